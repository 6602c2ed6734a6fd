"""Iterative depth-first search, optionally bounded by ``max_depth``.

The stack holds the current path (states, the labels that reached them, and an iterator
over each state's remaining successors), so a counterexample is simply the stack; it is
not necessarily a shortest one.

``seen`` maps each key to the smallest depth it was expanded at. Unbounded, that depth is
irrelevant (stored as 0: a seen state is never revisited). Bounded, a state reached again
on a strictly shorter path is expanded again, so every state within ``max_depth`` steps of
an initial state is explored exactly as BFS would (each is still counted once in
``distinct_states``; the transitions of a re-expanded state are counted again).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

from ._errors import ModelCodeError
from ._result import DEADLOCK, StopReason, Violation
from ._search import TICK_MASK, Outcome, SearchContext
from ._trace import Trace, TraceStep

__all__ = ["dfs"]


def dfs(ctx: SearchContext) -> Outcome:
    """Explore depth-first. Raises ``ModelCodeError`` when the model's code raises."""
    actions = ctx.model.actions
    keyfn = ctx.keyfn
    max_states = ctx.max_states
    bounded = ctx.max_depth is not None
    max_depth = ctx.max_depth if ctx.max_depth is not None else -1
    check_deadlock = ctx.check_deadlock
    seen: dict[Hashable, int] = {}
    path: list[Any] = []
    labels: list[str] = []  # labels[i] reached path[i + 1]
    stack: list[Iterator[tuple[str, Any]]] = []
    count = transitions = deepest = 0
    truncated = False

    def outcome(stop: StopReason | None, violation: Violation | None = None) -> Outcome:
        return Outcome(
            distinct_states=count,
            transitions=transitions,
            max_depth=deepest,
            stop_reason=stop,
            violation=violation,
        )

    def trace_to(label: str | None, last: Any) -> Trace:
        steps = [TraceStep(lb, st) for lb, st in zip(labels, path[1:])]
        if not path:
            return Trace(last)
        if label is not None:
            steps.append(TraceStep(label, last))
        return Trace(path[0], steps)

    def stuck(state: Any, key: Hashable, successors: list[tuple[str, Any]]) -> bool:
        """No action leads to another state and the model does not call it final."""
        for _, nxt in successors:
            if (nxt if keyfn is None else keyfn(nxt)) != key:
                return False
        return ctx.is_deadlock(state, None)

    def deadlock(trace: Trace) -> Outcome:
        violation = Violation(
            invariant=DEADLOCK,
            message="no action leads to another state, and the model does not call this "
                    "state final",
            description="every reachable state that is not final can move on",
            trace=trace,
        )
        return outcome(StopReason.VIOLATION, violation)

    try:
        initial_states = list(ctx.model.initial_states())
    except Exception as exc:
        raise ctx.fault("initial_states", None, None, exc) from exc
    for root in initial_states:
        try:
            key = ctx.key(root)
        except Exception as exc:
            raise ctx.fault("canonical", root, Trace(root), exc) from exc
        if key in seen:
            continue
        if count >= max_states:
            return outcome(StopReason.MAX_STATES)
        seen[key] = 0
        count += 1
        found = ctx.first_violation(root, Trace(root))
        if found is not None:
            return outcome(StopReason.VIOLATION, ctx.violation(*found, Trace(root)))
        try:
            successors = list(actions(root))
        except Exception as exc:
            raise ctx.fault("actions", root, Trace(root), exc) from exc
        if check_deadlock and stuck(root, key, successors):
            return deadlock(Trace(root))
        if not successors:
            continue
        if max_depth == 0:
            truncated = True
            continue
        path.append(root)
        stack.append(iter(successors))

        while stack:
            try:
                item = next(stack[-1], None)
                if item is None:
                    stack.pop()
                    path.pop()
                    if labels:
                        labels.pop()
                    continue
                label, nxt = item
            except Exception as exc:
                raise ctx.fault("actions", path[-1], trace_to(None, None), exc) from exc
            transitions += 1
            if not transitions & TICK_MASK and ctx.tick(count, transitions, len(path), len(stack)):
                return outcome(StopReason.TIME_LIMIT)
            depth = len(path)  # of nxt
            try:
                key = nxt if keyfn is None else keyfn(nxt)
                known = seen.get(key)
            except Exception as exc:
                raise ctx.fault("canonical", nxt, trace_to(label, nxt), exc) from exc
            if known is not None and known <= depth:
                continue
            if known is None:
                if count >= max_states:
                    return outcome(StopReason.MAX_STATES)
                count += 1
                try:
                    found = ctx.first_violation(nxt, None)
                except ModelCodeError as exc:  # again, with the trace (built only now)
                    cause = exc.__cause__ if exc.__cause__ is not None else exc
                    where = str(getattr(exc, "where", "invariants"))
                    raise ctx.fault(where, nxt, trace_to(label, nxt), cause) from cause
                if found is not None:
                    if depth > deepest:
                        deepest = depth
                    trace = trace_to(label, nxt)
                    return outcome(StopReason.VIOLATION, ctx.violation(*found, trace))
            seen[key] = depth if bounded else 0
            if depth > deepest:
                deepest = depth
            try:
                successors = list(actions(nxt))
            except Exception as exc:
                raise ctx.fault("actions", nxt, trace_to(label, nxt), exc) from exc
            if check_deadlock and known is None and stuck(nxt, key, successors):
                return deadlock(trace_to(label, nxt))
            if not successors:
                continue
            if depth == max_depth:
                truncated = True
                continue
            path.append(nxt)
            labels.append(label)
            stack.append(iter(successors))
    return outcome(StopReason.MAX_DEPTH if truncated else None)
