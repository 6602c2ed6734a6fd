"""Trace validation: a recorded log replayed through the reference machine, fact by fact.

A store's log is a sequence of commits (commit id, writer epoch, the Run facts appended).
:func:`validate_scope` walks them in append order and, for every commit, asks the
reference what the command behind it could legally have produced on the Run as folded so
far: the family is read off the group's first fact, the preconditions are the guards of
``_store.decide`` and ``_store.commit`` (generalised from the model's ``run-<r>`` runs and
abstract bodies to real ids and the protocol's whole vocabulary: external responses,
declines, bindings), the expected group is rebuilt from the state and the command's free
choices, and the recorded group must equal it. Every identity — commit ids, step, call,
tool-step, response and effect ids — is re-derived with :mod:`runx_spec.ids_oracle`, never
with ``runx_actors.protocol.ids``. The group then folds with the reference ``evolve``.

Scope-wide rules: commit ids unique (INV-9), a Run's facts contiguous (INV-10), epochs
never decrease along the log and never exceed the scope's persisted epoch (INV-28).

Input is plain data (:class:`Observed`, :class:`ObservedCommit`), so this module knows
nothing of a store or of the production codec; ``runx_actors.check._tracecheck`` reads a
store and builds it. A violation names the Run, the stream position, the commit and the
rule (:class:`Violation`); after the first violation of a Run its later commits are not
judged (its state is no longer defined), the other Runs are.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

import attrs

from . import ids_oracle as H
from ._state import (
    ACTIVE,
    EXECUTING,
    OPEN,
    PENDING,
    PREPARED,
    WAITING,
    Call,
    Fact,
    ModelStep,
    RunState,
    ToolStep,
    evolve,
)

__all__ = ["Observed", "ObservedCommit", "Violation", "RunHead", "validate_scope",
           "POLICIES"]

#: binding policy (wire value) → the reference's call policy and its response kind
POLICIES: dict[str, tuple[str, str]] = {
    "direct_execution": ("direct", ""),
    "approval_required": ("approval", "approval"),
    "external_response": ("external", "external_response"),
}


@attrs.frozen
class Observed:
    """One recorded fact, bodies abstracted. ``detail`` by kind:

    RunCreated → run id; InputAccepted → input id; ModelStepPrepared → (input ids,
    offered tools as (ref, name, definition digest, policy)); ModelStepFailed → failure
    class; ToolStepOpened → (source, bindings as (call id, tool ref, definition digest,
    policy, response id or "")); ToolCallApproved / ToolCallAnswered → response id;
    ToolCallFailed → (outcome, failure class); RunEnded → ("completed",) |
    ("failed", reason, failure class) | ("stopped", reason, uncertain calls, uncertain
    model); any other kind → None.
    """

    kind: str
    step: str = ""
    call: str = ""
    effect: str = ""
    detail: Any = None

    def show(self) -> str:
        parts = [f"{k}={_short(v)}" for k, v in
                 (("step", self.step), ("call", self.call), ("effect", self.effect)) if v]
        if self.detail is not None:
            parts.append(f"detail={_short(self.detail)}")
        return f"{self.kind}({', '.join(parts)})"


@attrs.frozen
class ObservedCommit:
    """One commit of the scope's log, in append order (``seq``).

    ``run`` is the Run its facts belong to (None for a commit of foreign events only);
    ``first`` the stream position of its first Run fact."""

    seq: int
    commit_id: str
    epoch: int
    run: str | None
    first: int
    facts: tuple[Observed, ...]


@attrs.frozen
class RunHead:
    """What the store's Run index says of a Run: its head position and whether active."""

    head: int
    active: bool


@attrs.frozen
class Violation:
    """A recorded fact the reference does not allow. ``position`` is the stream index of
    the offending fact (-1 when the rule is about the scope); ``rule`` an ``INV-n`` or
    ``RUN-XXX-n`` id of spec/SPEC.md."""

    scope: str
    run: str
    position: int
    commit_id: str
    seq: int
    rule: str
    message: str

    def show(self) -> str:
        where = f"run {self.run!r} position {self.position}" if self.run else "scope"
        return (f"{self.rule}: {where} (commit {_short(self.commit_id)}, seq {self.seq}): "
                f"{self.message}")


