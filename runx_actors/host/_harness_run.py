"""Running one harness case (loop-host §8.1, §8.3, §8.5).

A case runs in its own corner of the scratch root: a freshly staged ``workspace/``, a
fresh SQLite run store ``stores/<i>/`` (scope ``harness``) and a fresh receipt directory
(``inline-receipts/<i>/`` or ``fixture-receipts/<i>/``). Its run id and ``created_at`` are
pinned (§8.5), so its receipts are the same on every run with the same key. When the Run
parks, the caller's answers and approvals go through the resume path (§7.3, §7.4). The top
receipt is verified as a tree before any field is compared; only then are the tree's
receipts ``put`` into the output directory.
"""

from __future__ import annotations

import datetime as _dt
import functools
import shutil
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import attrs
import trio

from .._strictread import limit_for, loads_json, read_regular_file
from ..protocol import facts as F
from ..protocol.digests import decode_frozen_value
from ..store.sqlite import open_sqlite_store
from ._governed import HostConfig
from ._harness_assert import CaseEvidence, assert_case
from ._harness_cases import Case, HarnessParseError, normalise_case_name
from ._prompt import AGENT_TASK_PREFIX
from .errors import InputContractError
from .package import GraphRunner, Package
from .receipts import (
    Keyring,
    Receipt,
    ReceiptStore,
    SignatureMode,
    Signer,
    Verifier,
    verify_directory,
)
from .resume import resume_run
from .skill import RUN_ID_ENV, run_skill

__all__ = [
    "PIN_CREATED_AT",
    "PIN_DATETIME",
    "HARNESS_SCOPE",
    "SIGNING_NOT_CONFIGURED",
    "PlannedCase",
    "CaseResult",
    "CaseContext",
    "harness_files",
    "stage_files",
    "run_case",
    "describe_error",
]

#: ``created_at`` of every harness receipt and context entry (§8.5).
PIN_CREATED_AT = "2026-01-01T00:00:00.000Z"
PIN_DATETIME = _dt.datetime(2026, 1, 1, tzinfo=_dt.UTC)
#: The scope of every case's fresh run store (§8.5).
HARNESS_SCOPE = "harness"
#: What every case records when the signing identity is missing (§8.1).
SIGNING_NOT_CONFIGURED = "receipt signing is not configured"

_PARKED = ("needs_agent", "needs_approval")
_STORE_FILE = "runs.sqlite3"


def _pinned_now() -> _dt.datetime:
    return PIN_DATETIME


@attrs.frozen(kw_only=True)
class PlannedCase:
    """A parsed case, ready to run: ``kind`` is ``inline`` or ``fixture``;
    ``setup_receipts`` are absolute paths of receipts to ``put`` first."""

    case: Case
    package: Package
    runner_name: str
    kind: str = "inline"
    setup_receipts: tuple[Path, ...] = ()

    @property
    def name(self) -> str:
        """The case's name as declared in the package."""
        return self.case.name

    @property
    def graph(self) -> bool:
        """True when the case runs a graph runner (its receipt tree has step children)."""
        return isinstance(self.package.runner(self.runner_name), GraphRunner)

    @property
    def steps(self) -> tuple[str, ...]:
        """The package step ids (§8.3): ``[<runner>]`` or the graph's step ids."""
        runner = self.package.runner(self.runner_name)
        if isinstance(runner, GraphRunner):
            return tuple(step.id for step in runner.steps)
        return (self.runner_name,)


@attrs.frozen(kw_only=True)
class CaseResult:
    """One case's outcome: its status, the verified top receipt (if any), the run id,
    and its assertion errors."""

    name: str
    runner: str
    graph: bool
    status: str
    errors: tuple[str, ...] = ()
    run_id: str | None = None
    receipt: Receipt | None = None
    detail: str | None = None

    @property
    def passed(self) -> bool:
        """True when no assertion of the case failed."""
        return not self.errors

    @property
    def receipt_id(self) -> str | None:
        """The id of the receipt the case sealed, or None (it sealed none)."""
        return None if self.receipt is None else self.receipt.id


@attrs.frozen(kw_only=True)
class CaseContext:
    """What every case of one harness run shares: the scratch root, the signing identity
    (None when missing), the verification keyring, the process environment and the
    output receipt store."""

    scratch: Path
    signer: Signer | None
    keyring: Keyring
    env: Mapping[str, str]
    output: ReceiptStore


