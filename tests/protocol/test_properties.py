"""Property tests of the commit path: random command sequences through evaluate_commit.

A hypothesis state machine drives a ``SimpleLog`` holding several Runs with a mix of
valid commands (built from the current state), replays of earlier command ids (with the
same or other content), commands naming stale or foreign effects, non-derived ids,
missing effects, random input batches, stale Prepare bases, cancels and responses.
After every step it checks:

(a) every state passes ``validate_machine_state`` (INV-3);
(b) ``fold_run`` of each Run's facts equals its projected state, and the position is
    ``len(facts) - 1`` (INV-39, INV-40);
(c) a known command id never appends and returns the first commit's facts (INV-9);
(d) a refused command appends nothing;
(e) each started effect is closed by at most one fact carrying its EffectID, and by
    exactly one once the Run has ended (INV-4); at most one ToolCallStarted per call
    (INV-6), under the derived EffectID (INV-6, INV-7);
(f) every body a fact names was stored, under its digest (INV-38); a cancel group
    closes exactly the unfinished effects (INV-23).

Settings come from the profile loaded by the root conftest.py.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    precondition,
    rule,
)

from runx_actors.protocol import commands as C
from runx_actors.protocol import facts as F
from runx_actors.protocol.commit import CommitResult, CommitStatus, expected_command_ids, fold_run
from runx_actors.protocol.errors import (
    CommandConflictError,
    RunNotFoundError,
    RunTerminalError,
    StaleRuntimeError,
)
from runx_actors.protocol.ids import derive_effect_id
from runx_actors.protocol.state import (
    MachineState,
    ModelStep,
    Open,
    ToolStep,
    validate_machine_state,
)
from runx_actors.protocol.values import (
    FailureClass,
    ModelRejectDisposition,
    ModelStepStatus,
    ResponseKind,
    ResponsePolicy,
    RunReason,
    RunStatus,
    RunStoppedEnd,
    ToolCallStatus,
    ToolFailureOutcome,
    ToolScheduling,
    Usage,
)
from runx_actors.testing import builders as B

REFUSALS = (StaleRuntimeError, CommandConflictError, RunTerminalError, RunNotFoundError)
TOOLS: dict[str, B.OfferedTool] = {
    "search": "search",
    "deploy": B.tool_spec("deploy", policy=ResponsePolicy.APPROVAL_REQUIRED),
    "ask_human": B.tool_spec("ask_human", policy=ResponsePolicy.EXTERNAL_RESPONSE),
}
RARE = ("accept_input", "decline", "model_failure", "reject_fail", "cancel")
INPUT_IDS = ("in-1", "in-2", "in-3", "in-4")
ACTIVE_RUNS = 2  # create_run tops the scope up to this many active Runs
# Strategies are built once: building them per draw dominates the running time.
OFFERS = st.sampled_from(
    [("search", "deploy", "ask_human"), ("search",), (), ("ask_human", "deploy")])
BODIES = st.sampled_from(["{}", '{"messages": [1]}'])
TOOL_CALLS = st.lists(
    st.tuples(st.sampled_from(["deploy", "search", "ask_human", "unlisted", "deploy"]),
              st.sampled_from(["{}", '{"a": 1}', "not json", ""]),
              st.sampled_from(["p-1", "p-1", ""])),
    min_size=1, max_size=3)
SCHEDULINGS = st.sampled_from(
    [ToolScheduling(), ToolScheduling("parallel", 2), ToolScheduling("sequential", 1)])
MODEL_FAILURES = st.sampled_from([FailureClass.PROVIDER_FAILURE, FailureClass.EFFECT_UNKNOWN])
INPUT_BATCHES = st.lists(st.sampled_from(INPUT_IDS), min_size=1, max_size=2, unique=True)
RANDOM_BATCHES = st.lists(st.sampled_from(INPUT_IDS), max_size=3)
BASES = st.sampled_from([None, 0, 10_000])
SPOILERS = st.sampled_from(
    ["none", "none", "none", "none", "foreign_effect", "missing_effect", "non_derived_id"])
CANCEL_REASONS = st.sampled_from(["user", "user", "user", "", "cancelled"])
VALID_CANCEL_REASONS = st.sampled_from(["cancelled", ""])
_MODEL_CLOSERS = (F.ModelStepRecovered, F.ModelStepRejected, F.ModelStepFailed,
                  F.ModelStepCompleted)


def _weight(label: str) -> int:
    if label.startswith(RARE):
        return 1
    return 24 if label == "model_result_tools" else 8


def _pick(data: st.DataObject, options: Sequence[Any]) -> Any:
    """One of *options* (cheaper than a fresh ``sampled_from`` per draw)."""
    return options[data.draw(st.integers(0, len(options) - 1))]


def _candidates(
    log: B.SimpleLog, run_id: str, data: st.DataObject
) -> dict[str, Callable[[], B.Built]]:
    """Valid commands for the Run's current state, as named thunks (drawn lazily)."""
    state = log.state(run_id)
    out: dict[str, Callable[[], B.Built]] = {
        "cancel": lambda: B.cancel(state, data.draw(VALID_CANCEL_REASONS),
                                   command_id=f"cancel:{run_id}:{len(log.commits)}"),
    }
    pending = {p.id for p in state.pending_inputs}
    fresh = [i for i in INPUT_IDS if i not in pending]
    if fresh:
        out["accept_input"] = lambda: B.accept_input(
            state, *([i for i in data.draw(INPUT_BATCHES) if i not in pending] or fresh[:1]))
    cur = state.current
    if isinstance(cur, Open):
        out["prepare"] = lambda: B.prepare(
            state, log.position(run_id),
            tools=[TOOLS[n] for n in data.draw(OFFERS)], body=data.draw(BODIES),
        )
    elif isinstance(cur, ModelStep) and cur.status is ModelStepStatus.PREPARED:
        out["start_model"] = lambda: B.start_model(state)
        if state.pending_inputs:
            out["withdraw"] = lambda: B.withdraw(state)
    elif isinstance(cur, ModelStep):
        def tool_result() -> B.Built:
            return B.model_result(state, tool_calls=data.draw(TOOL_CALLS), usage=Usage(1, 1),
                                  scheduling=data.draw(SCHEDULINGS))
        out["model_result_tools"] = tool_result
        out["model_result_text"] = lambda: B.model_result(state, text="hi", usage=Usage(2, 0))
        out["model_failure"] = lambda: B.model_failure(state, data.draw(MODEL_FAILURES))
        out["reject_retry"] = lambda: B.reject_model_result(
            state, disposition=ModelRejectDisposition.RETRY, usage=Usage(0, 1))
        out["reject_fail"] = lambda: B.reject_model_result(
            state, disposition=ModelRejectDisposition.FAIL_RUN)
        out["recover_model"] = lambda: B.recover_model(state)
    elif isinstance(cur, ToolStep):
        for c in cur.calls:
            cid = c.call_id
            if c.status is ToolCallStatus.PENDING:
                out[f"start_tool:{cid}"] = lambda cid=cid: B.start_tool(state, cid)
                out[f"decline:{cid}"] = lambda cid=cid: B.decline(state, cid)
            elif c.status is ToolCallStatus.EXECUTING:
                out[f"tool_result:{cid}"] = lambda cid=cid: B.tool_result(state, cid, '"ok"')
                out[f"tool_failure:{cid}"] = lambda cid=cid: B.tool_failure(state, cid)
                out[f"tool_unknown:{cid}"] = lambda cid=cid: B.tool_failure(
                    state, cid, failure_class="", outcome=ToolFailureOutcome.UNKNOWN)
                out[f"tool_recovered:{cid}"] = lambda cid=cid: B.tool_failure(
                    state, cid, failure_class=FailureClass.EFFECT_UNKNOWN,
                    outcome=ToolFailureOutcome.UNKNOWN, recovery=True)
            elif c.status is ToolCallStatus.WAITING:
                assert c.waiting is not None
                if c.waiting.kind is ResponseKind.APPROVAL:
                    out[f"approve:{cid}"] = lambda cid=cid: B.approve(state, cid)
                else:
                    out[f"answer:{cid}"] = lambda cid=cid: B.answer(state, cid, '{"x": 1}')
                out[f"reject:{cid}"] = lambda cid=cid: B.reject(state, cid, "no")
    return out


