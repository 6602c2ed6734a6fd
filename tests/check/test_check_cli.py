"""``runx-actors check`` with a synthetic model injected into the model registry."""

from __future__ import annotations

import json
import pathlib
import sys
import types
from collections.abc import Iterator

import pytest
import synthetic_models
from click.testing import CliRunner

from runx_actors import cli
from runx_actors.check import CheckConfig, ModelNotFoundError, UnknownVariantError, models
from runx_actors.check.models import _registry

FAKE_MODULE = "_runx_fake_models_for_cli_tests"


@pytest.fixture
def fake_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``reference`` is the synthetic mutex (runs + 1 processes, variant ``racy``);
    ``core`` points at a module that does not exist."""
    module = types.ModuleType(FAKE_MODULE)
    module.build_model = synthetic_models.build_mutex  # type: ignore[attr-defined]
    module.VARIANTS = synthetic_models.VARIANTS  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, FAKE_MODULE, module)
    monkeypatch.setattr(
        _registry,
        "MODEL_MODULES",
        {"reference": FAKE_MODULE, "core": "_runx_no_such_module_anywhere.core"},
    )
    yield


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli.main, ["check", "--no-progress", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


# --- the registry ----------------------------------------------------------------------------


def test_registry_builds_and_validates_variants(fake_registry: None) -> None:
    model = models.load_model("reference", CheckConfig(runs=2), None)
    assert isinstance(model, synthetic_models.Mutex) and model.procs == 3
    assert models.load_model("reference", CheckConfig(), "racy").racy  # type: ignore[attr-defined]
    assert dict(models.model_variants("reference")) == synthetic_models.VARIANTS
    with pytest.raises(UnknownVariantError) as info:
        models.load_model("reference", CheckConfig(), "nope")
    assert info.value.available == synthetic_models.VARIANTS  # type: ignore[attr-defined]


def test_registry_reports_missing_and_unknown_models(fake_registry: None) -> None:
    with pytest.raises(ModelNotFoundError) as info:
        models.load_model("core", CheckConfig(), None)
    assert info.value.module == "_runx_no_such_module_anywhere.core"  # type: ignore[attr-defined]
    with pytest.raises(ModelNotFoundError):
        models.load_model("nonesuch", CheckConfig(), None)


def test_registry_does_not_hide_a_broken_import(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    (tmp_path / "_runx_broken_model.py").write_text("import _runx_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_registry, "MODEL_MODULES", {"reference": "_runx_broken_model"})
    with pytest.raises(ModuleNotFoundError) as info:
        models.load_model("reference", CheckConfig(), None)
    assert info.value.name == "_runx_missing_dependency"


def test_config_validates_counts() -> None:
    assert CheckConfig().runs >= 1
    with pytest.raises(ValueError):
        CheckConfig(runs=0)
    with pytest.raises(ValueError):
        CheckConfig(crashes=-1)


# --- exit 0 ----------------------------------------------------------------------------------


def test_ok_prints_a_statistics_table(fake_registry: None) -> None:
    code, out, _ = _run()
    assert code == 0
    assert "distinct states" in out and "OK" in out
    # runs=1 -> 2 processes: 2**2 + 2 * 2 states
    assert " 8 " in out


def test_ok_json(fake_registry: None) -> None:
    code, out, _ = _run("--json", "--runs", "2", "--strategy", "dfs")
    assert code == 0
    data = json.loads(out)
    assert data["ok"] is True
    assert data["stats"]["distinct_states"] == 2**3 + 3 * 2**2
    assert data["stats"]["complete"] is True
    assert data["config"]["runs"] == 2
    assert data["strategy"] == "dfs"
    assert data["violation"] is None


def test_incomplete_exits_3_and_says_so(fake_registry: None) -> None:
    """A search a bound cut short is not a pass: its own exit code (3, EX_INCOMPLETE)."""
    code, out, _ = _run("--json", "--max-states", "3")
    assert code == cli.EX_INCOMPLETE == 3
    data = json.loads(out)
    assert data["complete"] is False and data["ok"] is True
    assert data["stats"]["complete"] is False
    assert data["stats"]["stop_reason"] == "max_states"
    code, out, _ = _run("--max-states", "3")
    assert code == 3 and "INCOMPLETE" in out and "max_states" in out


# --- exit 1 ----------------------------------------------------------------------------------


def test_violation_prints_the_shortest_trace(fake_registry: None) -> None:
    code, out, _ = _run("--variant", "racy")
    assert code == 1
    assert "MUTEX" in out and "p0 and p1 are both critical" in out
    assert "Trace (6 steps)" in out
    assert "FAILED" in out


def test_violation_json_includes_the_trace(fake_registry: None) -> None:
    code, out, _ = _run("--variant", "racy", "--json")
    assert code == 1
    data = json.loads(out)
    assert data["ok"] is False
    assert data["variant"] == "racy"
    assert data["violation"]["invariant"] == "MUTEX"
    assert data["violation"]["trace"]["length"] == 6


@pytest.mark.parametrize("fmt", ["mermaid", "json"])
def test_violation_trace_formats(fake_registry: None, fmt: str) -> None:
    code, out, err = _run("--variant", "racy", "--trace-format", fmt)
    assert code == 1
    if fmt == "mermaid":
        assert out.startswith("sequenceDiagram")
        assert sum("->>" in line for line in out.splitlines()) == 6
    else:
        assert json.loads(out)["invariant"] == "MUTEX"
    # the trace owns stdout; the statistics go to stderr
    assert "distinct states" in err and "distinct states" not in out


# --- exit 64 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--bogus"],
        ["--model", "nonesuch"],
        ["--runs", "0"],
        ["--strategy", "sideways"],
        ["--max-states", "zero"],
        ["--trace-format", "svg"],
        ["--variant", "nope"],
        ["--model", "core"],
        # a fresh user's tries: a fork per worker, an index-sized count, NaN seconds
        ["--workers", "65"],
        ["--workers", "100000"],
        ["--runs", "99999999999999999999"],
        ["--calls", "1001"],
        ["--time-limit", "nan"],
    ],
)
def test_usage_errors_exit_64(fake_registry: None, args: list[str]) -> None:
    code, _, err = _run(*args)
    assert code == 64
    first, hint = err.splitlines()  # the CLI's two lines, not click's usage block
    assert first.startswith("runx-actors: check: ") and hint.startswith("hint: usage: ")
    assert "check --help` lists the options" in hint


def test_unknown_command_exits_64() -> None:
    assert CliRunner().invoke(cli.main, ["frobnicate"]).exit_code == 64


def test_help_exits_0() -> None:
    result = CliRunner().invoke(cli.main, ["check", "--help"])
    assert result.exit_code == 0
    assert "--trace-format" in result.stdout


# --- exit 70 ---------------------------------------------------------------------------------


def test_model_code_error_exits_70(
    fake_registry: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = sys.modules[FAKE_MODULE]
    monkeypatch.setattr(
        module, "build_model", lambda config, variant=None: synthetic_models.Exploding(at=2)
    )
    code, _, err = _run()
    assert code == 70
    assert "RuntimeError" in err and "boom at 2" in err
    assert err.startswith("runx-actors: check: ") and "\nhint: " in err
    code, out, _ = _run("--json")
    assert code == 70
    data = json.loads(out)  # the one error object of every command (RUN-CLI-2) …
    assert {k: data[k] for k in ("ok", "command", "error", "exit_code")} == {
        "ok": False, "command": "check", "error": "ModelCodeError", "exit_code": 70}
    assert data["message"] and data["hint"]
    # … with the check's own details
    assert data["exception"] == "RuntimeError" and data["where"] == "actions"
    assert data["trace"]["length"] == 2 and data["model"] == "reference"


@pytest.mark.parametrize("text", ["runs = 99999999999999999999\n", "calls = 1001\n"])
def test_config_file_counts_are_bounded(fake_registry: None, tmp_path: pathlib.Path,
                                        text: str) -> None:
    path = tmp_path / "check.toml"
    path.write_text(text)
    code, _, err = _run("--config", str(path))
    assert code == 64 and "from" in err and "1000" in err
    assert "Traceback" not in err


def test_the_api_bounds_match_the_flags() -> None:
    from runx_actors.check import check_model
    from runx_actors.check._checker import MAX_WORKERS
    from runx_actors.check._config import MAX_COUNT

    CheckConfig(runs=MAX_COUNT, calls=MAX_COUNT)  # the largest counts are accepted
    with pytest.raises(ValueError):
        CheckConfig(runs=MAX_COUNT + 1)
    model = synthetic_models.build_mutex(CheckConfig(runs=1))
    for workers in (0, MAX_WORKERS + 1, True):
        with pytest.raises(ValueError):
            check_model(model, workers=workers)
    for limit in (float("nan"), 0.0, -1.0):
        with pytest.raises(ValueError):
            check_model(model, time_limit=limit)