def describe_error(exc: BaseException) -> str:
    """A one-line description of an execution error (single-exception groups unwrapped)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc)
    if isinstance(exc, InputContractError):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _inside(base: Path, rel: str, what: str) -> Path:
    posix = PurePosixPath(rel)
    if not rel or posix.is_absolute() or ".." in posix.parts or "\\" in rel:
        raise HarnessParseError(f"harness.files: {what} {rel!r} must be a relative path "
                                "inside its root", label="harness.files", field=rel)
    return base.joinpath(*posix.parts)


def harness_files(package: Package, workspace: Path) -> list[tuple[Path, Path]]:
    """The package's ``harness.files`` (``{<workspace path>: <package path>}``) as
    ``(source, target)`` paths.

    Raises:
        HarnessParseError: a path that is absolute, escapes its root, or names no regular
            file of the package.
    """
    section = package.spec.harness
    pairs = []
    for dest, src in (section.files if section is not None else {}).items():
        source = _inside(package.root, src, "source")
        if not source.is_file() or source.is_symlink():
            raise HarnessParseError(f"harness.files: {src} is not a regular file of the "
                                    "package", label="harness.files", field=dest)
        pairs.append((source, _inside(workspace, dest, "destination")))
    return pairs


def stage_files(package: Package, workspace: Path) -> None:
    """Recreate *workspace* and copy the package's ``harness.files`` into it.

    Raises:
        HarnessParseError: as :func:`harness_files`.
    """
    pairs = harness_files(package, workspace)
    if workspace.exists():
        shutil.rmtree(workspace)
    workspace.mkdir(parents=True)
    for source, target in pairs:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


async def _step_outputs(store: Any, run_id: str) -> dict[str, Any]:
    """Each graph step's recorded response (the committed answer payload), by step id."""
    reader = await store.reader(HARNESS_SCOPE)
    steps: dict[str, str] = {}
    out: dict[str, Any] = {}
    for fact in await reader.run_facts(run_id):
        if isinstance(fact, F.ToolStepOpened):
            for binding in fact.calls:
                if not binding.tool_ref.startswith(AGENT_TASK_PREFIX):
                    continue
                try:
                    envelope = loads_json(binding.arguments, source="arguments")
                except ValueError:
                    continue
                if isinstance(envelope, dict) and isinstance(envelope.get("step_id"), str):
                    steps[binding.call_id] = envelope["step_id"]
        elif isinstance(fact, F.ToolCallAnswered) and fact.call_id in steps:
            data = await store.frozen.get(fact.response_digest)
            text = decode_frozen_value("tool_response_payload", fact.response_digest, data)
            out[steps[fact.call_id]] = loads_json(str(text), source="answer")
    return out


async def _execute(plan: PlannedCase, config: HostConfig, store_path: Path,
                   env: Mapping[str, str], run_id: str) -> tuple[dict[str, Any],
                                                                  dict[str, Any],
                                                                  list[str]]:
    """Run the case: the skill run, then the caller's values through resume while the Run
    parks on requests they answer. Returns the last ``runx.skill_run.v1`` result, the
    recorded step responses and the caller keys no request used."""
    caller = plan.case.caller
    used: set[str] = set()
    async with open_sqlite_store(store_path) as store:
        result = await run_skill(store, plan.package, inputs=dict(plan.case.inputs),
                                 config=config, runner=plan.runner_name,
                                 scope=HARNESS_SCOPE, run_id=run_id,
                                 created_at_pin=PIN_CREATED_AT, env=env)
        while result.get("status") in _PARKED:
            waiting = {str(r.get("id")) for r in result.get("requests") or ()}
            answers = {k: v for k, v in caller.answers.items() if k in waiting and k not in used}
            approvals = {k: v for k, v in caller.approvals.items()
                         if k in waiting and k not in used}
            if not answers and not approvals:
                break
            used |= set(answers) | set(approvals)
            outcome = await resume_run(store, run_id,
                                       {"answers": answers, "approvals": approvals},
                                       config=config, scope=HARNESS_SCOPE)
            result = outcome.result
        step_outputs = await _step_outputs(store, run_id) if plan.graph else {}
    unused = [f"caller.answers.{k}" for k in caller.answers if k not in used]
    unused += [f"caller.approvals.{k}" for k in caller.approvals if k not in used]
    return result, step_outputs, unused


