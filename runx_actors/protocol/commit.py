"""Commit evaluation, creation and fold (spec §2.11, §2.12, §4.1, §4.3).

``evaluate_commit`` is the pure heart of every store: given a read-only view of the
scope (machine projection, streams, commit-id index) and a request, it returns either
``Replay`` (the id was applied before) or ``Append`` (the facts to append atomically).
Stores run it inside their writer's critical section and only do the I/O it names.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeAlias

import attrs

from . import commands as C
from . import facts as F
from ._decide import decide
from ._evolve import evolve, evolve_all
from .errors import (
    CommandConflictError,
    CommandRefusedError,
    CorruptLogError,
    EvolveError,
    PreconditionError,
    RunNotFoundError,
    RunTerminalError,
    StaleRuntimeError,
    ValidationError,
)
from .ids import (
    derive_decline_command_id,
    derive_input_command_id,
    derive_model_request_command_id,
    derive_model_step_id,
    derive_recovery_command_id,
    derive_response_command_id,
    derive_settlement_command_id,
    derive_start_command_id,
    derive_withdraw_command_id,
)
from .state import MachineState
from .values import AgentInput, CommandID, NewRun, RunID, RunStatus, Scope, ToolFailureOutcome

__all__ = [
    "CommandEnvelope", "envelope", "Snapshot", "CommitRequest", "Prediction",
    "predict_commit", "CommitStatus",
    "CommitResult", "CommitView", "Replay", "Append", "CommitDecision",
    "PromptTokenGuard", "evaluate_commit", "expected_command_ids", "create_group",
    "BatchResult", "evaluate_batch", "check_batch", "batch_refusal",
    "initialize_run", "fold_run", "validate_identity", "validate_name", "MAX_NAME_BYTES",
    "MAX_ID_BYTES",
]


@attrs.frozen
class CommandEnvelope:
    """A command addressed to a Run under its CommandID. Build it with :func:`envelope`."""

    type: str
    run_id: RunID
    id: CommandID
    command: C.Command


def validate_identity(value: str, what: str) -> None:
    """Raise ValidationError unless *value* is a non-empty str encodable as UTF-8."""
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{what} must be a non-empty string", value=value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{what} is not valid UTF-8", value=value) from exc


#: the longest name (a Run id, a scope, a foreign stream or type), in UTF-8 bytes (RUN-WIR-1)
MAX_NAME_BYTES = 512
#: the longest caller-chosen command or commit id, which may embed a name (``create:<run>``)
MAX_ID_BYTES = 2 * MAX_NAME_BYTES

# C0 and C1 controls (NUL, tab, newline, DEL …), the line and paragraph separators, and
# the bidirectional formatting characters (ALM, LRM, RLM, LRE…RLO, LRI…PDI)
_UNSAFE_IN_NAME = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e"
                             "\u2066-\u2069]")


def validate_name(value: str, what: str, limit: int = MAX_NAME_BYTES) -> None:
    """Raise ValidationError unless *value* is a valid name (RUN-WIR-1).

    A name — a Run id, a scope, a foreign stream or event type, a command or commit id a
    caller chooses — is also a key of every store and a line of CLI output: a valid
    identity (:func:`validate_identity`) of at most *limit* UTF-8 bytes
    (:data:`MAX_NAME_BYTES`; :data:`MAX_ID_BYTES` for command and commit ids) with no
    control character (U+0000–U+001F, U+007F–U+009F: NUL, tab, newline …), no line or
    paragraph separator (U+2028, U+2029) and no bidirectional formatting character
    (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069). Derived identities (64 hex
    digits) always are. The error's ``value`` holds at most the first 64 characters.
    """
    validate_identity(value, what)
    size = len(value.encode("utf-8"))
    if size > limit:
        raise ValidationError(f"{what} is {size} UTF-8 bytes, more than {limit}",
                              value=value[:64], size=size)
    bad = _UNSAFE_IN_NAME.search(value)
    if bad is not None:
        raise ValidationError(f"{what} contains U+{ord(bad.group()):04X} at index "
                              f"{bad.start()} (a control, line separator or bidirectional "
                              f"formatting character)", value=value[:64], index=bad.start())


def envelope(run_id: RunID, command_id: CommandID, command: C.Command) -> CommandEnvelope:
    """Wrap *command* for commit; ``type`` comes from the command (RUN-WIR-3).

    Raises:
        ValidationError: empty or non-UTF-8 run id, a command id that is not a valid name
            (:func:`validate_name`: derived ids always are), or not a command.
    """
    validate_identity(run_id, "run id")
    validate_name(command_id, "command id", MAX_ID_BYTES)
    if type(command) not in C.COMMAND_TYPES:
        raise ValidationError(f"not a command: {command!r}", command=command)
    return CommandEnvelope(type(command).WIRE_NAME, run_id, command_id, command)


@attrs.frozen
class Snapshot:
    """A Run's state and position (index of its last fact; RunCreated is 0)."""

    state: MachineState
    position: int


