"""The application surface: helpers of §5.12, the transcript prompt builder, and
``open_runtime`` (architecture §3).

``open_runtime`` opens the scope (bumping its epoch: this process is now the single
writer), runs takeover reconciliation once for Runs a previous owner left EXECUTING, and
starts the RunRuntime. Leaving the block cancels actors cleanly; settlements in flight
finish inside shielded, time-limited scopes.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

import attrs
import trio

from ..protocol import commands as C
from ..protocol import facts as F
from ..protocol.canonical import canonical_json_text, decode_frozen, typed_envelope
from ..protocol.commit import CommitRequest, CommitResult, Snapshot, envelope
from ..protocol.digests import decision_digest, digest_tool_response_payload
from ..protocol.errors import (
    CorruptRecordError,
    FrozenValueMissingError,
    OwnershipLostError,
    ValidationError,
)
from ..protocol.ids import derive_input_command_id, derive_response_command_id
from ..protocol.plan import Prompt, PromptInput, waiting_calls
from ..protocol.values import (
    AgentInput,
    ModelRef,
    ModelRequest,
    NewRun,
    ResponseKind,
    ResponseRequest,
    RunID,
    ToolDefinition,
    ToolSpec,
)
from ._events import Event, EventSink
from ._preflight import check_offers
from ._reconcile import Reconciler, recover_interrupted
from ._results import LoopResult
from ._runtime import RunRuntime
from ._settings import Settings

__all__ = [
    "approve", "reject", "answer", "accept_input", "cancel_run", "TranscriptBuilder",
    "ToolOffer", "Runtime", "open_runtime", "input_body", "AGENT_INPUT",
]


#: Frozen body type of an input's text: ``{"text": str}``.
AGENT_INPUT = "agent_input"


def input_body(text: str) -> tuple[AgentInput, bytes]:
    """An input's frozen body: ``(AgentInput(id="", digest), envelope bytes)``.

    The digest is the one ``AgentInput.text`` derives (type ``agent_input``).
    """
    return AgentInput.text("", text), typed_envelope(AGENT_INPUT, {"text": text})


async def _commit(store: Any, run_id: RunID, command_id: str, command: C.Command) -> CommitResult:
    result: CommitResult = await store.commit(
        CommitRequest(0, envelope(run_id, command_id, command)))
    return result


async def approve(store: Any, request: ResponseRequest) -> CommitResult:
    """Approve a WAITING(approval) call under its derived ids (§5.12, RUN-MCH-4)."""
    return await _commit(store, request.run_id, derive_response_command_id(
        request.run_id, request.step_id, request.call_id, request.id), C.ApproveToolCall(
        step_id=request.step_id, call_id=request.call_id, response_id=request.id,
        response_digest=decision_digest(ResponseKind.APPROVAL, "approved", "")))


async def reject(store: Any, request: ResponseRequest, reason: str) -> CommitResult:
    """Reject a WAITING call; it fails KNOWN (permission_denied / response_rejected)."""
    return await _commit(store, request.run_id, derive_response_command_id(
        request.run_id, request.step_id, request.call_id, request.id), C.RejectToolCall(
        step_id=request.step_id, call_id=request.call_id, response_id=request.id,
        response_digest=decision_digest(request.kind, "rejected", reason), reason=reason))


async def answer(store: Any, request: ResponseRequest, payload: Any) -> CommitResult:
    """Answer a WAITING(external_response) call with the JSON value *payload*."""
    text = canonical_json_text(payload)
    return await _commit(store, request.run_id, derive_response_command_id(
        request.run_id, request.step_id, request.call_id, request.id), C.SubmitToolResponse(
        step_id=request.step_id, call_id=request.call_id, response_id=request.id,
        response_digest=digest_tool_response_payload(text), payload=text))


async def accept_input(store: Any, run_id: RunID, inputs: Sequence[AgentInput]) -> CommitResult:
    """Queue *inputs* under the derived input command id (RUN-LOP-8)."""
    return await _commit(store, run_id, derive_input_command_id(run_id, *(i.id for i in inputs)),
                         C.AcceptInput(tuple(inputs)))


async def cancel_run(store: Any, run_id: RunID, command_id: str) -> CommitResult:
    """Commit CancelRun (RUN-LOP-2); derive *command_id* from your request id."""
    return await _commit(store, run_id, command_id, C.CancelRun("cancelled"))


class ToolOffer(Protocol):
    """A tool as the builder offers it: its definition and the Run-side spec."""

    @property
    def definition(self) -> ToolDefinition: ...

    def spec(self) -> ToolSpec: ...


class TranscriptBuilder:
    """A PromptBuilder that rebuilds the conversation from the Run's own log.

    Messages (in ``body.messages``): inputs as ``user`` messages (from their frozen
    ``agent_input`` bodies), completed model steps as ``assistant`` messages (content and
    tool calls from the frozen model result), and settled calls as ``tool`` messages
    (output, answer, or error). Withdrawn, recovered and rejected steps leave no message.
    """

    def __init__(self, writer: Any, frozen: Any, model: ModelRef,
                 tools: Sequence[ToolOffer] = (), *, system: str = "",
                 require_inputs: bool = False) -> None:
        self._writer = writer
        self._frozen = frozen
        self._require_inputs = require_inputs
        self.model = model
        self.tools = tuple(tools)
        self.system = system

    async def _body(self, digest: str, type_name: str) -> Any:
        """The frozen body *digest* of type *type_name*.

        An ``agent_input`` body is frozen by whoever submits the input (``input_body``),
        not by the store, so a missing one gives None (the message shows ``[input id]``)
        unless the builder was made with ``require_inputs=True``.

        Raises:
            CorruptRecordError: a model result, tool output or response payload is missing
                (the store freezes those with their facts, so the store is damaged;
                RUN-STO-4), or an input body with ``require_inputs`` (``table="frozen"``,
                ``row`` = the digest). No placeholder is substituted for them.
        """
        try:
            return decode_frozen(type_name, digest, await self._frozen.get(digest))
        except FrozenValueMissingError as exc:
            if type_name == AGENT_INPUT and not self._require_inputs:
                return None
            raise CorruptRecordError(f"the frozen body {digest} ({type_name}) is missing",
                                     table="frozen", row=digest, digest=digest,
                                     reason="missing") from exc

    async def messages(self, run_id: RunID) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = []
        if self.system:
            msgs.append({"role": "system", "content": self.system})
        provider_ids: dict[str, str] = {}
        for fact in await self._writer.run_facts(run_id):
            match fact:
                case F.InputAccepted(input=i):
                    body = await self._body(i.digest, AGENT_INPUT)
                    text = body.get("text") if isinstance(body, dict) else None
                    msgs.append({"role": "user", "content": text if text is not None
                                 else f"[input {i.id}]"})
                case F.ModelStepCompleted(result_digest=d):
                    body = await self._body(d, "model_result") or {}
                    msg: dict[str, Any] = {"role": "assistant",
                                           "content": body.get("content", "")}
                    if body.get("toolCalls"):
                        msg["toolCalls"] = body["toolCalls"]
                    msgs.append(msg)
                case F.ToolStepOpened(calls=calls):
                    provider_ids.update({b.call_id: b.provider_call_id for b in calls})
                case F.ToolCallCompleted(call_id=cid, output_digest=d):
                    body = await self._body(d, "tool_output") or {}
                    msgs.append({"role": "tool", "toolCallId": provider_ids.get(cid, ""),
                                 "callId": cid, "content": body.get("output")})
                case F.ToolCallAnswered(call_id=cid, response_digest=d):
                    body = await self._body(d, "tool_response_payload") or {}
                    msgs.append({"role": "tool", "toolCallId": provider_ids.get(cid, ""),
                                 "callId": cid, "content": body.get("payload")})
                case F.ToolCallFailed(call_id=cid, failure=failure):
                    msgs.append({"role": "tool", "toolCallId": provider_ids.get(cid, ""),
                                 "callId": cid, "error": {"class": failure.class_,
                                                          "message": failure.message}})
        return msgs

    async def build(self, hint: PromptInput) -> Prompt:
        """Build the next request for *hint* (consumes every pending input)."""
        body = {"messages": await self.messages(hint.run_id)}
        request = ModelRequest(self.model, tuple(t.definition for t in self.tools),
                               canonical_json_text(body))
        return Prompt(request=request, input_ids=tuple(i.id for i in hint.inputs),
                      tools=tuple(t.spec() for t in self.tools))


@attrs.define
class Runtime:
    """What ``open_runtime`` yields: the application's handle on one scope."""

    store: Any
    writer: Any
    runtime: RunRuntime
    builder: Any
    recovered: int = 0

    @property
    def scope(self) -> str:
        return str(self.writer.scope)

    @property
    def run_store(self) -> Any:
        return self.runtime.run_store

    async def _inputs(self, run_id: RunID, texts: Sequence[str | AgentInput],
                      first: int) -> tuple[AgentInput, ...]:
        out = []
        for n, item in enumerate(texts, start=first):
            if isinstance(item, AgentInput):
                out.append(item)
                continue
            shell, data = input_body(item)
            await self.store.frozen.put(shell.digest, data)
            out.append(AgentInput(f"{run_id}/input-{n}", shell.digest))
        return tuple(out)

    async def create_run(self, run_id: RunID, inputs: Sequence[str | AgentInput] = (), *,
                         commit_id: str = "", causation_id: str = "",
                         extra_events: Sequence[Any] = ()) -> Snapshot:
        """Create a Run with text (or AgentInput) inputs; idempotent under *commit_id*
        (default ``"create:" + run_id``). Raises RunExistsError, ValidationError."""
        items = await self._inputs(run_id, inputs, 0)
        result = await self.writer.create_run(NewRun(run_id, causation_id), items,
                                              commit_id=commit_id or f"create:{run_id}",
                                              extra_events=extra_events)
        return result.snapshot  # type: ignore[no-any-return]

    async def drive(self, run_id: RunID, *, builder: Any = None, settings: Settings | None = None,
                    sink: EventSink | None = None) -> LoopResult:
        """Drive *run_id* (see RunHandle.drive)."""
        handle = self.runtime.run(run_id, settings=settings)
        return await handle.drive(builder or self.builder, sink=sink)

    async def accept_input(self, run_id: RunID, *texts: str | AgentInput) -> CommitResult:
        """Queue inputs for *run_id* (ids continue the Run's numbering)."""
        facts = await self.writer.run_facts(run_id)
        n = sum(1 for f in facts if isinstance(f, F.InputAccepted))
        return await accept_input(self.run_store, run_id, await self._inputs(run_id, texts, n))

    async def waiting(self, run_id: RunID) -> tuple[ResponseRequest, ...]:
        return waiting_calls((await self.run_store.load(run_id)).state)

    async def _request(self, run_id: RunID, call_id: str) -> ResponseRequest:
        for request in await self.waiting(run_id):
            if request.call_id == call_id or not call_id:
                return request
        raise ValidationError(f"no waiting call {call_id!r} in run {run_id}", run_id=run_id)

    async def approve(self, run_id: RunID, call_id: str = "") -> CommitResult:
        return await approve(self.run_store, await self._request(run_id, call_id))

    async def reject(self, run_id: RunID, call_id: str = "", reason: str = "") -> CommitResult:
        return await reject(self.run_store, await self._request(run_id, call_id), reason)

    async def respond(self, run_id: RunID, call_id: str, payload: Any) -> CommitResult:
        return await answer(self.run_store, await self._request(run_id, call_id), payload)

    async def cancel(self, run_id: RunID, request_id: str = "") -> CommitResult:
        """Commit CancelRun and stop the Run's work (``RunRuntime.cancel_run``,
        RUN-ACT-4): in-flight effects are cancelled at the executor and a concurrent
        drive returns within ``drain_timeout``."""
        return await self.runtime.cancel_run(run_id, f"cancel:{request_id or run_id}")

    async def snapshot(self, run_id: RunID) -> Snapshot:
        return await self.run_store.load(run_id)  # type: ignore[no-any-return]

    async def record(self, run_id: RunID) -> Snapshot:
        return await self.writer.record(run_id)  # type: ignore[no-any-return]

    def events(self, run_id: RunID | None = None) -> AsyncIterator[Event]:
        """Live events of *run_id* (all Runs for None); provisional ones may be dropped."""
        return self.runtime.hub.subscribe(run_id)


