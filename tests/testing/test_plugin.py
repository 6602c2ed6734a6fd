"""The pytest plugin from a user's point of view (issue 13 item 7).

A project outside the repository (``user_project/``, copied to a temporary directory
and run by a fresh ``python -m pytest`` process) names its own factories on the command
line. The plugin catches the store that forgets fencing and the executor that starts a
known key twice, passes the correct ones, and changes nothing when its options are absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

USER_PROJECT = Path(__file__).with_name("user_project")

pytestmark = pytest.mark.slow


def _pytest(tmp_path: Path, *args: str, bare: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m pytest`` in the project with it on PYTHONPATH; *bare*: the ``pytest``
    command itself, with no PYTHONPATH (what a user types: nothing puts the project
    directory on ``sys.path``)."""
    project = tmp_path / "project"
    if not project.exists():
        shutil.copytree(USER_PROJECT, project)
    env = {**os.environ, "PYTHONPATH": str(project)}
    env.pop("PYTEST_ADDOPTS", None)
    command = [sys.executable, "-m", "pytest"]
    if bare:
        env.pop("PYTHONPATH")
        command = [str(Path(sys.executable).with_name("pytest"))]
    return subprocess.run([*command, "-q", "-p", "no:cacheprovider", *args], cwd=project,
                          env=env, capture_output=True, text=True, timeout=600, check=False)


def _failed(out: str) -> set[str]:
    return {line.split("::", 1)[1].split(" ", 1)[0] for line in out.splitlines()
            if line.startswith("FAILED ")}


def test_correct_store_and_executor_pass(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "--runx-store=userstore:good_store",
                   "--runx-executor=userexec:good_executor", "--runx-machine-examples=10")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "29 passed, 2 skipped" in done.stdout, done.stdout[-2000:]


def test_store_that_forgets_fencing_is_caught(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "--runx-store=userstore:unfenced_store",
                   "--runx-machine-examples=30")
    assert done.returncode == 1, done.stdout[-4000:]
    assert {"test_store_ownership_lost", "test_store_machine"} <= _failed(done.stdout), (
        done.stdout[-4000:])
    assert "assert 1 > 1" in done.stdout  # the epochs, both sides shown
    assert "a takeover raises your store's epoch" in done.stdout
    # the machine's failure is located at its rule, not in the helper that raised
    assert "executor_conformance.py:" not in done.stdout, done.stdout[-4000:]
    assert "runx_actors/testing/machines.py:" in done.stdout.replace("\\", "/")


def test_executor_that_starts_a_known_key_twice_is_caught(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "--runx-executor=userexec:twice_executor")
    assert done.returncode == 1, done.stdout[-4000:]
    assert _failed(done.stdout) == {"test_executor_dispatch_is_idempotent"}, done.stdout[-4000:]
    assert "expected: {'run': 1, 'args': {'x': 1}}" in done.stdout


def test_plugin_is_inert_without_its_options(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "--collect-only")
    assert done.returncode == 5, done.stdout  # nothing collected: no suite was added
    (tmp_path / "project" / "test_own.py").write_text("def test_own():\n    pass\n")
    done = _pytest(tmp_path)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout


@pytest.mark.parametrize("spec", ["userstore", "userstore:nope", "no_such_module:f"])
def test_bad_factory_name_is_a_usage_error(tmp_path: Path, spec: str) -> None:
    done = _pytest(tmp_path, f"--runx-store={spec}")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "--runx-store" in done.stderr


def test_readme_example_runs(tmp_path: Path) -> None:
    """README "Test your own store or executor": the factories and the command, as shown."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Test your own store or executor", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    command = re.findall(r"```bash\n(.*?)```", section, re.S)[0].split()
    assert code.startswith("# factories.py") and command[0] == "pytest"
    project = tmp_path / "project"
    project.mkdir()
    (project / "factories.py").write_text(code)
    # the command as written: the `pytest` script, nothing on PYTHONPATH (a bare pytest
    # does not put the directory on sys.path; the plugin looks there for the factories)
    done = _pytest(tmp_path, *command[1:], "--runx-machine-examples=10", bare=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "31 passed" in done.stdout, done.stdout[-2000:]


@pytest.mark.parametrize("source,shown", [
    ('raise RuntimeError("x")\n', "RuntimeError: x"),
    ("def broken(:\n", "SyntaxError: "),
    ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
    ("def __getattr__(name):\n    raise KeyError(name)\n", "KeyError: 'x'"),
])
def test_a_factory_module_that_raises_is_a_usage_error(tmp_path: Path, source: str,
                                                        shown: str) -> None:
    """A factory module that raises while it is imported (or while NAME is resolved) is
    a usage error naming the module and the exception: exit 4, no INTERNALERROR."""
    project = tmp_path / "project"
    shutil.copytree(USER_PROJECT, project)
    (project / "boom.py").write_text(source)
    for option in ("--runx-store", "--runx-executor"):
        done = _pytest(tmp_path, f"{option}=boom:x")
        out = done.stdout + done.stderr
        assert done.returncode == 4, out
        assert f"{option}: " in done.stderr and "'boom'" in done.stderr, out
        assert shown in done.stderr, out
        assert "INTERNALERROR" not in out and "Traceback" not in out, out


def test_a_bare_pytest_finds_the_factories_beside_it(tmp_path: Path) -> None:
    """``pytest --runx-executor=userexec:good_executor`` in the project directory, no
    PYTHONPATH: the module is found in the invocation directory (it used to be
    "cannot import 'userexec': No module named 'userexec'", exit 4)."""
    done = _pytest(tmp_path, "--runx-executor=userexec:good_executor", bare=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "passed" in done.stdout and "failed" not in done.stdout, done.stdout[-2000:]


def test_the_search_path_is_only_for_the_factory_import(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """load_factory puts *search* in front of sys.path for the import and restores it."""
    from runx_actors.testing.pytest_plugin import load_factory

    (tmp_path / "fixsim_factory_mod.py").write_text("def make():\n    return 1\n")
    monkeypatch.delitem(sys.modules, "fixsim_factory_mod", raising=False)
    before = list(sys.path)
    with pytest.raises(pytest.UsageError, match="No module named 'fixsim_factory_mod'"):
        load_factory("fixsim_factory_mod:make", "--runx-store")
    assert load_factory("fixsim_factory_mod:make", "--runx-store", search=[tmp_path])() == 1
    assert sys.path == before
    monkeypatch.delitem(sys.modules, "fixsim_factory_mod")
