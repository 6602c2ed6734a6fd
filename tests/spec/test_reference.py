"""The reference state machine (spec/runx_spec): exhaustive exploration, broken variants,
and one targeted walk per environment move."""

from __future__ import annotations

import ast
import collections
import json
import pathlib
import re

import pytest
from runx_spec.reference import (
    EXPECTED,
    INVARIANT_IDS,
    INVARIANT_NOTES,
    VARIANTS,
    ReferenceConfig,
    build_model,
)

from runx_actors.protocol import ids

SPEC_DIR = pathlib.Path(__file__).resolve().parents[2] / "spec" / "runx_spec"
LABEL = re.compile(r"^(owner1|owner2|executor|env|user): \w+\(")


def bfs(model, limit=300_000):
    """Breadth-first search: (invariant name, message, trace) of the first violation, with a
    shortest trace, or (None, number of distinct states, None)."""
    start = list(model.initial_states())
    parent = {model.canonical(s): None for s in start}
    queue = collections.deque(start)
    while queue:
        state = queue.popleft()
        for inv in model.invariants():
            if (msg := inv.check(state)) is not None:
                trace, key = [], model.canonical(state)
                while parent[key] is not None:
                    key, label = parent[key][0], parent[key][1]
                    trace.append(label)
                return inv.name, msg, trace[::-1]
        for label, nxt in model.actions(state):
            if (key := model.canonical(nxt)) not in parent:
                parent[key] = (model.canonical(state), label)
                queue.append(nxt)
        assert len(parent) < limit, "exploration larger than expected"
    return None, len(parent), None


def walk(model, *steps):
    """Follow, for each step, the one enabled action whose label contains it (or ends with
    it); check every invariant on the way; return the states."""
    states = list(model.initial_states())
    for step in steps:
        found = [(lbl, nxt) for lbl, nxt in model.actions(states[-1]) if step in lbl]
        if len(found) > 1:  # "X -> accepted" is also a prefix of "X -> accepted, ..."
            found = [(lbl, nxt) for lbl, nxt in found if lbl.endswith(step)]
        labels = [lbl for lbl, _ in found]
        assert len(found) == 1, f"{step!r} matches {labels}"
        states.append(found[0][1])
        for inv in model.invariants():
            assert inv.check(states[-1]) is None, (inv.name, labels[0])
    return states


def labels(model, state):
    return [lbl for lbl, _ in model.actions(state)]


# Small configurations: every feature on, one of each fault.
SMALL = ReferenceConfig(calls=1, inputs=1, approvals=False, malformed=True, cancel=True)
TOOLS2 = ReferenceConfig(calls=2, crashes=0, takeovers=0, duplicates=1, inputs=0,
                         approvals=True, malformed=False, cancel=True)

MODEL_START = ("owner1: Prepare(r0.m1", "owner1: StartModel(r0.m1#0)")
TOOL_STEP = (*MODEL_START, "Dispatch(r0.m1#0) -> accepted", "executor: Finish(r0.m1#0, tools)",
             "owner1: Deliver(r0.m1#0, tools)")  # fused: the direct call starts in the batch


# --------------------------------------------------------------------------- exploration


def test_default_config_has_no_violation():
    name, states, _ = bfs(build_model(ReferenceConfig()))
    assert name is None
    # 50_052 distinct states for runs=1 calls=2 crashes=1 takeovers=1 duplicates=1
    assert states > 10_000, states


@pytest.mark.parametrize("config", [
    ReferenceConfig(calls=2, inputs=1, approvals=True, cancel=True, crashes=0, takeovers=0,
                    duplicates=1),
    ReferenceConfig(calls=1, inputs=1, malformed=True, failures=True, cancel=True,
                    max_prepares=2, crashes=0, takeovers=0, duplicates=0),
    ReferenceConfig(calls=1, inputs=1, malformed=True, cancel=True, stale_reads=True,
                    crashes=0, takeovers=1, duplicates=0),
    ReferenceConfig(runs=2, calls=1, crashes=0, takeovers=0, duplicates=0),
    ReferenceConfig(runs=2, calls=0, crashes=0, takeovers=1, duplicates=0),
], ids=["approvals-inputs-cancel", "malformed-failures", "stale-reads-takeover", "two-runs",
        "two-runs-takeover"])