def _ownership_lost(group: BaseExceptionGroup[Any]) -> OwnershipLostError | None:
    """The first OwnershipLostError of *group* if every other leaf is one too or a
    ``trio.Cancelled`` (the siblings it cancelled); else None (keep the group)."""
    found: list[OwnershipLostError] = []

    def walk(exc: BaseException) -> bool:
        if isinstance(exc, BaseExceptionGroup):
            return all(walk(e) for e in exc.exceptions)
        if isinstance(exc, OwnershipLostError):
            found.append(exc)
            return True
        return isinstance(exc, trio.Cancelled)

    return found[0] if walk(group) and found else None


@contextlib.asynccontextmanager
async def open_runtime(store: Any, executor: Any, *, scope: str = "default",
                       settings: Settings | None = None, model: ModelRef = "",
                       tools: Sequence[ToolOffer] = (), system: str = "",
                       builder: Any = None, reconciler: Reconciler | None = None,
                       mailbox_size: int = 16, sink: EventSink | None = None,
                       ) -> AsyncIterator[Runtime]:
    """Open *scope* on *store* as its single writer and run its Runs as actors.

    Opens the writer (epoch + 1), runs ``recover_interrupted`` once with *reconciler*
    (default: ``Reconciler(executor)``; its ``epoch`` is set to the writer's), then
    starts :meth:`Reconciler.watch` in the runtime's nursery — it settles the effects
    takeover kept EXECUTING through the runtime's Watcher and ``RunRuntime.deliver``
    (unless the reconciler has its own ``watcher``/``on_outcome``) and retries owed
    redispatches every ``requeue_after`` seconds (RUN-CMT-7, RUN-EXE-15) — and yields a
    :class:`Runtime`. The default builder is a :class:`TranscriptBuilder` for *model*
    and *tools*.

    Before the scope is opened (nothing is written yet) *tools* and *model* are checked
    against the executor's ``validate`` (RUN-ACT-8, :func:`check_offers`).

    Raises: ToolOfferError (an offered tool the executor lacks or declares differently);
    ModelUnavailableError (the executor refuses *model*); the reconciler's configuration
    errors; OwnershipLostError if another writer opens the scope meanwhile — unwrapped,
    never inside an ExceptionGroup, whether the body or a task of the runtime (the
    reconciler's watch) met it first (RUN-ACT-5).
    """
    await check_offers(executor, scope, model=model, tools=tools)
    writer = await store.open(scope)
    try:
        rec = reconciler if reconciler is not None else Reconciler(executor)
        rec.epoch = getattr(writer, "epoch", 0)
        recovered = await recover_interrupted(writer, rec)
        if builder is None:
            builder = TranscriptBuilder(writer, store.frozen, model, tools, system=system)
        try:
            async with RunRuntime(writer, executor, settings, mailbox_size=mailbox_size,
                                  sink=sink) as rt:
                nursery = rt._nursery
                assert nursery is not None  # open inside the async with
                nursery.start_soon(functools.partial(
                    rec.watch, rt.run_store, watcher=rt.watcher, on_outcome=rt.deliver),
                    name="runx-reconcile-watch")
                yield Runtime(store, writer, rt, builder, recovered)
        except BaseExceptionGroup as group:
            lost = _ownership_lost(group)
            if lost is None:
                raise
            raise lost from None  # RUN-ACT-5: one documented shape, unwrapped
    finally:
        with trio.CancelScope(shield=True):
            await writer.aclose()
