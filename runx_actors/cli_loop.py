"""``runx-actors loop run|status`` and ``runx-actors keys`` (issue 10; loop-host §2, §9).

``loop run PACKAGE --loop-id ID [-i k=v …]`` runs a loop of governed turns over the run
store with :class:`~runx_actors.host.LoopHost` until its stop policy stops it, a turn
parks or fails. Kill it at any point and run the same command again: the same spec
continues from the loop record (a finished loop prints the same turns and receipts). A
loop whose recorded turns no longer verify — an edited or deleted receipt, a changed
Run — is refused with ``LoopIntegrityError`` and nothing is submitted (exit 3). Other
options than the loop was opened with are refused (``LoopConfigMismatch``, exit 1).

``loop status ID`` reads the loop record (no ownership, nothing written, receipts not
re-verified): its configuration and each turn's state, run id and receipt.

``keys`` prints the public key of the signing identity in the form the verifier's
``RUNX_RECEIPT_VERIFY_*`` variables expect: the ``RUNX_RECEIPT_SIGN_*`` identity when all
three are set, else (or with ``--demo``) the publicly known demo identity.

Exit codes (loop-host §9.1): ``loop run`` 0 stopped, 2 paused (a turn needs an agent or
an approval; answer it with ``resume`` and run the loop again), 1 failed or a
configuration error, 3 integrity failure; ``loop status`` 0, 1 no such loop; 64 usage.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import click

from .protocol.canonical import MAX_SAFE_INTEGER
from .protocol.errors import RunxError

__all__ = ["loop", "keys", "LoopNotFoundError"]


class LoopNotFoundError(RunxError):
    """``loop status``: no loop record under this id in this scope (exit 1). Attributes:
    ``loop_id``, ``scope``."""


def _loop_id(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A loop id is a name inside its stream's ``loop/<id>`` (RUN-WIR-1: at most
    ``MAX_ID_BYTES`` for the whole stream name): refused as a usage error (64)."""
    from .host._cli_support import name_option_callback
    from .protocol.commit import MAX_ID_BYTES

    return name_option_callback("loop id", MAX_ID_BYTES - len("loop/"))(ctx, param, value)


