"""What the core model drives: the real protocol functions, or a deliberately broken
wrapper of one of them.

:class:`Impl` bundles the pieces of the implementation a transition calls:

* ``evaluate`` — ``protocol.evaluate_commit`` (decide and evolve run inside it);
* ``plan`` — ``protocol.plan_next`` (what the loop does next);
* the store's own steps: the epoch fence (``check_epoch``) and what a replay does to the
  projection (``reapply_replays``);
* ``shell_bugs``: defects of the shell, which the environment (``runx_spec._moves``, the
  one definition of the moves both models share) switches on by name — the epoch bump on
  open (``shared_epoch``), which effect a delivered Outcome settles
  (``settle_foreign_effect``), whether the loop starts tool calls
  (``loop_skips_tool_calls``) and whether a fused batch is one transaction
  (``fused_split``).

``CORRECT`` is the implementation as shipped. Every entry of :data:`VARIANTS` breaks
exactly one thing, by wrapping a real function (never by patching a module): the wrapped
function calls the real one and changes its answer in the one case the defect is about.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ...protocol import _decide
from ...protocol import commands as C
from ...protocol import facts as F
from ...protocol._evolve import evolve
from ...protocol.commit import (
    Append,
    CommitDecision,
    CommitRequest,
    Snapshot,
    evaluate_commit,
    expected_command_ids,
    fold_run,
)
from ...protocol.digests import digest_tool_output
from ...protocol.errors import RunTerminalError, StaleRuntimeError
from ...protocol.plan import (
    Action,
    Idle,
    StartModelCall,
    StartToolCalls,
    WithdrawPrepared,
    plan_next,
)
from ...protocol.state import MachineState, ToolCallState, ToolStep
from ...protocol.values import (
    Failure,
    FailureClass,
    RunReason,
    RunResult,
    RunStatus,
    RunStoppedEnd,
    ToolCallStatus,
    ToolFailureOutcome,
)
from ._mutants import mutant_function, mutant_module, rebind

__all__ = ["Impl", "CORRECT", "VARIANTS", "EXPECTED", "MUTANT_VARIANTS", "impl_for"]

Evaluate = Callable[[Any, CommitRequest], CommitDecision]
Plan = Callable[[MachineState], Action]
Fold = Callable[..., MachineState]


@attrs.frozen
class Impl:
    """The implementation under check (hashable: it is part of the transition cache key)."""

    name: str = "core"
    evaluate: Evaluate = evaluate_commit
    plan: Plan = plan_next
    check_epoch: bool = True
    reapply_replays: bool = False
    shell_bugs: frozenset[str] = frozenset()
    fold: Fold = fold_run
    """The authoritative read (``fold_run``); the adversary's foreign log goes through it."""


CORRECT = Impl()


# --------------------------------------------------------------------------- wrappers


class _NoReplayView:
    """A CommitView whose commit-id index is never consulted."""

    __slots__ = ("_view",)

    def __init__(self, view: Any) -> None:
        self._view = view

    def replay_facts(self, command_id: str, run_id: str) -> None:
        return None

    def active(self, run_id: str) -> Any:
        return self._view.active(run_id)

    def stream_exists(self, run_id: str) -> bool:
        return bool(self._view.stream_exists(run_id))


def _evaluate_without_replay(view: Any, request: CommitRequest) -> CommitDecision:
    """``replay_redecides``: step 1 (replay lookup) is skipped; a known id is decided again."""
    return evaluate_commit(_NoReplayView(view), request)


def _closes_running(fact: F.Fact) -> bool:
    return (isinstance(fact, F.ToolCallFailed) and fact.outcome is ToolFailureOutcome.UNKNOWN
            ) or isinstance(fact, F.ModelStepFailed)


