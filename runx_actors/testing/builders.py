"""Builders of protocol commands for tests, model tests and runtime tests.

Every command builder takes a :class:`MachineState` (and, for Prepare, the position the
caller loaded), finds its target there — the current model step, or a call of the
current ToolStep named by its id or by its index — derives every id and digest the
protocol requires (spec §3.3, §3.6) and returns ``(command_id, command)``.

Builders only *derive*; they do not check that the state allows the command. That is
``decide``'s job. Applied to the wrong state (a call that is not PENDING, a step that is
not EXECUTING) a builder yields exactly what a confused caller would send, which
``decide``/``evaluate_commit`` then refuse; negative tests rely on that. A builder raises
``ValueError`` only when it cannot find its target at all (no current model step, no
such call).

:class:`SimpleLog` is a tiny synchronous, in-memory scope: a ``CommitView`` that runs
``evaluate_commit`` and appends, so protocol tests stay independent of the async store.

Everything here is synchronous and pure apart from ``SimpleLog``'s own lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeAlias

import attrs

from ..protocol import commands as C
from ..protocol._decide import decide
from ..protocol._evolve import evolve
from ..protocol.canonical import freeze_tool_arguments, normalize_json_text
from ..protocol.commit import (
    Append,
    CommandEnvelope,
    CommitDecision,
    CommitRequest,
    CommitResult,
    CommitStatus,
    PromptTokenGuard,
    Snapshot,
    create_group,
    envelope,
    evaluate_commit,
    fold_run,
)
from ..protocol.digests import (
    decision_digest,
    digest_model_request,
    digest_tool_definition,
    digest_tool_response_payload,
)
from ..protocol.errors import RunExistsError, RunNotFoundError
from ..protocol.facts import Fact
from ..protocol.ids import (
    derive_call_id,
    derive_decline_command_id,
    derive_effect_id,
    derive_input_command_id,
    derive_model_step_id,
    derive_prepare_command_id,
    derive_recovery_command_id,
    derive_response_command_id,
    derive_settlement_command_id,
    derive_start_command_id,
    derive_withdraw_command_id,
)
from ..protocol.state import MachineState, ModelStep, ToolCallState, ToolStep
from ..protocol.values import (
    AgentInput,
    CallID,
    CommandID,
    Digest,
    Failure,
    FailureClass,
    InputID,
    ModelRef,
    ModelRejectDisposition,
    ModelRequest,
    ModelResult,
    ModelToolCall,
    NewRun,
    ResponseKind,
    ResponsePolicy,
    RunID,
    RunStatus,
    Scope,
    ToolCallBinding,
    ToolDefinition,
    ToolFailureOutcome,
    ToolPlacement,
    ToolReplay,
    ToolResult,
    ToolScheduling,
    ToolSpec,
    Usage,
)
from ..store._freeze import bodies_of

__all__ = [
    "Built", "OfferedTool", "ToolCallSpec", "CallRef", "DEFAULT_MODEL", "NO_USAGE", "PARALLEL",
    "agent_input", "tool_definition", "tool_spec", "model_tool_calls", "model_result_value",
    "bindings", "accept_input", "prepare", "withdraw", "start_model", "recover_model",
    "model_result", "model_failure", "reject_model_result", "start_tool", "tool_result",
    "tool_failure", "decline", "approve", "reject", "answer", "cancel", "call_ids",
    "decide_and_fold", "SimpleLog",
]

#: What every command builder returns: the derived command id and the command.
Built: TypeAlias = tuple[CommandID, C.Command]
#: A tool offered in a Prepare: a name, a definition, a spec built by :func:`tool_spec`
#: from the default definition of its name, or an explicit ``(definition, spec)`` pair.
OfferedTool: TypeAlias = str | ToolDefinition | ToolSpec | tuple[ToolDefinition, ToolSpec]
#: A tool call of a model result: a ModelToolCall, ``(name, raw_args)`` or
#: ``(name, raw_args, provider_call_id)``; raw arguments are frozen as in §3.8.
ToolCallSpec: TypeAlias = ModelToolCall | tuple[str, str] | tuple[str, str, str]
#: A call of the current ToolStep: its CallID or its index in the step.
CallRef: TypeAlias = CallID | int

DEFAULT_MODEL: ModelRef = "model-1"
NO_USAGE = Usage()
#: The zero scheduling (mode ``""``, no cap), which behaves as parallel.
PARALLEL = ToolScheduling()


def _canonical(text: str) -> str:
    return normalize_json_text(text)


# -- values ----------------------------------------------------------------------------


def agent_input(input_id: InputID, text: str | None = None) -> AgentInput:
    """An input whose body is *text* (default: the id itself)."""
    return AgentInput.text(input_id, input_id if text is None else text)


def _inputs(items: Iterable[AgentInput | InputID]) -> tuple[AgentInput, ...]:
    return tuple(i if isinstance(i, AgentInput) else agent_input(i) for i in items)


def tool_definition(name: str, *, description: str = "", parameters: str = "{}") -> ToolDefinition:
    """A ToolDefinition with canonical ``parameters``."""
    return ToolDefinition(name, description, _canonical(parameters))


def tool_spec(
    tool: str | ToolDefinition,
    *,
    ref: str = "",
    policy: ResponsePolicy = ResponsePolicy.DIRECT_EXECUTION,
    replay: ToolReplay = ToolReplay.UNKNOWN,
    placement: ToolPlacement = ToolPlacement.NONE,
) -> ToolSpec:
    """The ToolSpec of *tool* (a name means ``tool_definition(name)``).

    ``ref`` defaults to the name; ``definition_digest`` is derived from the definition.
    """
    definition = tool if isinstance(tool, ToolDefinition) else tool_definition(tool)
    return ToolSpec(
        ref=ref or definition.name,
        name=definition.name,
        definition_digest=digest_tool_definition(definition),
        policy=policy,
        replay=replay,
        placement=placement,
    )


def _offered(tool: OfferedTool) -> tuple[ToolDefinition, ToolSpec]:
    if isinstance(tool, str | ToolDefinition):
        definition = tool if isinstance(tool, ToolDefinition) else tool_definition(tool)
        return definition, tool_spec(definition)
    if isinstance(tool, ToolSpec):
        definition = tool_definition(tool.name)
        if digest_tool_definition(definition) != tool.definition_digest:
            raise ValueError(
                f"spec {tool.name!r} was not built from the default definition of its name; "
                "pass a (definition, spec) pair"
            )
        return definition, tool
    definition, spec = tool
    return definition, spec


def model_tool_calls(tool_calls: Iterable[ToolCallSpec]) -> tuple[ModelToolCall, ...]:
    """ModelToolCalls with frozen arguments; provider ids default to ``provider-<i>``."""
    out = []
    for i, tc in enumerate(tool_calls):
        if isinstance(tc, ModelToolCall):
            out.append(tc)
            continue
        name, raw = tc[0], tc[1]
        provider = tc[2] if len(tc) > 2 else f"provider-{i}"
        out.append(ModelToolCall(provider, name, freeze_tool_arguments(raw)))
    return tuple(out)


def model_result_value(
    *,
    text: str = "",
    tool_calls: Iterable[ToolCallSpec] = (),
    usage: Usage = NO_USAGE,
    finish_reason: str | None = None,
    body: str = "{}",
) -> ModelResult:
    """A ModelResult; ``finish_reason`` defaults to ``tool_calls`` or ``stop``."""
    calls = model_tool_calls(tool_calls)
    if finish_reason is None:
        finish_reason = "tool_calls" if calls else "stop"
    return ModelResult(
        content=text, tool_calls=calls, finish_reason=finish_reason, usage=usage,
        body=_canonical(body),
    )


# -- targets ---------------------------------------------------------------------------


def _model_step(state: MachineState) -> ModelStep:
    cur = state.current
    if not isinstance(cur, ModelStep):
        raise ValueError(f"the current step is not a model step: {cur!r}")
    return cur


def _tool_call(state: MachineState, call: CallRef) -> tuple[ToolStep, ToolCallState]:
    cur = state.current
    if not isinstance(cur, ToolStep):
        raise ValueError(f"the current step is not a tool step: {cur!r}")
    if isinstance(call, int):
        return cur, cur.calls[call]
    found = cur.call(call)
    if found is None:
        raise ValueError(f"no call {call!r} in the current tool step")
    return cur, found


def call_ids(state: MachineState) -> tuple[CallID, ...]:
    """The call ids of the current ToolStep, in call order (``()`` if there is none)."""
    cur = state.current
    return tuple(c.call_id for c in cur.calls) if isinstance(cur, ToolStep) else ()


# -- command builders -------------------------------------------------------------------


def accept_input(state: MachineState, *inputs: AgentInput | InputID) -> Built:
    """``AcceptInput`` under ``derive_input_command_id`` (strings become text inputs)."""
    batch = _inputs(inputs)
    return (
        derive_input_command_id(state.run_id, *(i.id for i in batch)),
        C.AcceptInput(batch),
    )


def prepare(
    state: MachineState,
    position: int,
    *,
    tools: Sequence[OfferedTool] = (),
    model: ModelRef = DEFAULT_MODEL,
    body: str = "{}",
    input_ids: Sequence[InputID] | None = None,
    prompt_token: str = "",
) -> Built:
    """``PrepareModelRequest`` for *state* loaded at *position* (§2.8 C2, §3.3).

    The command id is ``derive_prepare_command_id(run_id, position)`` and the step id is
    derived from it; ``input_ids`` default to every pending input; the request holds one
    definition per offered tool, in order, and ``request_digest`` is its digest.
    """
    command_id = derive_prepare_command_id(state.run_id, position)
    pairs = [_offered(t) for t in tools]
    request = ModelRequest(
        model=model, tools=tuple(d for d, _ in pairs), body=_canonical(body)
    )
    ids = tuple(i.id for i in state.pending_inputs) if input_ids is None else tuple(input_ids)
    return command_id, C.PrepareModelRequest(
        step_id=derive_model_step_id(state.run_id, command_id),
        model=model,
        request=request,
        request_digest=digest_model_request(request),
        input_ids=ids,
        prompt_token=prompt_token,
        tools=tuple(s for _, s in pairs),
    )


def withdraw(state: MachineState) -> Built:
    """``WithdrawPreparedStep`` of the current model step."""
    step = _model_step(state)
    return derive_withdraw_command_id(state.run_id, step.id), C.WithdrawPreparedStep(step.id)


def start_model(state: MachineState) -> Built:
    """``StartModelExecution`` with ``derive_effect_id(run, step, "", rejects)`` (INV-7)."""
    step = _model_step(state)
    effect = derive_effect_id(state.run_id, step.id, "", step.rejects)
    return derive_start_command_id(effect), C.StartModelExecution(step.id, effect)


def recover_model(state: MachineState) -> Built:
    """``RecoverModelExecution`` of the running model effect, under its recovery id."""
    step = _model_step(state)
    return derive_recovery_command_id(step.effect), C.RecoverModelExecution(step.id, step.effect)


def bindings(state: MachineState, result: ModelResult) -> tuple[ToolCallBinding, ...]:
    """The bindings of *result*'s tool calls for the current model step (§2.8 C6, §5.8).

    ``call_id = derive_call_id(step, i)``; a tool offered under the call's name (first
    match) gives its spec's ref, digest, policy, replay and placement; an unknown tool is
    DIRECT_EXECUTION with ``tool_ref = name`` and an empty digest. ``response`` is left
    ``None`` (decide derives it).
    """
    step = _model_step(state)
    out = []
    for i, tc in enumerate(result.tool_calls):
        call_id = derive_call_id(step.id, i)
        spec = next((s for s in step.tools if s.name == tc.name), None)
        if spec is None:
            out.append(ToolCallBinding(
                call_id=call_id, provider_call_id=tc.id, tool_ref=tc.name,
                arguments=tc.arguments,
            ))
        else:
            out.append(ToolCallBinding(
                call_id=call_id, provider_call_id=tc.id, tool_ref=spec.ref,
                definition_digest=spec.definition_digest, arguments=tc.arguments,
                policy=spec.policy, replay=spec.replay, placement=spec.placement,
            ))
    return tuple(out)


def model_result(
    state: MachineState,
    *,
    text: str = "",
    tool_calls: Iterable[ToolCallSpec] = (),
    usage: Usage = NO_USAGE,
    finish_reason: str | None = None,
    scheduling: ToolScheduling = PARALLEL,
    body: str = "{}",
    result: ModelResult | None = None,
) -> Built:
    """``SubmitModelResult`` for the running model effect, with derived bindings."""
    step = _model_step(state)
    if result is None:
        result = model_result_value(
            text=text, tool_calls=tool_calls, usage=usage, finish_reason=finish_reason,
            body=body,
        )
    return derive_settlement_command_id(step.effect), C.SubmitModelResult(
        step_id=step.id, effect=step.effect, result=result,
        calls=bindings(state, result), scheduling=scheduling,
    )


def model_failure(
    state: MachineState,
    failure_class: str = FailureClass.PROVIDER_FAILURE,
    message: str = "",
) -> Built:
    """``SubmitModelFailure`` for the running model effect."""
    step = _model_step(state)
    return derive_settlement_command_id(step.effect), C.SubmitModelFailure(
        step_id=step.id, effect=step.effect, failure=Failure(failure_class, message)
    )


def reject_model_result(
    state: MachineState,
    *,
    disposition: ModelRejectDisposition = ModelRejectDisposition.RETRY,
    usage: Usage = NO_USAGE,
    message: str = "malformed result",
) -> Built:
    """``RejectModelResult`` (class ``malformed_model_result``) for the running effect."""
    step = _model_step(state)
    return derive_settlement_command_id(step.effect), C.RejectModelResult(
        step_id=step.id, effect=step.effect, usage=usage,
        failure=Failure(FailureClass.MALFORMED_MODEL_RESULT, message),
        disposition=disposition,
    )


def start_tool(state: MachineState, call: CallRef) -> Built:
    """``StartToolCall`` with ``derive_effect_id(run, step, call, 0)`` (INV-6)."""
    step, c = _tool_call(state, call)
    effect = derive_effect_id(state.run_id, step.id, c.call_id, 0)
    return derive_start_command_id(effect), C.StartToolCall(
        step_id=step.id, call_id=c.call_id, effect=effect
    )


def tool_result(state: MachineState, call: CallRef, output_json: str) -> Built:
    """``SubmitToolResult`` of the call's running effect; the output is canonicalised."""
    step, c = _tool_call(state, call)
    return derive_settlement_command_id(c.effect), C.SubmitToolResult(
        step_id=step.id, call_id=c.call_id, effect=c.effect,
        result=ToolResult(_canonical(output_json)),
    )


