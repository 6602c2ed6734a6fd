"""Governed Runs: creation with host facts, driving, requests, sealing and recording
(loop-host §2.1, §2.3 steps 5-8, §3.5, §6.3, §7.1).

A :class:`GovernedSession` is one runtime (one writer of the scope: opening it bumps the
epoch, and takeover runs first) over one package runner: its catalog tools bound to the
workspace, the built-in scripted models, and the policy gate. The loop host, ``resume``
and standalone ``skill`` runs are all built from these steps:

``open_run`` → ``drive`` (until the Run ends or parks) → ``requests`` (parked) or
``seal`` + ``record`` (ended).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from .. import effect
from .._strictread import loads_json
from ..executors import Tool, open_local_executor
from ..protocol import commands as C
from ..protocol import facts as F
from ..protocol.canonical import content_digest, typed_envelope
from ..protocol.commit import CommitRequest, CommitStatus, envelope
from ..protocol.digests import decode_frozen_value
from ..protocol.errors import (
    CommandConflictError,
    DispatchRejectedError,
    ExecutionNotFoundError,
    FrozenValueMissingError,
    OutcomeUnavailableError,
    OwnershipLostError,
    RunExistsError,
    RunTerminalError,
    StaleRuntimeError,
    ValidationError,
)
from ..protocol.plan import recovery_command, recovery_targets, waiting_calls
from ..protocol.state import MachineState
from ..protocol.values import (
    AgentInput,
    Digest,
    ModelResult,
    NewRun,
    ResponseKind,
    ResponseRequest,
    RunStatus,
    ToolReplay,
)
from ..runtime import (
    LoopDisposition,
    MemoryDispatchLedger,
    MissingPolicy,
    Reconciler,
    Runtime,
    Settings,
    assignment_from_target,
    open_runtime,
)
from ..store.base import ForeignEvent
from ._hashing import canonical, digest_json
from ._prompt import AGENT_TASK_PREFIX, HostPromptBuilder, catalog_tools
from ._records import (
    RUN_OPENED,
    RUN_SEALED,
    RUN_SEALING,
    TURN_RECORDED,
    GovernedRecord,
    fold_governed,
    fold_loop,
    governed_event,
    governed_stream,
    loop_event,
    loop_stream,
    run_blocked_commit,
    run_sealed_commit,
    run_sealing_commit,
    run_timeout_commit,
)
from ._sealing import NO_RESULT, RunEvidence, SealedRun, StepEvidence, seal_run
from .context import verify_entries
from .errors import (
    ContextChangedDuringPreparation,
    ContextRefError,
    LoopIntegrityError,
    PackageError,
    UnknownRunError,
)
from .package import Package, Runner, ScriptedRunner
from .policy import policy_gate
from .receipts import (
    Receipt,
    ReceiptError,
    ReceiptRepository,
    ReceiptSigner,
    Reference,
    format_created_at,
)
from .turn import BUILTIN_SCRIPTS, builtin_models

__all__ = [
    "utc_now",
    "HostConfig",
    "Phase",
    "RequestInfo",
    "GovernedSession",
    "open_session",
    "check_runner",
    "normalise_name",
    "derive_requests",
    "requests_of",
    "verify_request_context",
]


def utc_now() -> _dt.datetime:
    """The wall clock (UTC): the default ``now`` of a :class:`HostConfig`."""
    return _dt.datetime.now(_dt.UTC)


@attrs.frozen(kw_only=True)
class HostConfig:
    """What every governed operation needs besides the store and the package.

    * ``receipts`` — where receipts are written (a ``ReceiptStore``, or anything the
      ``receipts.ReceiptRepository`` Protocol describes: ``put``/``get``/``find``; its
      verifier is the §4.6 policy applied on every read and write);
    * ``signer`` — the signing identity (§4.5: a ``Signer``, or anything the
      ``receipts.ReceiptSigner`` Protocol describes);
    * ``workspace`` — the root the fs tools are confined to;
    * ``now`` — the injected clock (``run_sealing.created_at``, context ``created_at``);
    * ``models`` — extra or replacement scripted models by script name;
    * ``tools`` — replacement catalog tools by ref (tests);
    * ``wrap_executor`` — wraps the local executor *inside* the policy gate (tests);
    * ``probe`` — ``probe(point, info)`` at each crash point of §2.6 (tests);
    * ``actor_ref`` — ``authority.actor_ref`` (default ``runx:principal:local_runtime``);
    * ``settings`` — inner loop settings;
    * ``seal_timeout`` — seconds that "seal and record" may take (it runs shielded from
      cancellation); None for no bound (tests on a mock clock, whose autojump would fire
      it while a worker thread writes a receipt).
    """

    receipts: ReceiptRepository
    signer: ReceiptSigner
    workspace: Path
    now: Callable[[], _dt.datetime] = utc_now
    models: Mapping[str, Any] = attrs.field(factory=dict)
    tools: Sequence[Tool] = ()
    wrap_executor: Callable[[Any], Any] | None = None
    probe: Callable[[str, Mapping[str, Any]], None] | None = None
    actor_ref: Reference | None = None
    settings: Settings | None = None
    seal_timeout: float | None = 60.0

    def hit(self, point: str, **info: Any) -> None:
        """Call the crash-point probe (no-op without one)."""
        if self.probe is not None:
            self.probe(point, info)

    def created_at(self) -> str:
        """``now()`` as RFC 3339 UTC with milliseconds."""
        return format_created_at(self.now())


class Phase:
    """Where a Run stands: ``ENDED`` (terminal), ``PARKED`` (only Waiting calls remain)."""

    ENDED = "ended"
    PARKED = "parked"


_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def normalise_name(part: str) -> str:
    """A request-id name part: every character outside ``[A-Za-z0-9_.-]`` becomes ``_``."""
    return _NAME_CHARS.sub("_", part)


@attrs.frozen
class RequestInfo:
    """A derived request (§7.1): ``id`` (``agent_task.<task>.output`` or
    ``approval.<tool>[.k]``), ``kind`` (``agent_act`` / ``approval``), the tool and the
    inner ResponseRequest."""

    id: str
    kind: str
    tool: str
    request: ResponseRequest

    def payload(self) -> Any:
        """The request payload (the call arguments) as JSON data."""
        return loads_json(self.request.payload, source="request payload")

    def to_json(self) -> dict[str, Any]:
        """The ``requests[]`` entry of §7.1 (the envelope always inline)."""
        key = "envelope" if self.kind == "agent_act" else "arguments"
        return {"id": self.id, "kind": self.kind, "response_id": self.request.id,
                "tool": self.tool, "invocation": {key: self.payload()}}


def derive_requests(calls: Sequence[tuple[str, ResponseRequest]]) -> list[RequestInfo]:
    """Request ids of *calls* (``(tool_ref, ResponseRequest)`` in call order) (§7.1):
    an agent request is ``agent_task.<task>.output``; an approval is ``approval.<tool>``,
    with ``.2``, ``.3`` … for later approvals of the same tool."""
    out: list[RequestInfo] = []
    seen: dict[str, int] = {}
    for tool, request in calls:
        if request.kind is ResponseKind.APPROVAL:
            base = "approval." + normalise_name(tool)
            seen[base] = seen.get(base, 0) + 1
            rid = base if seen[base] == 1 else f"{base}.{seen[base]}"
            out.append(RequestInfo(rid, "approval", tool, request))
        else:
            name = tool.removeprefix(AGENT_TASK_PREFIX)
            rid = AGENT_TASK_PREFIX + normalise_name(name) + ".output"
            out.append(RequestInfo(rid, "agent_act", tool, request))
    return out


def input_envelope(inputs: Mapping[str, Any]) -> tuple[Digest, bytes]:
    """The frozen ``agent_input`` envelope of a governed Run's canonical *inputs* and its
    digest: the Run's single accepted input (§3.5 step 1)."""
    body = {"text": canonical(inputs).decode("utf-8")}
    return content_digest("agent_input", body), typed_envelope("agent_input", body)


