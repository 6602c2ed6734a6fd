"""The reference side of the model tests: the spec's reference machine (``runx_spec``) as
an oracle for identities, commit outcomes and projections.

* :func:`ids_report` walks a real Run's stored stream (facts with their commit ids) and
  compares every derived id in it with the reference's derivation from the abstract
  positions: command ids (the reference's ``expected_cid`` table), step, call, response
  and effect ids (the reference's ``prepare_ids``, ``model_effect``, ``tool_step_id``,
  ``call_id``, ``response_id``, ``tool_effect``).
* :class:`ReferenceScope` is the reference's store (its ``commit``: decide, replay, epoch
  fence) driven with the abstract image of the real commands (:func:`to_reference_cmd`).

Run ``r`` is always called ``run-{r}``, as in the reference. Real values are abstracted
with the core model's refinement mapping (``abstract_fact``, ``abstract_state``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runx_spec import _ids as ids
from runx_spec import _invariants as spec_invariants
from runx_spec import _state as spec_state
from runx_spec import _store as spec_store
from runx_spec import reference as spec_reference

from runx_actors.check.models._core_commands import agent_input
from runx_actors.check.models._core_world import abstract_fact, abstract_state
from runx_actors.protocol import commands as C
from runx_actors.protocol import facts as F
from runx_actors.protocol.values import RunReason, RunStoppedEnd

__all__ = ["ids_report", "to_reference_cmd", "ReferenceScope", "abstract_fact",
           "abstract_state", "run_name", "INPUT0", "spec_state", "spec_store",
           "spec_invariants", "spec_reference"]

#: Every Run is created with this one input (as in the reference machine).
INPUT0 = agent_input("in-0")


def run_name(r: int) -> str:
    return f"run-{r}"


# --------------------------------------------------------------------------- identities


def _is_cancel_group(group: Sequence[F.Fact]) -> bool:
    last = group[-1]
    return (isinstance(last, F.RunEnded) and isinstance(last.end, RunStoppedEnd)
            and last.end.reason is RunReason.CANCELLED)


def _group_command(r: int, group: Sequence[F.Fact], base: int, state: Any) -> Any:
    """The reference's abstract command that produced *group*, or None for a free id."""
    Cmd = spec_state.Cmd
    first = group[0]
    if _is_cancel_group(group):
        return None
    match first:
        case F.ModelStepPrepared():
            return Cmd("Prepare", first.step_id, arg=(base, tuple(first.input_ids)))
        case F.ModelStepWithdrawn():
            return Cmd("Withdraw", first.step_id)
        case F.ModelStepStarted():
            return Cmd("StartModel", first.step_id, "", first.effect)
        case F.ModelStepRecovered():
            return Cmd("RecoverModel", first.step_id, "", first.effect)
        case F.ModelStepCompleted():
            return Cmd("SubmitModelResult", first.step_id, "", first.effect)
        case F.ModelStepRejected():
            return Cmd("RejectModelResult", first.step_id, "", first.effect)
        case F.ModelStepFailed():
            return Cmd("SubmitModelFailure", first.step_id, "", first.effect)
        case F.ToolCallStarted():
            return Cmd("StartToolCall", first.step_id, first.call_id, first.effect)
        case F.ToolCallCompleted():
            return Cmd("SubmitToolResult", first.step_id, first.call_id, first.effect)
        case F.ToolCallFailed() if first.effect:
            return Cmd("SubmitToolFailure", first.step_id, first.call_id, first.effect,
                       first.outcome.value)
        case F.ToolCallFailed():
            call = spec_state.find_call(state, first.call_id) if state is not None else None
            return Cmd("RejectToolCall", first.step_id, first.call_id, "",
                       call.response if call is not None else "")
        case F.ToolCallApproved():
            return Cmd("ApproveToolCall", first.step_id, first.call_id, "", first.response_id)
    return None


def ids_report(r: int, records: Sequence[tuple[str, F.Fact]]) -> str | None:
    """The first id in Run ``r``'s stream (``(commit_id, fact)`` pairs, stream order)
    that differs from the reference's derivation, as a message; None if all agree."""
    run = run_name(r)
    groups: list[tuple[str, list[F.Fact]]] = []
    for cid, fact in records:
        if groups and groups[-1][0] == cid:
            groups[-1][1].append(fact)
        else:
            groups.append((cid, [fact]))
    position = -1
    prefix: list[Any] = []  # abstract facts folded so far (the reference's meaning)
    for n, (cid, group) in enumerate(groups):
        state = spec_state.fold(tuple(prefix)) if prefix else None
        if n == 0:
            if cid != f"create:{run}":
                return f"{run}: creation commit id {cid!r}"
        elif isinstance(group[0], F.InputAccepted):
            want = ids.derive_input_command_id(run, *(f.input.id for f in group
                                                      if isinstance(f, F.InputAccepted)))
            if cid != want:
                return f"{run}: AcceptInput commit id {cid[:12]} is not the derived one"
        else:
            cmd = _group_command(r, group, position, state)
            expected = spec_store.expected_cid(r, cmd) if cmd is not None else ()
            if expected and cid not in expected:
                return (f"{run}: {type(group[0]).__name__} committed under {cid[:12]}, the "
                        f"reference derives {[e[:12] for e in expected]}")
        for fact in group:
            message = _fact_ids(r, fact, position, state)
            if message is not None:
                return f"{run}: {message}"
            prefix.append(abstract_fact(fact))
            state = spec_state.fold(tuple(prefix))
            position += 1
    return None