def _verify_top(directory: Path, top: str, keyring: Keyring) -> tuple[Receipt | None,
                                                                     tuple[str, ...], str]:
    """Verify the case's receipts as a tree rooted at *top* (production signatures).
    Returns the top receipt (None on failure), the tree's receipt ids root first, and why
    it failed."""
    report = verify_directory(directory, keyring=keyring, mode=SignatureMode.PRODUCTION,
                              receipt_id=top)
    tree = next((t for t in report.trees if t.root_receipt_id == top), None)
    if tree is None:
        return None, (), f"receipt {top} is not the root of its tree"
    if not tree.valid:
        codes = sorted({finding.code.value for finding in tree.findings})
        return None, (), f"receipt verification failed: {', '.join(codes)}"
    store = ReceiptStore(directory, verifier=Verifier(keyring=keyring))
    return store.get(top), tree.receipt_ids, ""


def _copy_out(directory: Path, receipt_ids: tuple[str, ...], keyring: Keyring,
              output: ReceiptStore) -> None:
    """``put`` the verified tree into the output store, children before their root."""
    source = ReceiptStore(directory, verifier=Verifier(keyring=keyring))
    for receipt_id in reversed(receipt_ids):
        output.put(source.get(receipt_id))


async def run_case(index: int, plan: PlannedCase, ctx: CaseContext) -> CaseResult:
    """Run case number *index* and assert its expectations (§8.3).

    Execution errors and verification failures become the status ``failure`` (they pass
    only when ``failure`` is expected). Without a signing identity the case does not run
    and records ``<case>: receipt signing is not configured``.

    Checkpoint: always.
    Raises:
        ReceiptError: the output directory refused a verified receipt (for example
            ``ReceiptAlreadyExistsError``); a harness error, not a case failure.
        HarnessParseError: ``harness.files`` or ``setup.receipts`` name bad paths.
    """
    await trio.lowlevel.checkpoint()
    name, graph = plan.name, plan.graph
    base = CaseResult(name=name, runner=plan.runner_name, graph=graph, status="failure")
    if ctx.signer is None:
        return attrs.evolve(base, errors=(f"{name}: {SIGNING_NOT_CONFIGURED}",))
    workspace = ctx.scratch / "workspace"
    store_dir = ctx.scratch / "stores" / str(index)
    receipt_dir = ctx.scratch / f"{plan.kind}-receipts" / str(index)
    await trio.to_thread.run_sync(stage_files, plan.package, workspace)
    store_dir.mkdir(parents=True)
    receipt_dir.mkdir(parents=True)
    env = {**ctx.env, RUN_ID_ENV: "harness-" + normalise_case_name(name),
           "RUNX_CWD": str(workspace), **plan.case.env}
    run_id = env.get(RUN_ID_ENV) or "harness-" + normalise_case_name(name)
    receipts = ReceiptStore(receipt_dir, verifier=Verifier(keyring=ctx.keyring))
    config = HostConfig(receipts=receipts, signer=ctx.signer, workspace=workspace,
                        now=_pinned_now)
    evidence = CaseEvidence(status="failure", steps=plan.steps, graph=graph)
    unused: list[str] = []
    tree: tuple[str, ...] = ()
    try:
        for path in plan.setup_receipts:
            data = await trio.to_thread.run_sync(
                functools.partial(read_regular_file, path, max_bytes=limit_for("receipt")))
            await trio.to_thread.run_sync(receipts.put, Receipt.from_bytes(data))
        result, step_outputs, unused = await _execute(plan, config, store_dir / _STORE_FILE,
                                                      env, run_id)
    except Exception as exc:  # an execution error is a case result (§8.3 step 4)
        evidence = attrs.evolve(evidence, detail=describe_error(exc))
    else:
        status = str(result.get("status"))
        top = result.get("receipt_id")
        evidence = attrs.evolve(evidence, status=status, payload=result.get("payload"),
                                step_outputs=step_outputs)
        if isinstance(top, str):
            receipt, tree, why = await trio.to_thread.run_sync(
                _verify_top, receipt_dir, top, ctx.keyring)
            if receipt is None:
                evidence = attrs.evolve(evidence, status="failure", detail=why, payload=None)
            else:
                evidence = attrs.evolve(evidence, receipt=receipt)
    errors = assert_case(name, plan.case.expect, evidence)
    if evidence.status != "failure":
        errors += [f"{name}: {key}: names no request of the run" for key in unused]
    if evidence.receipt is not None:
        await trio.to_thread.run_sync(_copy_out, receipt_dir, tree, ctx.keyring, ctx.output)
    return attrs.evolve(base, status=evidence.status, errors=tuple(errors), run_id=run_id,
                        receipt=evidence.receipt, detail=evidence.detail)

