"""Identity: every derived id the implementation produces equals the reference's.

A synchronous machine over ``ScopeLog`` (the memory store's core: the real
``evaluate_commit`` behind a real commit index, projection and epoch). Rules submit the
commands the shell would build from each Run's loaded snapshot (also stale and refused
ones), and the same command under ids that are not the derived one. After every step the
stored streams are walked and every command, step, call, response and effect id is
compared with the reference machine's derivation (``runx_spec``) from the abstract
positions (INV-7, INV-8, INV-16, INV-17, INV-29 and RUN-WIR-1/3 as far as ids go).
"""

from __future__ import annotations

import pytest
from _driver import MODEL_OUTCOMES, TOOL_OUTCOMES, Move, build, moves, next_move
from _oracle import INPUT0, ids_report, run_name
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from runx_actors.protocol import commands as C
from runx_actors.protocol.commit import CommitRequest, CommitResult, Snapshot, envelope
from runx_actors.protocol.errors import (
    CommandConflictError,
    RunTerminalError,
    StaleRuntimeError,
)
from runx_actors.protocol.values import NewRun
from runx_actors.store._scope import ScopeLog
from runx_actors.store.base import run_stream

RUNS = 2
REFUSALS = (StaleRuntimeError, CommandConflictError, RunTerminalError)


class IdentityMachine(RuleBasedStateMachine):
    """The real scope log driven by shell-built commands; ids checked against the spec."""

    log_class: type[ScopeLog] = ScopeLog

    def __init__(self) -> None:
        super().__init__()
        self.log = self.log_class("identity")
        self.epoch, self.projection = self.log.open()
        for r in range(RUNS):
            self.log.create_run(self.epoch, self.projection, NewRun(run_name(r)), (INPUT0,),
                                f"create:{run_name(r)}", ())

    def _snapshot(self, r: int) -> Snapshot:
        return self.log.load(run_name(r), self.projection)

    def _commit(self, r: int, cid: str, command: C.Command, base: int) -> CommitResult:
        request = CommitRequest(base, envelope(run_name(r), cid, command))
        return self.log.commit(self.epoch, self.projection, request)

    def _submit(self, r: int, move: Move | None) -> None:
        built = build(run_name(r), self._snapshot(r), move) if move is not None else None
        if built is None:
            return
        before = len(self.log.commits)
        try:
            result = self._commit(r, *built)
        except REFUSALS as exc:
            event(f"{type(built[1]).__name__}: {type(exc).__name__}")
            assert len(self.log.commits) == before, "a refused command appended"
        else:
            event(f"{type(built[1]).__name__}: {result.status.value}")

    @rule(r=st.integers(0, RUNS - 1), model=MODEL_OUTCOMES, tool=TOOL_OUTCOMES)
    def advance(self, r: int, model: str, tool: str) -> None:
        """The loop's next command (real ``plan_next``), or the executor's settlement."""
        self._submit(r, next_move(self._snapshot(r), model, tool))

    @rule(r=st.integers(0, RUNS - 1), move=moves())
    def submit(self, r: int, move: Move) -> None:
        """Any command family, allowed by the state or not."""
        self._submit(r, move)

    @rule(r=st.integers(0, RUNS - 1), move=moves(),
          wrong=st.sampled_from(["suffix", "other_run", "empty_effect_family"]))
    def submit_under_a_wrong_id(self, r: int, move: Move, wrong: str) -> None:
        """INV-8: a command id that is not its family's derivation is a conflict (or the
        Run has ended); deduplication cannot be sidestepped and nothing is written."""
        built = build(run_name(r), self._snapshot(r), move)
        if built is None or isinstance(built[1], C.CancelRun):
            return  # CancelRun ids are free
        cid, command, base = built
        bad = {"suffix": cid + "-x", "other_run": f"{cid[:-8]}deadbeef",
               "empty_effect_family": "c" * 64}[wrong]
        if bad in self.log.index:
            return  # a known id replays (first wins): not this rule's subject
        before = len(self.log.commits)
        with pytest.raises((CommandConflictError, RunTerminalError)):
            self._commit(r, bad, command, base)
        assert len(self.log.commits) == before

    @invariant()
    def inv_ids_equal_reference(self) -> None:
        for r in range(RUNS):
            events = self.log.streams[run_stream(run_name(r))]
            facts = self.log.facts(run_name(r))
            report = ids_report(r, [(e.commit_id, f) for e, f in zip(events, facts)])
            assert report is None, report


IdentityMachine.TestCase.settings = settings(
    max_examples=max(20, settings.default.max_examples * 2), stateful_step_count=50,
    deadline=None)
test_identity = IdentityMachine.TestCase


# --------------------------------------------------------------------------- a broken core


class OneBasedScopeLog(ScopeLog):
    """A store that counts positions from 1 (RunCreated at 1): every position it hands
    out is one too high, consistently, so its own CAS passes, but Prepare ids (derived
    from the loaded position) are not the protocol's."""

    def create_run(self, epoch, projection, new_run, inputs, commit_id, extra_events):  # type: ignore[no-untyped-def]
        result = super().create_run(epoch, projection, new_run, inputs, commit_id,
                                    extra_events)
        shifted = Snapshot(result.snapshot.state, result.snapshot.position + 1)
        projection.apply(new_run.run_id, shifted)
        return CommitResult(result.status, shifted, result.facts)


class OneBasedIdentityMachine(IdentityMachine):
    log_class = OneBasedScopeLog


BROKEN = settings(max_examples=100, stateful_step_count=20, deadline=None, database=None,
                  phases=[Phase.generate], print_blob=False,
                  suppress_health_check=list(HealthCheck))


def test_identity_machine_catches_one_based_positions() -> None:
    with pytest.raises(AssertionError,
                       match=r"ModelStepPrepared committed under|not derived from position"):
        run_state_machine_as_test(OneBasedIdentityMachine, settings=BROKEN)


def test_the_oracle_derives_expected_ids_independently() -> None:
    """The oracle (``_oracle``) and the reference machine derive every id they expect with
    the spec's own implementation (``runx_spec._ids``), never with the code under test, and
    that implementation agrees with ``runx_actors.protocol.ids`` (golden vector G1 of
    ``tests/protocol`` and multi-part batches: a batch id covers every input)."""
    import inspect

    import _oracle
    import runx_spec._ids as spec_ids
    from runx_spec import _invariants, _moves, _state, _store

    from runx_actors.protocol import ids as impl

    for module in (_oracle, _invariants, _moves, _state, _store):
        source = inspect.getsource(module)
        assert "runx_actors.protocol import ids" not in source, module.__name__
        assert "runx_actors.protocol.ids" not in source, module.__name__
    assert spec_ids.derive_prepare_command_id("run-1", 7).startswith("7e42f750")
    for parts in ((), ("in-a",), ("in-a", "in-b"), ("in-a", "in-b", "in-c")):
        assert spec_ids.derive_input_command_id("run-1", *parts) == \
            impl.derive_input_command_id("run-1", *parts)
    assert spec_ids.derive_input_command_id("run-1", "in-a", "in-b") != \
        spec_ids.derive_input_command_id("run-1", "in-a")
    assert spec_ids.derive_effect_id("r", "s", "", 1) == impl.derive_effect_id("r", "s", "", 1)
    assert spec_ids.derive_response_id("r", "s", "c", "approval") == \
        impl.derive_response_id("r", "s", "c", "approval")