def _check_effects(run_id: str, facts: tuple[F.Fact, ...], ended: bool) -> None:
    started: set[str] = set()
    closed: Counter[str] = Counter()
    starts: Counter[tuple[str, str]] = Counter()
    rejects: Counter[str] = Counter()
    for f in facts:
        if isinstance(f, F.ModelStepStarted):
            assert f.effect == derive_effect_id(run_id, f.step_id, "", rejects[f.step_id])  # INV-7
            assert f.effect not in started
            started.add(f.effect)
        elif isinstance(f, F.ToolCallStarted):
            assert f.effect == derive_effect_id(run_id, f.step_id, f.call_id, 0)  # INV-6
            assert f.effect not in started
            started.add(f.effect)
            starts[(f.step_id, f.call_id)] += 1
        elif isinstance(f, (*_MODEL_CLOSERS, F.ToolCallCompleted)) or (
            isinstance(f, F.ToolCallFailed) and f.effect
        ):
            assert f.effect in started, f  # closes only an effect that was started
            closed[f.effect] += 1
        if isinstance(f, F.ModelStepRejected):
            rejects[f.step_id] += 1
    assert all(n == 1 for n in starts.values()), starts  # INV-6
    assert all(n == 1 for n in closed.values()), closed  # INV-4: at most one closer
    if ended:
        assert set(closed) == started  # every started effect was closed