@attrs.frozen
class CommitRequest:
    """``base`` is the position the caller loaded (only Prepare compares it).

    ``predicted`` (not part of equality, hash or repr): the decision the caller already
    computed for this very request with :func:`predict_commit`, or None. A store's
    ``evaluate_commit`` returns it instead of deciding again only when it provably equals
    what deciding again would return (RUN-CMT-10); otherwise it is ignored.
    """

    base: int
    envelope: CommandEnvelope
    predicted: Prediction | None = attrs.field(default=None, eq=False, repr=False)


#: Only :func:`predict_commit` holds this: a Prediction made any other way is ignored.
_SEAL = object()


@attrs.frozen(eq=False, repr=False)
class Prediction:
    """What ``evaluate_commit`` decided for a request on one snapshot (RUN-CMT-10).

    ``on`` is the snapshot it was decided on (the Run's, active), ``envelope`` and ``base``
    the request's, ``decision`` the ``Append``. Made only by :func:`predict_commit`
    (``seal``); a store trusts it only for the identical snapshot and envelope objects.
    """

    on: Snapshot
    envelope: CommandEnvelope
    base: int
    decision: Append
    seal: object


class _Ahead:
    """The CommitView of a prediction: the Run at one snapshot, no replay index (the
    commands a caller predicts are new; a store still looks its own index up first)."""

    __slots__ = ("snapshot",)

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def replay_facts(self, command_id: CommandID, run_id: RunID) -> tuple[F.Fact, ...] | None:
        return None

    def active(self, run_id: RunID) -> Snapshot | None:
        state = self.snapshot.state
        if state.run_id == run_id and state.status is RunStatus.ACTIVE:
            return self.snapshot
        return None

    def stream_exists(self, run_id: RunID) -> bool:
        return True


def predict_commit(snapshot: Snapshot, request: CommitRequest) -> tuple[CommitRequest, Append]:
    """Decide *request* on *snapshot* (the Run's state as the caller expects the store to
    hold it) and return the request carrying that decision, with the decision
    (RUN-CMT-10). Pure.

    A store given the returned request decides it by looking up its replay index and
    its snapshot of the Run: the same snapshot object (and no prompt-token guard on a
    Prepare) means ``evaluate_commit`` would return this very decision, so it is returned
    without deciding again; anything else (an applied id, a Run that moved, ended or is
    unknown) is decided in full, exactly as without the prediction.

    Raises: what ``evaluate_commit`` raises on that snapshot (RunTerminalError,
    CommandConflictError, StaleRuntimeError, EvolveError).
    """
    decision = evaluate_commit(_Ahead(snapshot), request)
    assert isinstance(decision, Append)  # no replay index: never a Replay
    env = request.envelope
    prediction = Prediction(snapshot, env, request.base, decision, _SEAL)
    return CommitRequest(request.base, env, prediction), decision