async def check_input_body(frozen: Any, inputs: Mapping[str, Any]) -> None:
    """Read the frozen body a Run of *inputs* would freeze, if the store holds one, so a
    damaged body is refused before anything is written — before the scope is opened
    (which bumps its epoch) and before the Run is created (RUN-STO-4). Checkpoint.

    Raises: CorruptRecordError (the stored body is not a BLOB or does not hash to its
    digest).
    """
    digest, _ = input_envelope(inputs)
    try:
        await frozen.get(digest)
    except FrozenValueMissingError:
        pass  # nothing stored yet: the Run's put will store it


class GovernedSession:
    """One open runtime over one package runner (see module docstring). Obtain it from
    :func:`open_session`."""

    def __init__(self, rt: Runtime, package: Package, runner_name: str, tools: Sequence[Tool],
                 config: HostConfig) -> None:
        self.rt = rt
        self.package = package
        self.runner_name = runner_name
        self.runner: Runner = package.runner(runner_name)
        self.config = config
        self.builder = HostPromptBuilder(rt.writer, rt.store.frozen, package, runner_name,
                                         tools, self._context_created_at)
        self._pins: dict[str, str | None] = {}

    @property
    def scope(self) -> str:
        """The scope this session owns (its runtime's)."""
        return self.rt.scope

    @property
    def writer(self) -> Any:
        """The scope's SessionWriter (epoch-fenced, RUN-CMT-6)."""
        return self.rt.writer

    # -- reads -------------------------------------------------------------------------

    async def governed(self, run_id: str) -> GovernedRecord:
        """The folded ``governed/<run_id>`` stream."""
        return fold_governed(run_id, await self.writer.read_stream(governed_stream(run_id)))

    async def state(self, run_id: str) -> MachineState:
        """The Run's folded state (authoritative read)."""
        return (await self.writer.record(run_id)).state  # type: ignore[no-any-return]

    def _context_created_at(self, run_id: str) -> str:
        pin = self._pins.get(run_id)
        return pin if pin else self.config.created_at()

    async def remember_pin(self, run_id: str) -> Mapping[str, Any]:
        """Load the Run's ``run_opened`` (and its ``created_at_pin`` for context entries).

        Raises:
            UnknownRunError: no governed Run *run_id* in this scope.
        """
        opened = (await self.governed(run_id)).opened
        if opened is None:
            raise UnknownRunError(f"unknown run {run_id!r}", run_id=run_id)
        self._pins[run_id] = opened.get("created_at_pin")
        return opened

    # -- creation (§2.1, §2.3 step 5) ------------------------------------------------------

    def run_opened_body(self, *, run_id: str, inputs: Mapping[str, Any], intent_key: str,
                        trigger_fingerprint: str, loop_id: str | None = None,
                        turn_index: int | None = None,
                        created_at_pin: str | None = None) -> dict[str, Any]:
        """The ``run_opened`` body (§2.1)."""
        return {
            "run_id": run_id, "scope": self.scope, "package_name": self.package.name,
            "package_path": str(self.package.root), "package_digest": self.package.digest,
            "runner": self.runner_name, "runner_kind": self.runner.kind,
            "inputs": dict(inputs), "inputs_sha256": digest_json(inputs),
            "intent_key": intent_key, "trigger_fingerprint": trigger_fingerprint,
            "loop_id": loop_id, "turn_index": turn_index, "created_at_pin": created_at_pin,
        }

    async def open_run(self, opened: Mapping[str, Any], *, commit_id: str,
                       extra_events: Sequence[ForeignEvent] = ()) -> CommitStatus:
        """Create the Run of *opened* (``run_opened`` body) in one commit with its
        ``run_opened`` fact and *extra_events*; its single accepted input is the canonical
        inputs, bound by digest (§3.5 step 1). An unknown outcome is replayed once with the
        same commit id (§2.6). Returns ACCEPTED or ALREADY_APPLIED.

        Raises: OwnershipLostError, RunExistsError (the Run exists under another commit),
        ValidationError.
        """
        run_id = str(opened["run_id"])
        digest, data = input_envelope(opened["inputs"])
        await self.rt.store.frozen.put(digest, data)
        events = [governed_event(run_id, RUN_OPENED, opened), *extra_events]
        create = self.writer.create_run
        args = (NewRun(run_id), [AgentInput(f"{run_id}/input-0", digest)])
        try:
            result = await create(*args, commit_id=commit_id, extra_events=events)
        except (OwnershipLostError, RunExistsError, ValidationError):
            raise
        except Exception:
            result = await create(*args, commit_id=commit_id, extra_events=events)
        self._pins[run_id] = opened.get("created_at_pin")
        return result.status  # type: ignore[no-any-return]

    # -- driving (§2.3 step 6) -------------------------------------------------------------

    async def drive(self, run_id: str) -> str:
        """Drive the Run until it ends or only Waiting calls remain; return a
        :class:`Phase`.

        ``timeout_seconds`` bounds this active drive (time parked does not count): when it
        expires, in-flight effects are settled and ``CancelRun`` is committed under
        ``run_timeout_commit`` (sealed ``timed_out``). A context that changes during
        preparation commits ``CancelRun`` under ``run_blocked_commit`` (sealed
        ``blocked``). An effect left in flight by a previous owner is awaited and settled.

        Raises: OwnershipLostError, and the inner loop's errors (§5.9).
        """
        await self.remember_pin(run_id)
        with trio.move_on_after(self.runner.timeout_seconds) as limit:
            while True:
                try:
                    result = await self.rt.drive(run_id, builder=self.builder)
                except (ContextChangedDuringPreparation, ContextRefError):
                    await self._cancel(run_id, run_blocked_commit(run_id))
                    return Phase.ENDED
                if result.disposition is LoopDisposition.FINISHED:
                    return Phase.ENDED
                state = (await self.rt.snapshot(run_id)).state
                if state.status is not RunStatus.ACTIVE:
                    return Phase.ENDED
                if result.execution_recovery:
                    await self._settle_in_flight(state)
                    continue
                if waiting_calls(state):
                    return Phase.PARKED
                raise ValidationError(f"run {run_id} stopped without a reason to wait",
                                      run_id=run_id, reason=result.reason)
        assert limit.cancelled_caught
        await self._cancel(run_id, run_timeout_commit(run_id))
        return Phase.ENDED

    async def _cancel(self, run_id: str, command_id: str) -> None:
        request = CommitRequest(0, envelope(run_id, command_id, C.CancelRun("cancelled")))
        with trio.CancelScope(shield=True):
            try:
                await self.rt.run_store.commit(request)
            except RunTerminalError:
                pass

    async def _settle_in_flight(self, state: MachineState) -> None:
        """Await and settle the Outcomes of effects a previous owner left EXECUTING;
        one the executor does not know is recovered (``effect_unknown``)."""
        watcher = self.rt.runtime.watcher
        for target in recovery_targets(state):
            key = effect.AssignmentKey(self.scope, target.run_id, target.effect)
            try:
                outcome = await watcher.await_outcome(key)
            except (ExecutionNotFoundError, OutcomeUnavailableError):
                command_id, command = recovery_command(target)
                request = CommitRequest(0, envelope(target.run_id, command_id, command))
                try:
                    await self.rt.run_store.commit(request)
                except (StaleRuntimeError, RunTerminalError, CommandConflictError):
                    pass
                continue
            await self.rt.runtime.deliver(outcome)

    # -- requests (§7.1, §6.3 point 2) ------------------------------------------------------

    async def all_requests(self, run_id: str) -> dict[str, tuple[RequestInfo, F.Fact | None]]:
        """Every request the Run ever had (see :func:`requests_of`)."""
        return requests_of(await self.writer.run_facts(run_id))

    async def waiting_requests(self, run_id: str, *, verify: bool = True) -> list[RequestInfo]:
        """The parked Run's requests, derived from ``waiting_calls(state)`` in call order.
        With *verify*, the context entries of agent envelopes are re-verified first (§6.3
        point 2).

        Raises:
            ContextSkillChanged: an envelope's context changed; the request is withheld.
        """
        state = await self.state(run_id)
        waiting = waiting_calls(state)
        tools = {}
        current = state.current
        for call in getattr(current, "calls", ()):
            tools[call.call_id] = call.tool_ref
        infos = derive_requests([(tools.get(r.call_id, ""), r) for r in waiting])
        if verify:
            for info in infos:
                await self.verify_context(info)
        return infos

    async def verify_context(self, info: RequestInfo) -> None:
        """Re-verify an agent request's context entries against the disk (§6.3).

        Raises: ContextSkillChanged.
        """
        await verify_request_context(self.package.root, info)

    # -- sealing and recording (§2.3 step 8) -----------------------------------------------

    async def _override(self, run_id: str, state: MachineState) -> str | None:
        if state.status is not RunStatus.STOPPED:
            return None
        events = await self.writer.read_stream("run/" + run_id)
        last = events[-1].commit_id if events else ""
        if last == run_timeout_commit(run_id):
            return "timed_out"
        if last == run_blocked_commit(run_id):
            return "blocked"
        return None

    async def seal(self, run_id: str) -> SealedRun:
        """Seal the terminal Run (§2.3 step 8.1-8.3): commit ``run_sealing`` (the first
        commit wins; a stored ``created_at`` is reused), then adopt or seal and ``put`` its
        receipts, children first. An already sealed Run returns its stored receipts.

        Raises:
            LoopIntegrityError: the Run is sealed but its receipt is missing or invalid.
            ValidationError: the Run is not terminal.
            Receipt errors of sealing and storing.
        """
        gov = await self.governed(run_id)
        if gov.opened is None:
            raise UnknownRunError(f"unknown run {run_id!r}", run_id=run_id)
        if gov.sealed is not None:
            return await self.stored(gov)
        state = await self.state(run_id)
        if state.status is RunStatus.ACTIVE:
            raise ValidationError(f"run {run_id} has not ended", run_id=run_id)
        self.config.hit("before_run_sealing", run_id=run_id)
        if gov.sealing is None:
            pin = gov.opened.get("created_at_pin")
            body = {"run_id": run_id, "created_at": pin or self.config.created_at(),
                    "disposition_override": await self._override(run_id, state)}
            await self.writer.append_events(run_sealing_commit(run_id),
                                            [governed_event(run_id, RUN_SEALING, body)])
            gov = await self.governed(run_id)
        assert gov.sealing is not None and gov.opened is not None
        self.config.hit("after_run_sealing", run_id=run_id)
        evidence = await self._evidence(run_id, gov, state)
        previous = await self._previous(gov.opened)
        sealed = await trio.to_thread.run_sync(lambda: seal_run(
            evidence, signer=self.config.signer, store=self.config.receipts,
            actor_ref=self.config.actor_ref, previous=previous))
        self.config.hit("after_receipt_put", run_id=run_id)
        return sealed

    async def record(self, run_id: str, sealed: SealedRun) -> None:
        """Commit ``run_sealed`` (+ ``turn_recorded`` for a loop turn) in one commit
        (§2.1); a replay is "already applied". Only after the receipts are durable."""
        gov = await self.governed(run_id)
        assert gov.opened is not None
        top = sealed.top
        events = [governed_event(run_id, RUN_SEALED, {
            "run_id": run_id, "receipt_id": top.id, "receipt_digest": top.digest,
            "step_receipt_ids": [c.id for c in sealed.children]})]
        loop_id = gov.opened.get("loop_id")
        if loop_id is not None:
            events.append(loop_event(str(loop_id), TURN_RECORDED, {
                "loop_id": loop_id, "turn_index": gov.opened.get("turn_index"),
                "run_id": run_id, "receipt_id": top.id, "payload": sealed.payload}))
        await self.writer.append_events(run_sealed_commit(run_id), events)
        self.config.hit("after_turn_recorded", run_id=run_id)

    async def seal_and_record(self, run_id: str) -> SealedRun:
        """:meth:`seal` then :meth:`record`, shielded from cancellation and bounded by
        ``config.seal_timeout`` (§1: correctness does not depend on the shield; a
        cancelled or crashed host redoes both steps idempotently).

        Raises: as :meth:`seal` and :meth:`record`; ``trio.TooSlowError`` past the bound.
        """
        timeout = self.config.seal_timeout
        with trio.CancelScope(shield=True):
            limit = trio.fail_after(timeout) if timeout else contextlib.nullcontext()
            with limit:
                sealed = await self.seal(run_id)
                await self.record(run_id, sealed)
        return sealed

    async def stored(self, gov: GovernedRecord) -> SealedRun:
        """The receipts a ``run_sealed`` names, read back and verified.

        Raises: LoopIntegrityError when a receipt is missing or fails verification.
        """
        assert gov.sealed is not None
        ids = [str(gov.sealed["receipt_id"]), *map(str, gov.sealed.get("step_receipt_ids", ()))]
        store = self.config.receipts
        try:
            receipts = await trio.to_thread.run_sync(lambda: [store.get(i) for i in ids])
        except ReceiptError as exc:
            raise LoopIntegrityError(f"run {gov.run_id}: its receipt cannot be read: {exc}",
                                     loop_id=None, turn_index=None, check="receipt") from exc
        top: Receipt = receipts[0]
        payload = None
        if top.body["seal"]["disposition"] == "closed":
            payload = await self._payload_of(gov.run_id, top)
        return SealedRun(top, tuple(receipts[1:]), payload, True)

    async def _payload_of(self, run_id: str, top: Receipt) -> Any:
        opened = (await self.governed(run_id)).opened or {}
        if opened.get("loop_id") is not None:
            events = await self.writer.read_stream(loop_stream(str(opened["loop_id"])))
            record = fold_loop(str(opened["loop_id"]), events)
            for turn in record.turns if record else ():
                if turn.run_id == run_id:
                    return turn.payload
        state = await self.state(run_id)
        gov = await self.governed(run_id)
        evidence = await self._evidence(run_id, gov, state)
        if evidence.steps:
            last = evidence.steps[-1].answer
            step = self.runner.steps[-1] if hasattr(self.runner, "steps") else None
            if isinstance(last, Mapping) and step is not None:
                return {k: last[k] for k in step.outputs if k in last}
        return None if evidence.final is NO_RESULT else evidence.final

    async def _previous(self, opened: Mapping[str, Any]) -> Reference | None:
        loop_id, turn_index = opened.get("loop_id"), opened.get("turn_index")
        if loop_id is None or not isinstance(turn_index, int) or turn_index <= 1:
            return None
        events = await self.writer.read_stream(loop_stream(str(loop_id)))
        record = fold_loop(str(loop_id), events)
        prev = record.turns[turn_index - 2] if record and len(record.turns) >= turn_index - 1 \
            else None
        if prev is None or prev.receipt_id is None:
            raise LoopIntegrityError(f"loop {loop_id}: turn {turn_index - 1} is not recorded",
                                     loop_id=loop_id, turn_index=turn_index, check="previous")
        store = self.config.receipts
        receipt_id = prev.receipt_id
        try:
            receipt: Receipt = await trio.to_thread.run_sync(lambda: store.get(receipt_id))
        except ReceiptError as exc:
            raise LoopIntegrityError(f"loop {loop_id}: receipt of turn {turn_index - 1}: {exc}",
                                     loop_id=loop_id, turn_index=turn_index - 1,
                                     check="receipt") from exc
        return receipt.reference

    async def _frozen(self, type_name: str, digest: str) -> Any:
        data = await self.rt.store.frozen.get(digest)
        return decode_frozen_value(type_name, digest, data)

    async def _evidence(self, run_id: str, gov: GovernedRecord,
                        state: MachineState) -> RunEvidence:
        assert gov.opened is not None
        facts = tuple(await self.writer.run_facts(run_id))
        final: Any = NO_RESULT
        if state.status is RunStatus.COMPLETED:
            completed = [f for f in facts if isinstance(f, F.ModelStepCompleted)]
            if completed:
                result = await self._frozen("model_result", completed[-1].result_digest)
                assert isinstance(result, ModelResult)
                try:
                    final = loads_json(result.content, source="model result")
                except ValueError:
                    final = result.content
        steps: list[StepEvidence] = []
        runner = self.runner
        if runner.kind == "graph":
            ids = [s.id for s in getattr(runner, "steps", ())]
            calls: dict[str, int] = {}
            for fact in facts:
                match fact:
                    case F.ToolStepOpened(calls=bindings):
                        for b in bindings:
                            if b.tool_ref.startswith(AGENT_TASK_PREFIX) and len(steps) < len(ids):
                                calls[b.call_id] = len(steps)
                                steps.append(StepEvidence(ids[len(steps)], reached=True))
                    case F.ToolCallAnswered(call_id=cid, response_digest=d) if cid in calls:
                        text = await self._frozen("tool_response_payload", d)
                        steps[calls[cid]] = attrs.evolve(steps[calls[cid]],
                                                         answer=loads_json(text, source="answer"))
                    case F.ToolCallFailed(call_id=cid, failure=failure) if cid in calls:
                        steps[calls[cid]] = attrs.evolve(
                            steps[calls[cid]], rejected=failure.class_ == "response_rejected")
        sealing = gov.sealing or {}
        return RunEvidence(scope=self.scope, run_id=run_id, runner_name=self.runner_name,
                           runner=runner, facts=facts, state=state, opened=gov.opened,
                           created_at=str(sealing.get("created_at")),
                           override=sealing.get("disposition_override"), final=final,
                           steps=tuple(steps))