def _check_cancel_group(before: MachineState, facts: tuple[F.Fact, ...]) -> None:
    """INV-23: every unfinished call and a running model step are closed first; the
    uncertain calls are exactly the EXECUTING ones; finished calls are left alone."""
    expected: list[tuple[str, str, ToolFailureOutcome]] = []
    uncertain: list[str] = []
    model = ""
    cur = before.current
    if isinstance(cur, ToolStep):
        for c in cur.calls:
            if c.status is ToolCallStatus.EXECUTING:
                expected.append((c.call_id, c.effect, ToolFailureOutcome.UNKNOWN))
                uncertain.append(c.call_id)
            elif c.status in (ToolCallStatus.PENDING, ToolCallStatus.WAITING):
                expected.append((c.call_id, "", ToolFailureOutcome.KNOWN))
    if isinstance(cur, ModelStep) and cur.status is ModelStepStatus.EXECUTING:
        model = cur.id
    *closers, ended = facts
    calls = [(f.call_id, f.effect, f.outcome) for f in closers if isinstance(f, F.ToolCallFailed)]
    assert calls == expected
    models = [f.step_id for f in closers if isinstance(f, F.ModelStepFailed)]
    assert models == ([model] if model else [])
    assert len(closers) == len(calls) + len(models)
    assert isinstance(ended, F.RunEnded)
    assert ended.end == RunStoppedEnd(RunReason.CANCELLED, tuple(uncertain), model)