def _evaluate_cancel_leaving_executing(view: Any, request: CommitRequest) -> CommitDecision:
    """``run_ended_while_executing``: CancelRun's group omits the facts that close the
    EXECUTING model step or calls, and the Run ends anyway."""
    decision = evaluate_commit(view, request)
    if not isinstance(request.envelope.command, C.CancelRun) or not isinstance(decision, Append):
        return decision
    kept = tuple(f for f in decision.facts[:-1] if not _closes_running(f))
    if len(kept) == len(decision.facts) - 1:
        return decision  # nothing was EXECUTING: the group is the correct one
    snap = view.active(request.envelope.run_id)
    state = snap.state
    for fact in kept:
        state = evolve(state, fact)
    # the broken fold ends the Run without asking whether an effect is still running
    ended = attrs.evolve(state, status=RunStatus.STOPPED, current=None, result=RunResult(
        status=RunStatus.STOPPED, reason=RunReason.CANCELLED, usage=state.usage))
    facts = (*kept, F.RunEnded(RunStoppedEnd(RunReason.CANCELLED)))
    return Append(facts, Snapshot(ended, snap.position + len(facts)))


def _call_of(state: MachineState, call_id: str) -> ToolCallState | None:
    for step in (state.current, state.last_tool_step):
        if isinstance(step, ToolStep):
            found = step.call(call_id)
            if found is not None:
                return found
    return None


def _evaluate_late_outcome(view: Any, request: CommitRequest) -> CommitDecision:
    """``late_outcome_written``: a tool settlement refused because its call was already
    failed UNKNOWN (by cancel or takeover) under that effect is appended anyway."""
    try:
        return evaluate_commit(view, request)
    except (RunTerminalError, StaleRuntimeError):
        command = request.envelope.command
        if not isinstance(command, C.SubmitToolResult | C.SubmitToolFailure):
            raise
        snap = view.snapshot(request.envelope.run_id)
        call = _call_of(snap.state, command.call_id)
        if (call is None or call.status is not ToolCallStatus.FAILED or call.failure is None
                or call.failure.outcome is not ToolFailureOutcome.UNKNOWN
                or call.effect != command.effect):
            raise
        fact: F.Fact
        if isinstance(command, C.SubmitToolResult):
            fact = F.ToolCallCompleted(step_id=command.step_id, call_id=command.call_id,
                                       effect=command.effect,
                                       output_digest=digest_tool_output(command.result.output))
        else:
            failure = (Failure(FailureClass.EFFECT_UNKNOWN, command.failure.message)
                       if command.outcome is ToolFailureOutcome.UNKNOWN else command.failure)
            fact = F.ToolCallFailed(step_id=command.step_id, call_id=command.call_id,
                                    effect=command.effect, failure=failure,
                                    outcome=command.outcome)
        return Append((fact,), Snapshot(snap.state, snap.position + 1))


def _plan_restarting_executing(state: MachineState) -> Action:
    """``double_tool_start`` (planner half): calls stuck EXECUTING are planned again."""
    action = plan_next(state)
    cur = state.current
    if isinstance(action, Idle) and isinstance(cur, ToolStep):
        running = tuple(c.call_id for c in cur.calls if c.status is ToolCallStatus.EXECUTING)
        if running:
            return StartToolCalls(cur.id, running)
    return action


def _evaluate_restart(view: Any, request: CommitRequest) -> CommitDecision:
    """``double_tool_start`` (decide half): a StartToolCall of an EXECUTING call under a new
    attempt's effect is accepted, and the call runs under the new effect."""
    command = request.envelope.command
    rid = request.envelope.run_id
    if (not isinstance(command, C.StartToolCall)
            or view.replay_facts(request.envelope.id, rid) is not None):
        return evaluate_commit(view, request)
    snap = view.active(rid)
    cur = snap.state.current if snap is not None else None
    call = cur.call(command.call_id) if isinstance(cur, ToolStep) else None
    if call is None or call.status is not ToolCallStatus.EXECUTING or call.effect == command.effect:
        return evaluate_commit(view, request)
    assert isinstance(cur, ToolStep)
    restarted = attrs.evolve(call, effect=command.effect)
    calls = tuple(restarted if c.call_id == call.call_id else c for c in cur.calls)
    state = attrs.evolve(snap.state, current=attrs.evolve(cur, calls=calls))
    fact = F.ToolCallStarted(step_id=command.step_id, call_id=command.call_id,
                             effect=command.effect)
    return Append((fact,), Snapshot(state, snap.position + 1))