class _Redispatch:
    """The reconciler's ``redispatch`` port (REDISPATCH_MISSING): offer an effect the
    previous owner left EXECUTING, and the executor no longer knows, once more. Every
    (re)start passes the gate; a tool whose replay policy is not ``allowed`` is refused
    (the reconciler then disposes it as ``effect_unknown``)."""

    def __init__(self, store: Any, scope: str, gate: Any) -> None:
        self.store, self.scope, self.gate = store, scope, gate

    async def __call__(self, key: Any) -> None:
        reader = await self.store.reader(self.scope)
        state = (await reader.record(key.run_id)).state
        target = next((t for t in recovery_targets(state) if t.effect == key.effect), None)
        if target is None:
            raise DispatchRejectedError("the effect is no longer executing", key=key)
        assignment = assignment_from_target(self.scope, state, target)
        body = assignment.body
        if isinstance(body, effect.ToolAssignment):
            if body.replay is not ToolReplay.ALLOWED:
                raise DispatchRejectedError("the tool may not be replayed", key=key)
        else:
            request = await self.store.frozen.get(body.request_digest)
            assignment = attrs.evolve(assignment, body=attrs.evolve(
                body, request=decode_frozen_value("model_request", body.request_digest,
                                                  request)))
        failure = await self.gate.validate(attrs.evolve(assignment, effect=""))
        if failure is not None:
            raise DispatchRejectedError(f"refused at validate: {failure.message}", key=key)
        await self.gate.dispatch(assignment)


