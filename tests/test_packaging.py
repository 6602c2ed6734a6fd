"""The built wheel ships the loop-orchestration example, and the demo runs from it.

``pyproject.toml`` maps the package ``runx_actors._examples`` to the repository's
``examples/`` and ships ``loop-orchestration/`` in it as package data; this module builds
a wheel (offline, from a copy of the source tree so the checkout gets no ``build/``) and
checks that

* the wheel holds every file of the example, byte for byte (its package digest, loop-host
  §2.2, covers them all), and every module of the source tree (the package list is
  explicit);
* the unpacked wheel, without the checkout on ``sys.path`` or its editable finder, runs
  ``runx-actors demo loop-orchestration`` from a directory outside the checkout;
* an editable install resolves the example to the checkout's ``examples/``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from runx_actors.host.package import load_package

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "loop-orchestration"
IN_WHEEL = "runx_actors/_examples/loop-orchestration/"
#: setuptools that builds this pyproject (SPDX ``license`` string) and wheels by itself
SETUPTOOLS_MIN = (77,)
#: what a copy of the source tree needs to build (and what it leaves out)
SOURCES = ("pyproject.toml", "README.md", "runx_actors", "spec", "examples")
IGNORED = shutil.ignore_patterns("__pycache__", ".runx", "*.egg-info", ".mypy_cache",
                                 ".pytest_cache", ".ruff_cache", ".hypothesis", "build",
                                 "dist")
DEMO_HEADERS = [
    "# success: bounded loop over governed turns",
    "# refusal: loop policy stops an undeclared tool",
    "# context-gate: agent turn pauses with bounded, advisory context",
]
DEMO_RUN_IDS = ["run_turn_5ef080227d47d7f1", "run_turn_357c317b91ab43e9",
                "run_turn_d79a1aecc8e1eb30"]


def _setuptools_or_skip() -> None:
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("setuptools is not installed: the wheel cannot be built offline "
                    "(pip install -e '.[dev]' brings it)")
    release = tuple(int(p) for p in version.split(".")[:1] if p.isdigit())
    if release < SETUPTOOLS_MIN:
        pytest.skip(f"setuptools {version} cannot build this pyproject (needs >= "
                    f"{SETUPTOOLS_MIN[0]}; pip install -e '.[dev]' brings it)")


def _example_files(root: Path) -> dict[str, str]:
    """POSIX path -> sha256 of every regular file the package digest covers (§2.2)."""
    found: dict[str, str] = {}
    for current, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".runx", "__pycache__")]
        for name in names:
            full = Path(current) / name
            found[full.relative_to(root).as_posix()] = hashlib.sha256(
                full.read_bytes()).hexdigest()
    return found


def _python_isolated(code: str, *, cwd: Path, env_tmp: Path, site_first: str,
                     editable: bool = False) -> subprocess.CompletedProcess[str]:
    """Run *code* with ``-I -S``: no ``PYTHON*`` variables, no ``.pth`` files (so not the
    checkout's editable finder), no current directory on ``sys.path``. ``sys.path`` gets
    *site_first* (processed as a site directory when *editable*), then this interpreter's
    entries minus the checkout (the dependencies)."""
    prefix = Path(sys.prefix).resolve()
    deps = []
    for entry in sys.path:
        if not entry or "__editable__" in entry:
            continue
        path = Path(entry).resolve()
        if path.is_relative_to(ROOT) and not path.is_relative_to(prefix):
            continue
        deps.append(str(path))
    head = (f"import site; site.addsitedir({site_first!r})" if editable
            else f"sys.path.insert(0, {site_first!r})")
    prelude = f"import sys\n{head}\nsys.path.extend({deps!r})\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNX_")}
    env["TMPDIR"] = str(env_tmp)
    return subprocess.run([sys.executable, "-I", "-S", "-c", prelude + code], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


_PROBE = """
import importlib.resources, json
import runx_actors, runx_spec
from runx_actors.host._cli_demo import example_package_path
mapped = importlib.resources.files("runx_actors._examples") / "loop-orchestration"
from runx_actors.host.package import load_package
path = example_package_path()
print(json.dumps({
    "runx_actors": runx_actors.__file__, "runx_spec": runx_spec.__file__,
    "mapped": str(mapped), "example": str(path), "digest": load_package(path).digest,
    "meta_path": [repr(f) for f in sys.meta_path], "sys_path": sys.path,
}))
"""


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of what the build reads, so building leaves the checkout untouched."""
    _setuptools_or_skip()
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, src / name, ignore=IGNORED)
        else:
            shutil.copy2(origin, src / name)
    return src