def _plan_ignoring_inputs(state: MachineState) -> Action:
    """``start_despite_inputs``: a PREPARED step is started although inputs are pending
    (the planner never withdraws)."""
    action = plan_next(state)
    if isinstance(action, WithdrawPrepared):
        return StartModelCall(action.step_id)
    return action


# --------------------------------------------------------------------------- mutants
# Single-edit mutants of the shipped source (``_mutants``): the bugs of issue 13 that the
# test suite and the checker's old environment missed.

_COMMIT = "runx_actors.protocol.commit"
_DECIDE = "runx_actors.protocol._decide"
_EVOLVE = "runx_actors.protocol._evolve"

_EXECUTING_CHECK = (
    "    if call.status is not ToolCallStatus.EXECUTING:\n"
    '        raise _refuse(fact, f"call is {call.status.value}, not executing")\n'
    "    if fact.effect != call.effect:\n"
    '        raise _refuse(fact, "effect is not the running one")\n'
    "    new = attrs.evolve(\n"
    "        call, status=ToolCallStatus.COMPLETED")
_TOOLSPEC_CHECK = (
    "    for spec, definition in zip(c.tools, c.request.tools):\n"
    "        if spec.name != definition.name:\n"
    '            raise _refuse(c, f"tool spec {spec.name!r} does not name its definition", '
    "state)\n"
    "        if spec.definition_digest != digest_tool_definition(definition):\n"
    '            raise _refuse(c, f"definition digest of {spec.name!r} does not match", state)\n')


def _evaluate_with_decide(handler: tuple[type[Any], Any], func: str,
                          edits: tuple[tuple[str, str], ...]) -> Evaluate:
    """``evaluate_commit`` over a ``decide`` whose table entry *handler* is the mutant of
    ``_decide.<func>``."""
    table = {**_decide.DECIDE_TABLE, handler: mutant_function(_DECIDE, func, edits)}
    evaluate: Evaluate = rebind(evaluate_commit,
                                decide=rebind(_decide.decide, DECIDE_TABLE=table))
    return evaluate


def _commit_mutant(old: str, new: str) -> Evaluate:
    evaluate: Evaluate = mutant_function(_COMMIT, "evaluate_commit", ((old, new),))
    return evaluate


def _prepare_cas_behind_only() -> Impl:
    return Impl("prepare_cas_behind_only", evaluate=_commit_mutant(
        "if request.base != snap.position:", "if request.base < snap.position:"))


def _complete_non_executing() -> Impl:
    edit = (_EXECUTING_CHECK, _EXECUTING_CHECK.split("\n", 2)[2])
    mutant = mutant_module(_EVOLVE, (edit,))
    # evaluate_commit and fold_run fold through evolve_all (RUN-INP-2), the mutant
    # module's own, which calls its mutant evolve
    swap = {"evolve": mutant.evolve, "evolve_all": mutant.evolve_all}
    return Impl("complete_non_executing", evaluate=rebind(evaluate_commit, **swap),
                fold=rebind(fold_run, **swap))


def _input_id_first_only() -> Impl:
    derive = mutant_function("runx_actors.protocol.ids", "derive_input_command_id", ((
        "return derive(NS_INPUT_COMMAND, run_id, *input_ids)",
        "return derive(NS_INPUT_COMMAND, run_id, *input_ids[:1])"),))
    expected = rebind(expected_command_ids, derive_input_command_id=derive)
    return Impl("input_id_first_only",
                evaluate=rebind(evaluate_commit, expected_command_ids=expected))


