"""Trace and result renderers."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console
from synthetic_models import Grid, Mutex

from runx_actors.check import (
    ProgressSnapshot,
    RichProgress,
    Trace,
    TraceStep,
    Violation,
    check_model,
    render_json,
    render_mermaid,
    render_text,
    render_trace,
    result_to_dict,
    split_label,
)

TRACE = Trace(
    {"n": 0},
    [
        ("owner1: StartToolCall(call 0)", {"n": 1}),
        ("executor: complete(call 0)", {"n": 2, "tag": frozenset({"b", "a"})}),
        ("tick", {"n": 2, "tag": frozenset({"a", "b"})}),
        ("owner2: Take; over <#1>", {"n": 3}),
    ],
)
VIOLATION = Violation(invariant="INV-6", message="two starts", trace=TRACE, description="d")


def _describe(state: dict[str, object]) -> dict[str, object]:
    return dict(state)


def test_trace_shape() -> None:
    assert len(TRACE) == 4
    assert TRACE.steps[0] == TraceStep("owner1: StartToolCall(call 0)", {"n": 1})
    assert TRACE.states[0] == {"n": 0} and len(TRACE.states) == 5
    assert TRACE.final == {"n": 3}
    assert Trace(7).final == 7 and len(Trace(7)) == 0


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("owner1: StartToolCall(call 0)", ("owner1", "StartToolCall(call 0)")),
        ("env: crash", ("env", "crash")),
        ("executor.local: deliver(ok)", ("executor.local", "deliver(ok)")),
        ("tick", ("env", "tick")),
        ("deliver(outcome: ok)", ("env", "deliver(outcome: ok)")),
        ("two words: x", ("env", "two words: x")),
        ("owner1:no-space", ("env", "owner1:no-space")),
    ],
)
def test_split_label(label: str, expected: tuple[str, str]) -> None:
    assert split_label(label) == expected


def test_text_contains_every_label_in_order() -> None:
    text = render_text(TRACE, _describe, violation=VIOLATION)
    positions = [text.index(label) for label in TRACE.labels]
    assert positions == sorted(positions)
    assert "INV-6" in text and "two starts" in text
    lines = text.splitlines()
    assert any(re.match(r"\s+4\. owner2: Take; over <#1>", line) for line in lines)
    assert "(no visible change)" in text  # the "tick" step


def test_text_without_describe_uses_repr() -> None:
    text = render_text(Trace((0, 0), [("walker: right", (1, 0))]))
    assert "repr = (1, 0)" in text


def test_json_round_trips() -> None:
    data = render_json(TRACE, _describe)
    assert json.loads(json.dumps(data)) == data
    assert data["length"] == 4
    assert [s["label"] for s in data["steps"]] == list(TRACE.labels)
    assert data["steps"][0]["actor"] == "owner1"
    assert data["steps"][2]["actor"] == "env"
    assert data["steps"][1]["state"]["tag"] == ["a", "b"]


def test_mermaid_has_one_arrow_per_step() -> None:
    text = render_mermaid(TRACE, violation=VIOLATION)
    lines = text.splitlines()
    assert lines[0] == "sequenceDiagram"
    arrows = [line for line in lines if "->>" in line]
    assert len(arrows) == len(TRACE)
    participants = [line.split(" as ")[1] for line in lines if "participant" in line]
    assert participants == ["owner1", "executor", "env", "owner2"]
    assert arrows[-1].endswith("Take#59; over #lt;#35;1#gt;")
    assert not re.search(r"[;<>#]", re.sub(r"#\w+;", "", arrows[-1].split(":", 1)[1]))
    assert lines[-1].lstrip().startswith("Note over")


def test_mermaid_of_an_empty_trace() -> None:
    lines = render_mermaid(Trace(0)).splitlines()
    assert lines[0] == "sequenceDiagram"
    assert not [line for line in lines if "->>" in line]


def test_render_trace_dispatches() -> None:
    assert render_trace(TRACE, "mermaid").startswith("sequenceDiagram")
    assert json.loads(render_trace(TRACE, "json", violation=VIOLATION))["invariant"] == "INV-6"
    assert "owner1: StartToolCall" in render_trace(TRACE, "text")
    with pytest.raises(ValueError):
        render_trace(TRACE, "svg")  # type: ignore[arg-type]


def test_result_to_dict_is_json() -> None:
    model = Mutex(2, racy=True)
    result = check_model(model, progress=False)
    data = result_to_dict(result, model.describe)
    assert json.loads(json.dumps(data)) == data
    assert data["ok"] is False
    assert data["stats"]["stop_reason"] == "violation"
    assert data["violation"]["trace"]["length"] == 6
    ok = result_to_dict(check_model(Grid(2), progress=False))
    assert ok["ok"] is True and ok["violation"] is None and ok["stats"]["complete"] is True


def test_rich_progress_renders_to_its_console() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with RichProgress("checking grid", console=console) as display:
        display(
            ProgressSnapshot(
                distinct_states=1234, transitions=5678, depth=3, pending=9, elapsed_s=0.5,
                states_per_s=2468.0,
            )
        )
    assert "1,234 states" in out.getvalue()
