"""Fused commits in the checker's environment (issue 11, deliverable 2).

With ``fused`` (the default, as the runtime commits), a deliver that settles an Outcome
continues in the same move with what the new state plans up to and including the next
start (``runx_spec._moves._fused``), so a crash or a takeover lands only on either side of
the batch; ``--no-fused`` keeps one commit per move. Checked here on both models:

* the batches themselves (settle → Prepare → StartModel; SubmitModelResult → the starts of
  the PENDING calls, dispatched in order; settle → the next call's start), each command
  under its own derived id;
* fused and unfused explorations both complete without a violation, the core and the
  reference agree state for state, and the unfused counts are main's from before fused
  commits (``--no-fused`` keeps today's interleaving exactly);
* with ``crashes >= 1`` the search reaches a crash right before a fused move and one right
  after it (found with the checker itself, on an observing wrapper of the model);
* the broken store ``fused_split`` is caught by INV-24 — and only on the fused path;
* the knob reaches the models from ``CheckConfig``, the flags, the TOML file and the
  profiles.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

from runx_actors import cli
from runx_actors.check import (
    PROFILES,
    CheckConfig,
    Invariant,
    ModelBase,
    check_model,
    resolve_config,
)
from runx_actors.check.models import load_model
from runx_actors.protocol import ids

reference = pytest.importorskip("runx_spec.reference")
state = pytest.importorskip("runx_spec._state")

#: Every knob off (as ``test_variants.TINY``), fused commits left at their default.
TINY: dict[str, Any] = dict(runs=1, calls=1, crashes=0, takeovers=0, duplicates=0,
                            inputs=0, max_prepares=1, approvals=False, malformed=False,
                            failures=False, cancel=False, stale_reads=False,
                            adversarial=False)
MODELS = ("reference", "core")


def _model(name: str, variant: str | None = None, **knobs: Any) -> Any:
    return load_model(name, CheckConfig(**{**TINY, **knobs}), variant)


def _fused(label: str) -> bool:
    """A fused move: a deliver whose label goes on with the rest of its batch."""
    return label.split(": ", 1)[1].startswith("Deliver(") and "; " in label


def _walk(model: Any, *steps: str) -> list[Any]:
    """Follow, for each step, the one enabled move whose label starts with it (or is it);
    check every invariant on the way; return the states."""
    states = list(model.initial_states())
    for step in steps:
        found = [(lbl, nxt) for lbl, nxt in model.actions(states[-1]) if lbl.startswith(step)]
        if len(found) > 1:  # "X -> accepted" is also a prefix of "X -> accepted, ..."
            found = [(lbl, nxt) for lbl, nxt in found if lbl == step]
        assert len(found) == 1, (step, [lbl for lbl, _ in model.actions(states[-1])])
        states.append(found[0][1])
        assert model.first_violation(states[-1]) is None, found[0][0]
    return states


def _labels(model: Any, world: Any) -> list[str]:
    return [lbl for lbl, _ in model.actions(world)]


MODEL_START = ("owner1: Prepare(r0.m1", "owner1: StartModel(r0.m1#0)",
               "owner1: Dispatch(r0.m1#0) -> accepted", "executor: Finish(r0.m1#0, tools)")


# --------------------------------------------------------------------------- the batches


@pytest.mark.parametrize("name", MODELS)
def test_model_result_starts_every_pending_call_in_one_move(name: str) -> None:
    model = _model(name, calls=2)
    *_, before, after = _walk(model, *MODEL_START, "owner1: Deliver(r0.m1#0, tools)")
    label = next(lbl for lbl, nxt in model.actions(before) if nxt == after)
    assert label == ("owner1: Deliver(r0.m1#0, tools) -> accepted; "
                     "StartToolCall(r0.m1.c0) -> accepted; StartToolCall(r0.m1.c1) -> accepted")
    log = model.ctx.sem.image(after.store).log
    new = log[len(model.ctx.sem.image(before.store).log):]
    effects = [c.facts[0].effect for c in new[1:]]
    assert [c.cid for c in new[1:]] == [ids.derive_start_command_id(e) for e in effects]
    assert [f.kind for c in new for f in c.facts] == [
        "ModelStepCompleted", "ToolStepOpened", "ToolCallStarted", "ToolCallStarted"]
    # each command is its own commit under its own id; the section holds both, in order
    assert len({c.cid for c in new}) == 3
    assert after.owners[0].section == tuple(effects)
    # dispatched one per move, from the head; nothing else of owner1 in between
    assert {lbl.split(" -> ")[0] for lbl in _labels(model, after)
            if lbl.startswith("owner1")} == {"owner1: Dispatch(r0.m1.c0)"}
    *_, second = _walk(model, *MODEL_START, "owner1: Deliver(r0.m1#0, tools)",
                       "owner1: Dispatch(r0.m1.c0) -> accepted, delivered twice")
    assert second.owners[0].section == (effects[1],)
    *_, done = _walk(model, *MODEL_START, "owner1: Deliver(r0.m1#0, tools)",
                     "owner1: Dispatch(r0.m1.c0) -> accepted, delivered twice",
                     "owner1: Dispatch(r0.m1.c1) -> unknown (the executor got it)")
    assert done.owners[0].section == () and {r.effect for r in done.recs} >= set(effects)


@pytest.mark.parametrize("name", MODELS)
def test_settle_of_the_last_call_prepares_and_starts_the_model_in_one_move(name: str) -> None:
    model = _model(name, max_prepares=2)
    *_, before, after = _walk(model, *MODEL_START, "owner1: Deliver(r0.m1#0, tools)",
                              "owner1: Dispatch(r0.m1.c0) -> accepted,",
                              "executor: Finish(r0.m1.c0, ok)",
                              "owner1: Deliver(r0.m1.c0, ok)")
    label = next(lbl for lbl, nxt in model.actions(before) if nxt == after)
    assert label.startswith("owner1: Deliver(r0.m1.c0, ok) -> accepted; Prepare(")
    assert label.endswith(") -> accepted") and label.count("; ") == 2 and "StartModel(" in label
    log = model.ctx.sem.image(after.store).log
    settle, prepare, start = log[len(model.ctx.sem.image(before.store).log):]
    assert [f.kind for f in prepare.facts] == ["ModelStepPrepared"]
    assert [f.kind for f in start.facts] == ["ModelStepStarted"]
    assert start.cid == ids.derive_start_command_id(start.facts[0].effect)
    assert settle.origin.startswith("deliver:") and prepare.origin == start.origin == "loop"
    assert after.owners[0].section == (start.facts[0].effect,)


@pytest.mark.parametrize("name", MODELS)
def test_settle_starts_the_next_pending_call(name: str) -> None:
    """Call 1 approved while call 0 runs: delivering call 0 starts call 1 in the batch."""
    model = _model(name, calls=2, approvals=True)
    *_, after = _walk(model, *MODEL_START, "owner1: Deliver(r0.m1#0, tools)",
                      "owner1: Dispatch(r0.m1.c0) -> accepted,",
                      "user: ApproveToolCall(r0.m1.c1) -> accepted",
                      "executor: Finish(r0.m1.c0, ok)",
                      "owner1: Deliver(r0.m1.c0, ok) -> accepted; "
                      "StartToolCall(r0.m1.c1) -> accepted")
    assert next(lbl for lbl in _labels(model, after) if lbl.startswith("owner1")).startswith(
        "owner1: Dispatch(r0.m1.c1)")


@pytest.mark.parametrize("name", MODELS)
def test_what_is_not_fused(name: str) -> None:
    """RUN-LOP-11's other cases commit the settlement alone: a malformed result's retry
    (the model start is not a chain), and a settlement while another call of the Run is
    still EXECUTING (the drive has it in flight: the approved call starts on its own)."""
    model = _model(name, malformed=True)
    *_, retried = _walk(model, *MODEL_START[:3], "executor: Finish(r0.m1#0, malformed)",
                        "owner1: Deliver(r0.m1#0, malformed) -> accepted")
    assert "owner1: StartModel(r0.m1#1) -> accepted" in _labels(model, retried)
    model = _model(name, calls=3, approvals=True)
    *_, finished, settled = _walk(
        model, *MODEL_START, "owner1: Deliver(r0.m1#0, tools) -> accepted; "
        "StartToolCall(r0.m1.c0) -> accepted; StartToolCall(r0.m1.c2) -> accepted",
        "owner1: Dispatch(r0.m1.c0) -> accepted,", "owner1: Dispatch(r0.m1.c2) -> accepted,",
        "user: ApproveToolCall(r0.m1.c1) -> accepted", "executor: Finish(r0.m1.c0, ok)",
        "owner1: Deliver(r0.m1.c0, ok) -> accepted")
    assert finished.owners[0].section == settled.owners[0].section == ()
    assert "owner1: StartToolCall(r0.m1.c1) -> accepted" in _labels(model, settled)


@pytest.mark.parametrize("name", MODELS)
def test_unfused_keeps_one_commit_per_move(name: str) -> None:
    model = _model(name, calls=2, fused=False)
    *_, after = _walk(model, *MODEL_START, "owner1: Deliver(r0.m1#0, tools) -> accepted")
    assert after.owners[0].section == ()
    assert "owner1: StartToolCall(r0.m1.c0) -> accepted" in _labels(model, after)
    assert not any(_fused(lbl) for lbl in _labels(model, after))


# --------------------------------------------------------------------------- explorations


#: Small configurations and their unfused (states, transitions): main's counts before
#: fused commits existed, so ``--no-fused`` is today's interleaving, state for state.
UNFUSED_COUNTS = [
    (dict(calls=2, crashes=1), (584, 1019)),
    (dict(calls=2, takeovers=1), (618, 1771)),
    (dict(calls=2, approvals=True, cancel=True, failures=True, max_prepares=2), (3398, 7173)),
]


@pytest.mark.parametrize(("knobs", "unfused"), UNFUSED_COUNTS,
                         ids=["crash", "takeover", "approvals-cancel-failures"])
def test_fused_and_unfused_explorations_pass_on_both_models(
        knobs: dict[str, Any], unfused: tuple[int, int]) -> None:
    stats = {}
    for fused in (True, False):
        for name in MODELS:
            result = check_model(_model(name, fused=fused, **knobs), progress=False)
            assert result.ok and result.stats.complete, (name, fused, result.violation)
            stats[name, fused] = (result.stats.distinct_states, result.stats.transitions)
    for fused in (True, False):  # the core refines the reference's Run semantics
        assert stats["core", fused] == stats["reference", fused]
    assert stats["reference", False] == unfused
    # no state inside a batch: fewer states (a crash point less per batch)
    assert stats["reference", True][0] < unfused[0]


# --------------------------------------------------------------------------- crash points


@attrs.frozen
class _Seen:
    """A world and what the move into it was: ``fused:<owner>``, ``crash-before``,
    ``crash-after`` or ``""``."""

    world: Any
    tag: str = ""


def _on_world(check: Callable[[Any], str | None]) -> Callable[[_Seen], str | None]:
    return lambda seen: check(seen.world)


class _CrashAroundFused(ModelBase):
    """The model, observed: a crash-restart of an owner is tagged ``crash-before`` when
    that owner could have made a fused move instead, ``crash-after`` when the move just
    before it was that owner's fused move. Its one invariant fails on the *target* tag, so
    ``check_model`` returns a shortest trace to such a crash."""

    def __init__(self, inner: Any, target: str) -> None:
        self.inner, self.target = inner, target
        self.name = f"{inner.name}+{target}"

    def initial_states(self) -> Iterable[_Seen]:
        return [_Seen(w) for w in self.inner.initial_states()]

    def actions(self, seen: _Seen) -> Iterable[tuple[str, _Seen]]:
        moves = list(self.inner.actions(seen.world))
        fused_by = {lbl.split(":")[0] for lbl, _ in moves if _fused(lbl)}
        out = []
        for label, nxt in moves:
            tag = ""
            if label.startswith("env: CrashRestart("):
                owner = label[len("env: CrashRestart("):].split(",")[0]
                if seen.tag == f"fused:{owner}":
                    tag = "crash-after"
                elif owner in fused_by:
                    tag = "crash-before"
            elif _fused(label):
                tag = "fused:" + label.split(":")[0]
            out.append((label, _Seen(nxt, tag)))
        return out

    def invariants(self) -> Sequence[Invariant]:
        def check(seen: _Seen) -> str | None:
            return self.target if seen.tag == self.target else None
        return (Invariant("FOUND", "no crash at the observed point", check),
                *(Invariant(i.name, i.description, _on_world(i.check))
                  for i in self.inner.invariants()))

    def canonical(self, seen: _Seen) -> Hashable:
        return (self.inner.canonical(seen.world), seen.tag)


@pytest.mark.parametrize("name", MODELS)
def test_a_crash_lands_right_before_and_right_after_a_fused_move(name: str) -> None:
    inner = _model(name, crashes=1)
    before = check_model(_CrashAroundFused(inner, "crash-before"), progress=False).violation
    after = check_model(_CrashAroundFused(inner, "crash-after"), progress=False).violation
    assert before is not None and before.invariant == "FOUND", before
    assert after is not None and after.invariant == "FOUND", after
    # before: the Outcome is still unread, the settle not in the log; the restarted
    # owner reconciles, then delivers it (the same fused batch, under the new epoch)
    pre, crashed = (s.world for s in before.trace.states[-2:])
    assert before.trace.labels[-1] == "env: CrashRestart(owner1, epoch=2)"
    assert crashed.store.log == pre.store.log and crashed.owners[0].section == ()
    assert any(r.status == "settled" for r in crashed.recs)
    # after: the batch is durable (settle and starts), its section lost with the process;
    # the new incarnation finds the started effect missing at the executor and aborts it
    assert _fused(after.trace.labels[-2])
    assert after.trace.labels[-1] == "env: CrashRestart(owner1, epoch=2)"
    batch, crashed = (s.world for s in after.trace.states[-2:])
    assert batch.owners[0].section and crashed.owners[0].section == ()
    started = batch.owners[0].section[0]
    assert started in inner.ctx.sem.executing(crashed.store, 0)
    assert crashed.rec(started) is None
    assert f"owner1: Attach({state.name(started)}) -> missing" in _labels(inner, crashed)


@pytest.mark.parametrize("name", MODELS)
def test_unfused_has_no_fused_move_to_crash_around(name: str) -> None:
    """The observer's negative control: without fused commits there is none."""
    result = check_model(_CrashAroundFused(_model(name, crashes=1, fused=False),
                                           "crash-after"), progress=False)
    assert result.ok and result.stats.complete