def tool_failure(
    state: MachineState,
    call: CallRef,
    *,
    failure_class: str = FailureClass.EXECUTION_FAILED,
    message: str = "",
    outcome: ToolFailureOutcome = ToolFailureOutcome.KNOWN,
    recovery: bool = False,
) -> Built:
    """``SubmitToolFailure`` of the call's running effect.

    Under the settlement id, or the recovery id with ``recovery=True`` (only legal for
    UNKNOWN). Pass ``outcome=UNKNOWN`` together with ``failure_class="effect_unknown"``
    (or ``""``) for an UNKNOWN failure.
    """
    step, c = _tool_call(state, call)
    derive = derive_recovery_command_id if recovery else derive_settlement_command_id
    return derive(c.effect), C.SubmitToolFailure(
        step_id=step.id, call_id=c.call_id, effect=c.effect,
        failure=Failure(failure_class, message), outcome=outcome,
    )


def decline(
    state: MachineState,
    call: CallRef,
    *,
    failure_class: str = FailureClass.TOOL_LOOKUP_FAILED,
    message: str = "",
) -> Built:
    """``DeclineToolCall`` under ``derive_decline_command_id``."""
    step, c = _tool_call(state, call)
    return derive_decline_command_id(state.run_id, step.id, c.call_id), C.DeclineToolCall(
        step_id=step.id, call_id=c.call_id, failure=Failure(failure_class, message)
    )