def requests_of(facts: Sequence[F.Fact]) -> dict[str, tuple[RequestInfo, F.Fact | None]]:
    """Every request a Run ever had, by derived id (per ToolStep, in call order; a later
    step wins), each with the fact that settled it (None while waiting)."""
    settled: dict[str, F.Fact] = {}
    steps: list[list[tuple[str, ResponseRequest]]] = []
    for fact in facts:
        match fact:
            case F.ToolStepOpened(calls=bindings):
                steps.append([(b.tool_ref, b.response) for b in bindings
                              if b.response is not None])
            case (F.ToolCallApproved(call_id=cid) | F.ToolCallAnswered(call_id=cid)
                  | F.ToolCallFailed(call_id=cid)):
                settled.setdefault(cid, fact)
    out: dict[str, tuple[RequestInfo, F.Fact | None]] = {}
    for calls in steps:
        for info in derive_requests(calls):
            out[info.id] = (info, settled.get(info.request.call_id))
    return out


async def verify_request_context(root: Path, info: RequestInfo) -> None:
    """Re-verify an agent request's context entries against the disk (§6.3).

    Raises: ContextSkillChanged.
    """
    if info.kind != "agent_act":
        await trio.lowlevel.checkpoint()
        return
    payload = info.payload()
    entries = payload.get("current_context", ()) if isinstance(payload, dict) else ()
    await trio.to_thread.run_sync(verify_entries, root, entries)