class CommitMachine(RuleBasedStateMachine):
    """Random commands against SimpleLog + evaluate_commit (one scope, several Runs)."""

    committed = Bundle("committed")

    def __init__(self) -> None:
        super().__init__()
        self.log = B.SimpleLog()
        self.runs: list[str] = []
        self.first: dict[str, tuple[str, tuple[F.Fact, ...]]] = {}  # cid → (run, facts)
        self.counter = 0
        self.checked: dict[str, dict[str, int]] = {}
        for _ in range(2):
            self._create()

    # -- plumbing ---------------------------------------------------------------------

    def _create(self) -> None:
        run_id = f"run-{len(self.runs)}"
        self.log.create(run_id, ["in-1"])
        self.runs.append(run_id)

    def _fresh_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}:{self.counter}"

    def _active_runs(self) -> list[str]:
        return [r for r in self.runs if self.log.active(r) is not None]

    def _submit(self, run_id: str, cid: str, command: Any, *, base: int | None = None,
                must_accept: bool = False) -> CommitResult | None:
        """Commit and check (c) and (d); return the result, or None if refused."""
        before = (tuple(self.log.commits), {r: self.log.facts(r) for r in self.runs})
        before_state = self.log.state(run_id) if run_id in self.runs else None
        known = cid in self.log.commit_ids
        try:
            result = self.log.commit(cid, command, run_id=run_id, base=base)
        except REFUSALS:
            assert not known, "a known command id must replay, never be refused"
            assert not must_accept
            assert (tuple(self.log.commits), {r: self.log.facts(r) for r in self.runs}) == before
            return None
        if known:  # (c) replay: first wins, nothing appended, original facts returned
            assert result.status is CommitStatus.ALREADY_APPLIED
            first_run, first_facts = self.first[cid]
            assert result.facts == (first_facts if first_run == run_id else ())
            assert (tuple(self.log.commits), {r: self.log.facts(r) for r in self.runs}) == before
        else:
            assert result.status is CommitStatus.ACCEPTED
            assert len(self.log.commits) == len(before[0]) + 1
            assert self.log.facts(run_id) == before[1][run_id] + result.facts  # INV-10
            assert result.facts
            assert not any(isinstance(f, F.RunEnded) for f in result.facts[:-1])
            assert result.snapshot == self.log.snapshot(run_id)
            self.first[cid] = (run_id, result.facts)
            if isinstance(command, C.CancelRun):
                assert before_state is not None
                _check_cancel_group(before_state, result.facts)
        return result

    # -- rules ------------------------------------------------------------------------

    @precondition(lambda self: len(self._active_runs()) < ACTIVE_RUNS)
    @rule()
    def create_run(self) -> None:
        self._create()

    @rule(target=committed, data=st.data(), steps=st.integers(1, 6))
    def command_burst(self, data: st.DataObject, steps: int) -> Any:
        """A short burst of commands on one Run, each built valid from the current
        state and then, now and then, spoiled: a foreign or stale effect, no effect,
        or a non-derived id. Inputs, declines, cancels and Run-ending results are drawn
        rarely (see ``_weight``), so Runs get deep into ToolSteps."""
        active = self._active_runs()
        if not active:
            return multiple()
        run_id = _pick(data, active)
        base = data.draw(BASES, label="base")
        entries = []
        for _ in range(steps):
            if self.log.active(run_id) is None:
                break
            options = _candidates(self.log, run_id, data)
            labels = [x for x in sorted(options) for _ in range(_weight(x))]
            cid, command = options[_pick(data, labels)]()
            spoil = data.draw(SPOILERS, label="spoil")
            if spoil == "foreign_effect" and isinstance(command, C.EFFECT_COMMANDS):
                self._foreign_effect(data, run_id, command)
            elif spoil == "missing_effect" and isinstance(command, C.EFFECT_COMMANDS):
                self._missing_effect(run_id, cid, command)
            elif spoil == "non_derived_id" and not isinstance(command, C.CancelRun):
                self._non_derived_id(run_id, command)
            else:
                # INV-11: only Prepare compares base; any other base is ignored.
                at = None if isinstance(command, C.PrepareModelRequest) else base
                self._submit(run_id, cid, command, base=at, must_accept=True)
                entries.append((run_id, cid, command))
        return multiple(*entries)

    @rule(entry=committed)
    def replay_same(self, entry: Any) -> None:
        run_id, cid, command = entry
        result = self._submit(run_id, cid, command)
        assert result is not None and result.status is CommitStatus.ALREADY_APPLIED

    @rule(entry=committed, other=committed, data=st.data())
    def replay_other_content(self, entry: Any, other: Any, data: st.DataObject) -> None:
        run_id, cid, _ = entry
        target_run = _pick(data, [run_id, other[0]])
        result = self._submit(target_run, cid, other[2])
        assert result is not None and result.status is CommitStatus.ALREADY_APPLIED

    # One rule for the other odd commands, so that command bursts stay frequent.
    @rule(data=st.data(), kind=st.sampled_from(
        ["random_input_batch", "cancel", "stale_prepare", "unknown_run"]))
    def odd_command(self, data: st.DataObject, kind: str) -> None:
        getattr(self, kind)(data)

    # -- spoilers and odd commands ----------------------------------------------------

    def _foreign_effect(self, data: st.DataObject, run_id: str, command: Any) -> None:
        """INV-5: a command naming an effect that is not its target's running one is
        stale (or, under an id already used, a replay) and appends nothing."""
        seen = [f.effect for r in self.runs for f in self.log.facts(r)
                if isinstance(f, F.ModelStepStarted | F.ToolCallStarted)]
        step_id, call_id = command.step_id, getattr(command, "call_id", "")
        other_run = self.runs[0] if run_id != self.runs[0] else self.runs[1]
        fresh = [  # effects never started: wrong step, wrong sequence, other Run
            derive_effect_id(run_id, "elsewhere", "", 0),
            derive_effect_id(run_id, step_id, call_id, 1 if call_id else 7),
            derive_effect_id(other_run, step_id, call_id, 0),
        ]
        foreign = _pick(data, fresh if not seen or data.draw(st.booleans()) else seen)
        if foreign == command.effect:
            return
        stale = attrs.evolve(command, effect=foreign)
        ids = expected_command_ids(run_id, self.log.position(run_id), stale)
        assert ids is not None
        result = self._submit(run_id, _pick(data, ids), stale)
        assert result is None or result.status is CommitStatus.ALREADY_APPLIED

    def _missing_effect(self, run_id: str, cid: str, command: Any) -> None:
        """§4.3 step 4: a start/settlement/recovery command without an effect."""
        before = len(self.log.commits)
        spoiled = attrs.evolve(command, effect="")
        try:
            self.log.commit(cid, spoiled, run_id=run_id)
        except CommandConflictError as exc:
            assert exc.command == spoiled
            assert len(self.log.commits) == before
        else:
            raise AssertionError("a command without an effect was accepted")

    def _non_derived_id(self, run_id: str, command: Any) -> None:
        """INV-8: a command id that is not its family's derivation is a conflict."""
        before = len(self.log.commits)
        try:
            self.log.commit(self._fresh_id("bogus"), command, run_id=run_id)
        except CommandConflictError as exc:
            assert exc.command == command
            assert len(self.log.commits) == before
        else:
            raise AssertionError("a non-derived id was accepted")

    def random_input_batch(self, data: st.DataObject) -> None:
        ids = data.draw(RANDOM_BATCHES, label="ids")
        run_id = _pick(data, self.runs)
        cid, command = B.accept_input(self.log.state(run_id), *ids)
        pending = {i.id for i in self.log.state(run_id).pending_inputs}
        admissible = (
            self.log.active(run_id) is not None and cid not in self.log.commit_ids
            and bool(ids) and len(set(ids)) == len(ids) and not pending & set(ids)
        )
        result = self._submit(run_id, cid, command)
        # INV-13: an admissible batch always lands, whole; nothing else does.
        accepted = result is not None and result.status is CommitStatus.ACCEPTED
        assert accepted == admissible
        if accepted:
            assert [i.id for i in self.log.state(run_id).pending_inputs][-len(ids):] == ids

    def cancel(self, data: st.DataObject) -> None:
        # Mostly a refused reason, so that cancels do not end every Run early.
        reason = data.draw(CANCEL_REASONS, label="reason")
        run_id = _pick(data, self.runs)
        active = self.log.active(run_id) is not None
        result = self._submit(run_id, *B.cancel(None, reason, command_id=self._fresh_id("cancel")))
        assert (result is not None) == (active and reason != "user")
        assert result is None or result.snapshot.state.status is RunStatus.STOPPED

    def stale_prepare(self, data: st.DataObject) -> None:
        back = data.draw(st.integers(1, 5), label="back")
        run_id = _pick(data, self.runs)
        state = self.log.state(run_id)
        position = self.log.position(run_id)
        if position - back < 0:
            return
        cid, command = B.prepare(state, position - back)
        result = self._submit(run_id, cid, command, base=position - back)
        assert result is None or result.status is CommitStatus.ALREADY_APPLIED  # hard CAS

    def unknown_run(self, data: st.DataObject) -> None:
        try:
            self.log.commit(*B.cancel(command_id=self._fresh_id("cancel")), run_id="run-zzz")
        except RunNotFoundError:
            pass
        else:
            raise AssertionError("a command for an unknown Run was accepted")

    # -- invariants -------------------------------------------------------------------

    # Facts only grow, so each invariant looks at a Run only when its log changed.

    def _changed(self, name: str) -> list[str]:
        seen = self.checked.setdefault(name, {})
        out = []
        for run_id in self.runs:
            n = len(self.log.facts(run_id))
            if seen.get(run_id) != n:
                seen[run_id] = n
                out.append(run_id)
        return out

    @invariant()
    def inv_3_states_are_valid(self) -> None:
        for run_id in self._changed("inv_3"):
            validate_machine_state(self.log.state(run_id))

    @invariant()
    def inv_39_40_fold_equals_projection(self) -> None:
        for run_id in self._changed("inv_39_40"):
            facts = self.log.facts(run_id)
            snap = self.log.snapshot(run_id)
            assert fold_run(facts) == snap.state
            assert snap.position == len(facts) - 1
            assert (self.log.active(run_id) is None) == (snap.state.status is not RunStatus.ACTIVE)

    @invariant()
    def inv_4_6_effects_start_and_close_once(self) -> None:
        for run_id in self._changed("inv_4_6"):
            ended = self.log.state(run_id).status is not RunStatus.ACTIVE
            _check_effects(run_id, self.log.facts(run_id), ended)


    @invariant()
    def inv_38_named_bodies_are_stored(self) -> None:
        for run_id in self._changed("inv_38"):
            for f in self.log.facts(run_id):
                digest = _named_body(f)
                if digest:
                    data = self.log.bodies[digest]
                    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest


def _named_body(fact: F.Fact) -> str:
    """The digest of the frozen body *fact* names, or ""."""
    match fact:
        case F.ModelStepPrepared(request_digest=d) | F.ModelStepCompleted(result_digest=d):
            return d
        case F.ToolCallCompleted(output_digest=d) | F.ToolCallAnswered(response_digest=d):
            return d
    return ""


TestCommitMachine = CommitMachine.TestCase
