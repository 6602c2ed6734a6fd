"""``runx-actors demo loop-orchestration [--scenario success|refusal|context-gate]``
(loop-host §9.3).

Everything runs in-process against a kept temporary root ``<tmp>/runx-loop-*/`` holding
``store/`` (SQLite, scope ``demo``) and ``workspace/NOTES.md``; receipts go to
``$RUNX_LOOP_RECEIPT_DIR``, else ``<root>/receipts``. The signing identity is the
``RUNX_RECEIPT_SIGN_*`` one, else the demo identity (§4.5).

stdout is exactly the transcript of §9.3; a demonstration that does not behave as listed
prints ``demo failed: <demonstration>: <why>`` on stderr and the command exits 1. An
error before any demonstration runs (a signing identity half set, an unwritable temporary
directory) is reported as every command's: ``runx-actors: demo: <message>`` and a
``hint:`` line, exit 1.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import click

from ..store.sqlite import open_sqlite_store
from ._cli_support import (
    EXPECTED_ERRORS,
    STORE_FILE,
    environment,
    fail,
    run_trio,
    unwrap,
)
from ._governed import HostConfig
from .loop import LoopHost, LoopOutcome, LoopSpec, TurnSummary
from .package import Package, load_package
from .receipts import (
    DEMO_KID,
    DEMO_SEED_BASE64,
    ReceiptStore,
    Signer,
    Verifier,
    demo_signer_from_env,
    keyring_from_env,
)
from .skill import RUN_ID_ENV, run_skill

__all__ = ["DEMO_SCOPE", "NOTES_TEXT", "SCENARIOS", "example_package_path", "demo"]

#: The demo's scope (§9.3).
DEMO_SCOPE = "demo"
#: ``workspace/NOTES.md`` of the example (§3.1).
NOTES_TEXT = "# Loop notes\n\nTurns may read this file. It grants no authority.\n"


#: The package that is the repository's ``examples/`` directory (``pyproject.toml`` maps
#: it there and ships ``loop-orchestration/`` in it as package data).
_EXAMPLES_PACKAGE = "runx_actors._examples"
_EXAMPLE = "loop-orchestration"


def example_package_path() -> Path:
    """The directory of the loop-orchestration example package (§9.3).

    Looked up with :func:`importlib.resources.files` in ``runx_actors._examples``: a wheel
    (``pip install .``) carries the example as package data, an editable install resolves
    the package to the checkout's ``examples/``. Else ``examples/loop-orchestration`` of
    the source tree this module runs from (an uninstalled checkout on ``sys.path``, or an
    editable install made before that mapping existed). Only a real directory counts:
    running from a zip import is not supported.

    Raises:
        FileNotFoundError: neither place holds the example (the message names both).
    """
    tried: list[str] = []
    try:
        resource = importlib.resources.files(_EXAMPLES_PACKAGE) / _EXAMPLE
    except ImportError:
        tried.append(f"the package {_EXAMPLES_PACKAGE} (not installed)")
    else:
        if not isinstance(resource, os.PathLike):
            tried.append(f"{resource} (not on the file system: zip imports are not supported)")
        elif Path(resource).is_dir():
            return Path(resource).resolve()
        else:
            tried.append(str(resource))
    checkout = Path(__file__).resolve().parents[2] / "examples" / _EXAMPLE
    if checkout.is_dir():
        return checkout
    tried.append(str(checkout))
    raise FileNotFoundError(f"the {_EXAMPLE} example is missing (looked in "
                            f"{' and in '.join(tried)}); reinstall runx-actors: its wheel "
                            "ships the example")


@attrs.frozen
class _LoopDemo:
    name: str
    title: str
    loop_id: str
    fixed_inputs: Mapping[str, Any]
    decisions: tuple[str, ...]
    reason: str


_LOOP_DEMOS = (
    _LoopDemo("success", "bounded loop over governed turns", "loop-demo-success",
              {"objective": "Draft, review, and ratify one tiny safe change.",
               "scenario": "success", "requested_tool": "fs.read"},
              ("continue", "done"), "fixture_objective_complete"),
    _LoopDemo("refusal", "loop policy stops an undeclared tool", "loop-demo-refusal",
              {"objective": "Try to mutate files without explicit authority.",
               "scenario": "refusal", "requested_tool": "fs.write"},
              ("refused",), "tool_not_allowed"),
)
_GATE_TITLE = "agent turn pauses with bounded, advisory context"
_GATE_OBJECTIVE = "Review whether the next turn may continue."
_GATE_REQUEST = "agent_task.review-loop-plan.output"
SCENARIOS = ("success", "refusal", "context-gate")


class _DemoFailed(Exception):
    """A demonstration did not behave as listed in §9.3 (its message says why)."""


_DEMO_ERRORS: tuple[type[Exception], ...] = (_DemoFailed, *EXPECTED_ERRORS)


def _turn_line(turn: TurnSummary) -> list[str]:
    head = f"turn {turn.turn_index} | run={turn.run_id} | receipt={turn.receipt_id}"
    payload = turn.payload if isinstance(turn.payload, Mapping) else {}
    if turn.disposition != "closed":
        return [f"{head} | failed disposition={turn.disposition} reason={turn.reason_code}"]
    nxt = "yes" if payload.get("next_turn_allowed") is True else "no"
    return [f"{head} | decision={payload.get('decision')} | "
            f"reason={payload.get('reason_code')} | next={nxt}",
            f"  {payload.get('next_turn_reason')}"]


def _check_loop(demo: _LoopDemo, outcome: LoopOutcome) -> None:
    decisions = tuple(
        str(t.payload.get("decision")) if isinstance(t.payload, Mapping) else "-"
        for t in outcome.turns)
    if outcome.status != "stopped" or outcome.stop_reason != "next_turn_not_allowed":
        raise _DemoFailed(f"the loop ended {outcome.status} ({outcome.stop_reason}), "
                          "expected stopped (next_turn_not_allowed)")
    if decisions != demo.decisions:
        raise _DemoFailed(f"decisions were {', '.join(decisions)}, expected "
                          f"{', '.join(demo.decisions)}")
    last = outcome.turns[-1].payload
    if not isinstance(last, Mapping) or last.get("reason_code") != demo.reason:
        raise _DemoFailed(f"the last turn's reason is not {demo.reason}")


async def _loop_demo(demo: _LoopDemo, store: Any, package: Package,
                     config: HostConfig) -> None:
    click.echo(f"# {demo.name}: {demo.title}")
    spec = LoopSpec(loop_id=demo.loop_id, package=package, runner="turn", max_turns=3,
                    fixed_inputs=demo.fixed_inputs, scope=DEMO_SCOPE)
    outcome = await LoopHost(store, config).run(spec)
    for turn in outcome.turns:
        for line in _turn_line(turn):
            click.echo(line)
    _check_loop(demo, outcome)


async def _gate_demo(store: Any, package: Package, config: HostConfig,
                     env: Mapping[str, str]) -> str:
    click.echo(f"# context-gate: {_GATE_TITLE}")
    clean_env = {k: v for k, v in env.items() if k != RUN_ID_ENV}
    result = await run_skill(store, package, runner="context-gate",
                             inputs={"objective": _GATE_OBJECTIVE}, config=config,
                             scope=DEMO_SCOPE, env=clean_env)
    requests = result.get("requests") or []
    if result.get("status") != "needs_agent" or not requests:
        raise _DemoFailed(f"the run ended {result.get('status')}, expected needs_agent")
    request = requests[0]
    envelope = (request.get("invocation") or {}).get("envelope") or {}
    context = envelope.get("current_context") or []
    click.echo(f"needs_agent run={result['run_id']} request={request.get('id')}")
    click.echo("allowed_tools=" + json.dumps(envelope.get("allowed_tools"),
                                             separators=(",", ":")))
    click.echo(f"context_artifacts={len(context)}")
    for entry in context:
        data, meta = entry.get("data") or {}, entry.get("meta") or {}
        click.echo(f"- {data.get('name')} ref={data.get('ref')} digest={meta.get('hash')} "
                   f"({data.get('security_boundary')})")
    if request.get("id") != _GATE_REQUEST:
        raise _DemoFailed(f"the request is {request.get('id')}, expected {_GATE_REQUEST}")
    if envelope.get("allowed_tools") != ["fs.read"] or len(context) != 1:
        raise _DemoFailed("the envelope does not hold allowed_tools [fs.read] and one "
                          "context entry")
    return str(result["run_id"])


@attrs.frozen
class _DemoSetup:
    root: Path
    store: Path
    receipts: Path
    package: Package
    config: HostConfig


def _demo_setup(env: Mapping[str, str]) -> _DemoSetup:
    signer: Signer = demo_signer_from_env(env)
    keyring = keyring_from_env(env).merged(signer.keyring().entries)
    package = load_package(example_package_path())
    root = Path(tempfile.mkdtemp(prefix="runx-loop-"))
    (root / "store").mkdir()
    workspace = root / "workspace"
    workspace.mkdir()
    (workspace / "NOTES.md").write_text(NOTES_TEXT, encoding="utf-8")
    receipts = Path(env.get("RUNX_LOOP_RECEIPT_DIR") or root / "receipts")
    store = ReceiptStore(receipts, verifier=Verifier(keyring=keyring))
    config = HostConfig(receipts=store, signer=signer, workspace=workspace)
    return _DemoSetup(root, root / "store", receipts, package, config)


async def _run_demos(names: Sequence[str], setup: _DemoSetup,
                     env: Mapping[str, str]) -> tuple[list[tuple[str, str]], str | None]:
    """Run the demonstrations in order; returns the failures and the paused run's id."""
    failures: list[tuple[str, str]] = []
    paused: str | None = None
    async with open_sqlite_store(setup.store / STORE_FILE) as store:
        for name in names:
            try:
                loop = next((d for d in _LOOP_DEMOS if d.name == name), None)
                if loop is not None:
                    await _loop_demo(loop, store, setup.package, setup.config)
                else:
                    paused = await _gate_demo(store, setup.package, setup.config, env)
            except _DEMO_ERRORS as exc:
                failures.append((name, str(unwrap(exc))))
    return failures, paused