def _response_id(c: ToolCallState) -> str:
    if c.waiting is None:
        raise ValueError(f"call {c.call_id!r} has no response request")
    return c.waiting.id


def approve(state: MachineState, call: CallRef) -> Built:
    """``ApproveToolCall`` of a WAITING(approval) call, with the approval decision digest."""
    step, c = _tool_call(state, call)
    rid = _response_id(c)
    return derive_response_command_id(state.run_id, step.id, c.call_id, rid), C.ApproveToolCall(
        step_id=step.id, call_id=c.call_id, response_id=rid,
        response_digest=decision_digest(ResponseKind.APPROVAL, "approved", ""),
    )


def reject(state: MachineState, call: CallRef, reason: str = "") -> Built:
    """``RejectToolCall`` of a WAITING call of either kind, with the rejection digest."""
    step, c = _tool_call(state, call)
    rid = _response_id(c)
    assert c.waiting is not None
    return derive_response_command_id(state.run_id, step.id, c.call_id, rid), C.RejectToolCall(
        step_id=step.id, call_id=c.call_id, response_id=rid,
        response_digest=decision_digest(c.waiting.kind, "rejected", reason), reason=reason,
    )


def answer(state: MachineState, call: CallRef, payload_json: str) -> Built:
    """``SubmitToolResponse`` of a WAITING(external_response) call; payload canonicalised."""
    step, c = _tool_call(state, call)
    rid = _response_id(c)
    payload = _canonical(payload_json)
    return derive_response_command_id(state.run_id, step.id, c.call_id, rid), (
        C.SubmitToolResponse(
            step_id=step.id, call_id=c.call_id, response_id=rid,
            response_digest=digest_tool_response_payload(payload), payload=payload,
        )
    )