def _predicted(request: CommitRequest, snap: Snapshot,
               prompt_token_guard: PromptTokenGuard | None) -> Append | None:
    """The request's own prediction when deciding it on *snap* would give exactly that
    decision (RUN-CMT-10), else None. Steps 3-11 of ``evaluate_commit`` read nothing
    but *snap*, the request and the guard: the same snapshot object, the same envelope
    object and base, and no guard to call give the same answer."""
    p = request.predicted
    if (p is None or p.seal is not _SEAL or p.on is not snap
            or p.envelope is not request.envelope or p.base != request.base):
        return None
    if prompt_token_guard is not None and isinstance(p.envelope.command,
                                                     C.PrepareModelRequest):
        return None
    return p.decision


class CommitStatus(enum.Enum):
    """A commit appended new facts (``ACCEPTED``) or found its command id in the index
    and answered the original facts (``ALREADY_APPLIED``; RUN-CMT-5)."""

    ACCEPTED = "accepted"
    ALREADY_APPLIED = "already_applied"


def _facts(value: Iterable[F.Fact]) -> tuple[F.Fact, ...]:
    return tuple(value)


@attrs.frozen
class CommitResult:
    """What a commit answers (RUN-CMT-1): its status, the Run's snapshot after it, and
    the facts of the command (the new ones, or the original ones on a replay)."""

    status: CommitStatus
    snapshot: Snapshot
    facts: tuple[F.Fact, ...] = attrs.field(converter=_facts)


class CommitView(Protocol):
    """What ``evaluate_commit`` reads from the scope (all synchronous, no I/O)."""

    def replay_facts(self, command_id: CommandID, run_id: RunID) -> tuple[F.Fact, ...] | None:
        """The facts for *run_id* of the commit *command_id*, or None if not in the index."""

    def active(self, run_id: RunID) -> Snapshot | None:
        """The projection's snapshot of an active Run, or None."""

    def stream_exists(self, run_id: RunID) -> bool:
        """True iff the Run's stream exists (active or ended)."""


@attrs.frozen
class Replay:
    """The command id was applied before: answer ALREADY_APPLIED with these facts."""

    facts: tuple[F.Fact, ...]


@attrs.frozen
class Append:
    """Append ``facts`` atomically; the Run is then at ``snapshot``."""

    facts: tuple[F.Fact, ...]
    snapshot: Snapshot


CommitDecision: TypeAlias = Replay | Append
PromptTokenGuard: TypeAlias = Callable[[Scope, RunID, str], None]


def expected_command_ids(
    run_id: RunID, base: int, command: C.Command
) -> tuple[CommandID, ...] | None:
    """The command ids the derivation family of *command* accepts (§3.3, step 5).

    ``None`` for ``CancelRun`` (free id). An UNKNOWN ``SubmitToolFailure`` accepts the
    settlement id or the recovery id of its effect.
    """
    match command:
        case C.AcceptInput(inputs=inputs):
            return (derive_input_command_id(run_id, *(i.id for i in inputs)),)
        case C.PrepareModelRequest():
            if base < 0:  # no position is negative: no id derives from it (step 5)
                return ()
            return (derive_model_request_command_id(run_id, base),)
        case C.WithdrawPreparedStep(step_id=step_id):
            return (derive_withdraw_command_id(run_id, step_id),)
        case C.StartModelExecution(effect=e) | C.StartToolCall(effect=e):
            return (derive_start_command_id(e),)
        case C.RecoverModelExecution(effect=e):
            return (derive_recovery_command_id(e),)
        case C.SubmitToolFailure(effect=e, outcome=ToolFailureOutcome.UNKNOWN):
            return (derive_settlement_command_id(e), derive_recovery_command_id(e))
        case (
            C.SubmitModelResult(effect=e) | C.SubmitModelFailure(effect=e)
            | C.RejectModelResult(effect=e) | C.SubmitToolResult(effect=e)
            | C.SubmitToolFailure(effect=e)
        ):
            return (derive_settlement_command_id(e),)
        case C.DeclineToolCall(step_id=s, call_id=c):
            return (derive_decline_command_id(run_id, s, c),)
        case (
            C.ApproveToolCall(step_id=s, call_id=c, response_id=r)
            | C.RejectToolCall(step_id=s, call_id=c, response_id=r)
            | C.SubmitToolResponse(step_id=s, call_id=c, response_id=r)
        ):
            return (derive_response_command_id(run_id, s, c, r),)
        case C.CancelRun():
            return None
    raise ValidationError(f"not a command: {command!r}", command=command)


