"""Renderers of traces and results: plain text, JSON-able dicts, Mermaid sequence diagrams.

State summaries come from a ``describe`` callable (normally ``model.describe``); without
one a state is summarised as ``{"repr": repr(state)}``. Labels follow ``"actor: action"``;
``split_label`` takes the part before the first ``": "`` as the actor when it is a plain
name (letters, digits, ``_ . -``), else the actor is ``"env"``.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs

from ._result import CheckResult, CheckStats, Violation
from ._trace import Trace

__all__ = [
    "Describe",
    "TraceFormat",
    "DEFAULT_ACTOR",
    "split_label",
    "render_text",
    "render_json",
    "render_mermaid",
    "render_trace",
    "stats_to_dict",
    "violation_to_dict",
    "result_to_dict",
]

Describe = Callable[[Any], Mapping[str, Any]]
"""``state -> summary``: a JSON-able mapping (``Model.describe``)."""

TraceFormat = Literal["text", "json", "mermaid"]

DEFAULT_ACTOR = "env"
"""The participant of a label without an ``"actor: "`` prefix."""

_MISSING: Any = object()
_ACTOR = re.compile(r"([A-Za-z_][\w.\-]*):\s+(.*)", re.DOTALL)


def split_label(label: str) -> tuple[str, str]:
    """``"owner1: StartToolCall(call 0)"`` → ``("owner1", "StartToolCall(call 0)")``;
    ``"tick"`` → ``("env", "tick")``."""
    match = _ACTOR.fullmatch(label)
    if match is None:
        return DEFAULT_ACTOR, label
    return match.group(1), match.group(2)


def _default_describe(state: Any) -> Mapping[str, Any]:
    return {"repr": repr(state)}


def _jsonable(value: Any) -> Any:
    """*value* made of JSON types only: tuples/sets become lists, enums their value, other
    objects their ``repr``; so ``json.loads(json.dumps(x)) == x`` for the result."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else repr(value)
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_jsonable(v) for v in value), key=repr)
    return repr(value)


def _summary(describe: Describe, state: Any) -> dict[str, Any]:
    summary = _jsonable(dict(describe(state)))
    assert isinstance(summary, dict)
    return summary


