"""The loop host's commands of ``runx-actors`` (loop-host §9): ``demo``, ``skill``,
``resume``, ``harness`` and ``verify``.

Each command returns its exit code; the group in ``runx_actors.cli`` exits with it and
turns usage errors into 64. Exit codes (§9.1): 0 sealed/ok, 1 failure or policy block
(including signing and configuration errors), 2 needs agent/approval/input, 3 verification
failed, 64 usage error. Errors go to stderr as ``runx-actors: <command>: <message>``,
followed by a ``hint:`` line saying what to do.

The run store (§9.1, **[ours]**) is ``--store S``, else ``$RUNX_ACTORS_STORE``, else
``<P>/store`` where ``P`` is ``$RUNX_PROJECT_DIR`` or ``<workspace>/.runx``
(:func:`~._cli_support.resolve_store`). ``--scope`` **[ours]** names the Session of the
store (default ``default``; the demo's runs live in scope ``demo``).
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import click

from .._strictread import MalformedInputError, limit_for, loads_json, read_regular_file
from ..store.sqlite import open_sqlite_store
from ._cli_demo import demo
from ._cli_support import (
    EXPECTED_ERRORS,
    STORE_ENV,
    environment,
    fail,
    name_option_callback,
    resolve_store,
    run_trio,
    workspace_dir,
)
from ._governed import HostConfig
from .errors import AnswersError, UnknownRunError
from .harness import HarnessError, HarnessUsageError, classify_targets, harness_command
from .loop import DEFAULT_SCOPE
from .package import load_package
from .receipts import (
    ReceiptStore,
    Verifier,
    keyring_from_env,
    require_signer,
    resolve_receipt_dir,
    verify_command,
)
from .resume import resume_run
from .skill import check_skill, exit_code_of, run_skill

__all__ = ["COMMANDS", "demo", "skill", "resume", "harness", "verify"]


def _resume_flags(receipt_dir: str | None, store: str | None, scope: str) -> str:
    """The options a later ``resume`` needs to find this run: those given explicitly."""
    flags = [f"--store {shlex.quote(store)}" if store else "",
             f"--scope {shlex.quote(scope)}" if scope != DEFAULT_SCOPE else "",
             f"-R {shlex.quote(receipt_dir)}" if receipt_dir else ""]
    return "".join(" " + flag for flag in flags if flag)


def _echo_result(result: Mapping[str, Any], as_json: bool, resume_flags: str = "") -> None:
    """Print a ``runx.skill_run.v1`` result: the JSON (indent 2, ``next`` exactly as
    §7.1 writes it), or a few text lines whose ``next:`` also carries *resume_flags*
    (the ``--store`` / ``--scope`` / ``-R`` given to this command)."""
    if as_json:
        click.echo(json.dumps(result, indent=2, ensure_ascii=False))
        return
    status, run_id = result.get("status"), result.get("run_id")
    if result.get("receipt_id") is not None:
        closure = result.get("closure") or {}
        click.echo(f"{status} run={run_id} receipt={result['receipt_id']} "
                   f"disposition={closure.get('disposition')} "
                   f"reason={closure.get('reason_code')}")
        click.echo(f"  {closure.get('summary')}")
        if result.get("payload") is not None:
            click.echo("payload=" + json.dumps(result["payload"], sort_keys=True,
                                               separators=(",", ":"), ensure_ascii=False))
        return
    click.echo(f"{status} run={run_id}")
    for request in result.get("requests") or ():
        click.echo(f"- request={request.get('id')} kind={request.get('kind')} "
                   f"tool={request.get('tool')}")
    if result.get("next"):
        click.echo(f"next: {result['next']}{resume_flags}")


def _parse_inputs(pairs: Sequence[str], json_pairs: Sequence[str]) -> dict[str, Any]:
    """``-i k=v`` (the value parsed as JSON when it is JSON, else the text) and
    ``--input-json k=json`` (must be JSON). Both use the strict JSON reader: duplicate
    keys, NaN/Infinity, nesting past 64 levels and values over
    ``limit_for("input_json")`` bytes (1 MiB) are refused, and so is a key given twice
    (over both options: a second ``-i allowed_tools=…`` must not silently replace the
    first). Raises click.UsageError (exit 64)."""
    out: dict[str, Any] = {}
    cap = limit_for("input_json")
    for option, items, strict in (("-i", pairs, False), ("--input-json", json_pairs, True)):
        for item in items:
            key, sep, text = item.partition("=")
            if not sep or not key:
                raise click.UsageError(f"{option} expects key=value, got {item[:80]!r}")
            if key in out:
                raise click.UsageError(f"input {key[:80]!r} is given twice ({option} "
                                       f"{key[:80]}=…); give each input once")
            try:
                value: Any = loads_json(text, source=f"{option} {key}", max_bytes=cap)
            except MalformedInputError as exc:
                if strict or exc.reason not in ("syntax", "non_finite"):
                    raise click.UsageError(str(exc)) from None
                value = text
            out[key] = value
    return out


@attrs.frozen
class _Host:
    """What ``skill`` and ``resume`` share: the store file and the host configuration."""

    store: Path
    config: HostConfig


def _host(receipt_dir: str | None, store: str | None, env: Mapping[str, str],
          cwd: Path) -> _Host:
    from ..store._check import is_dsn, redact_dsn

    chosen = store or env.get(STORE_ENV, "")
    if is_dsn(chosen):  # never a directory named after the DSN (its password in a path)
        raise click.UsageError(
            f"this command needs a SQLite run store (a directory or a file), but "
            f"{'--store' if store else STORE_ENV} is a PostgreSQL DSN ({redact_dsn(chosen)});"
            " the runs and loop status commands read PostgreSQL stores")
    signer = require_signer(env)
    keyring = keyring_from_env(env)
    receipts = ReceiptStore(resolve_receipt_dir(receipt_dir, env, cwd),
                            verifier=Verifier(keyring=keyring))
    config = HostConfig(receipts=receipts, signer=signer, workspace=workspace_dir(env, cwd))
    return _Host(resolve_store(store, env, cwd), config)


_RECEIPT_DIR_OPTION = click.option("-R", "--receipt-dir", "receipt_dir", default=None,
                                   metavar="D", help="Receipt directory (else "
                                   "$RUNX_RECEIPT_DIR, else <workspace>/.runx/receipts).")
_STORE_OPTION = click.option("--store", default=None, metavar="S",
                             help="Run store: a directory or a SQLite file (else "
                             "$RUNX_ACTORS_STORE, else <workspace>/.runx/store).")
_SCOPE_OPTION = click.option("--scope", default=DEFAULT_SCOPE, show_default=True,
                             callback=name_option_callback("scope"),
                             help="Scope (session) of the run store [ours].")
_JSON_OPTION = click.option("--json", "as_json", is_flag=True,
                            help="Print runx.skill_run.v1 JSON.")


# -- skill and resume -------------------------------------------------------------------------


@click.command()
@click.argument("package", type=click.Path())
@click.option("--runner", default=None, help="Runner name (default: the default runner).")
@click.option("-i", "--input", "inputs", multiple=True, metavar="K=V",
              help="An input; V is parsed as JSON when it is JSON.")
@click.option("--input-json", "json_inputs", multiple=True, metavar="K=JSON",
              help="An input given as JSON.")
@_RECEIPT_DIR_OPTION
@_STORE_OPTION
@_SCOPE_OPTION
@_JSON_OPTION
def skill(*, package: str, runner: str | None, inputs: tuple[str, ...],
          json_inputs: tuple[str, ...], receipt_dir: str | None, store: str | None,
          scope: str, as_json: bool) -> int:
    """Run one standalone governed run of PACKAGE.

    Exits 0 when sealed closed, 2 when the run parks (resume it with `resume`), 1 for any
    other closure, an input-contract violation or a configuration error.
    """
    values = _parse_inputs(inputs, json_inputs)
    env, cwd = environment(), Path.cwd()
    try:
        host = _host(receipt_dir, store, env, cwd)
        loaded = load_package(cwd / package)
        check_skill(loaded, inputs=values, config=host.config, runner=runner)
        host.store.parent.mkdir(parents=True, exist_ok=True)  # nothing before the checks

        async def main() -> dict[str, Any]:
            async with open_sqlite_store(host.store) as opened:
                return await run_skill(opened, loaded, inputs=values, config=host.config,
                                       runner=runner, scope=scope, env=env)

        result: dict[str, Any] = run_trio(main)
    except EXPECTED_ERRORS as exc:
        return fail("skill", exc)
    _echo_result(result, as_json, _resume_flags(receipt_dir, store, scope))
    return exit_code_of(result)


def _read_answers(source: str, cwd: Path) -> Any:
    """The answers document (§7.2) from *source* (a path relative to *cwd*, or ``-``),
    read by the strict readers: at most ``limit_for("answers")`` bytes (8 MiB), a regular
    file, strict JSON. Raises AnswersError (``reason`` the strict reader's)."""
    cap = limit_for("answers")
    try:
        if source == "-":
            data = sys.stdin.buffer.read(cap + 1)
            if len(data) > cap:
                raise AnswersError(f"the answers on stdin are larger than {cap} bytes",
                                   key="", reason="too_large")
        else:
            data = read_regular_file(cwd / source, max_bytes=cap, follow_symlinks=True)
    except MalformedInputError as exc:
        raise AnswersError(f"the answers file {exc}", key="", reason=exc.reason) from None
    except OSError as exc:
        raise AnswersError(f"cannot read the answers file {source}: {exc.strerror or exc}",
                           key="") from None
    try:
        return loads_json(data, source=source)
    except MalformedInputError as exc:
        raise AnswersError(f"the answers file is not strict JSON: {exc}", key="",
                           reason=exc.reason, line=exc.line) from None


@click.command()
@click.argument("run_id")
@click.argument("answers", metavar="ANSWERS.json|-")
@_RECEIPT_DIR_OPTION
@_STORE_OPTION
@_SCOPE_OPTION
@_JSON_OPTION
def resume(*, run_id: str, answers: str, receipt_dir: str | None, store: str | None,
           scope: str, as_json: bool) -> int:
    """Resume the parked run RUN_ID with an answers file (`-` reads stdin).

    Exits like `skill`: 0 sealed closed, 2 parked again, 1 otherwise (an invalid answers
    file commits nothing). A run that has already ended is reported again; the answers
    are then ignored with a warning.
    """
    env, cwd = environment(), Path.cwd()
    try:
        host = _host(receipt_dir, store, env, cwd)
        document = _read_answers(answers, cwd)
        if not host.store.is_file():
            raise UnknownRunError(f"unknown run {run_id!r}: there is no run store at "
                                  f"{host.store}", run_id=run_id)

        async def main() -> Any:
            async with open_sqlite_store(host.store) as opened:
                return await resume_run(opened, run_id, document, config=host.config,
                                        scope=scope)

        outcome = run_trio(main)
    except EXPECTED_ERRORS as exc:
        return fail("resume", exc)
    for warning in outcome.warnings:
        click.echo(f"runx-actors: resume: warning: {warning}", err=True)
    _echo_result(outcome.result, as_json, _resume_flags(receipt_dir, store, scope))
    return int(outcome.exit_code)


# -- harness and verify -------------------------------------------------------------------------


@click.command()
@click.argument("targets", nargs=-1)
@_RECEIPT_DIR_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def harness(*, targets: tuple[str, ...], receipt_dir: str | None, as_json: bool) -> int:
    """Replay a package's harness cases and fixtures, or fixture files.

    Package mode (one package directory or SKILL.md) prints the report; fixture mode
    (.yaml/.yml files) prints each fixture's top receipt. Exits 0 passed / not_declared,
    1 failed or a harness error, 64 a usage error.
    """
    env, cwd = environment(), Path.cwd()
    try:
        classify_targets(targets, cwd)
    except HarnessUsageError as exc:
        raise click.UsageError(str(exc)) from exc
    except HarnessError:
        pass  # reported by harness_command
    result = harness_command(targets, receipt_dir=receipt_dir, as_json=as_json, env=env,
                             cwd=cwd)
    click.echo(result.stdout, nl=False)
    click.echo(result.stderr, nl=False, err=True)
    return result.exit_code


@click.command()
@click.argument("receipt_id", required=False)
@_RECEIPT_DIR_OPTION
@click.option("--receipt", "receipt", default=None, metavar="PATH|-",
              help="Verify one receipt file (`-` reads stdin); lineage stays unverified.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--allow-local-development-signatures", "allow_local", is_flag=True,
              help="Also accept local-development (sig:) signatures.")
def verify(*, receipt_id: str | None, receipt_dir: str | None, receipt: str | None,
           as_json: bool, allow_local: bool) -> int:
    """Verify the receipt trees of a receipt directory, or one receipt.

    Exits 0 when everything is valid, 3 when something is invalid, 1 on an I/O or parse
    error (missing directory, unknown RECEIPT_ID, unreadable input).
    """
    if receipt is not None and (receipt_id is not None or receipt_dir is not None):
        raise click.UsageError("--receipt cannot be combined with a receipt-id or -R")
    result = verify_command(receipt_id, receipt_dir=receipt_dir, receipt=receipt,
                            as_json=as_json, allow_local_development_signatures=allow_local,
                            env=environment(), cwd=Path.cwd(),
                            stdin=sys.stdin.buffer)
    click.echo(result.stdout, nl=False)
    click.echo(result.stderr, nl=False, err=True)
    return result.exit_code




#: The commands ``runx_actors.cli`` adds to its group.
COMMANDS: tuple[click.Command, ...] = (demo, skill, resume, harness, verify)