@pytest.fixture(scope="module")
def wheel(source_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source_copy), "--no-deps",
         "--no-build-isolation", "--no-index", "-q", "-w", str(out)],
        capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    wheels = list(out.glob("runx_actors-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_ships_the_example_byte_identical(wheel: Path) -> None:
    expected = _example_files(EXAMPLE)
    assert {"X.yaml", "SKILL.md", "context/loop-operator/SKILL.md",
            "workspace/NOTES.md"} <= expected.keys()
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        shipped = {name[len(IN_WHEEL):]: hashlib.sha256(archive.read(name)).hexdigest()
                   for name in names if name.startswith(IN_WHEEL)}
    assert shipped == expected
    assert "runx_actors/_examples/__init__.py" in names
    # the package list in pyproject.toml is explicit: every module must still ship
    modules = {path.relative_to(base).as_posix()
               for base, package in ((ROOT, ROOT / "runx_actors"),
                                     (ROOT / "spec", ROOT / "spec" / "runx_spec"))
               for path in package.rglob("*.py") if "__pycache__" not in path.parts}
    missing = sorted(modules - names)
    assert not missing, (f"the wheel lacks {missing}: add their packages to "
                         "[tool.setuptools] packages in pyproject.toml")


def test_wheel_runs_the_demo_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    work = tmp_path / "work"
    work.mkdir()

    probe = _python_isolated(_PROBE, cwd=work, env_tmp=tmp_path, site_first=str(site))
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert Path(seen["runx_actors"]).is_relative_to(site), seen
    assert Path(seen["runx_spec"]).is_relative_to(site), seen
    assert not any("editable" in f.lower() for f in seen["meta_path"]), seen
    assert not any(Path(p) == ROOT for p in seen["sys_path"]), seen
    assert seen["example"] == seen["mapped"] == str((site / IN_WHEEL).resolve()), seen
    assert seen["digest"] == load_package(EXAMPLE).digest

    demo = _python_isolated(
        "sys.argv = ['runx-actors', 'demo', 'loop-orchestration']\n"
        "from runx_actors.cli import main\nmain()\n",
        cwd=work, env_tmp=tmp_path, site_first=str(site))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    lines = demo.stdout.splitlines()
    assert [line for line in lines if line.startswith("# ")] == DEMO_HEADERS, demo.stdout
    assert [line.split(" | ")[1] for line in lines if line.startswith("turn ")] == [
        f"run={run_id}" for run_id in DEMO_RUN_IDS], demo.stdout
    assert lines[-2].startswith("receipts=") and lines[-1].startswith("store="), demo.stdout
    assert Path(lines[-1].removeprefix("store=")).is_relative_to(tmp_path)


def test_editable_install_resolves_the_checkout(source_copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "editable"
    out.mkdir()
    built = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta; "
         "print(build_meta.build_editable(sys.argv[1]))", str(out)],
        cwd=source_copy, capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    site = tmp_path / "site"
    with zipfile.ZipFile(out / built.stdout.splitlines()[-1].strip()) as archive:
        archive.extractall(site)
    work = tmp_path / "work"
    work.mkdir()
    probe = _python_isolated(_PROBE, cwd=work, env_tmp=tmp_path, site_first=str(site),
                             editable=True)
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert Path(seen["runx_actors"]).is_relative_to(source_copy), seen
    # the editable finder maps runx_actors._examples to the tree's examples/
    assert seen["example"] == seen["mapped"] == str(
        (source_copy / "examples" / "loop-orchestration").resolve()), seen
    assert seen["digest"] == load_package(EXAMPLE).digest