def evaluate_commit(
    view: CommitView,
    request: CommitRequest,
    *,
    scope: Scope = "",
    prompt_token_guard: PromptTokenGuard | None = None,
) -> CommitDecision:
    """Decide what committing *request* means, in the order of §4.3 (RUN-CMT-3/4/5).

    Pure: reads *view*, writes nothing. Steps: replay lookup; locate; envelope; effect
    present; derived id; terminal; hard CAS (Prepare only) and the optional prompt-token
    guard [D-9]; decide exactly once; derived step (Prepare only); evolve each fact.
    A request carrying its own :func:`predict_commit` decision, made on the very snapshot
    the view locates (and no guard to call on a Prepare), returns that decision after the
    replay lookup and locate (RUN-CMT-10): steps 3-11 would compute it again.

    Returns:
        ``Replay(facts)`` when the command id is in the index (even if the Run has ended
        or the content differs: first wins), else ``Append(facts, snapshot)``.
    Raises:
        RunNotFoundError / RunTerminalError: the Run is unknown / has ended.
        CommandConflictError: ids that do not add up (steps 3–5, or decide's).
        StaleRuntimeError: decide refused (chained from PreconditionError), a Prepare
            base or step id out of date, or the prompt-token guard refused.
        EvolveError: internal bug — a decided fact does not fold.
    """
    env = request.envelope
    command = env.command
    run_id = env.run_id
    # 1. Replay lookup.
    if env.id:
        replay = view.replay_facts(env.id, run_id)
        if replay is not None:
            return Replay(tuple(replay))
    # 2. Locate.
    snap = view.active(run_id)
    if snap is None:
        if view.stream_exists(run_id):
            raise RunTerminalError(f"run {run_id!r} has ended", run_id=run_id, command=command)
        raise RunNotFoundError(f"run {run_id!r} not found", run_id=run_id)
    # Decided already (RUN-CMT-10): steps 3-11 on this very snapshot gave this Append.
    if request.predicted is not None:
        predicted = _predicted(request, snap, prompt_token_guard)
        if predicted is not None:
            return predicted
    # 3. Envelope.
    if not run_id or not env.id or (snap.state.run_id != run_id):
        raise CommandConflictError("envelope ids are empty or name another Run",
                                   command=command, reason="envelope")
    if type(command) not in C.COMMAND_TYPES or env.type != type(command).WIRE_NAME:
        raise CommandConflictError("envelope type does not name its command",
                                   command=command, reason="envelope")
    # 4. Effect present.
    if isinstance(command, C.EFFECT_COMMANDS) and not command.effect:
        raise CommandConflictError("start/settlement/recovery without an effect",
                                   command=command, reason="effect missing")
    # 5. Derived id.
    expected = expected_command_ids(run_id, request.base, command)
    if expected is not None and env.id not in expected:
        raise CommandConflictError("command id is not the derived one", command=command,
                                   reason="non-derived id", expected=expected)
    state = snap.state
    # 6. Terminal (defensive).
    if state.status is not RunStatus.ACTIVE:
        raise RunTerminalError(f"run {run_id!r} has ended", run_id=run_id, status=state.status)
    # 7. Hard CAS, Prepare only.
    if isinstance(command, C.PrepareModelRequest):
        if request.base != snap.position:
            raise StaleRuntimeError("prepare base is not the current position",
                                    command=command, base=request.base,
                                    position=snap.position)
        if prompt_token_guard is not None:
            prompt_token_guard(scope, run_id, command.prompt_token)
    # 8. Decide exactly once.
    try:
        facts = decide(state, command)
    except PreconditionError as exc:
        raise StaleRuntimeError(f"reload and derive again: {exc.message}", command=command,
                                reason=getattr(exc, "reason", "")) from exc
    # 9. Derived step, Prepare only.
    if isinstance(command, C.PrepareModelRequest):
        if command.step_id != derive_model_step_id(run_id, env.id):
            raise StaleRuntimeError("prepare step id is not derived from its command id",
                                    command=command)
    # 10. Evolve each fact (a run of inputs in one pass: RUN-INP-2).
    folded = evolve_all(state, facts)
    assert folded is not None  # state is a Run's (step 1)
    state = folded
    # 11. The store appends.
    return Append(facts, Snapshot(state, snap.position + len(facts)))


