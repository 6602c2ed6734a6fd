"""Breadth-first search with parent pointers: the first violation has a shortest trace.

``seen`` maps every discovered key to its parent's key (``_ROOT`` for initial states); the
frontier holds ``(state, key)`` pairs of one level followed by the next. Nothing else is
kept per state: labels and the concrete states of a counterexample are rebuilt by replaying
the model along the chain of keys (``actions`` is deterministic, so the first successor
with the wanted key is the one the search followed).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

from ._errors import CheckError, TraceReplayError
from ._result import DEADLOCK, StopReason, Violation
from ._search import TICK_MASK, Outcome, SearchContext
from ._trace import Trace, TraceStep

__all__ = ["bfs"]

_ROOT: Any = object()


def bfs(ctx: SearchContext) -> Outcome:
    """Explore level by level. Raises ``ModelCodeError`` when the model's code raises."""
    actions = ctx.model.actions
    keyfn = ctx.keyfn
    invariants = ctx.invariants
    fast = ctx.fast
    max_states = ctx.max_states
    max_depth = -1 if ctx.max_depth is None else ctx.max_depth
    check_deadlock = ctx.check_deadlock
    seen: dict[Hashable, Hashable] = {}
    frontier: deque[tuple[Any, Hashable]] = deque()
    count = transitions = 0

    def outcome(depth: int, stop: StopReason | None, violation: Violation | None = None) -> Outcome:
        return Outcome(
            distinct_states=count,
            transitions=transitions,
            max_depth=depth,
            stop_reason=stop,
            violation=violation,
        )

    try:
        initial_states = list(ctx.model.initial_states())
    except Exception as exc:
        raise ctx.fault("initial_states", None, None, exc) from exc
    for state in initial_states:
        try:
            key = ctx.key(state)
            if key in seen:
                continue
        except Exception as exc:
            raise ctx.fault("canonical", state, Trace(state), exc) from exc
        if count >= max_states:
            return outcome(0, StopReason.MAX_STATES)
        seen[key] = _ROOT
        count += 1
        found = ctx.first_violation(state, Trace(state))
        if found is not None:
            return outcome(0, StopReason.VIOLATION, ctx.violation(*found, Trace(state)))
        frontier.append((state, key))

    depth = 0  # the level being expanded
    level_left = len(frontier)
    next_level = 0
    expanded = 0
    truncated = False
    while frontier:
        if not level_left:
            depth += 1
            level_left, next_level = next_level, 0
        level_left -= 1
        state, skey = frontier.popleft()
        expanded += 1
        if not expanded & TICK_MASK and ctx.tick(count, transitions, depth, len(frontier) + 1):
            return outcome(depth + (next_level > 0), StopReason.TIME_LIMIT)
        moved = False  # some action leads to another state (a self-loop is no progress)
        try:
            successors = actions(state)
            if depth == max_depth:  # not followed: only whether any exists matters
                if next(iter(successors), _ROOT) is not _ROOT:
                    truncated = True
                    continue
            else:
                for label, nxt in successors:
                    transitions += 1
                    try:
                        if nxt is state:  # a self-loop (a refused command): same key
                            continue
                        key = nxt if keyfn is None else keyfn(nxt)
                        if check_deadlock and not moved and key != skey:
                            moved = True
                        if key in seen:
                            continue
                    except Exception as exc:
                        trace = _trace_or_none(ctx, seen, skey, label, nxt)
                        raise ctx.fault("canonical", nxt, trace, exc) from exc
                    if count >= max_states:
                        return outcome(depth + (next_level > 0), StopReason.MAX_STATES)
                    seen[key] = skey
                    count += 1
                    if fast is not None:
                        try:
                            found = fast(nxt)
                        except Exception as exc:
                            trace = _trace_or_none(ctx, seen, skey, label, nxt)
                            raise ctx.fault("invariants (first_violation)", nxt, trace,
                                            exc) from exc
                        if found is not None:
                            trace = _rebuild(ctx, seen, skey, label, nxt)
                            violation = ctx.violation(*found, trace)
                            return outcome(depth + 1, StopReason.VIOLATION, violation)
                        frontier.append((nxt, key))
                        next_level += 1
                        continue
                    for invariant in invariants:
                        try:
                            message = invariant.check(nxt)
                        except Exception as exc:
                            trace = _trace_or_none(ctx, seen, skey, label, nxt)
                            where = f"invariant {invariant.name}"
                            raise ctx.fault(where, nxt, trace, exc) from exc
                        if message is not None:
                            trace = _rebuild(ctx, seen, skey, label, nxt)
                            violation = ctx.violation(invariant, message, trace)
                            return outcome(depth + 1, StopReason.VIOLATION, violation)
                    frontier.append((nxt, key))
                    next_level += 1
        except (CheckError, MemoryError):  # ours, or the search itself ran out of memory
            raise
        except Exception as exc:
            trace = _trace_or_none(ctx, seen, skey, None, None)
            raise ctx.fault("actions", state, trace, exc) from exc
        if check_deadlock and not moved and ctx.is_deadlock(state, None):
            trace = _rebuild(ctx, seen, skey, None, None)
            violation = Violation(
                invariant=DEADLOCK,
                message="no action leads to another state, and the model does not call "
                        "this state final",
                description="every reachable state that is not final can move on",
                trace=trace,
            )
            return outcome(depth + (next_level > 0), StopReason.VIOLATION, violation)
    if truncated:
        return outcome(depth, StopReason.MAX_DEPTH)
    return outcome(depth, None)


def _rebuild(
    ctx: SearchContext,
    seen: dict[Hashable, Hashable],
    parent_key: Hashable,
    label: str | None,
    last: Any,
) -> Trace:
    """The path to the state with key *parent_key*, then ``(label, last)`` if *label* is set.

    Raises ``TraceReplayError`` when replaying the model does not reproduce the chain.
    """
    chain = [parent_key]
    while (up := seen[chain[-1]]) is not _ROOT:
        chain.append(up)
    chain.reverse()
    initial = next((s for s in ctx.model.initial_states() if ctx.key(s) == chain[0]), _ROOT)
    if initial is _ROOT:
        raise TraceReplayError("no initial state has the recorded key", step=0)
    steps: list[TraceStep] = []
    current = initial
    for index, want in enumerate(chain[1:], start=1):
        for step_label, nxt in ctx.model.actions(current):
            if ctx.key(nxt) == want:
                steps.append(TraceStep(step_label, nxt))
                current = nxt
                break
        else:
            raise TraceReplayError(
                "replaying the model did not reproduce a recorded step "
                "(non-deterministic actions, or a hash collision in compact mode)",
                step=index,
            )
    if label is not None:
        steps.append(TraceStep(label, last))
    return Trace(initial, steps)


def _trace_or_none(
    ctx: SearchContext,
    seen: dict[Hashable, Hashable],
    parent_key: Hashable,
    label: str | None,
    last: Any,
) -> Trace | None:
    """Best-effort trace for an error report: the model is already misbehaving."""
    try:
        return _rebuild(ctx, seen, parent_key, label, last)
    except Exception:
        return None