def _single_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        item = stack.pop()
        if isinstance(item, BaseExceptionGroup):
            stack.extend(item.exceptions)
        else:
            leaves.append(item)
    return leaves[0] if len(leaves) == 1 else None


def check_runner(package: Package, runner_name: str, config: HostConfig) -> list[Tool]:
    """Check that this host can serve *package*'s runner *runner_name*, before anything
    is written (the CLI calls it before it creates or opens a store): the runner exists,
    this host provides each of its catalog tools, and a ``scripted-run``'s ``script`` is a
    built-in script (``BUILTIN_SCRIPTS``) or one of ``config.models``. Returns the
    runner's executor tools (:func:`~._prompt.catalog_tools`).

    Raises:
        PackageError: ``reason`` ``unknown_runner``, ``unknown_tool`` or
            ``unknown_script`` (the package author's error; no Run is created).
    """
    runner = package.runner(runner_name)
    tools = catalog_tools(config.workspace, runner, config.tools)
    if isinstance(runner, ScriptedRunner):
        served = sorted({*BUILTIN_SCRIPTS, *config.models})
        if runner.script not in served:
            raise PackageError(
                f"runner {runner_name}: script {runner.script!r} is not a script this host "
                f"serves (known: {', '.join(served)})", path=str(package.root),
                reason="unknown_script")
    return tools