def _results(value: Iterable[CommitResult]) -> tuple[CommitResult, ...]:
    return tuple(value)


@attrs.frozen
class BatchResult:
    """The outcome of a batch commit (RUN-CMT-9).

    ``results`` holds one CommitResult per request evaluated, in order: a prefix of the
    batch, all of it appended in one transaction. ``error`` is the refusal of request
    number ``len(results)`` (it and everything after it wrote nothing), or None when
    every request was committed or replayed.
    """

    results: tuple[CommitResult, ...] = attrs.field(converter=_results)
    error: Exception | None = None


def batch_refusal(exc: BaseException) -> bool:
    """True iff *exc* is a refusal that ends a batch and is returned in
    ``BatchResult.error`` (RUN-CMT-9): a CommandRefusedError (RunNotFoundError,
    RunTerminalError, CommandConflictError, StaleRuntimeError) or a ValidationError.
    Anything else (OwnershipLostError, I/O, EvolveError) is raised by the store."""
    return isinstance(exc, (CommandRefusedError, ValidationError))


def check_batch(requests: Sequence[CommitRequest]) -> RunID:
    """The Run every request of the batch names (RUN-CMT-9).

    Raises:
        ValidationError: the batch is empty, an item is not a CommitRequest, or the
            requests name different Runs.
    """
    if not requests:
        raise ValidationError("a batch needs at least one commit request")
    run_ids = []
    for r in requests:
        if not isinstance(r, CommitRequest):
            raise ValidationError(f"not a commit request: {r!r}", request=r)
        run_ids.append(r.envelope.run_id)
    if len(set(run_ids)) != 1:
        raise ValidationError("the requests of a batch name different Runs",
                              run_ids=tuple(dict.fromkeys(run_ids)))
    return run_ids[0]


class _BatchView:
    """A CommitView over *base* plus the requests appended earlier in the same batch:
    their command ids replay their facts and the Run is at their last snapshot."""

    def __init__(self, base: CommitView, run_id: RunID) -> None:
        self._base = base
        self._run_id = run_id
        self._applied: dict[CommandID, tuple[F.Fact, ...]] = {}
        self.snapshot: Snapshot | None = None  # set by the first Append of the batch

    def append(self, command_id: CommandID, decision: Append) -> None:
        self._applied[command_id] = decision.facts
        self.snapshot = decision.snapshot

    def replay_facts(self, command_id: CommandID, run_id: RunID) -> tuple[F.Fact, ...] | None:
        if run_id == self._run_id and command_id in self._applied:
            return self._applied[command_id]
        return self._base.replay_facts(command_id, run_id)

    def active(self, run_id: RunID) -> Snapshot | None:
        if run_id == self._run_id and self.snapshot is not None:
            active = self.snapshot.state.status is RunStatus.ACTIVE
            return self.snapshot if active else None
        return self._base.active(run_id)

    def stream_exists(self, run_id: RunID) -> bool:
        if run_id == self._run_id and self.snapshot is not None:
            return True
        return self._base.stream_exists(run_id)