def _short(value: Any) -> str:
    if isinstance(value, str):
        return value[:12] + "…" if len(value) == 64 else repr(value)
    if isinstance(value, tuple):
        return "(" + ", ".join(_short(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


class _Bad(Exception):
    def __init__(self, rule: str, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.rule, self.message, self.offset = rule, message, offset


@attrs.frozen
class _Run:
    """A Run as the reference folded it so far, plus what the abstract state leaves out:
    the tools offered to the current model step and every EffectID started."""

    state: RunState | None = None
    length: int = 0  # facts in the stream
    tools: tuple[tuple[str, str, str, str], ...] = ()
    started: frozenset[str] = frozenset()


# --------------------------------------------------------------------------- one group


def _model(state: RunState, f: Observed, status: str) -> ModelStep:
    cur = state.current
    if not (isinstance(cur, ModelStep) and cur.id == f.step):
        raise _Bad("RUN-MCH-3", f"{f.kind} names step {_short(f.step)}, which is not the "
                                f"current model step")
    if cur.status != status:
        raise _Bad("RUN-MCH-3", f"{f.kind} needs the model step {status}, it is {cur.status}")
    return cur


def _running_model(state: RunState, f: Observed) -> ModelStep:
    step = _model(state, f, EXECUTING)
    if f.effect != step.effect:
        raise _Bad("INV-5", f"{f.kind} names effect {_short(f.effect)}, the step runs "
                            f"{_short(step.effect)}")
    return step


def _call(state: RunState, f: Observed) -> Call:
    cur = state.current
    if not (isinstance(cur, ToolStep) and cur.id == f.step):
        raise _Bad("RUN-MCH-3", f"{f.kind} names step {_short(f.step)}, which is not the "
                                f"current tool step")
    for c in cur.calls:
        if c.id == f.call:
            return c
    raise _Bad("RUN-MCH-3", f"{f.kind} names call {_short(f.call)}, not a call of the step")


def _need(call: Call, f: Observed, status: str, rule: str) -> None:
    if call.status != status:
        raise _Bad(rule, f"{f.kind} needs the call {status}, it is {call.status}")


def _cancel_group(state: RunState) -> tuple[Observed, ...]:
    """What CancelRun produces (``_store._cancel`` with the real failure classes)."""
    out: list[Observed] = []
    uncertain: list[str] = []
    model = ""
    cur = state.current
    if isinstance(cur, ToolStep):
        for c in cur.calls:
            if c.status in (PENDING, WAITING):
                out.append(Observed("ToolCallFailed", cur.id, c.id, "", ("known", "cancelled")))
            elif c.status == EXECUTING:
                out.append(Observed("ToolCallFailed", cur.id, c.id, c.effect,
                                    ("unknown", "effect_unknown")))
                uncertain.append(c.id)
    elif isinstance(cur, ModelStep) and cur.status == EXECUTING:
        out.append(Observed("ModelStepFailed", cur.id, "", cur.effect, "effect_unknown"))
        model = cur.id
    out.append(Observed("RunEnded", detail=("stopped", "cancelled", tuple(uncertain), model)))
    return tuple(out)


def _bindings(run: str, step: ModelStep, tools: Sequence[tuple[str, str, str, str]],
              opened: Observed) -> Observed:
    """The ToolStepOpened the reference expects for the recorded bindings (INV-16/17)."""
    tstep = H.tool_step(step.id)
    detail = opened.detail if isinstance(opened.detail, tuple) else ((), ())
    bindings = detail[1] if len(detail) == 2 else ()
    if not bindings:
        raise _Bad("INV-16", "a ToolStep opened with no calls", 1)
    out = []
    for i, b in enumerate(bindings):
        _call, ref, digest, policy, _resp = b
        if policy not in POLICIES:
            raise _Bad("INV-16", f"binding {i} has policy {policy!r}", 1)
        spec = next((s for s in tools if s[0] == ref), None)
        if spec is not None and (digest, policy) != (spec[2], spec[3]):
            raise _Bad("INV-16", f"binding {i} does not carry the offered spec of {ref!r}: "
                                 f"expected ({_short(spec[2])}, {spec[3]}), recorded "
                                 f"({_short(digest)}, {policy})", 1)
        if spec is None and (digest, policy) != ("", "direct_execution"):
            raise _Bad("INV-16", f"binding {i}: a tool not offered must be direct, by name", 1)
        kind = POLICIES[policy][1]
        expected_call = H.call(step.id, i)
        out.append((expected_call, ref, digest, policy,
                    H.response(run, tstep, expected_call, kind) if kind else ""))
    return Observed("ToolStepOpened", tstep, detail=(step.id, tuple(out)))


def _expect(run: str, r: _Run, group: tuple[Observed, ...], base: int) -> tuple[
    str, tuple[str, ...] | None, tuple[Observed, ...]
]:
    """(command, the commit ids its family allows (None: free), the group it produces)."""
    state = r.state
    f = group[0]
    if state is None:
        if f.kind != "RunCreated":
            raise _Bad("INV-1", f"the stream starts with {f.kind}, not RunCreated")
        inputs = [g.detail for g in group[1:]]
        if len(set(inputs)) != len(inputs):
            raise _Bad("RUN-NEW-1", "the creation group repeats an input id")
        return ("CreateRun", None,
                (Observed("RunCreated", detail=run),
                 *(Observed("InputAccepted", detail=i) for i in inputs)))
    if state.status != ACTIVE:
        raise _Bad("INV-2", f"{f.kind} after the Run ended ({state.status})")
    k = f.kind
    if k == "RunCreated":
        raise _Bad("INV-1", "a second RunCreated")
    if group[-1].kind == "RunEnded" and group[-1].detail[:1] == ("stopped",):
        return "CancelRun", None, _cancel_group(state)
    if k == "InputAccepted":
        inputs = tuple(g.detail for g in group)
        for i, g in enumerate(inputs):
            if g in state.pending or g in inputs[:i]:
                raise _Bad("INV-12", f"input id {g!r} is pending twice", i)
        return ("AcceptInput", (H.input_cid(run, *inputs),),
                tuple(Observed("InputAccepted", detail=i) for i in inputs))
    if k == "ModelStepPrepared":
        if state.current != OPEN:
            raise _Bad("RUN-MCH-3", "ModelStepPrepared over a current step")
        taken = f.detail[0] if isinstance(f.detail, tuple) else ()
        if tuple(taken) != state.pending:
            raise _Bad("INV-12", f"the Prepare took inputs {_short(tuple(taken))}, pending "
                                 f"were {_short(state.pending)}")
        cid = H.prepare_cid(run, base)
        return ("PrepareModelRequest", (cid,),
                (Observed(k, H.model_step(run, cid), detail=(state.pending, f.detail[1])),))
    if k == "ModelStepWithdrawn":
        _model(state, f, PREPARED)
        if not state.pending:
            raise _Bad("RUN-LOP-8", "a withdraw with no pending input")
        return "WithdrawPreparedStep", (H.withdraw_cid(run, f.step),), (Observed(k, f.step),)
    if k == "ModelStepStarted":
        step = _model(state, f, PREPARED)
        effect = H.effect(run, step.id, "", step.rejects)
        if f.effect != effect:
            raise _Bad("INV-7", f"started under {_short(f.effect)}, the derivation with "
                                f"rejects={step.rejects} gives {_short(effect)}")
        return ("StartModelExecution", (H.start_cid(effect),),
                (Observed(k, step.id, "", effect),))
    if k == "ModelStepRecovered":
        step = _running_model(state, f)
        return ("RecoverModelExecution", (H.recovery_cid(step.effect),),
                (Observed(k, step.id, "", step.effect),))
    if k == "ModelStepCompleted":
        step = _running_model(state, f)
        done = Observed(k, step.id, "", step.effect)
        cids = (H.settlement_cid(step.effect),)
        if len(group) > 1 and group[1].kind == "ToolStepOpened":
            return "SubmitModelResult", cids, (done, _bindings(run, step, r.tools, group[1]))
        if state.pending:  # INV-15: a text answer with inputs waiting goes back to Open
            return "SubmitModelResult", cids, (done,)
        return "SubmitModelResult", cids, (done, Observed("RunEnded", detail=("completed",)))
    if k == "ModelStepRejected":
        step = _running_model(state, f)
        rejected = Observed(k, step.id, "", step.effect)
        cids = (H.settlement_cid(step.effect),)
        if len(group) == 1:
            return "RejectModelResult", cids, (rejected,)
        end = ("failed", "malformed_model_result", "malformed_model_result")
        return "RejectModelResult", cids, (rejected, Observed("RunEnded", detail=end))
    if k == "ModelStepFailed":
        step = _running_model(state, f)
        klass = f.detail
        if not klass:
            raise _Bad("RUN-MCH-2", "a model failure without a class")
        reason = "effect_unknown" if klass == "effect_unknown" else "provider_failure"
        return ("SubmitModelFailure", (H.settlement_cid(step.effect),),
                (Observed(k, step.id, "", step.effect, klass),
                 Observed("RunEnded", detail=("failed", reason, klass))))
    if k == "ToolCallStarted":
        call = _call(state, f)
        _need(call, f, PENDING, "INV-6")
        effect = H.effect(run, f.step, f.call, 0)
        if f.effect != effect:
            raise _Bad("INV-6", f"started under {_short(f.effect)}, the derivation (sequence "
                                f"0) gives {_short(effect)}")
        return "StartToolCall", (H.start_cid(effect),), (Observed(k, f.step, f.call, effect),)
    if k == "ToolCallCompleted":
        call = _call(state, f)
        _need(call, f, EXECUTING, "INV-4")
        if f.effect != call.effect:
            raise _Bad("INV-5", f"settles {_short(f.effect)}, the call runs "
                                f"{_short(call.effect)}")
        return ("SubmitToolResult", (H.settlement_cid(call.effect),),
                (Observed(k, f.step, f.call, call.effect),))
    if k in ("ToolCallApproved", "ToolCallAnswered"):
        call = _call(state, f)
        _need(call, f, WAITING, "RUN-MCH-3")
        policy = "approval" if k == "ToolCallApproved" else "external"
        if call.policy != policy:
            raise _Bad("RUN-MCH-3", f"{k} on a call whose policy is {call.policy}")
        command = "ApproveToolCall" if k == "ToolCallApproved" else "SubmitToolResponse"
        return (command, (H.response_cid(run, f.step, f.call, call.response),),
                (Observed(k, f.step, f.call, "", call.response),))
    if k == "ToolCallFailed":
        call = _call(state, f)
        outcome, klass = f.detail
        if call.status == EXECUTING:
            if f.effect != call.effect:
                raise _Bad("INV-5", f"fails {_short(f.effect)}, the call runs "
                                    f"{_short(call.effect)}")
            if (outcome == "unknown") != (klass == "effect_unknown") or not klass:
                raise _Bad("INV-19", f"outcome {outcome!r} with class {klass!r}")
            cids = (H.settlement_cid(call.effect),)
            if outcome == "unknown":
                cids += (H.recovery_cid(call.effect),)
            return "SubmitToolFailure", cids, (Observed(k, f.step, f.call, call.effect,
                                                        (outcome, klass)),)
        if call.status == PENDING:
            if not klass or klass == "effect_unknown":
                raise _Bad("INV-19", f"a decline with class {klass!r}")
            return ("DeclineToolCall", (H.decline_cid(run, f.step, f.call),),
                    (Observed(k, f.step, f.call, "", ("known", klass)),))
        if call.status == WAITING:
            klass = "permission_denied" if call.policy == "approval" else "response_rejected"
            return ("RejectToolCall", (H.response_cid(run, f.step, f.call, call.response),),
                    (Observed(k, f.step, f.call, "", ("known", klass)),))
        raise _Bad("INV-4", f"ToolCallFailed on a call already {call.status}")
    if k == "RunEnded":
        raise _Bad("RUN-MCH-3", f"RunEnded {f.detail!r} without the fact that ends the Run")
    if k == "ToolStepOpened":
        raise _Bad("RUN-MCH-3", "ToolStepOpened without the ModelStepCompleted it follows")
    raise _Bad("RUN-WIR-2", f"unknown fact kind {k!r}")


def _fold(r: _Run, group: tuple[Observed, ...]) -> _Run:
    state, tools, started = r.state, r.tools, set(r.started)
    for f in group:
        if f.kind == "ToolStepOpened":
            calls = tuple(
                Call(cid, POLICIES[policy][0], WAITING if POLICIES[policy][1] else PENDING,
                     response=resp)
                for cid, _ref, _digest, policy, resp in f.detail[1])
            fact = Fact("ToolStepOpened", f.step, arg=(f.detail[0], calls))
        elif f.kind == "ToolCallAnswered":  # WAITING(external) → COMPLETED
            fact = Fact("ToolCallCompleted", f.step, f.call)
        elif f.kind == "ModelStepPrepared":
            tools = f.detail[1]
            fact = Fact(f.kind, f.step, arg=tuple(f.detail[0]))
        elif f.kind == "RunEnded":
            fact = Fact(f.kind, arg=f.detail[:1] + f.detail[1:2])
        else:
            fact = Fact(f.kind, f.step, f.call, f.effect, f.detail)
        if f.kind in ("ModelStepStarted", "ToolCallStarted"):
            if f.effect in started:
                raise _Bad("INV-4", f"effect {_short(f.effect)} started a second time")
            started.add(f.effect)
        state = evolve(state, fact)
    return _Run(state, r.length + len(group), tools, frozenset(started))


# --------------------------------------------------------------------------- the scope


def validate_scope(scope: str, commits: Iterable[ObservedCommit], *, epoch: int | None,
                   heads: Mapping[str, RunHead] | None = None,
                   runs: Iterable[str] | None = None,
                   unread: Container[str] = frozenset()) -> list[Violation]:
    """Every violation of the reference's rules in one scope's log.

    ``commits`` in append order (any iterable: a reader may stream them); ``epoch`` the
    scope's persisted epoch (None: the store holds none, the reader reports that itself;
    epochs are then only checked never to decrease); ``heads`` the store's Run index
    (checked against the replay when given, INV-39: every replayed Run has an entry that
    says its head and status, every entry has a replayed stream); ``runs`` restricts the
    per-Run judgement to those Run ids (scope rules are checked whatever it says);
    ``unread`` the Runs whose stored log the reader could not read (it reports that
    itself): neither their commits nor their index entry are judged.
    A streaming reader may add to ``unread`` while ``commits`` is consumed: it is consulted
    for each commit as it arrives and for the index after the last one.
    """
    only = None if runs is None else set(runs)
    out: list[Violation] = []
    table: dict[str, _Run] = {}
    broken: set[str] = set()
    seen: dict[str, int] = {}
    high = 0
    for c in commits:
        if c.commit_id in seen or not c.commit_id:
            out.append(Violation(scope, c.run or "", c.first, c.commit_id, c.seq, "INV-9",
                                 f"commit id {'empty' if not c.commit_id else 'already used'}"
                                 f" (first at seq {seen.get(c.commit_id)})"))
        seen.setdefault(c.commit_id, c.seq)
        if c.epoch < high or (epoch is not None and c.epoch > epoch) or c.epoch < 1:
            out.append(Violation(scope, c.run or "", c.first, c.commit_id, c.seq, "INV-28",
                                 f"written under epoch {c.epoch} after a commit under {high} "
                                 f"(scope epoch {epoch}): a fenced writer appended"))
        high = max(high, c.epoch)
        if c.run is None or not c.facts or c.run in broken or c.run in unread:
            continue
        if only is not None and c.run not in only:
            continue
        r = table.get(c.run, _Run())
        if c.first != r.length:
            out.append(Violation(scope, c.run, c.first, c.commit_id, c.seq, "INV-10",
                                 f"the group starts at {c.first}, the stream has {r.length} "
                                 f"facts"))
            broken.add(c.run)
            continue
        try:
            command, cids, expected = _expect(c.run, r, c.facts, r.length - 1)
            if cids is not None and c.commit_id not in cids:
                raise _Bad("INV-8", f"{command} committed under {_short(c.commit_id)}, its "
                                    f"family derives {_short(cids)}")
            for i in range(max(len(expected), len(c.facts))):
                want = expected[i] if i < len(expected) else None
                got = c.facts[i] if i < len(c.facts) else None
                if want != got:
                    raise _Bad("RUN-WIR-3", f"{command}: expected "
                                            f"{want.show() if want else 'no more facts'}, "
                                            f"recorded {got.show() if got else 'nothing'}", i)
            table[c.run] = _fold(r, c.facts)
        except _Bad as bad:
            out.append(Violation(scope, c.run, c.first + bad.offset, c.commit_id, c.seq,
                                 bad.rule, bad.message))
            broken.add(c.run)
    if heads is None:
        return out
    for run, r in table.items():
        if run not in heads and run not in broken and run not in unread and r.state is not None:
            out.append(Violation(scope, run, r.length - 1, "", -1, "INV-39",
                                 f"the Run index has no entry for the Run; the log replays "
                                 f"to {r.length - 1} {r.state.status}"))
    for run, head in heads.items():
        r = table.get(run)
        if run in broken or run in unread or (only is not None and run not in only):
            continue
        if r is None or r.state is None:
            out.append(Violation(scope, run, head.head, "", -1, "INV-39",
                                 f"the Run index says head {head.head} active {head.active}; "
                                 f"the log holds no stream for the Run"))
            continue
        active = r.state.status == ACTIVE
        if head.head != r.length - 1 or head.active != active:
            out.append(Violation(scope, run, head.head, "", -1, "INV-39",
                                 f"the Run index says head {head.head} active {head.active}; "
                                 f"the log replays to {r.length - 1} {r.state.status}"))
    return out