def _scope_name(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    from .host._cli_support import name_option_callback

    return name_option_callback("scope")(ctx, param, value)


@click.group("loop")
def loop() -> None:
    """Run a loop of governed turns, kill and resume it; show a loop's record."""


@loop.command("run")
@click.argument("package", type=click.Path())
@click.option("--loop-id", required=True, callback=_loop_id,
              help="The loop's id (the same id continues it).")
@click.option("--runner", default="turn", show_default=True, help="The turn runner.")
@click.option("--max-turns", type=click.IntRange(min=1, max=MAX_SAFE_INTEGER), default=3,
              show_default=True)
@click.option("-i", "--input", "inputs", multiple=True, metavar="K=V",
              help="A fixed input of every turn; V is parsed as JSON when it is JSON.")
@click.option("--input-json", "json_inputs", multiple=True, metavar="K=JSON",
              help="A fixed input given as JSON.")
@click.option("-R", "--receipt-dir", "receipt_dir", default=None, metavar="D",
              help="Receipt directory (else $RUNX_RECEIPT_DIR, else "
              "<workspace>/.runx/receipts).")
@click.option("--store", default=None, metavar="S",
              help="Run store: a directory or a SQLite file (else $RUNX_ACTORS_STORE).")
@click.option("--scope", default="default", show_default=True, callback=_scope_name,
              help="Scope of the loop.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def loop_run(package: str, loop_id: str, runner: str, max_turns: int,
             inputs: tuple[str, ...], json_inputs: tuple[str, ...], receipt_dir: str | None,
             store: str | None, scope: str, as_json: bool) -> None:
    """Run (or continue) the loop LOOP_ID of PACKAGE until it stops, parks or fails."""
    from .host._cli_support import EXPECTED_ERRORS, environment, fail, run_trio
    from .host._governed import check_runner
    from .host.cli_commands import _host, _parse_inputs
    from .host.loop import LoopHost, LoopSpec, check_max_turns
    from .host.package import load_package
    from .store.sqlite import open_sqlite_store

    values = _parse_inputs(inputs, json_inputs)
    env, cwd = environment(), Path.cwd()
    try:
        host = _host(receipt_dir, store, env, cwd)
        spec = LoopSpec(loop_id=loop_id, package=load_package(cwd / package), runner=runner,
                        max_turns=max_turns, fixed_inputs=values, scope=scope)
        # what LoopHost.run checks first, before the store is created or opened
        check_max_turns(spec.max_turns)
        check_runner(spec.package, spec.runner, host.config)
        spec.turn_inputs(1, None)
        host.store.parent.mkdir(parents=True, exist_ok=True)

        async def main() -> Any:
            async with open_sqlite_store(host.store) as opened:
                return await LoopHost(opened, host.config).run(spec)

        outcome = run_trio(main)
    except EXPECTED_ERRORS as exc:
        sys.exit(fail("loop run", exc))
    if as_json:
        click.echo(json.dumps({
            "loop_id": outcome.loop_id, "status": outcome.status,
            "stop_reason": outcome.stop_reason, "exit_code": outcome.exit_code,
            "turns": [t.to_json() for t in outcome.turns],
            "requests": [dict(r) for r in outcome.requests],
            "projection": dict(outcome.projection)}, indent=2, ensure_ascii=False))
    else:
        for turn in outcome.turns:
            click.echo(f"turn {turn.turn_index} | run={turn.run_id} | state={turn.state} | "
                       f"receipt={turn.receipt_id} | disposition={turn.disposition} | "
                       f"reason={turn.reason_code}")
        click.echo(f"loop {outcome.loop_id}: {outcome.status} ({outcome.stop_reason})")
        for request in outcome.requests:
            click.echo(f"- request={request.get('id')} kind={request.get('kind')}")
    sys.exit(outcome.exit_code)


@loop.command("status")
@click.argument("loop_id", callback=_loop_id)
@click.option("--store", default=None, metavar="S",
              help="Run store: a directory or a SQLite file (else $RUNX_ACTORS_STORE).")
@click.option("--scope", default="default", show_default=True, callback=_scope_name,
              help="Scope of the loop.")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
def loop_status(loop_id: str, store: str | None, scope: str, as_json: bool) -> None:
    """The loop record of LOOP_ID: configuration and turns (read-only)."""
    from .cli_runs import _run, open_store_for, require_scope
    from .host._records import fold_loop, loop_stream

    async def main() -> Any:
        async with open_store_for(store) as opened:
            await require_scope(opened, scope)
            reader = await opened.reader(scope)
            record = fold_loop(loop_id, await reader.read_stream(loop_stream(loop_id)))
            if record is None:
                raise LoopNotFoundError(f"no loop {loop_id!r} in scope {scope!r}",
                                        loop_id=loop_id, scope=scope)
            return record

    record = _run("loop status", main)
    turns = [{"turn_index": t.turn_index, "run_id": t.run_id, "state": t.state,
              "receipt_id": t.receipt_id} for t in record.turns]
    opened = dict(record.opened)
    if as_json:
        click.echo(json.dumps({"loop_id": loop_id, "scope": scope, "opened": opened,
                               "turns": turns}, indent=2, ensure_ascii=False))
        return
    click.echo(f"loop {loop_id} (scope {scope}): package={opened.get('package_name')} "
               f"runner={opened.get('runner')} max_turns={opened.get('max_turns')}")
    for t in turns:
        click.echo(f"turn {t['turn_index']} | run={t['run_id']} | state={t['state']} | "
                   f"receipt={t['receipt_id']}")


@click.command("keys")
@click.option("--demo", is_flag=True, help="The demo identity, whatever the environment.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def keys(demo: bool, as_json: bool) -> None:
    """Print the signing identity's public key as RUNX_RECEIPT_VERIFY_* lines."""
    from .host._cli_support import EXPECTED_ERRORS, environment, fail
    from .host.receipts import Signer, demo_signer_from_env

    try:
        signer = Signer.demo() if demo else demo_signer_from_env(environment())
    except EXPECTED_ERRORS as exc:
        sys.exit(fail("keys", exc))
    key = signer.public_key
    if key is None:  # the local-development identity has no key
        click.echo("runx-actors: keys: the identity has no public key", err=True)
        sys.exit(1)
    text = base64.b64encode(key).decode("ascii")
    if as_json:
        click.echo(json.dumps({"kid": signer.kid, "public_key_base64": text,
                               "issuer_type": signer.issuer_type.value}))
        return
    click.echo(f"RUNX_RECEIPT_VERIFY_KID={signer.kid}")
    click.echo(f"RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64={text}")


if __name__ == "__main__":  # python -m runx_actors.cli_loop …
    loop()
