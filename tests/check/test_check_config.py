"""Every knob of ``runx-actors check`` (flags, ``--config`` TOML, ``--profile``), honest
verdicts (deadlock, incomplete), progress lines off a terminal and unclipped traces."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

from runx_actors import cli
from runx_actors.check import (
    DEFAULT_PROFILE,
    PROFILES,
    CheckConfig,
    ConfigFileError,
    LineProgress,
    ProgressSnapshot,
    Trace,
    TraceStep,
    check_model,
    render_text,
    resolve_config,
)
from runx_actors.check._progress import progress_sink
from runx_actors.check.models import load_model

reference = pytest.importorskip("runx_spec.reference")

FIELDS = [a.name for a in attrs.fields(CheckConfig)]


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli.main, ["check", "--no-progress", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_every_config_field_is_a_flag_and_reaches_the_model() -> None:
    params = {p.name for p in cli.check.params}
    assert set(FIELDS) <= params
    # the reference model's knobs are exactly CheckConfig's
    assert set(FIELDS) == {a.name for a in attrs.fields(reference.ReferenceConfig)}
    args = ["--runs", "2", "--calls", "3", "--crashes", "0", "--takeovers", "0",
            "--duplicates", "0", "--inputs", "2", "--max-prepares", "2", "--no-approvals",
            "--malformed", "--no-failures", "--no-cancel", "--stale-reads", "--no-adversarial"]
    name, config = resolve_config(None, None, _flags(args))
    assert name == DEFAULT_PROFILE
    assert config == CheckConfig(runs=2, calls=3, crashes=0, takeovers=0, duplicates=0,
                                 inputs=2, max_prepares=2, approvals=False, malformed=True,
                                 failures=False, cancel=False, stale_reads=True,
                                 adversarial=False)
    model: Any = load_model("core", config)
    assert (model.ctx.runs, model.ctx.calls, model.ctx.inputs, model.ctx.max_prepares,
            model.ctx.malformed, model.ctx.stale_reads, model.ctx.adversarial) == (
        2, 3, 2, 2, True, True, False)


def _flags(args: list[str]) -> dict[str, Any]:
    ctx = cli.check.make_context("check", list(args))
    return {k: v for k, v in ctx.params.items() if k in FIELDS}


def test_profiles_file_and_flags_override_in_that_order(tmp_path: Path) -> None:
    assert set(PROFILES) == {"quick", "default", "deep"}
    default = PROFILES["default"]
    assert default.inputs and default.approvals and default.cancel and default.failures
    assert default.adversarial and default.takeovers
    path = tmp_path / "check.toml"
    path.write_text('profile = "quick"\ncalls = 2\napprovals = true\n')
    name, config = resolve_config(None, path, {"calls": 1, "approvals": None})
    assert name == "quick"
    assert config == attrs.evolve(PROFILES["quick"], calls=1, approvals=True)
    name, config = resolve_config("deep", path, {})  # --profile beats the file's profile
    assert name == "deep" and config.calls == 2 and config.malformed


@pytest.mark.parametrize(("text", "key"), [
    ("calls = 2\nrunz = 1\n", "runz"),
    ("calls = true\n", "calls"),
    ("cancel = 1\n", "cancel"),
    ('profile = "huge"\n', "profile"),
    ("calls = -1\n", None),
    ("calls = 1\ncalls = 2\n", None),  # duplicate key: not TOML
    ("calls = \n", None),
])
def test_a_bad_config_file_is_refused_with_exit_64(tmp_path: Path, text: str,
                                                   key: str | None) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigFileError) as info:
        resolve_config(None, path, {})
    assert info.value.key == key  # type: ignore[attr-defined]
    code, _, err = _run("--config", str(path))
    assert code == cli.EX_USAGE and "bad.toml" in err


def test_a_huge_or_missing_config_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_text("# x\n" * 20_000)
    assert _run("--config", str(path))[0] == cli.EX_USAGE
    assert _run("--config", str(tmp_path / "missing.toml"))[0] == cli.EX_USAGE


def test_check_without_options_runs_the_default_profile() -> None:
    """The header names the profile and its configuration; a depth bound makes it short
    (and the search incomplete: exit 3, ``"complete": false``)."""
    code, out, _ = _run("--json", "--max-depth", "2")
    assert code == cli.EX_INCOMPLETE
    data = json.loads(out)
    assert data["profile"] == "default" and data["complete"] is False
    assert data["config"] == attrs.asdict(PROFILES["default"])


def test_time_limit_is_incomplete_not_ok() -> None:
    code, out, _ = _run("--profile", "deep", "--time-limit", "0.5", "--json")
    assert code == cli.EX_INCOMPLETE
    assert json.loads(out)["stats"]["stop_reason"] == "time_limit"


@pytest.mark.parametrize("name", ["reference", "core"])
def test_deadlock_check_passes_on_the_unmodified_models(name: str) -> None:
    """Ended Runs (cancel, failures), Runs waiting for an approval and Runs whose Outcome
    was lost are final, not deadlocks; forged commands (self-loops) are no progress."""
    config = reference.ReferenceConfig(runs=1, calls=2, crashes=0, takeovers=0, duplicates=0,
                                       approvals=True, cancel=True, failures=True,
                                       adversarial=True)
    result = check_model(load_model(name, config), check_deadlock=True, progress=False)
    assert result.ok and result.stats.complete, result.violation


@pytest.mark.parametrize("name", ["reference", "core"])
def test_a_stalled_run_is_a_deadlock_on_both_models(name: str) -> None:
    # without cancel: the user's cancel is always a way out of a stall (a liveness issue)
    code, out, _ = _run("--model", name, "--variant", "loop_skips_tool_calls",
                        "--check-deadlock", "--profile", "quick", "--no-cancel", "--json")
    assert code == cli.EX_VIOLATION
    data = json.loads(out)
    assert data["violation"]["invariant"] == "DEADLOCK"
    code, _, _ = _run("--model", name, "--variant", "loop_skips_tool_calls",
                      "--profile", "quick", "--no-cancel")
    assert code == cli.EX_OK  # without the flag the stall is not an invariant violation


def test_progress_lines_go_to_a_plain_stream_periodically() -> None:
    stream = io.StringIO()
    sink = LineProgress("checking x", stream=stream, interval=5.0)
    for elapsed in (1.0, 5.5, 6.0, 11.0):
        sink(ProgressSnapshot(distinct_states=int(elapsed * 100), transitions=1, depth=2,
                              pending=3, elapsed_s=elapsed, states_per_s=100.0))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("checking x: 6 s  550 states")


def test_progress_off_a_terminal_is_plain_lines() -> None:
    with progress_sink(None, "checking x") as sink:  # pytest's stderr is not a terminal
        assert isinstance(sink, LineProgress)
    with progress_sink(False, "checking x") as sink:
        assert sink is None


def test_text_traces_are_not_clipped_and_show_the_newest_log_entry() -> None:
    log = [f"commit {i} " + "x" * 150 for i in range(5)]
    trace = Trace({"log": log[:4]}, [TraceStep("owner1: Append", {"log": log})])
    text = render_text(trace, lambda s: dict(s))
    assert all(not line.endswith("…") for line in text.splitlines())
    lines = [line.strip() for line in text.splitlines()]
    assert lines[-2] == log[-1] and lines[-1] == "]"  # the newest entry, whole, last