def test_feature_configs_have_no_violation(config):
    name, states, _ = bfs(build_model(config))
    assert name is None
    assert states > 300


@pytest.mark.parametrize("variant", sorted(v for v in VARIANTS if EXPECTED[v] != "DEADLOCK"))
def test_variant_is_caught_with_a_short_trace(variant):
    name, msg, trace = bfs(build_model(SMALL, variant))
    assert name == EXPECTED[variant], (name, msg, trace)
    assert 1 <= len(trace) <= 10, trace


def test_variants_are_documented():
    assert len(VARIANTS) >= 6
    assert set(EXPECTED) == set(VARIANTS)
    with pytest.raises(ValueError):
        build_model(SMALL, "no_such_variant")


# --------------------------------------------------------------------------- the Model protocol


def test_model_protocol_shape():
    model = build_model(SMALL)
    assert model.name == "reference"
    assert build_model(SMALL, "no_epoch_check").name == "reference[no_epoch_check]"
    states = walk(model, *TOOL_STEP)
    for state in states:
        hash(model.canonical(state))
        json.dumps(model.describe(state))
        for label in labels(model, state):
            assert LABEL.match(label), label


def test_invariant_ids_cover_the_brief():
    required = {"INV-2", "INV-3", "INV-4", "INV-5", "INV-6", "INV-9", "INV-10", "INV-12",
                "INV-14", "INV-18", "INV-19", "INV-20", "INV-23", "INV-24", "INV-26",
                "INV-27", "INV-28", "INV-29", "INV-30", "INV-31", "INV-40", "EXEC-1"}
    assert required <= set(INVARIANT_IDS)
    assert list(INVARIANT_NOTES) == INVARIANT_IDS
    model = build_model(SMALL)
    assert [inv.name for inv in model.invariants()] == INVARIANT_IDS
    assert all(inv.description for inv in model.invariants())


def test_reference_imports_only_stdlib_attrs_and_ids():
    """Nothing of runx_actors: even the ids are the spec's own derivation (``_ids``), so
    the reference is an independent oracle for the implementation's identities."""
    allowed = {"__future__", "attrs", "collections", "collections.abc", "functools", "typing",
               "hashlib", "itertools"}
    for path in SPEC_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mods = [node.module]
            else:
                continue
            for mod in mods:
                assert mod in allowed, (path.name, mod)


def test_ids_are_the_protocol_derivations():
    model = build_model(SMALL)
    state = walk(model, *TOOL_STEP)[-1]
    facts = state.store.streams[0]
    prepare = ids.derive_prepare_command_id("run-0", 1)
    step = ids.derive_model_step_id("run-0", prepare)
    effect = ids.derive_effect_id("run-0", step, "", 0)
    assert facts[2].kind == "ModelStepPrepared" and facts[2].step == step
    assert facts[3].effect == effect
    assert state.store.log[1].cid == prepare
    assert state.store.log[2].cid == ids.derive_start_command_id(effect)
    assert state.store.log[3].cid == ids.derive_settlement_command_id(effect)
    opened = facts[-2]  # the fused batch: the settlement, then the start of call 0
    assert opened.kind == "ToolStepOpened" and opened.step == ids.derive_tool_step_id(step)
    call = ids.derive_call_id(step, 0)
    assert opened.arg[1][0].id == call
    call_effect = ids.derive_effect_id("run-0", opened.step, call, 0)
    assert (facts[-1].kind, facts[-1].effect) == ("ToolCallStarted", call_effect)
    assert state.store.log[4].cid == ids.derive_start_command_id(call_effect)


# --------------------------------------------------------------------------- environment moves


def test_duplicated_outcome_after_settlement_writes_nothing():
    model = build_model(SMALL)
    *_, before, after = walk(model, *MODEL_START, "Dispatch(r0.m1#0) -> accepted",
                             "executor: Finish(r0.m1#0, tools)",
                             "env: Duplicate(r0.m1#0, tools)",
                             "owner1: Deliver(r0.m1#0, tools) -> accepted",
                             "owner1: Dispatch(r0.m1.c0) -> accepted",
                             "owner1: Deliver(r0.m1#0, tools) [duplicate] -> already_applied")
    assert after.store.log == before.store.log and after.inflight == ()