def _toolspec_unchecked() -> Impl:
    return Impl("toolspec_unchecked", evaluate=_evaluate_with_decide(
        (C.PrepareModelRequest, _decide.Phase.OPEN), "_prepare", ((_TOOLSPEC_CHECK, ""),)))


def _envelope_type_and() -> Impl:
    check = "if type(command) not in C.COMMAND_TYPES {} env.type != type(command).WIRE_NAME:"
    return Impl("envelope_type_and",
                evaluate=_commit_mutant(check.format("or"), check.format("and")))


def _empty_command_id() -> Impl:
    return Impl("empty_command_id", evaluate=_commit_mutant(
        "if not run_id or not env.id or (snap.state.run_id != run_id):",
        "if not run_id or (snap.state.run_id != run_id):"))


def _input_missing_digest() -> Impl:
    return Impl("input_missing_digest", evaluate=_evaluate_with_decide(
        (C.AcceptInput, _decide.Phase.ANY), "_accept_input", ((
            "if any(not i.id or not i.digest for i in c.inputs):",
            "if any(not i.id for i in c.inputs):"),)))


def _terminal_before_replay() -> Impl:
    return Impl("terminal_before_replay", evaluate=_commit_mutant(
        "    if env.id:\n        replay = view.replay_facts(env.id, run_id)",
        "    if env.id and view.active(run_id) is not None:\n"
        "        replay = view.replay_facts(env.id, run_id)"))


#: name -> builder of the mutant implementations (built on first use).
_MUTANTS: dict[str, Callable[[], Impl]] = {
    "prepare_cas_behind_only": _prepare_cas_behind_only,
    "complete_non_executing": _complete_non_executing,
    "input_id_first_only": _input_id_first_only,
    "toolspec_unchecked": _toolspec_unchecked,
    "envelope_type_and": _envelope_type_and,
    "empty_command_id": _empty_command_id,
    "input_missing_digest": _input_missing_digest,
    "terminal_before_replay": _terminal_before_replay,
}


# --------------------------------------------------------------------------- variants

_IMPLS: dict[str, Impl] = {
    "replay_redecides": Impl("replay_redecides", evaluate=_evaluate_without_replay),
    "replay_reapplies": Impl("replay_reapplies", reapply_replays=True),
    "no_epoch_check": Impl("no_epoch_check", check_epoch=False),
    "shared_epoch": Impl("shared_epoch", shell_bugs=frozenset({"shared_epoch"})),
    "settle_foreign_effect": Impl("settle_foreign_effect",
                                  shell_bugs=frozenset({"settle_foreign_effect"})),
    "run_ended_while_executing": Impl("run_ended_while_executing",
                                      evaluate=_evaluate_cancel_leaving_executing),
    "late_outcome_written": Impl("late_outcome_written", evaluate=_evaluate_late_outcome),
    "double_tool_start": Impl("double_tool_start", evaluate=_evaluate_restart,
                              plan=_plan_restarting_executing),
    "start_despite_inputs": Impl("start_despite_inputs", plan=_plan_ignoring_inputs),
    "loop_skips_tool_calls": Impl("loop_skips_tool_calls",
                                  shell_bugs=frozenset({"loop_skips_tool_calls"})),
    "fused_split": Impl("fused_split", shell_bugs=frozenset({"fused_split"})),
}