def _fact_ids(r: int, fact: F.Fact, position: int, state: Any) -> str | None:
    match fact:
        case F.ModelStepPrepared():
            _, step = spec_state.prepare_ids(r, position)
            if fact.step_id != step:
                return f"ModelStep id {fact.step_id[:12]} is not derived from position {position}"
        case F.ModelStepStarted():
            cur = state.current if state is not None else None
            rejects = cur.rejects if isinstance(cur, spec_state.ModelStep) else 0
            if fact.effect != spec_state.model_effect(r, fact.step_id, rejects):
                return f"model EffectID {fact.effect[:12]} is not sequence {rejects}"
        case F.ToolStepOpened():
            if fact.step_id != spec_state.tool_step_id(fact.source):
                return "ToolStep id is not derived from its source"
            for i, b in enumerate(fact.calls):
                if b.call_id != spec_state.call_id(fact.source, i):
                    return f"CallID {i} is not derived from its index"
                if b.response is not None and b.response.id != spec_state.response_id(
                        r, fact.step_id, b.call_id):
                    return f"ResponseID of call {i} is not the derived one"
        case F.ToolCallStarted():
            if fact.effect != spec_state.tool_effect(r, fact.step_id, fact.call_id):
                return f"tool EffectID {fact.effect[:12]} is not sequence 0"
    return None


# --------------------------------------------------------------------------- the store


def to_reference_cmd(command: C.Command, base: int) -> Any:
    """The reference's abstract command for a real one (*base*: the commit's base)."""
    Cmd = spec_state.Cmd
    match command:
        case C.AcceptInput(inputs=inputs):
            return Cmd("AcceptInput", arg=inputs[0].id)
        case C.PrepareModelRequest():
            return Cmd("Prepare", command.step_id, arg=(base, tuple(command.input_ids)))
        case C.WithdrawPreparedStep(step_id=step):
            return Cmd("Withdraw", step)
        case C.StartModelExecution(step_id=step, effect=e):
            return Cmd("StartModel", step, "", e)
        case C.RecoverModelExecution(step_id=step, effect=e):
            return Cmd("RecoverModel", step, "", e)
        case C.SubmitModelResult():
            return Cmd("SubmitModelResult", command.step_id, "", command.effect,
                       "tools" if command.result.tool_calls else "text")
        case C.SubmitModelFailure():
            return Cmd("SubmitModelFailure", command.step_id, "", command.effect)
        case C.RejectModelResult():
            return Cmd("RejectModelResult", command.step_id, "", command.effect,
                       command.disposition.value)
        case C.StartToolCall():
            return Cmd("StartToolCall", command.step_id, command.call_id, command.effect)
        case C.SubmitToolResult():
            return Cmd("SubmitToolResult", command.step_id, command.call_id, command.effect)
        case C.SubmitToolFailure():
            return Cmd("SubmitToolFailure", command.step_id, command.call_id, command.effect,
                       command.outcome.value)
        case C.ApproveToolCall() | C.RejectToolCall():
            return Cmd(type(command).__name__, command.step_id, command.call_id, "",
                       command.response_id)
        case C.CancelRun():
            return Cmd("CancelRun")
    raise TypeError(f"no reference command for {command!r}")


class ReferenceScope:
    """The reference's store for *runs* Runs (created with input ``in-0`` at epoch 1).

    ``commit`` returns the reference's status (``"accepted"``, ``"already_applied"``,
    ``"terminal"``, ``"conflict"``, ``"stale"``, ``"fenced"``) and the facts the commit
    produced or replayed (abstract facts).
    """

    def __init__(self, runs: int, *, calls: int, approvals: bool) -> None:
        config = spec_reference.ReferenceConfig(runs=runs, calls=calls, approvals=approvals)
        (self.world,) = spec_reference.build_model(config).initial_states()
        self.calls = calls
        self.approvals = approvals

    @property
    def store(self) -> Any:
        return self.world.store

    @property
    def epoch(self) -> int:
        return int(self.world.store.epoch)

    def open(self) -> int:
        """A new writer opens the scope: the persisted epoch + 1."""
        replace = spec_state.replace
        self.world = replace(self.world, store=replace(self.world.store, epoch=self.epoch + 1))
        return self.epoch

    def commit(self, r: int, cid: str, command: C.Command, *, epoch: int,
               base: int) -> tuple[str, tuple[Any, ...]]:
        cmd = to_reference_cmd(command, base)
        world, status = spec_store.commit(
            self.world, r, cid, cmd, epoch=epoch, origin="model_test", base=base,
            calls=self.calls, approvals=self.approvals, bugs=frozenset())
        self.world = world
        if status == "accepted":
            return status, tuple(world.store.log[-1].facts)
        if status == "already_applied":
            original = next(c for c in world.store.log if c.cid == cid)
            return status, tuple(original.facts) if original.run == r else ()
        return status, ()

    def state(self, r: int) -> Any:
        return self.world.store.runs[r]

    def position(self, r: int) -> int:
        return int(self.world.store.position(r))

    def log(self, r: int) -> list[tuple[str, int]]:
        """``(commit id, writer epoch)`` of every fact of Run ``r``, in stream order."""
        return [(c.cid, c.epoch) for c in self.world.store.log if c.run == r
                for _ in c.facts]
