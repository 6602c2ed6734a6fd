"""The application surface: helpers of §5.12, the transcript prompt builder, and
``open_runtime`` (architecture §3; APP-RES-1 … APP-EVT-1).

``open_runtime`` opens the scope (bumping its epoch: this process is now the single
writer), runs takeover reconciliation once for Runs a previous owner left EXECUTING, and
starts the actor runtime. Leaving the block cancels actors cleanly; settlements in flight
finish inside shielded, time-limited scopes. ``runx_actors.app.open_sqlite_runtime`` does
the common case (SQLite store + local executor + runtime) in one ``async with``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

import attrs
import trio

from .. import effect
from .._scoped import body_errors_unwrapped
from ..protocol import commands as C
from ..protocol import facts as F
from ..protocol._codec import encode_value
from ..protocol.canonical import (
    canonical_json_text,
    decode_frozen,
    parse_json_strict,
    typed_envelope,
)
from ..protocol.commit import (
    CommitRequest,
    CommitResult,
    CommitStatus,
    Snapshot,
    envelope,
    validate_name,
)
from ..protocol.digests import decision_digest, digest_tool_response_payload
from ..protocol.errors import (
    CanonicalJSONError,
    CorruptRecordError,
    FrozenValueMissingError,
    OwnershipLostError,
    RunConflictError,
    RunNotFoundError,
    RuntimeClosedError,
    ValidationError,
)
from ..protocol.ids import derive_input_command_id, derive_response_command_id
from ..protocol.plan import Prompt, PromptInput, waiting_calls
from ..protocol.state import MachineState, ToolStep
from ..protocol.values import (
    AgentInput,
    ModelRef,
    ModelRequest,
    NewRun,
    ResponseKind,
    ResponseRequest,
    RunID,
    RunStatus,
    ToolDefinition,
    ToolSpec,
)
from ..store.base import ForeignEvent, FrozenStore, RunStore, SessionReader, SessionWriter
from ._events import Durability, Event, EventKind, EventSink, safe_emit
from ._preflight import check_offers, check_open_arguments
from ._reconcile import Reconciler, recover_interrupted
from ._results import (
    AWAITING_APPROVAL,
    AWAITING_APPROVAL_OR_RESPONSE,
    AWAITING_RESPONSE,
    Answer,
    LoopDisposition,
    LoopResult,
    WaitingCall,
)
from ._runtime import ActorRuntime, DriveTicket
from ._settings import Settings

__all__ = [
    "approve", "reject", "answer", "accept_input", "cancel_run", "TranscriptBuilder",
    "ToolOffer", "Runtime", "open_runtime", "input_body", "read_answer", "waiting_for",
    "AGENT_INPUT", "Created", "ScopeWriter", "RuntimeStore", "PromptBuilder",
    "MAX_INPUTS_PER_COMMAND", "MAX_INPUTS_PER_RUN", "MAX_INPUT_TEXT_BYTES",
]


#: Frozen body type of an input's text: ``{"text": str}``.
AGENT_INPUT = "agent_input"


def _ints(value: Any) -> Any:
    """JSON as written: strict parsing yields floats for every number; integral ones
    (within ±2**53) come back as ``int`` (``42``, not ``42.0``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53 - 1:
        return int(value)
    if isinstance(value, list):
        return [_ints(v) for v in value]
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    return value


def _check_id(run_id: object) -> None:
    """Raise ValidationError unless *run_id* is a string (a number or None is a caller's
    mistake, named as such — not a TypeError from deep inside a store; RUN-WIR-1). A
    string no Run can carry is answered by the lookup itself (RunNotFoundError)."""
    if not isinstance(run_id, str):
        raise ValidationError(f"run id must be a string, not {type(run_id).__name__}",
                              value=repr(run_id)[:64])


#: The most inputs one ``create_run`` or ``accept_input`` takes (RUN-INP-2).
MAX_INPUTS_PER_COMMAND = 1024
#: The most inputs one Run accepts over its life (RUN-INP-2; ``accept_input`` checks the
#: count in the log it reads before committing).
MAX_INPUTS_PER_RUN = 65536
#: The largest text input, in UTF-8 bytes (8 MiB, as a model result or a tool output;
#: RUN-INP-2).
MAX_INPUT_TEXT_BYTES = 8 << 20


def _check_inputs(texts: object) -> None:
    """Raise ValidationError unless *texts* is a sequence (not a string) of texts and
    AgentInputs (APP-NEW-1): a bare string would be taken letter by letter; at most
    :data:`MAX_INPUTS_PER_COMMAND` of them, each text at most
    :data:`MAX_INPUT_TEXT_BYTES` UTF-8 bytes (RUN-INP-2; ``index``, ``size``, ``limit``)."""
    if isinstance(texts, str | bytes | bytearray) or not isinstance(texts, Sequence):
        raise ValidationError(f"inputs must be a list of texts or AgentInputs, not "
                              f"{type(texts).__name__} (a single text: [text])")
    if len(texts) > MAX_INPUTS_PER_COMMAND:
        raise ValidationError(f"{len(texts)} inputs in one command, more than "
                              f"{MAX_INPUTS_PER_COMMAND} (MAX_INPUTS_PER_COMMAND)",
                              size=len(texts), limit=MAX_INPUTS_PER_COMMAND)
    for n, item in enumerate(texts):
        if not isinstance(item, str | AgentInput):
            raise ValidationError(f"input {n} is {type(item).__name__}, not a text (str) "
                                  f"or an AgentInput", index=n)
        if isinstance(item, str) and len(item) > MAX_INPUT_TEXT_BYTES // 4:
            size = len(item.encode("utf-8", "surrogatepass"))
            if size > MAX_INPUT_TEXT_BYTES:
                raise ValidationError(f"input {n} is {size} UTF-8 bytes, more than "
                                      f"{MAX_INPUT_TEXT_BYTES} (MAX_INPUT_TEXT_BYTES)",
                                      index=n, size=size, limit=MAX_INPUT_TEXT_BYTES)


def input_body(text: str) -> tuple[AgentInput, bytes]:
    """An input's frozen body: ``(AgentInput(id="", digest), envelope bytes)``.

    The digest is the one ``AgentInput.text`` derives (type ``agent_input``).
    """
    return AgentInput.text("", text), typed_envelope(AGENT_INPUT, {"text": text})


# -- the ports the facade needs ------------------------------------------------------------


class ScopeWriter(SessionWriter, SessionReader, Protocol):
    """A scope's writer as the facade uses it: the :class:`SessionWriter` port plus its
    reads (:class:`SessionReader`). The SQLite, PostgreSQL and memory stores' writers all
    are one (architecture §4)."""


class RuntimeStore(Protocol):
    """The store ``open_runtime`` takes (architecture §4; spec §4.5): ``open(scope)``
    bumps the scope's epoch and returns its single writer; ``frozen`` holds
    content-addressed bodies. ``MemoryStore``, ``open_sqlite_store(...)`` and
    ``open_postgres_store(...)`` give one."""

    async def open(self, scope: str) -> ScopeWriter:
        """Bump *scope*'s epoch and return its writer (RUN-CMT-6)."""

    @property
    def frozen(self) -> FrozenStore:
        """The content-addressed bodies (RUN-WIR-4)."""


class PromptBuilder(Protocol):
    """Builds the next model request of a Run (§5.6): ``build(hint)`` gets the planner's
    hint (run id, pending inputs, source step) and returns the Prompt to prepare.

    A builder may set the attribute ``reads_pending = True`` to opt in to fused commits
    (RUN-LOP-11): it then promises to build from the store's log *followed by*
    ``hint.pending`` (facts decided but not yet durable; their bodies in
    ``hint.pending_bodies``), or from nothing in the store at all. Without it the last
    tool result is committed on its own before the builder runs.
    """

    async def build(self, hint: PromptInput) -> Prompt:
        """The Prompt to prepare for *hint*; an exception propagates to the drive."""


# -- module-level helpers (§5.12) -------------------------------------------------------


async def _commit(store: RunStore, run_id: RunID, command_id: str,
                  command: C.Command) -> CommitResult:
    return await store.commit(CommitRequest(0, envelope(run_id, command_id, command)))


async def approve(store: RunStore, request: ResponseRequest) -> CommitResult:
    """Approve a WAITING(approval) call under its derived ids (§5.12, RUN-MCH-4).

    Idempotent (a repeat returns ALREADY_APPLIED). Raises StaleRuntimeError (the call
    no longer waits), RunTerminalError, OwnershipLostError; nothing is written then.
    """
    return await _commit(store, request.run_id, derive_response_command_id(
        request.run_id, request.step_id, request.call_id, request.id), C.ApproveToolCall(
        step_id=request.step_id, call_id=request.call_id, response_id=request.id,
        response_digest=decision_digest(ResponseKind.APPROVAL, "approved", "")))


async def reject(store: RunStore, request: ResponseRequest, reason: str) -> CommitResult:
    """Reject a WAITING call; it fails KNOWN (permission_denied / response_rejected;
    RUN-MCH-4).

    Raises as :func:`approve`.
    """
    return await _commit(store, request.run_id, derive_response_command_id(
        request.run_id, request.step_id, request.call_id, request.id), C.RejectToolCall(
        step_id=request.step_id, call_id=request.call_id, response_id=request.id,
        response_digest=decision_digest(request.kind, "rejected", reason), reason=reason))


#: Deepest nesting (arrays/objects) of a response payload: the strict readers' limit
#: (``_strictread.MAX_DEPTH``; README "Hostile input").
MAX_PAYLOAD_DEPTH = 64


def check_payload_depth(value: Any, limit: int = MAX_PAYLOAD_DEPTH) -> None:
    """Raise CanonicalJSONError (``reason="too_deep"``) when the JSON value *value* nests
    arrays/objects more than *limit* levels (a scalar is depth 0). Iterative: a hostile
    value cannot reach a RecursionError here."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth + 1 > limit:
            raise CanonicalJSONError(f"the payload is nested deeper than {limit} levels",
                                     reason="too_deep", limit=limit)
        stack.extend((child, depth + 1) for child in children)


async def answer(store: RunStore, request: ResponseRequest, payload: Any) -> CommitResult:
    """Answer a WAITING(external_response) call with the JSON value *payload*
    (RUN-MCH-4). Any JSON value is an answer, ``null`` and ``""`` included: the spec
    refuses those only as a tool's *output* (RUN-WIR-4), not as a response payload
    (``tool_response_payload``), so "no value" can be answered.

    Raises CanonicalJSONError (not JSON, or nested deeper than
    :data:`MAX_PAYLOAD_DEPTH` levels; nothing written), else as :func:`approve`.
    """
    check_payload_depth(payload)
    text = canonical_json_text(payload)
    return await _commit(store, request.run_id, derive_response_command_id(
        request.run_id, request.step_id, request.call_id, request.id), C.SubmitToolResponse(
        step_id=request.step_id, call_id=request.call_id, response_id=request.id,
        response_digest=digest_tool_response_payload(text), payload=text))


async def accept_input(store: RunStore, run_id: RunID,
                       inputs: Sequence[AgentInput]) -> CommitResult:
    """Queue *inputs* under the derived input command id (RUN-LOP-8).

    Raises CommandConflictError (a duplicate input id), RunTerminalError,
    OwnershipLostError.
    """
    return await _commit(store, run_id, derive_input_command_id(run_id, *(i.id for i in inputs)),
                         C.AcceptInput(tuple(inputs)))


async def cancel_run(store: RunStore, run_id: RunID, command_id: str) -> CommitResult:
    """Commit CancelRun (RUN-LOP-2); derive *command_id* from your request id.

    Raises RunTerminalError (the Run ended before), OwnershipLostError.
    """
    return await _commit(store, run_id, command_id, C.CancelRun("cancelled"))


class ToolOffer(Protocol):
    """A tool as the builder offers it: its definition and the Run-side spec."""

    @property
    def definition(self) -> ToolDefinition:
        """What the model is shown (name, description, parameters)."""

    def spec(self) -> ToolSpec:
        """The Run-side ToolSpec (ref, name, definition digest, policy)."""


class TranscriptBuilder:
    """A PromptBuilder that rebuilds the conversation from the Run's own log.

    Messages (in ``body.messages``): inputs as ``user`` messages (from their frozen
    ``agent_input`` bodies), completed model steps as ``assistant`` messages (content and
    tool calls from the frozen model result), and settled calls as ``tool`` messages
    (output, answer, or error). Withdrawn, recovered and rejected steps leave no message.
    Tool outputs and answers are the JSON the tool returned (``42`` stays an int).

    It reads ``PromptInput.pending`` (``reads_pending``): the facts the runtime decided
    but has not committed yet follow the log, their bodies come from the hint (RUN-LOP-11).
    """

    #: Opt-in to fused commits: :meth:`build` honours ``hint.pending`` (RUN-LOP-11).
    reads_pending = True

    def __init__(self, writer: SessionReader, frozen: FrozenStore, model: ModelRef,
                 tools: Sequence[ToolOffer] = (), *, system: str = "",
                 require_inputs: bool = False) -> None:
        self._writer = writer
        self._frozen = frozen
        self._require_inputs = require_inputs
        self.model = model
        self.tools = tuple(tools)
        self.system = system

    async def _body(self, digest: str, type_name: str,
                    pending: PromptInput | None = None) -> Any:
        """The frozen body *digest* of type *type_name*, integral numbers as ``int``.

        An ``agent_input`` body is frozen by whoever submits the input (``input_body``),
        not by the store, so a missing one gives None (the message shows ``[input id]``)
        unless the builder was made with ``require_inputs=True``.

        Raises:
            CorruptRecordError: a model result, tool output or response payload is missing
                (the store freezes those with their facts, so the store is damaged;
                RUN-STO-4), or an input body with ``require_inputs`` (``table="frozen"``,
                ``row`` = the digest). No placeholder is substituted for them.
        """
        data = pending.pending_body(digest) if pending is not None else None
        try:
            if data is None:
                data = await self._frozen.get(digest)
            return _ints(decode_frozen(type_name, digest, data))
        except FrozenValueMissingError as exc:
            if type_name == AGENT_INPUT and not self._require_inputs:
                return None
            raise CorruptRecordError(f"the frozen body {digest} ({type_name}) is missing",
                                     table="frozen", row=digest, digest=digest,
                                     reason="missing") from exc

    async def messages(self, run_id: RunID,
                       pending: PromptInput | None = None) -> list[dict[str, Any]]:
        """The messages of *run_id* as the model sees them (see the class docstring):
        ``{"role": "system"|"user"|"assistant"|"tool", "content": …}``, assistant
        messages with ``toolCalls``, tool messages with ``toolCallId`` (the provider's
        id), ``callId`` and ``content`` or ``error`` (``{"class", "message"}``).

        With *pending* (a hint carrying ``pending`` facts, RUN-LOP-11) those facts follow
        the log's and their bodies are read from ``pending.pending_bodies`` first.

        Raises RunNotFoundError; CorruptRecordError; DecodeError for a damaged body.
        """
        msgs: list[dict[str, Any]] = []
        if self.system:
            msgs.append({"role": "system", "content": self.system})
        provider_ids: dict[str, str] = {}
        facts = tuple(await self._writer.run_facts(run_id))
        if pending is not None and pending.pending:
            facts += pending.pending
        for fact in facts:
            match fact:
                case F.InputAccepted(input=i):
                    body = await self._body(i.digest, AGENT_INPUT, pending)
                    text = body.get("text") if isinstance(body, dict) else None
                    msgs.append({"role": "user", "content": text if text is not None
                                 else f"[input {i.id}]"})
                case F.ModelStepCompleted(result_digest=d):
                    body = await self._body(d, "model_result", pending) or {}
                    msg: dict[str, Any] = {"role": "assistant",
                                           "content": body.get("content", "")}
                    if body.get("toolCalls"):
                        msg["toolCalls"] = body["toolCalls"]
                    msgs.append(msg)
                case F.ToolStepOpened(calls=calls):
                    provider_ids.update({b.call_id: b.provider_call_id for b in calls})
                case F.ToolCallCompleted(call_id=cid, output_digest=d):
                    body = await self._body(d, "tool_output", pending) or {}
                    msgs.append({"role": "tool", "toolCallId": provider_ids.get(cid, ""),
                                 "callId": cid, "content": body.get("output")})
                case F.ToolCallAnswered(call_id=cid, response_digest=d):
                    body = await self._body(d, "tool_response_payload", pending) or {}
                    msgs.append({"role": "tool", "toolCallId": provider_ids.get(cid, ""),
                                 "callId": cid, "content": body.get("payload")})
                case F.ToolCallFailed(call_id=cid, failure=failure):
                    msgs.append({"role": "tool", "toolCallId": provider_ids.get(cid, ""),
                                 "callId": cid, "error": {"class": failure.class_,
                                                          "message": failure.message}})
        return msgs

    async def build(self, hint: PromptInput) -> Prompt:
        """Build the next request for *hint* (consumes every pending input)."""
        body = {"messages": await self.messages(hint.run_id, hint)}
        request = ModelRequest(self.model, tuple(t.definition for t in self.tools),
                               canonical_json_text(body))
        return Prompt(request=request, input_ids=tuple(i.id for i in hint.inputs),
                      tools=tuple(t.spec() for t in self.tools))


# -- reads shared by the facade and the inspection CLI ----------------------------------


#: How many facts at the end of a Run's log :func:`read_answer` reads first: a Run that
#: finished with an answer ends ``model_step_completed``, ``run_ended`` (and a fused
#: batch may add nothing after them), so the answer is almost always in its last two.
_ANSWER_TAIL = 4


def _last_model_step(facts: Sequence[F.Fact]) -> F.ModelStepCompleted | None:
    for fact in reversed(facts):
        if isinstance(fact, F.ModelStepCompleted):
            return fact
    return None


async def read_answer(reader: SessionReader, frozen: FrozenStore,
                      run_id: RunID) -> Answer | None:
    """The last completed model step of *run_id* as an :class:`Answer`; None when no
    model step completed (APP-RES-1). Raises RunNotFoundError, DecodeError,
    CorruptRecordError (its frozen result is missing: RUN-STO-4)."""
    last = _last_model_step(await reader.tail_facts(run_id, _ANSWER_TAIL))
    if last is None:  # not in the tail: the whole log (a Run that ended otherwise)
        last = _last_model_step(await reader.run_facts(run_id))
    if last is None:
        return None
    try:
        body = _ints(decode_frozen("model_result", last.result_digest,
                                   await frozen.get(last.result_digest)))
    except FrozenValueMissingError as exc:  # the store froze it with the fact: damage
        raise CorruptRecordError(f"the frozen body {last.result_digest} (model_result) is "
                                 "missing", table="frozen", row=last.result_digest,
                                 digest=last.result_digest, reason="missing") from exc
    body = dict(body) if isinstance(body, dict) else {}
    text = body.pop("content", "")
    calls = body.pop("toolCalls", [])
    return Answer(text=text if isinstance(text, str) else canonical_json_text(text),
                  step_id=last.step_id, structured=body,
                  tool_calls=tuple(c for c in calls if isinstance(c, dict)),
                  finish_reason=last.finish_reason)


def waiting_for(state: MachineState) -> tuple[WaitingCall, ...]:
    """The calls *state* waits for, in call order, with tool and decoded arguments
    (APP-RES-2); () when nothing waits."""
    cur = state.current
    calls = {c.call_id: c for c in cur.calls} if isinstance(cur, ToolStep) else {}
    out = []
    for request in waiting_calls(state):
        call = calls.get(request.call_id)
        args_text = call.arguments if call is not None else request.payload
        try:
            args: Any = _ints(parse_json_strict(args_text))
        except Exception:  # arguments are frozen canonical JSON; keep the text otherwise
            args = args_text
        out.append(WaitingCall(call_id=request.call_id, tool=call.tool_ref if call else "",
                               arguments=args, kind=request.kind, step_id=request.step_id,
                               request=request))
    return tuple(out)


def waiting_reason(calls: Sequence[WaitingCall]) -> str:
    """``awaiting_approval`` / ``awaiting_response`` / ``awaiting_approval_or_response``
    for *calls*; ``""`` for none."""
    kinds = {c.kind for c in calls}
    if not kinds:
        return ""
    if kinds == {ResponseKind.APPROVAL}:
        return AWAITING_APPROVAL
    if kinds == {ResponseKind.EXTERNAL_RESPONSE}:
        return AWAITING_RESPONSE
    return AWAITING_APPROVAL_OR_RESPONSE


@attrs.frozen(kw_only=True)
class Created:
    """What :meth:`Runtime.create_run` did (APP-NEW-1): ``status`` is ACCEPTED (this call
    created the Run) or ALREADY_APPLIED (it existed with the same inputs: a replay);
    ``snapshot`` the Run's state and position after creation (for a replay: now)."""

    run_id: RunID
    status: CommitStatus
    snapshot: Snapshot

    @property
    def created(self) -> bool:
        """True iff this call created the Run."""
        return self.status is CommitStatus.ACCEPTED


@attrs.define
class Runtime:
    """What ``open_runtime`` yields: the application's handle on one scope.

    ``store`` is the store given to ``open_runtime``; ``writer`` the scope's writer
    (epoch ``writer.epoch``); ``runtime`` the actor layer (:class:`ActorRuntime`; one actor
    per Run being operated on); ``builder`` the default PromptBuilder; ``recovered`` how
    many Runs takeover reconciliation settled at open (RUN-CMT-7).

    Every write goes through the commit path with derived ids, so each method is
    idempotent; a refused command writes nothing and raises (``StaleRuntimeError``,
    ``RunTerminalError``, ``RunNotFoundError``). After another process opened the same
    scope every write raises ``OwnershipLostError`` (attributes ``scope``, ``epoch``,
    ``current``). Once the ``open_runtime`` block has ended every method that writes
    (``create_run``, ``accept_input``, ``approve``, ``reject``, ``respond``, ``cancel``,
    ``drive``, ``start_drive``) raises ``RuntimeClosedError`` and writes nothing
    (RUN-ACT-3); the reads (``record``, ``answer``, ``transcript``, ``waiting``,
    ``snapshot``, ``events``: the history, no live part) still answer while the store is
    open.
    """

    store: RuntimeStore
    writer: ScopeWriter
    runtime: ActorRuntime
    builder: PromptBuilder
    recovered: int = 0

    @property
    def scope(self) -> str:
        """The scope this runtime owns (its single writer, RUN-CMT-6)."""
        return str(self.writer.scope)

    @property
    def run_store(self) -> RunStore:
        """The transactional RunStore port bound to this writer (RUN-CMT-1)."""
        store: RunStore = self.runtime.run_store
        return store

    def _open(self) -> None:
        """Raise RuntimeClosedError once ``open_runtime``'s block is left (RUN-ACT-3): a
        handle that escaped its block writes nothing."""
        if self.runtime.closed:
            raise RuntimeClosedError("the runtime is closed: its open_runtime block has "
                                     "ended", scope=self.scope)

    def _notify(self, run_id: RunID, command_id: str, result: CommitResult) -> None:
        """Announce an application command's commit to the hub (and the runtime's sink)
        so ``events`` streams it (APP-EVT-1)."""
        sink = self.runtime.sink_for(None)
        safe_emit(sink, Event(kind=EventKind.AGENT_COMMITTED, durability=Durability.COMMITTED,
                              session=self.scope, run_id=run_id, committed=result.facts,
                              command_id=command_id))

    async def _inputs(self, run_id: RunID, texts: Sequence[str | AgentInput],
                      first: int) -> tuple[AgentInput, ...]:
        out = []
        for n, item in enumerate(texts, start=first):
            if isinstance(item, AgentInput):
                out.append(item)
                continue
            assert isinstance(item, str)  # _check_inputs ran first
            shell, data = input_body(item)
            await self.store.frozen.put(shell.digest, data)
            out.append(AgentInput(f"{run_id}/input-{n}", shell.digest))
        return tuple(out)

    async def create_run(self, run_id: RunID, inputs: Sequence[str | AgentInput] = (), *,
                         commit_id: str = "", causation_id: str = "",
                         extra_events: Sequence[ForeignEvent] = ()) -> Created:
        """Create the Run *run_id* with text (or AgentInput) *inputs* (RUN-NEW-1,
        APP-NEW-1).

        Text inputs get the ids ``<run_id>/input-<n>`` (0-based) and their bodies are
        frozen first. Idempotent under *commit_id* (default ``"create:" + run_id``): the
        same call again returns ``Created(status=ALREADY_APPLIED)`` and writes nothing.

        Raises:
            RunConflictError: the Run exists under this commit id with other inputs or
                another causation id (nothing written; attributes ``existing``,
                ``requested``: the input digests).
            RunExistsError: the Run exists under another commit id.
            ValidationError: an invalid run id (RUN-WIR-1), *inputs* not a list of texts
                and AgentInputs (a bare string is refused, not split), more than
                MAX_INPUTS_PER_COMMAND (1024) inputs or a text over MAX_INPUT_TEXT_BYTES
                (8 MiB of UTF-8; RUN-INP-2), foreign events on ``run/`` (nothing
                written, no body frozen).
            OwnershipLostError: another writer opened the scope.
            RuntimeClosedError: the ``open_runtime`` block has ended (RUN-ACT-3).
        """
        self._open()
        validate_name(run_id, "run id")
        _check_inputs(inputs)
        items = await self._inputs(run_id, inputs, 0)
        cid = commit_id or f"create:{run_id}"
        result = await self.writer.create_run(NewRun(run_id, causation_id), items,
                                              commit_id=cid, extra_events=extra_events)
        if result.status is CommitStatus.ALREADY_APPLIED:
            existing = tuple((f.input.id, f.input.digest) for f in result.facts
                             if isinstance(f, F.InputAccepted))
            requested = tuple((i.id, i.digest) for i in items)
            created = next((f for f in result.facts if isinstance(f, F.RunCreated)), None)
            same_cause = created is None or created.causation_id == causation_id
            if existing != requested or not same_cause:
                raise RunConflictError(
                    f"run {run_id!r} exists under {cid!r} with other inputs", run_id=run_id,
                    commit_id=cid, existing=tuple(d for _, d in existing),
                    requested=tuple(d for _, d in requested))
        self._notify(run_id, cid, result)
        return Created(run_id=run_id, status=result.status, snapshot=result.snapshot)

    async def drive(self, run_id: RunID, *, builder: PromptBuilder | None = None,
                    settings: Settings | None = None,
                    sink: EventSink | None = None) -> LoopResult:
        """Drive *run_id* until it ends or needs something from outside (§5.9).

        Returns FINISHED (``result``: status, reason, failure, usage in tokens;
        ``answer``: the last model step's text and structured content) or WAITING
        (``waiting_for``: the calls to approve/reject/respond to, ``reason``
        ``awaiting_approval`` / ``awaiting_response`` / ``awaiting_approval_or_response``,
        or ``execution_recovery`` / ``cancelled``) (APP-RES-1, APP-RES-2).

        Cancellation: cancelling the caller's scope stops the drive (no new effect; what
        was dispatched is cancelled and settled, shielded for at most
        ``settings.drain_timeout`` seconds) and re-raises ``trio.Cancelled``; the Run
        itself stays ACTIVE (use :meth:`cancel` to end it).

        Raises: RunAlreadyRunningError (another drive of this Run), OwnershipLostError,
        RunNotFoundError, ModelUnavailableError, PrepareStalledError,
        FrozenValueMissingError, DispatchUnknownError (see ``RunHandle.drive``),
        RuntimeClosedError.
        """
        self._open()
        _check_id(run_id)
        handle = self.runtime.run(run_id, settings=settings)
        result = await handle.drive(builder or self.builder, sink=sink)
        return await self._complete(run_id, result)

    async def start_drive(self, run_id: RunID, *, builder: PromptBuilder | None = None,
                          settings: Settings | None = None,
                          sink: EventSink | None = None) -> DriveTicket:
        """Start driving *run_id* and return at once with the drive's
        :class:`DriveTicket` (``RunHandle.start_drive``; RUN-ACT-9): no task of the
        caller's waits for it, so many Runs can wait for long calls at the cost of their
        parked actors only. ``await ticket.wait()`` gives the LoopResult :meth:`drive`
        would return before its answer/waiting details (read them with :meth:`answer`,
        :meth:`waiting`). Raises RunAlreadyRunningError, RuntimeClosedError.
        """
        self._open()
        _check_id(run_id)
        handle = self.runtime.run(run_id, settings=settings)
        return await handle.start_drive(builder or self.builder, sink=sink)

    async def _complete(self, run_id: RunID, result: LoopResult) -> LoopResult:
        if result.disposition is LoopDisposition.FINISHED:
            return attrs.evolve(result, answer=await self.answer(run_id))
        if result.disposition is LoopDisposition.WAITING:
            calls = await self.waiting(run_id)
            reason = result.reason or waiting_reason(calls) or "idle"
            return attrs.evolve(result, waiting_for=calls, reason=reason)
        return result

    async def answer(self, run_id: RunID) -> Answer | None:
        """The Run's answer so far: its last completed model step (APP-RES-1); None when
        no model step completed. Raises RunNotFoundError."""
        _check_id(run_id)
        return await read_answer(self.writer, self.store.frozen, run_id)

    async def transcript(self, run_id: RunID) -> list[dict[str, Any]]:
        """The Run's messages as the model saw them, rebuilt from its log (APP-RES-3):
        ``user`` inputs, ``assistant`` steps (with ``toolCalls``), ``tool`` results
        (``content`` is the JSON the tool returned or the answer given; ``error`` is
        ``{"class", "message"}`` for a failed call). No system message. Raises
        RunNotFoundError."""
        _check_id(run_id)
        model = getattr(self.builder, "model", "")
        return await TranscriptBuilder(self.writer, self.store.frozen, model).messages(run_id)

    async def accept_input(self, run_id: RunID, *texts: str | AgentInput) -> CommitResult:
        """Queue inputs for *run_id* (ids continue the Run's numbering; RUN-LOP-8). Legal
        in every active state; the next model step consumes them.

        Raises RunTerminalError (ended Run), RunNotFoundError, OwnershipLostError,
        ValidationError (an input that is not a text or an AgentInput, or none at all,
        more than MAX_INPUTS_PER_COMMAND of them, a text over MAX_INPUT_TEXT_BYTES, or
        the Run's inputs would pass MAX_INPUTS_PER_RUN (RUN-INP-2); nothing written),
        RuntimeClosedError.
        """
        self._open()
        _check_id(run_id)
        _check_inputs(texts)
        if not texts:
            raise ValidationError("accept_input needs at least one input", run_id=run_id)
        facts = await self.writer.run_facts(run_id)
        n = sum(1 for f in facts if isinstance(f, F.InputAccepted))
        if n + len(texts) > MAX_INPUTS_PER_RUN:
            raise ValidationError(f"run {run_id!r} has {n} inputs; {len(texts)} more would "
                                  f"pass {MAX_INPUTS_PER_RUN} (MAX_INPUTS_PER_RUN)",
                                  run_id=run_id, size=n + len(texts),
                                  limit=MAX_INPUTS_PER_RUN)
        inputs = await self._inputs(run_id, texts, n)
        result = await accept_input(self.run_store, run_id, inputs)
        self._notify(run_id, derive_input_command_id(run_id, *(i.id for i in inputs)), result)
        return result

    async def waiting(self, run_id: RunID) -> tuple[WaitingCall, ...]:
        """The calls *run_id* waits for now (APP-RES-2), in call order; () if none.
        Raises RunNotFoundError."""
        _check_id(run_id)
        return waiting_for((await self.snapshot(run_id)).state)

    async def _request(self, run_id: RunID, call_id: str) -> ResponseRequest:
        for call in await self.waiting(run_id):
            if call.call_id == call_id or not call_id:
                return call.request
        raise ValidationError(f"no waiting call {call_id!r} in run {run_id!r}", run_id=run_id,
                              call_id=call_id)

    async def _respond(self, request: ResponseRequest, result: CommitResult) -> CommitResult:
        self._notify(request.run_id, derive_response_command_id(
            request.run_id, request.step_id, request.call_id, request.id), result)
        return result

    async def approve(self, run_id: RunID, call_id: str = "") -> CommitResult:
        """Approve the waiting call *call_id* (the first waiting call for ``""``;
        RUN-MCH-4). The next drive starts it.

        Raises ValidationError (no such waiting call), StaleRuntimeError,
        OwnershipLostError, RuntimeClosedError; nothing is written then.
        """
        self._open()
        _check_id(run_id)
        request = await self._request(run_id, call_id)
        return await self._respond(request, await approve(self.run_store, request))

    async def reject(self, run_id: RunID, call_id: str = "", reason: str = "") -> CommitResult:
        """Reject the waiting call *call_id*: it fails KNOWN (``permission_denied`` for an
        approval, ``response_rejected`` for a response) and the model sees the failure
        (RUN-MCH-4). Raises as :meth:`approve`."""
        self._open()
        _check_id(run_id)
        request = await self._request(run_id, call_id)
        return await self._respond(request, await reject(self.run_store, request, reason))

    async def respond(self, run_id: RunID, call_id: str, payload: Any) -> CommitResult:
        """Answer the waiting external-response call *call_id* with the JSON value
        *payload* (any JSON value, ``null`` included; see :func:`answer`); the model sees
        it as the call's output (RUN-MCH-4). Raises CanonicalJSONError (not JSON, or
        nested deeper than 64 levels; nothing written), else as :meth:`approve`."""
        self._open()
        _check_id(run_id)
        request = await self._request(run_id, call_id)
        return await self._respond(request, await answer(self.run_store, request, payload))

    async def cancel(self, run_id: RunID, request_id: str = "") -> CommitResult:
        """End the Run as ``stopped``/``cancelled`` (RUN-LOP-2, RUN-ACT-4): commits
        CancelRun under ``"cancel:" + (request_id or run_id)`` (idempotent) through
        ``ActorRuntime.cancel_run``: the Run's in-flight effects are cancelled at the
        executor and a concurrent drive returns FINISHED within ``drain_timeout``; an
        idle Run ends at once. Raises RunTerminalError (already ended), RunNotFoundError,
        OwnershipLostError, RuntimeClosedError."""
        self._open()
        _check_id(run_id)
        if not isinstance(request_id, str):
            raise ValidationError(f"request id must be a string, not "
                                  f"{type(request_id).__name__}", run_id=run_id)
        command_id = f"cancel:{request_id or run_id}"
        result: CommitResult = await self.runtime.cancel_run(run_id, command_id)
        self._notify(run_id, command_id, result)
        return result

    async def snapshot(self, run_id: RunID) -> Snapshot:
        """The Run's state from this writer's in-memory projection (cheap; ended Runs are
        read from the store; RUN-CMT-2 says :meth:`record` is the authority). Raises
        RunNotFoundError."""
        _check_id(run_id)
        return await self.run_store.load(run_id)

    async def record(self, run_id: RunID) -> Snapshot:
        """The Run's state folded from its log: the authoritative read (RUN-CMT-2); also
        checks the projection agrees (ProjectionDivergenceError). Raises
        RunNotFoundError, CorruptRecordError."""
        _check_id(run_id)
        return await self.writer.record(run_id)

    def events(self, run_id: RunID | None = None, *, since: int = 0) -> AsyncIterator[Event]:
        """Live events (§5.13, APP-EVT-1).

        For a *run_id*: every committed fact of the Run, read from its log in commit
        order — one AGENT_COMMITTED event per commit (``command_id`` the commit id,
        ``position`` the index of its first fact), starting at position *since* (0: the
        whole history, then live) — interleaved with provisional progress events
        (dropped under back-pressure), ending with one RUN_FINISHED event (``payload``
        the RunResult JSON) after ``run_ended``. The iterator also ends when the runtime
        closes.

        For None: every Run's events as the runtime emits them (never ends before the
        runtime closes; no ordering promise across Runs).

        Raises, at the call: ValidationError for a *run_id* that is not a valid name
        (RUN-WIR-1, ``validate_name``: no Run can carry it, so its stream would never
        start) or a *since* that is not a position (an int ≥ 0), or is given without a
        *run_id*. A *since* past the log's end yields nothing of the history; an ended
        Run's RUN_FINISHED event still carries the ``run_ended`` fact's position.
        """
        if type(since) is not int or since < 0:
            raise ValidationError(f"since must be a log position (an int >= 0), not "
                                  f"{since!r}", run_id=run_id)
        if run_id is None:
            if since:
                raise ValidationError("since is a position in one Run's log: give a run "
                                      "id with it")
            return self.runtime.hub.subscribe(None)
        validate_name(run_id, "run id")
        return self._run_events(run_id, since)

    async def _log_commits(self, run_id: RunID, start: int
                           ) -> tuple[list[Event], bool, int]:
        """The commits of *run_id*'s log from position *start*, whether it ended, and the
        log's length."""
        try:
            facts = await self.writer.run_facts(run_id)
            records = await self.writer.read_stream(f"run/{run_id}")
        except RunNotFoundError:
            return [], False, 0
        commit_of = {r.index: r.commit_id for r in records}
        out: list[Event] = []
        group: list[Any] = []
        first, out_cid = start, ""
        for index in range(start, len(facts)):
            cid = commit_of.get(index, "")
            if group and cid != out_cid:
                out.append(self._fact_event(run_id, out_cid, first, group))
                group, first = [], index
            out_cid = cid
            group.append(facts[index])
        if group:
            out.append(self._fact_event(run_id, out_cid, first, group))
        ended = bool(facts) and isinstance(facts[-1], F.RunEnded)
        return out, ended, len(facts)

    def _fact_event(self, run_id: RunID, cid: str, first: int, facts: list[Any]) -> Event:
        return Event(kind=EventKind.AGENT_COMMITTED, durability=Durability.COMMITTED,
                     session=self.scope, run_id=run_id, committed=tuple(facts),
                     command_id=cid, position=first)

    async def _run_events(self, run_id: RunID, since: int) -> AsyncIterator[Event]:
        hub = self.runtime.hub
        sub = hub.attach(run_id)  # before the first read: no commit slips between
        try:
            position = since
            while True:
                events, ended, length = await self._log_commits(run_id, position)
                for event in events:
                    position = event.position + len(event.committed)
                    yield event
                if ended:
                    # the run_ended fact's position, whatever *since* was (past the end)
                    state = (await self.writer.record(run_id)).state
                    yield Event(kind=EventKind.RUN_FINISHED, durability=Durability.COMMITTED,
                                session=self.scope, run_id=run_id, position=length - 1,
                                payload=_result_json(state))
                    return
                while True:
                    live = await sub.next()
                    if live is None:
                        return
                    if live.durability is Durability.PROVISIONAL:
                        yield live
                        continue
                    break  # something committed: read the log again
        finally:
            hub.detach(sub)


def _result_json(state: MachineState) -> str | None:
    if state.status is RunStatus.ACTIVE or state.result is None:
        return None
    return canonical_json_text(encode_value(state.result))


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


@body_errors_unwrapped
@contextlib.asynccontextmanager
async def open_runtime(store: RuntimeStore, executor: effect.ExecutionPort, *,
                       scope: str = "default", settings: Settings | None = None,
                       model: ModelRef = "", tools: Sequence[ToolOffer] = (),
                       system: str = "", builder: PromptBuilder | None = None,
                       reconciler: Reconciler | None = None, mailbox_size: int = 16,
                       sink: EventSink | None = None) -> AsyncIterator[Runtime]:
    """Open *scope* on *store* as its single writer and run its Runs as actors.

    Opens the writer (epoch + 1), runs ``recover_interrupted`` once with *reconciler*
    (default: ``Reconciler(executor)``; its ``epoch`` is set to the writer's), then
    starts :meth:`Reconciler.watch` in the runtime's nursery — it settles the effects
    takeover kept EXECUTING through the runtime's Watcher and ``ActorRuntime.deliver``
    (unless the reconciler has its own ``watcher``/``on_outcome``) and retries owed
    redispatches every ``requeue_after`` seconds (RUN-CMT-7, RUN-EXE-15) — and yields a
    :class:`Runtime`. The default builder is a :class:`TranscriptBuilder` for *model*
    and *tools* (with the *system* message). *mailbox_size* bounds each actor's
    mailbox; *sink* receives every event synchronously.

    Before the scope is opened (nothing is written yet) every argument is checked
    (:func:`check_open_arguments`) and *tools* and *model* are checked against the
    executor's ``validate`` (RUN-ACT-8, :func:`check_offers`). *model* ``""`` means no
    default model: every drive then needs a ``builder`` that names one.

    Raises: ValidationError (an argument of the wrong type or value: *settings* not a
    Settings, *model*/*system* not a str, *scope* not a valid name, *tools* not offers,
    *mailbox_size* not an int >= 1; attribute ``argument``); ToolOfferError (an offered
    tool the executor lacks or declares differently);
    ModelUnavailableError (the executor refuses *model*); the reconciler's configuration
    errors; OwnershipLostError if another writer opens the scope meanwhile — unwrapped,
    never inside an ExceptionGroup, whether the body or a task of the runtime (the
    reconciler's watch) met it first (RUN-ACT-5).

    An exception raised in the block comes out as itself, not in an ExceptionGroup; an error
    of a background task comes out in an ExceptionGroup (RUN-ACT-10).
    """
    check_open_arguments(scope=scope, settings=settings, model=model, tools=tools,
                         system=system, mailbox_size=mailbox_size, sink=sink)
    await check_offers(executor, scope, model=model, tools=tools)
    writer = await store.open(scope)
    try:
        rec = reconciler if reconciler is not None else Reconciler(executor)
        rec.epoch = getattr(writer, "epoch", 0)
        recovered = await recover_interrupted(writer, rec)
        if builder is None:
            builder = TranscriptBuilder(writer, store.frozen, model, tools, system=system)
        try:
            async with ActorRuntime(writer, executor, settings, mailbox_size=mailbox_size,
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