def test_lost_duplicate_and_reordered_outcomes():
    model = build_model(TOOLS2)
    states = walk(model, *TOOL_STEP, "Dispatch(r0.m1.c0) -> accepted",
                  "ApproveToolCall(r0.m1.c1)", "StartToolCall(r0.m1.c1)",
                  "Dispatch(r0.m1.c1) -> accepted",
                  "executor: Finish(r0.m1.c1, ok)", "executor: Finish(r0.m1.c0, ok)",
                  "env: Duplicate(r0.m1.c0, ok)", "env: Lose(r0.m1.c0, ok)",
                  "owner1: Deliver(r0.m1.c1, ok)", "owner1: Deliver(r0.m1.c0, ok)")
    run = states[-1].store.runs[0]
    assert run.current == "open" and [c.status for c in run.last_tool.calls] == ["completed"] * 2


def test_late_outcome_after_cancel_is_dropped():
    model = build_model(SMALL)
    *_, cancelled, late = walk(model, *TOOL_STEP, "Dispatch(r0.m1.c0) -> accepted",
                               "user: CancelRun(run-0)",
                               "executor: Finish(r0.m1.c0, ok)",
                               "owner1: Deliver(r0.m1.c0, ok) -> terminal")
    facts = cancelled.store.log[-1].facts
    assert [f.kind for f in facts] == ["ToolCallFailed", "RunEnded"]
    assert facts[0].arg == ("unknown", "effect_unknown")
    assert facts[1].arg[2] == (facts[0].call,)  # uncertain_calls
    assert late.store == cancelled.store and late.rec(facts[0].effect).status == "settled"


def test_takeover_keeps_a_live_key_and_fences_the_old_owner():
    model = build_model(SMALL)
    *_, finished, dropped, settled = walk(model, *MODEL_START, "Dispatch(r0.m1#0) -> accepted",
                                          "owner2: TakeOver(epoch=2)",  # attach: active, KEEP
                                          "owner2: ReconcileDone",
                                          "executor: Finish(r0.m1#0, text)",
                                          "owner1: Deliver(r0.m1#0, text) -> fenced",
                                          "owner2: Deliver(r0.m1#0, text) -> accepted")
    assert dropped.store == finished.store  # OwnershipLostError: nothing written
    assert dropped.owners[0].phase == "fenced"
    assert not [lbl for lbl in labels(model, dropped) if lbl.startswith("owner1")]
    assert settled.store.runs[0].status == "completed"
    assert all(c.epoch == c.store_epoch for c in settled.store.log)


def test_abort_versus_accept_race_either_wins_never_both():
    model = build_model(SMALL)
    race = (*MODEL_START, "owner2: TakeOver(epoch=2)", "owner2: Attach(r0.m1#0) -> missing")
    # the acceptance wins: abort sees the record, the target is kept EXECUTING
    *_, accepted_first = walk(model, *race, "owner1: Dispatch(r0.m1#0) -> accepted",
                              "owner2: Abort(r0.m1#0) -> running: keep")
    assert accepted_first.rec(accepted_first.store.runs[0].current.effect).status == "running"
    # the abort wins: tombstone, disposal, and the late dispatch is refused
    *_, disposed, refused = walk(model, *race, "owner2: Abort(r0.m1#0) -> aborted: dispose",
                                 "owner1: Dispatch(r0.m1#0) -> rejected")
    assert disposed.store.runs[0].current == "open"
    assert refused.store.log == disposed.store.log and refused.owners[0].phase == "fenced"
    rec = refused.recs[0]
    assert (rec.status, rec.accepts) == ("aborted", 0)