# --------------------------------------------------------------------------- fused_split


@pytest.mark.parametrize("name", MODELS)
def test_fused_split_is_caught_by_inv_24_only_on_the_fused_path(name: str) -> None:
    model = _model(name, "fused_split")
    result = check_model(model, progress=False)
    assert result.violation is not None and result.violation.invariant == "INV-24"
    labels = result.violation.trace.labels
    assert "lost, reported appended" in labels[-2] and "Dispatch(" in labels[-1]
    assert check_model(model, max_depth=len(labels) - 1, progress=False).ok  # shortest
    # the defect lives on the fused path only: without fused commits nothing is wrong
    unfused = check_model(_model(name, "fused_split", fused=False), progress=False)
    assert unfused.ok and unfused.stats.complete


# --------------------------------------------------------------------------- the knob


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.main, ["check", "--no-progress", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout


def test_fused_is_on_by_default_everywhere() -> None:
    assert CheckConfig().fused and reference.ReferenceConfig().fused
    assert all(profile.fused for profile in PROFILES.values())
    from runx_actors.check.models.core import CoreConfig
    assert CoreConfig().fused
    for name in MODELS:
        assert load_model(name, CheckConfig()).ctx.fused  # type: ignore[attr-defined]


def test_fused_knob_from_flags_and_toml(tmp_path: Path) -> None:
    ctx = cli.check.make_context("check", ["--no-fused"])
    name, config = resolve_config(None, None, ctx.params)
    assert name == "default" and config == attrs.evolve(PROFILES["default"], fused=False)
    path = tmp_path / "check.toml"
    path.write_text('profile = "quick"\nfused = false\n')
    _, config = resolve_config(None, path, {})
    assert config == attrs.evolve(PROFILES["quick"], fused=False)
    _, config = resolve_config(None, path, {"fused": True})  # the flag beats the file
    assert config.fused
    for model in MODELS:
        assert not load_model(model, attrs.evolve(config, fused=False)).ctx.fused  # type: ignore[attr-defined]
    path.write_text("fused = 1\n")
    code, _ = _run("--config", str(path))
    assert code == cli.EX_USAGE
    # the CLI runs what it reports: fewer states fused than unfused, both complete
    runs = {}
    for flag in ("--fused", "--no-fused"):
        code, out = _run("--profile", "quick", "--model", "reference", flag, "--json")
        data = json.loads(out)
        assert code == 0 and data["config"]["fused"] is (flag == "--fused")
        runs[flag] = data["stats"]["distinct_states"]
    assert runs["--fused"] < runs["--no-fused"]