@contextlib.asynccontextmanager
async def open_session(store: Any, scope: str, package: Package, runner_name: str,
                       config: HostConfig) -> AsyncIterator[GovernedSession]:
    """Open a :class:`GovernedSession`: the runner's catalog tools and the scripted models
    in a local executor, wrapped by the policy gate, and a runtime that owns *scope*
    (epoch + 1; takeover of a previous owner's effects runs first).

    An error raised inside the block leaves it as itself (not wrapped in the exception
    group of the nurseries it crosses).

    Raises: PackageError (:func:`check_runner`: an unknown runner, a catalog tool or a
    script this host does not provide; nothing is written), OwnershipLostError.
    """
    runner = package.runner(runner_name)
    tools = check_runner(package, runner_name, config)
    models = {**builtin_models(), **config.models}
    try:
        async with open_local_executor(tools=tools, models=models) as local:
            inner = config.wrap_executor(local) if config.wrap_executor else local
            gate = policy_gate(inner, runner.allowed_tools)
            reconciler = Reconciler(gate, missing=MissingPolicy.REDISPATCH_MISSING,
                                    ledger=MemoryDispatchLedger(),
                                    redispatch=_Redispatch(store, scope, gate))
            async with open_runtime(store, gate, scope=scope, settings=config.settings,
                                    reconciler=reconciler) as rt:
                yield GovernedSession(rt, package, runner_name, tools, config)
    except BaseExceptionGroup as group:
        leaf = _single_leaf(group)
        if leaf is None:
            raise
        raise leaf from None