#: Broken variants of the core: name → the one defect it switches on.
VARIANTS: dict[str, str] = {
    "replay_redecides": "evaluate_commit skips the commit-id replay lookup (step 1): a "
                        "known command id is decided again",
    "replay_reapplies": "on a commit-id replay the store folds the original group into the "
                        "projection a second time (nothing appended to the log)",
    "no_epoch_check": "the store appends without comparing the writer's epoch with the "
                      "persisted one (a fenced owner still writes)",
    "shared_epoch": "opening the scope does not raise the epoch: a takeover shares the old "
                    "owner's epoch",
    "settle_foreign_effect": "deliver builds the settlement for the effect its target is "
                             "running now, not for the Outcome's key (a late Outcome of an "
                             "earlier attempt settles the retry)",
    "run_ended_while_executing": "CancelRun's group leaves out the facts that close the "
                                 "EXECUTING model step and calls, and ends the Run anyway",
    "late_outcome_written": "a tool settlement refused because its call was already failed "
                            "UNKNOWN (cancel, takeover) is appended anyway, even after "
                            "RunEnded",
    "double_tool_start": "the planner plans calls stuck EXECUTING again and decide accepts "
                         "the second StartToolCall under the next attempt's effect",
    "start_despite_inputs": "plan_next starts a PREPARED model step although inputs are "
                            "pending, instead of withdrawing it",
    "loop_skips_tool_calls": "the loop never starts a PENDING tool call (the Run stalls: "
                             "found only by --check-deadlock)",
    "fused_split": "the store's batch is two transactions, the settle and then the rest; "
                   "the second can be lost while the batch reports success, so the loop "
                   "dispatches starts that are not in the log",
    # single-edit mutants of the shipped source (issue 13)
    "prepare_cas_behind_only": "evaluate_commit's Prepare CAS refuses only bases behind the "
                               "position (`<` for `!=`): a base ahead is accepted",
    "complete_non_executing": "evolve folds ToolCallCompleted onto a call that is not "
                              "EXECUTING (PENDING, or already FAILED)",
    "input_id_first_only": "derive_input_command_id hashes only the first input of a batch "
                           "(as evaluate_commit's derived-id check uses it)",
    "toolspec_unchecked": "decide's Prepare skips the ToolSpec name / definition-digest "
                          "check",
    "envelope_type_and": "evaluate_commit's envelope type check is weakened (`or` -> `and`): "
                         "a type naming another command passes",
    "empty_command_id": "evaluate_commit accepts an empty command id in a hand-built envelope",
    "input_missing_digest": "decide's AcceptInput lets an input without a digest through "
                            "(the caller gets EvolveError instead of the refusal)",
    "terminal_before_replay": "evaluate_commit skips the replay lookup for an ended Run: the "
                              "resubmission of a known command id is refused terminal",
}

#: The invariant that catches each variant first (BFS, with the configs of the tests).
EXPECTED: dict[str, str] = {
    "replay_redecides": "INV-9.replay",
    "replay_reapplies": "INV-40",
    "no_epoch_check": "INV-28",
    "shared_epoch": "INV-27",
    "settle_foreign_effect": "INV-5",
    "run_ended_while_executing": "INV-4",
    "late_outcome_written": "INV-2",
    "double_tool_start": "INV-6",
    "start_despite_inputs": "INV-14",
    "loop_skips_tool_calls": "DEADLOCK",
    "fused_split": "INV-24",
    "prepare_cas_behind_only": "ADV-1",
    "complete_non_executing": "ADV-2",
    "input_id_first_only": "ADV-1",
    "toolspec_unchecked": "ADV-1",
    "envelope_type_and": "ADV-1",
    "empty_command_id": "ADV-1",
    "input_missing_digest": "CORE-EVOLVE",
    "terminal_before_replay": "INV-9.replay",
}

_BUILT: dict[str, Impl] = {}

#: The broken variants of issue 13 (each a single-edit mutant of the shipped source).
MUTANT_VARIANTS: tuple[str, ...] = tuple(_MUTANTS)


def impl_for(variant: str | None) -> Impl:
    """The implementation for *variant* (``None``: the correct one).

    Raises:
        ValueError: an unknown variant name.
    """
    if variant is None:
        return CORRECT
    if variant in _MUTANTS:
        if variant not in _BUILT:
            _BUILT[variant] = _MUTANTS[variant]()
        return _BUILT[variant]
    try:
        return _IMPLS[variant]
    except KeyError:
        raise ValueError(f"unknown core variant {variant!r}; known: {sorted(VARIANTS)}") \
            from None