def _fmt(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _clip(text: str, width: int | None) -> str:
    if width is None or len(text) <= width:
        return text
    return text[: width - 1] + "…"


#: A list whose one-line JSON is longer than this prints one item per line.
_LIST_INLINE = 100


def _field(indent: str, key: str, value: Any, width: int | None) -> list[str]:
    """``key = value`` lines. A long list (a log, the runs) prints one item per line, so
    its last item (the newest log entry) is always a line of its own, never clipped off."""
    text = _fmt(value)
    if isinstance(value, list) and value and len(text) > _LIST_INLINE:
        lines = [f"{indent}{key} = ["]
        lines.extend(_clip(f"{indent}    {_fmt(item)}", width) for item in value)
        lines.append(f"{indent}  ]")
        return lines
    return [_clip(f"{indent}{key} = {text}", width)]


def render_text(
    trace: Trace,
    describe: Describe | None = None,
    *,
    violation: Violation | None = None,
    width: int | None = None,
) -> str:
    """Numbered steps, one label each, with the fields of the state that changed.

    Step 0 is the initial state (all fields); each later step lists only the fields whose
    summary differs from the previous state's; the final state is repeated in full at the
    end. Nothing is clipped unless *width* (characters per line) is given; a long list
    field prints one item per line, so the newest entry of a log is always visible. With
    *violation*, a header names it.
    """
    describe = describe or _default_describe
    lines: list[str] = []
    if violation is not None:
        lines.append(f"Invariant {violation.invariant} violated: {violation.message}")
        if violation.description:
            lines.append(f"  ({violation.description})")
    lines.append(f"Trace ({len(trace)} step{'s' if len(trace) != 1 else ''}):")
    previous = _summary(describe, trace.initial)
    lines.append("  0. initial state")
    for k, v in previous.items():
        lines.extend(_field("       ", k, v, width))
    digits = len(str(len(trace)))
    for index, (label, state) in enumerate(trace.steps, start=1):
        current = _summary(describe, state)
        lines.append(_clip(f"  {index:>{digits}}. {label}", width))
        changed = [k for k, v in current.items() if previous.get(k, _MISSING) != v]
        removed = [k for k in previous if k not in current]
        for key in changed:
            lines.extend(_field("       ", key, current[key], width))
        lines.extend(f"       {key} removed" for key in removed)
        if not changed and not removed:
            lines.append("       (no visible change)")
        previous = current
    if trace.steps:
        lines.append("Final state:")
        for k, v in previous.items():
            lines.extend(_field("    ", k, v, width))
    return "\n".join(lines) + "\n"


def render_json(trace: Trace, describe: Describe | None = None) -> dict[str, Any]:
    """The trace as a JSON-able dict::

        {"length": n,
         "initial": {...summary...},
         "steps": [{"index": 1, "label": "...", "actor": "...", "action": "...",
                    "state": {...summary...}}, ...]}
    """
    describe = describe or _default_describe
    steps = []
    for index, (label, state) in enumerate(trace.steps, start=1):
        actor, action = split_label(label)
        steps.append(
            {
                "index": index,
                "label": label,
                "actor": actor,
                "action": action,
                "state": _summary(describe, state),
            }
        )
    return {"length": len(trace), "initial": _summary(describe, trace.initial), "steps": steps}


_MERMAID_ENTITIES = {"#": "#35;", ";": "#59;", "<": "#lt;", ">": "#gt;"}
_MERMAID_SPECIAL = re.compile("[#;<>]")


def _mermaid_text(text: str) -> str:
    """*text* on one line, with the characters Mermaid would interpret as entity codes."""
    text = " ".join(text.split())
    return _MERMAID_SPECIAL.sub(lambda m: _MERMAID_ENTITIES[m.group()], text)


def render_mermaid(trace: Trace, *, violation: Violation | None = None) -> str:
    """A Mermaid ``sequenceDiagram``: one participant per label prefix (in order of first
    appearance), one self-arrow per step (``autonumber`` numbers them like the text
    trace), and with *violation* a closing note over every participant."""
    actors: dict[str, str] = {}
    arrows: list[str] = []
    for label, _state in trace.steps:
        actor, action = split_label(label)
        pid = actors.setdefault(actor, f"p{len(actors)}")
        arrows.append(f"    {pid}->>{pid}: {_mermaid_text(action)}")
    if not actors:
        actors[DEFAULT_ACTOR] = "p0"
    lines = ["sequenceDiagram", "    autonumber"]
    lines.extend(f"    participant {pid} as {actor}" for actor, pid in actors.items())
    lines.extend(arrows)
    if violation is not None:
        ids = list(actors.values())
        span = ids[0] if len(ids) == 1 else f"{ids[0]},{ids[-1]}"
        note = _mermaid_text(f"{violation.invariant} violated: {violation.message}")
        lines.append(f"    Note over {span}: {note}")
    return "\n".join(lines) + "\n"


def render_trace(
    trace: Trace,
    fmt: TraceFormat,
    describe: Describe | None = None,
    *,
    violation: Violation | None = None,
) -> str:
    """*trace* rendered as ``"text"``, ``"json"`` (indented) or ``"mermaid"``.

    Raises ``ValueError`` for another *fmt*.
    """
    if fmt == "text":
        return render_text(trace, describe, violation=violation)
    if fmt == "json":
        payload = render_json(trace, describe)
        if violation is not None:
            payload = {**_violation_head(violation), "trace": payload}
        return json.dumps(payload, indent=2) + "\n"
    if fmt == "mermaid":
        return render_mermaid(trace, violation=violation)
    raise ValueError(f"unknown trace format {fmt!r}; expected text, json or mermaid")


def stats_to_dict(stats: CheckStats) -> dict[str, Any]:
    """The statistics as a JSON-able dict (``stop_reason`` as its string or ``None``)."""
    data = attrs.asdict(stats, recurse=False)
    data["stop_reason"] = None if stats.stop_reason is None else stats.stop_reason.value
    return data


def _violation_head(violation: Violation) -> dict[str, Any]:
    return {
        "invariant": violation.invariant,
        "description": violation.description,
        "message": violation.message,
    }


def violation_to_dict(violation: Violation, describe: Describe | None = None) -> dict[str, Any]:
    """``{"invariant", "description", "message", "trace": render_json(trace)}``."""
    return {**_violation_head(violation), "trace": render_json(violation.trace, describe)}


def result_to_dict(result: CheckResult, describe: Describe | None = None) -> dict[str, Any]:
    """``{"ok", "complete", "model", "strategy", "stats": {...}, "violation": {...} | None}``
    (``complete`` false: a bound stopped the search before it saw every state)."""
    return {
        "ok": result.ok,
        "complete": result.stats.complete,
        "model": result.model,
        "strategy": result.strategy.value,
        "stats": stats_to_dict(result.stats),
        "violation": (
            None if result.violation is None else violation_to_dict(result.violation, describe)
        ),
    }