def test_crash_between_start_and_dispatch_is_recovered_by_the_restart():
    model = build_model(SMALL)
    *_, restarted, _, disposed = walk(model, *MODEL_START,
                                      "env: CrashRestart(owner1, epoch=2)",
                                      "owner1: Attach(r0.m1#0) -> missing",
                                      "owner1: Abort(r0.m1#0) -> aborted: dispose")
    assert (restarted.owners[0].phase, restarted.owners[0].section) == ("reconcile", ())
    last = disposed.store.log[-1]
    assert [f.kind for f in last.facts] == ["ModelStepRecovered"]
    assert last.cid == ids.derive_recovery_command_id(last.facts[0].effect)
    assert disposed.rec(last.facts[0].effect).status == "aborted"
    assert disposed.store.runs[0].current == "open"


def test_orphaned_key_is_deferred_and_a_replay_never_tool_is_not_rerun():
    model = build_model(SMALL)
    *_, deferred, adopted, settled = walk(
        model, *TOOL_STEP, "Dispatch(r0.m1.c0) -> accepted", "env: WorkerCrash(r0.m1.c0)",
        "owner2: TakeOver(epoch=2)",
        "owner2: ReconcileDone",  # orphaned: DEFER, the call stays EXECUTING
        "executor: Adopt(r0.m1.c0) -> unknown", "owner2: Deliver(r0.m1.c0, unknown)")
    assert deferred.store.runs[0].current.calls[0].status == "executing"
    rec = adopted.rec(deferred.store.runs[0].current.calls[0].effect)
    assert (rec.accepts, rec.restarts, rec.outcome) == (1, 0, "unknown")
    assert settled.store.log[-1].facts[0].arg == ("unknown", "effect_unknown")
    assert settled.store.runs[0].status == "active"  # INV-20


def test_dispatch_unknown_and_retryable():
    model = build_model(SMALL)
    *_, lost = walk(model, *MODEL_START, "Dispatch(r0.m1#0) -> unknown (lost)")
    assert lost.recs == () and lost.store.runs[0].current.status == "executing"
    assert not [lbl for lbl in labels(model, lost) if lbl.startswith("owner1")]
    *_, exhausted = walk(model, *MODEL_START, "Dispatch(r0.m1#0) -> retryable",
                         "Dispatch(r0.m1#0) -> retryable, no offers left")
    assert [f.kind for f in exhausted.store.log[-1].facts] == ["ModelStepRecovered"]


def test_user_retry_replays_and_inputs_withdraw_a_prepared_step():
    model = build_model(ReferenceConfig(calls=1, inputs=1, max_prepares=2, crashes=0,
                                        takeovers=0, duplicates=1))
    *_, accepted, retried, _, prepared = walk(
        model, "owner1: Prepare(r0.m1", "user: AcceptInput(run-0, in-1) -> accepted",
        "user: AcceptInput(run-0, in-1) [retry] -> already_applied",
        "owner1: Withdraw(r0.m1)", "owner1: Prepare(r0.m4")
    assert retried.store == accepted.store
    assert prepared.store.streams[0][-1].arg == ("in-1",)


def test_approval_and_rejection_share_one_command_id():
    model = build_model(TOOLS2)
    *_, approved, again = walk(model, *TOOL_STEP, "ApproveToolCall(r0.m1.c1) -> accepted",
                               "ApproveToolCall(r0.m1.c1) [retry] -> already_applied")
    assert again.store == approved.store
    *_, rejected = walk(model, *TOOL_STEP, "RejectToolCall(r0.m1.c1) -> accepted")
    assert rejected.store.log[-1].facts[0].arg == ("known", "permission_denied")
    assert rejected.store.log[-1].cid == approved.store.log[-1].cid


def test_stale_snapshot_starts_a_step_with_a_newer_input_pending():
    """Spec finding: C4 does not re-check pending inputs, so an AcceptInput landing between
    the loop's load and its start commit starts the PREPARED step anyway; INV-14 holds only
    for inputs the starter had loaded (the text-only result then goes back to Open)."""
    model = build_model(ReferenceConfig(calls=0, inputs=1, stale_reads=True, crashes=0,
                                        takeovers=0, duplicates=0))
    *_, started = walk(model, "owner1: Prepare(r0.m1", "user: AcceptInput(run-0, in-1)",
                       "owner1: StartModel(r0.m1#0) -> accepted")
    assert started.store.runs[0].pending == ("in-1",)
    assert started.store.runs[0].current.status == "executing"
