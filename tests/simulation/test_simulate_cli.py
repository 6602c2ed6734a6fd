"""``runx-actors simulate``: one test per exit code (0, 1, 64) and the output shapes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from model_tests._broken import UnfencedMemoryStore
from runx_actors import cli
from runx_actors.testing.simulation import _world


def _run(*args: str) -> object:
    return CliRunner().invoke(cli.main, ["simulate", *args])


def test_exit_0_when_every_invariant_held() -> None:
    result = _run("--store", "memory", "--seeds", "2", "--faults", "off")
    assert result.exit_code == 0, result.output
    assert "memory: 2 schedules (random, faults off), 0 failing" in result.output
    one = _run("--store", "memory", "--seed", "5", "--faults", "off")
    assert one.exit_code == 0 and "memory: 1 schedules" in one.output, one.output


def test_exit_0_json_summary_over_both_stores() -> None:
    result = _run("--seeds", "1", "--faults", "off", "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["ok"] is True
    assert [s["store"] for s in summary["stores"]] == ["memory", "sqlite"]
    assert all(s["schedules"] == 1 and s["failing"] == 0 for s in summary["stores"])


def test_exit_1_prints_seed_shrunk_schedule_and_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store without fencing: the fenced-commit oracle fires, the CLI exits 1 with the
    failing seed, the shrunk schedule and a replay command that reproduces it."""
    monkeypatch.setattr(_world, "MemoryStore", UnfencedMemoryStore)
    result = _run("--store", "memory", "--seed", "7", "--seeds", "1",
                  "--only", "takeover+hang", "--shrink-budget", "6")
    assert result.exit_code == 1, result.output
    out = result.output
    assert "[fenced-commit]" in out and "seed=7" in out
    replay = next(line for line in out.splitlines() if line.startswith("replay:"))
    schedule = replay.split("--replay", 1)[1].strip().strip("'")
    again = _run("--replay", schedule)
    assert again.exit_code == 1, again.output
    assert "[fenced-commit]" in again.output
    mermaid = _run("--replay", schedule, "--format", "mermaid")
    assert mermaid.exit_code == 1 and "sequenceDiagram" in mermaid.output
    as_json = _run("--replay", schedule, "--format", "json")
    doc = json.loads(as_json.output)
    assert doc["ok"] is False and doc["schedule"] == schedule
    assert any(v["invariant"] == "fenced-commit" for v in doc["violations"])


@pytest.mark.parametrize("args", [
    ["--strategy", "nope"],
    ["--seed", "-1"],
    ["--seed", "abc"],
    ["--store", "postgres"],
    ["--replay", "v1/memory/seed=x/runs=3/steps=400/faults=1/-"],
    ["--replay", "garbage"],
    ["--only", "Crash;rm"],
    ["--only", "nope"],
    ["--only", ""],
    ["--only", "crash+nope"],
    ["--replay", "v1/memory/seed=1/runs=3/steps=400/faults=1/only=nope/-"],
])
def test_exit_64_on_usage_error(args: list[str]) -> None:
    result = _run(*args)
    assert result.exit_code == 64, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args", [
    ["--seed", "1", "--only", "nope"],
    ["--seed", "1", "--only", ""],
    ["--replay", "v1/memory/seed=1/runs=3/steps=400/faults=1/only=nope/-"],
])
def test_an_unknown_fault_kind_is_refused_with_the_known_kinds(args: list[str]) -> None:
    """A typo in ``--only`` (or a replay string's ``only=``) used to inject no fault and
    report ``0 failing``; it is a usage error that lists the kinds."""
    result = _run(*args)
    assert result.exit_code == 64, result.output
    assert "known kinds: " + ", ".join(_world.FAULT_KINDS) in result.output
    assert "schedules" not in result.output and "faults=0" not in result.output


def test_many_runs_fault_free_is_not_a_false_finding() -> None:
    """The tester's command: 32 fault-free Runs used to end in a [liveness] finding
    after the fixed 1,200 steps while every Run was still progressing."""
    result = _run("--seed", "0", "--store", "memory", "--faults", "off", "--runs", "32")
    assert result.exit_code == 0, result.output
    assert "1 schedules (random, faults off), 0 failing" in result.output