def cancel(
    state: MachineState | None = None, reason: str = "", *, command_id: CommandID = ""
) -> Built:
    """``CancelRun`` under a caller-chosen id (CancelRun ids are free, §3.3).

    ``command_id`` defaults to ``"cancel:<run id>"`` (``"cancel"`` without a state): a
    Run ends at most once, so a repeated default cancel simply replays.
    """
    if not command_id:
        command_id = f"cancel:{state.run_id}" if state is not None else "cancel"
    return command_id, C.CancelRun(reason)


# -- folding ---------------------------------------------------------------------------


def decide_and_fold(
    state: MachineState, command: C.Command | Built
) -> tuple[MachineState, tuple[Fact, ...]]:
    """``decide`` then ``evolve`` each fact: the new state and the group.

    Accepts a bare command or a builder's ``(command_id, command)`` (the id is ignored).
    Raises whatever ``decide`` or ``evolve`` raise.
    """
    if isinstance(command, tuple):
        command = command[1]
    facts = decide(state, command)
    for fact in facts:
        state = evolve(state, fact)
    return state, facts


@attrs.frozen
class _Commit:
    commit_id: CommandID
    run_id: RunID
    facts: tuple[Fact, ...]


class SimpleLog:
    """A synchronous in-memory scope implementing ``CommitView`` (§4.3, §4.8).

    It keeps an ordered list of commits, a commit-id index, every Run's facts, the
    active Runs' snapshots (the machine projection) and the frozen bodies. ``commit``
    freezes the command's bodies (step 0), runs ``evaluate_commit`` and applies its
    decision; a refusal propagates and appends nothing. Methods taking ``run_id=None``
    use the first Run created.
    """

    def __init__(self, scope: Scope = "scope-1") -> None:
        self.scope = scope
        self.commits: list[_Commit] = []
        self._index: dict[CommandID, _Commit] = {}
        self._streams: dict[RunID, list[Fact]] = {}
        self._active: dict[RunID, Snapshot] = {}
        self._ended: dict[RunID, Snapshot] = {}
        #: The frozen bodies stored by step 0, by digest (typed-envelope bytes).
        self.bodies: dict[Digest, bytes] = {}
        self._default: RunID | None = None

    @classmethod
    def with_run(
        cls, run_id: RunID = "run-1", inputs: Iterable[AgentInput | InputID] = (),
        *, scope: Scope = "scope-1",
    ) -> SimpleLog:
        """A log holding one freshly created Run."""
        log = cls(scope)
        log.create(run_id, inputs)
        return log

    # -- CommitView ------------------------------------------------------------------

    def replay_facts(self, command_id: CommandID, run_id: RunID) -> tuple[Fact, ...] | None:
        commit = self._index.get(command_id)
        if commit is None:
            return None
        return commit.facts if commit.run_id == run_id else ()

    def active(self, run_id: RunID) -> Snapshot | None:
        return self._active.get(run_id)

    def stream_exists(self, run_id: RunID) -> bool:
        return run_id in self._streams

    # -- writes ----------------------------------------------------------------------

    def create(
        self, run_id: RunID = "run-1", inputs: Iterable[AgentInput | InputID] = (),
        *, commit_id: CommandID = "", causation_id: str = "",
    ) -> CommitResult:
        """Create a Run in one commit (§4.9): a known commit id replays, an existing
        stream raises RunExistsError, an invalid group raises ValidationError."""
        cid = commit_id or f"create:{run_id}"
        prior = self._index.get(cid)
        if prior is not None:
            facts = prior.facts if prior.run_id == run_id else ()
            return CommitResult(CommitStatus.ALREADY_APPLIED, self.snapshot(run_id), facts)
        if run_id in self._streams:
            raise RunExistsError(f"run {run_id!r} exists", run_id=run_id)
        group = create_group(NewRun(run_id, causation_id), _inputs(inputs))
        snap = Snapshot(fold_run(group, run_id=run_id), len(group) - 1)
        self._append(cid, run_id, group, snap)
        if self._default is None:
            self._default = run_id
        return CommitResult(CommitStatus.ACCEPTED, snap, group)

    def evaluate(self, request: CommitRequest, *,
                 prompt_token_guard: PromptTokenGuard | None = None) -> CommitDecision:
        """``evaluate_commit`` on this log, without applying the decision."""
        return evaluate_commit(self, request, scope=self.scope,
                               prompt_token_guard=prompt_token_guard)

    def submit(self, request: CommitRequest, *,
               prompt_token_guard: PromptTokenGuard | None = None) -> CommitResult:
        """Freeze the command's bodies (step 0, §4.2), evaluate *request* and apply the
        decision. Takes a raw request, so any envelope can be tried.

        Raises:
            StaleRuntimeError: a body cannot be encoded (nothing stored or appended), or
                anything ``evaluate_commit`` raises (nothing appended).
        """
        for digest, data in bodies_of(request.envelope.command):
            self.bodies.setdefault(digest, data)
        decision = self.evaluate(request, prompt_token_guard=prompt_token_guard)
        run_id = request.envelope.run_id
        if not isinstance(decision, Append):
            return CommitResult(CommitStatus.ALREADY_APPLIED, self.snapshot(run_id),
                                decision.facts)
        self._append(request.envelope.id, run_id, decision.facts, decision.snapshot)
        return CommitResult(CommitStatus.ACCEPTED, decision.snapshot, decision.facts)

    def commit(
        self, command_id: CommandID, command: C.Command, *, run_id: RunID | None = None,
        base: int | None = None, prompt_token_guard: PromptTokenGuard | None = None,
    ) -> CommitResult:
        """Commit *command* under *command_id*; ``base`` defaults to the Run's position."""
        run_id = self._run(run_id)
        if base is None:
            base = self.position(run_id) if run_id in self._streams else 0
        request = CommitRequest(base, envelope(run_id, command_id, command))
        return self.submit(request, prompt_token_guard=prompt_token_guard)

    def apply(
        self, built: Built, *, run_id: RunID | None = None, base: int | None = None,
        prompt_token_guard: PromptTokenGuard | None = None,
    ) -> CommitResult:
        """``commit`` of a builder's ``(command_id, command)``."""
        return self.commit(built[0], built[1], run_id=run_id, base=base,
                           prompt_token_guard=prompt_token_guard)

    def _append(self, commit_id: CommandID, run_id: RunID, facts: tuple[Fact, ...],
                snap: Snapshot) -> None:
        commit = _Commit(commit_id, run_id, tuple(facts))
        self.commits.append(commit)
        self._index[commit_id] = commit
        self._streams.setdefault(run_id, []).extend(facts)
        if snap.state.status is RunStatus.ACTIVE:
            self._active[run_id] = snap
        else:
            self._active.pop(run_id, None)
            self._ended[run_id] = snap

    # -- reads -----------------------------------------------------------------------

    def _run(self, run_id: RunID | None) -> RunID:
        if run_id is not None:
            return run_id
        if self._default is None:
            raise ValueError("the log holds no Run")
        return self._default

    @property
    def run_ids(self) -> tuple[RunID, ...]:
        return tuple(self._streams)

    @property
    def commit_ids(self) -> frozenset[CommandID]:
        return frozenset(self._index)

    def facts(self, run_id: RunID | None = None) -> tuple[Fact, ...]:
        """Every fact of the Run, in stream order."""
        run_id = self._run(run_id)
        if run_id not in self._streams:
            raise RunNotFoundError(f"run {run_id!r} not found", run_id=run_id)
        return tuple(self._streams[run_id])

    def snapshot(self, run_id: RunID | None = None) -> Snapshot:
        """The projection's snapshot of an active Run, else the ended snapshot."""
        run_id = self._run(run_id)
        snap = self._active.get(run_id) or self._ended.get(run_id)
        if snap is None:
            raise RunNotFoundError(f"run {run_id!r} not found", run_id=run_id)
        return snap

    def state(self, run_id: RunID | None = None) -> MachineState:
        return self.snapshot(run_id).state

    def position(self, run_id: RunID | None = None) -> int:
        return self.snapshot(run_id).position

    def request(self, command_id: CommandID, command: C.Command, *,
                run_id: RunID | None = None, base: int | None = None) -> CommitRequest:
        """A raw CommitRequest (no envelope validation), for envelope-level tests."""
        run_id = self._run(run_id)
        if base is None:
            base = self.position(run_id) if run_id in self._streams else 0
        return CommitRequest(
            base, CommandEnvelope(type(command).WIRE_NAME, run_id, command_id, command)
        )
