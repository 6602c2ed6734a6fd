"""Rendering a schedule's result: text, JSON-able dict, Mermaid sequence diagram.

Like the model checker's renderers (``runx_actors.check._render``), labels are
``"actor: action"``; the Mermaid participants are the actors plus ``store`` and
``executor``.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from ._control import Step
from ._run import Result

__all__ = ["replay_command", "render_text", "render_json", "render_mermaid", "window"]

#: Steps shown before the first violation in text and Mermaid output.
CONTEXT = 40


def replay_command(result: Result) -> str:
    """The command that replays *result* exactly."""
    return f"runx-actors simulate --replay {shlex.quote(str(result.schedule))}"


def window(result: Result, context: int = CONTEXT) -> list[Step]:
    """The steps worth reading: every note and fault, and the *context* released steps
    before the first violation (the whole trace when it is short)."""
    trace = list(result.trace)
    if len(trace) <= 2 * context:
        return trace
    first = next((i for i, s in enumerate(trace) if s.label.startswith("VIOLATION")),
                 len(trace) - 1)
    lo = max(first - context, 0)
    return [s for i, s in enumerate(trace)
            if (i >= lo and i <= first) or s.fault or s.label.startswith("VIOLATION")]


def _line(step: Step) -> str:
    if step.fault == "note":
        return f"  {'':>5} t={step.time:7.1f}  -- {step.label}"
    fault = f"   [fault: {step.fault}]" if step.fault else ""
    return f"  {step.index:>5} t={step.time:7.1f}  {step.label}{fault}"


def render_text(result: Result, *, strategy: str = "", original: Result | None = None) -> str:
    cfg = result.schedule.config
    out = [f"{'ok' if result.ok else 'FAIL'} seed={cfg.seed} store={cfg.store}"
           f"{' strategy=' + strategy if strategy else ''} steps={result.steps} "
           f"faults={result.faults} {result.stats}"]
    if result.ok:
        return "\n".join(out)
    out.append("violations:")
    for v in result.violations:
        out.append(f"  [{v.invariant}] {v.run_id or 'world'} at step {v.step}, "
                   f"t={v.time:.1f}: {v.message}")
    if original is not None and original.schedule != result.schedule:
        out.append(f"shrunk from {len(original.schedule.choices)} to "
                   f"{len(result.schedule.choices)} decisions")
    out.append(f"schedule: {result.schedule}")
    out.append(f"replay:   {replay_command(result)}")
    steps = window(result)
    out.append(f"trace ({len(steps)} of {len(result.trace)} lines):")
    out.extend(_line(s) for s in steps)
    return "\n".join(out)


def render_json(result: Result, *, strategy: str = "") -> dict[str, Any]:
    cfg = result.schedule.config
    return {
        "ok": result.ok, "seed": cfg.seed, "store": cfg.store, "strategy": strategy,
        "steps": result.steps, "faults": result.faults, "stats": result.stats,
        "violations": [v.to_dict() for v in result.violations],
        "schedule": str(result.schedule), "replay": replay_command(result),
        "trace": [{"index": s.index, "time": s.time, "label": s.label,
                   "fault": s.fault} for s in result.trace],
    }


_SAFE = re.compile(r"[^A-Za-z0-9_]")


def _participant(name: str) -> str:
    return _SAFE.sub("_", name) or "env"


def render_mermaid(result: Result) -> str:
    """A Mermaid ``sequenceDiagram`` of the steps :func:`window` selects."""
    lines = ["sequenceDiagram"]
    for step in window(result):
        text = step.label.replace(";", ",").replace("#", "no. ")
        if step.fault == "note":
            lines.append(f"    Note over store: {text}")
            continue
        actor, _, action = text.partition(": ")
        target = ("store" if action.startswith(("store.", "frozen.")) else
                  "executor" if action.startswith("exec.") else _participant(actor))
        fault = f" [{step.fault}]" if step.fault else ""
        lines.append(f"    {_participant(actor)}->>{target}: {step.index} {action}{fault}")
    return "\n".join(lines)