def evaluate_batch(
    view: CommitView,
    requests: Sequence[CommitRequest],
    *,
    scope: Scope = "",
    prompt_token_guard: PromptTokenGuard | None = None,
) -> tuple[tuple[CommitDecision, ...], Exception | None]:
    """Decide what committing the batch *requests* means (RUN-CMT-9). Pure.

    Each request is evaluated with :func:`evaluate_commit` on *view* overlaid with the
    requests appended before it in the batch: their facts move the Run's position and
    state, and their command ids are in the replay index (a later request repeating an
    earlier id of the batch is a ``Replay`` of that request's facts). Evaluation stops at
    the first refusal (see :func:`batch_refusal`), which is returned, not raised.

    Returns:
        ``(decisions, error)``: one decision per evaluated request, in order (the prefix
        the store appends in one transaction), and the refusal of the next request or
        None when all were evaluated.
    Raises:
        ValidationError: empty batch, or requests naming different Runs (check_batch).
        EvolveError: internal bug, as evaluate_commit.
    """
    run_id = check_batch(requests)
    overlay = _BatchView(view, run_id)
    decisions: list[CommitDecision] = []
    for request in requests:
        try:
            decision = evaluate_commit(overlay, request, scope=scope,
                                       prompt_token_guard=prompt_token_guard)
        except Exception as exc:
            if not batch_refusal(exc):
                raise
            return tuple(decisions), exc
        if isinstance(decision, Append):
            overlay.append(request.envelope.id, decision)
        decisions.append(decision)
    return tuple(decisions), None


def create_group(new_run: NewRun, inputs: Sequence[AgentInput] = ()) -> tuple[F.Fact, ...]:
    """The creation group ``(RunCreated, InputAccepted…)`` (RUN-NEW-1, §2.11).

    Raises:
        ValidationError: a run id that is not a valid name (:func:`validate_name`: empty,
            non-UTF-8, over :data:`MAX_NAME_BYTES` bytes, a control or bidirectional
            character), an input with an empty id or digest, duplicate input ids. Zero
            inputs are allowed.
    """
    validate_name(new_run.run_id, "run id")
    seen: set[str] = set()
    for i in inputs:
        if not i.id or not i.digest:
            raise ValidationError("input needs an id and a digest", input=i)
        validate_identity(i.id, "input id")
        if i.id in seen:
            raise ValidationError(f"duplicate input id {i.id!r}", input=i)
        seen.add(i.id)
    return (F.RunCreated(new_run.run_id, new_run.causation_id),
            *(F.InputAccepted(i) for i in inputs))


def initialize_run(new_run: NewRun) -> MachineState:
    """``evolve(None, RunCreated(...))``: ACTIVE, Open, no inputs, zero usage."""
    return evolve(None, F.RunCreated(new_run.run_id, new_run.causation_id))


def fold_run(facts: Iterable[F.Fact], *, run_id: RunID = "") -> MachineState:
    """Fold a Run's whole fact list (RUN-NEW-2); the authoritative read.

    Raises:
        CorruptLogError: the list is empty, does not start with RunCreated, or a fact
            fails its guard; attributes ``index`` and ``wire_name`` name the fact.
    """
    listed = facts if isinstance(facts, Sequence) else tuple(facts)
    if listed and not isinstance(listed[0], F.RunCreated):
        raise CorruptLogError("the first fact is not run_created", index=0,
                              wire_name=getattr(listed[0], "WIRE_NAME", "?"), run_id=run_id,
                              fact=listed[0], reason="first fact")
    try:
        state = evolve_all(None, listed)  # linear in the inputs too (RUN-INP-2)
    except EvolveError as exc:
        index = getattr(exc, "index", 0)
        fact = listed[index]
        raise CorruptLogError(
            f"fact {index} ({getattr(fact, 'WIRE_NAME', '?')}) does not fold: {exc.message}",
            index=index, wire_name=getattr(fact, "WIRE_NAME", "?"), run_id=run_id, fact=fact,
            reason=getattr(exc, "reason", ""),
        ) from exc
    if state is None:
        raise CorruptLogError("empty log", index=0, wire_name="", run_id=run_id, fact=None,
                              reason="empty")
    return state