def _resumehint_for(setup: _DemoSetup, run_id: str, env: Mapping[str, str]) -> str:
    identity = ""
    if not env.get("RUNX_RECEIPT_SIGN_KID"):
        identity = (f"RUNX_RECEIPT_SIGN_KID={DEMO_KID} "
                    f"RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64={DEMO_SEED_BASE64} "
                    "RUNX_RECEIPT_SIGN_ISSUER_TYPE=hosted ")
    return (f"to resume the paused run: {identity}runx-actors resume {run_id} "
            f"<answers.json> --store {setup.store} --scope {DEMO_SCOPE} -R {setup.receipts}")


@click.command()
@click.argument("name", type=click.Choice(["loop-orchestration"]))
@click.option("--scenario", type=click.Choice(SCENARIOS), default=None,
              help="Run one demonstration only.")
def demo(*, name: str, scenario: str | None) -> int:
    """Run the loop-orchestration demonstrations.

    In-process: a bounded success loop, a refused tool, and a context gate that pauses for
    an agent.

    Uses the RUNX_RECEIPT_SIGN_* identity, else the demo key. The temporary root is kept
    so the paused run can be resumed. Exits 0 when every demonstration behaves as
    documented (with --scenario: 0, 0 or 2), else 1.
    """
    del name
    env = environment()
    names = [scenario] if scenario else list(SCENARIOS)
    try:
        setup = _demo_setup(env)
        failures, paused = run_trio(lambda: _run_demos(names, setup, env))
    except _DEMO_ERRORS as exc:  # a configuration error, reported as every command's
        return fail("demo", exc, as_json=False)
    click.echo(f"receipts={setup.receipts}")
    click.echo(f"store={setup.store}")
    for demonstration, why in failures:
        click.echo(f"demo failed: {demonstration}: {why}", err=True)
    if failures:
        return 1
    if paused is not None:
        click.echo(_resumehint_for(setup, paused, env), err=True)
    return 2 if scenario == "context-gate" else 0



