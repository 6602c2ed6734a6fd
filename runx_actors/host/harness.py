"""The harness: deterministic replay of cases and fixtures, with assertions (loop-host §8).

``runx-actors harness <target…> [-R D] [--json]`` is :func:`harness_command`; the
library entry points are :func:`run_package` and :func:`run_fixtures`.

* **Package mode** — one target, a package directory (holding ``SKILL.md`` or ``X.yaml``)
  or its ``SKILL.md``: runs ``harness.cases[]`` in order, then ``fixtures/*.yaml|yml`` in
  sorted order, and reports (:class:`HarnessReport`, §8.4).
* **Fixture mode** — one or more fixture files: prints each fixture's top receipt (an
  object for one fixture, an array for several) and stops at the first failure.

Isolation (§8.1): everything happens under the scratch root
``<workspace>/.runx/harness/run-<pid>-<nanos>/`` (removed in a ``finally``): a staged
``workspace/``, a fresh run store per case (scope ``harness``) and a fresh receipt
directory per case. The harness writes to no caller store, except that each case's
verified receipt tree is ``put`` into the output directory (``-R``, else
``$RUNX_RECEIPT_DIR``, else ``<workspace>/.runx/receipts``).

Every case pins ``created_at`` to ``2026-01-01T00:00:00.000Z`` and ``RUNX_RUN_ID`` to
``harness-<name>`` (§8.5), so receipt ids are the same on every run with the same key.
Without a signing identity (§4.5) every case records ``<case>: receipt signing is not
configured`` and the harness exits 1.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from .._strictread import MalformedInputError, limit_for, loads_yaml, read_regular_file
from ..protocol.errors import RunxError
from ._harness_cases import (
    Case,
    FixtureFile,
    HarnessParseError,
    parse_case,
    parse_fixture,
)
from ._harness_run import (
    HARNESS_SCOPE,
    PIN_CREATED_AT,
    SIGNING_NOT_CONFIGURED,
    CaseContext,
    CaseResult,
    PlannedCase,
    harness_files,
    run_case,
)
from .errors import PackageError
from .package import GraphRunner, Package, ScriptedRunner, load_package
from .receipts import (
    CommandResult,
    Keyring,
    ReceiptError,
    ReceiptIndexStaleError,
    ReceiptStore,
    Signer,
    SigningConfigError,
    Verifier,
    keyring_from_env,
    require_signer,
    resolve_receipt_dir,
)

__all__ = [
    "PIN_CREATED_AT",
    "HARNESS_SCOPE",
    "SIGNING_NOT_CONFIGURED",
    "EXIT_PASSED",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "HarnessError",
    "HarnessUsageError",
    "HarnessParseError",
    "CaseResult",
    "HarnessReport",
    "FixtureRun",
    "Targets",
    "classify_targets",
    "workspace_of",
    "scratch_root",
    "run_package",
    "run_fixtures",
    "format_report",
    "harness_command",
]

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_USAGE = 64
_PREFIX = "runx-actors: package harness failed for "
_FIXTURE_SUFFIXES = (".yaml", ".yml")


class HarnessError(RunxError):
    """The harness itself failed (§8.4): a parse error, an unloadable package, an output
    directory that refused a receipt. No report is printed; stderr ``runx-actors: package
    harness failed for <path>: <message>``, exit 1. Attributes: ``path``, ``hint`` (a
    line telling the user what to do, or ``""``)."""


class HarnessUsageError(RunxError):
    """The targets are not a valid combination (§8.1): none, a package mixed with fixture
    files, several packages, or a file that is neither. Exit 64."""


# -- targets --------------------------------------------------------------------------------


@attrs.frozen
class Targets:
    """Classified targets: exactly one of ``package`` and ``fixtures`` is set."""

    package: Path | None = None
    fixtures: tuple[Path, ...] = ()


def _is_package(path: Path) -> bool:
    if path.is_dir():
        return True
    return path.name in ("SKILL.md", "X.yaml")


def classify_targets(targets: Sequence[str], cwd: str | os.PathLike[str]) -> Targets:
    """Decide the mode (§8.1).

    Raises:
        HarnessUsageError: no target, a package mixed with fixture files, more than one
            package, or a file that is neither a package nor a ``.yaml``/``.yml`` fixture.
        HarnessError: a target does not exist.
    """
    if not targets:
        raise HarnessUsageError("no target given: pass a package directory, its SKILL.md, "
                                "or fixture files (.yaml/.yml)")
    packages: list[Path] = []
    fixtures: list[Path] = []
    for target in targets:
        path = Path(cwd) / target
        if not path.exists():
            raise HarnessError(f"{_PREFIX}{target}: {target} does not exist", path=target,
                               hint="give a package directory, its SKILL.md, or fixture "
                                    "files (.yaml/.yml), relative to the current directory")
        if _is_package(path):
            packages.append(path)
        elif path.suffix in _FIXTURE_SUFFIXES:
            fixtures.append(path)
        else:
            raise HarnessUsageError(f"{target} is neither a package (a directory or its "
                                    "SKILL.md) nor a fixture file (.yaml/.yml)")
    if packages and fixtures:
        raise HarnessUsageError("a package cannot be mixed with fixture files: run the "
                                "package alone, or list only fixture files")
    if len(packages) > 1:
        raise HarnessUsageError("package mode takes exactly one package")
    return Targets(package=packages[0] if packages else None, fixtures=tuple(fixtures))


def workspace_of(env: Mapping[str, str], cwd: str | os.PathLike[str]) -> Path:
    """The workspace (§5.1): ``$RUNX_CWD``, else ``$INIT_CWD``, else *cwd*."""
    chosen = env.get("RUNX_CWD") or env.get("INIT_CWD")
    return Path(cwd) / chosen if chosen else Path(cwd)


def scratch_root(env: Mapping[str, str], cwd: str | os.PathLike[str]) -> Path:
    """A new scratch root path ``<workspace>/.runx/harness/run-<pid>-<nanos>/`` (§8.1)."""
    return (workspace_of(env, cwd) / ".runx" / "harness"
            / f"run-{os.getpid()}-{time.time_ns()}")


# -- the report ---------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class HarnessReport:
    """The package-mode report (§8.4). ``cases`` (not part of the JSON) holds each case's
    result; ``hint`` is the stderr hint (the signing message), or ``""``."""

    status: str
    cases: tuple[CaseResult, ...] = ()
    hint: str = ""
    receipt_dir: str = ""

    @property
    def case_count(self) -> int:
        """How many cases ran."""
        return len(self.cases)

    @property
    def assertion_errors(self) -> tuple[str, ...]:
        """Every failed assertion of every case, in case order."""
        return tuple(error for case in self.cases for error in case.errors)

    @property
    def receipt_ids(self) -> tuple[str, ...]:
        """The ids of the receipts the cases sealed, in case order."""
        return tuple(c.receipt_id for c in self.cases if c.receipt_id is not None)

    @property
    def graph_case_count(self) -> int:
        """How many of the cases ran a graph runner."""
        return sum(1 for case in self.cases if case.graph)

    @property
    def exit_code(self) -> int:
        """0 for ``passed`` or ``not_declared``, 1 for ``failed`` (§8.4)."""
        return EXIT_FAILED if self.status == "failed" else EXIT_PASSED

    def to_json(self) -> dict[str, Any]:
        """The §8.4 object, keys in the documented order."""
        errors = list(self.assertion_errors)
        return {
            "status": self.status,
            "case_count": self.case_count,
            "assertion_error_count": len(errors),
            "assertion_errors": errors,
            "case_names": [case.name for case in self.cases],
            "receipt_ids": list(self.receipt_ids),
            "graph_case_count": self.graph_case_count,
        }


def format_report(report: HarnessReport, *, as_json: bool = False) -> str:
    """The stdout of package mode: the §8.4 JSON (indent 2) with *as_json*, else one line
    per case and a summary."""
    if as_json:
        return json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"
    if report.status == "not_declared":
        return "not_declared: the package declares no harness cases and no fixtures\n"
    lines = []
    for case in report.cases:
        mark = "ok  " if case.passed else "FAIL"
        receipt = f" receipt={case.receipt_id}" if case.receipt_id else ""
        lines.append(f"{mark} {case.name} ({case.runner}) {case.status}{receipt}")
        lines.extend(f"  {error}" for error in case.errors)
    errors = len(report.assertion_errors)
    lines.append(f"{report.status}: {report.case_count} case{'s' * (report.case_count != 1)}, "
                 f"{errors} assertion error{'s' * (errors != 1)}, "
                 f"{len(report.receipt_ids)} top receipt{'s' * (len(report.receipt_ids) != 1)}"
                 f" in {report.receipt_dir}")
    return "\n".join(lines) + "\n"


# -- planning -----------------------------------------------------------------------------------


def _load(path: Path) -> Package:
    try:
        return load_package(path)
    except PackageError as exc:
        raise HarnessParseError(str(exc), label=str(path), field="") from exc


def _runner_name(package: Package, wanted: str | None, label: str) -> str:
    name = wanted or package.default_runner
    if name not in package.spec.runners:
        raise HarnessParseError(f"{label}: runner: package {package.name} has no runner "
                                f"{name!r}", label=label, field="runner")
    return name


def _plan_case(package: Package, case: Case) -> PlannedCase:
    return PlannedCase(case=case, package=package,
                       runner_name=_runner_name(package, case.runner, case.name))


def _read_fixture(path: Path) -> FixtureFile:
    """Strict YAML (``runx_actors._strictread``): a regular file of at most
    ``limit_for("harness_case")`` bytes (1 MiB), a mapping, no duplicate keys."""
    try:
        data = read_regular_file(path, max_bytes=limit_for("harness_case"))
        raw = loads_yaml(data, source=path.name, mapping=True)
    except MalformedInputError as exc:
        raise HarnessParseError(f"{path.name}: cannot be read: {exc}", label=path.name,
                                field="", reason=exc.reason, line=exc.line) from None
    except OSError as exc:
        raise HarnessParseError(f"{path.name}: cannot be read: {exc.strerror or exc}",
                                label=path.name, field="") from None
    return parse_fixture(raw, path)


def _plan_fixture(loaded: FixtureFile) -> PlannedCase:
    fixture = loaded.fixture
    package = _load(loaded.target_path())
    name = _runner_name(package, fixture.runner, fixture.name)
    runner = package.runner(name)
    wanted = GraphRunner if fixture.kind == "graph" else ScriptedRunner
    if not isinstance(runner, wanted):
        raise HarnessParseError(f"{fixture.name}: kind: {fixture.kind} fixtures need a "
                                f"{'graph' if fixture.kind == 'graph' else 'single'} runner, "
                                f"and {name} is not one", label=fixture.name, field="kind")
    setup = tuple(package.root.joinpath(*ref.split("/")) for ref in fixture.setup.receipts)
    missing = [ref for ref, p in zip(fixture.setup.receipts, setup) if not p.is_file()]
    if missing:
        raise HarnessParseError(f"{fixture.name}: setup.receipts: {missing[0]} does not "
                                "exist in the package", label=fixture.name,
                                field="setup.receipts")
    return PlannedCase(case=fixture.as_case(), package=package, runner_name=name,
                       kind="fixture", setup_receipts=setup)


def _plan_package(target: Path) -> tuple[Package, list[PlannedCase]]:
    package = _load(target)
    section = package.spec.harness
    raw_cases = section.cases if section is not None else ()
    plans = [_plan_case(package, parse_case(raw, i)) for i, raw in enumerate(raw_cases)]
    folder = package.root / "fixtures"
    files = sorted(p for p in folder.iterdir()
                   if p.is_file() and p.suffix in _FIXTURE_SUFFIXES) if folder.is_dir() else []
    plans += [_plan_fixture(_read_fixture(path)) for path in files]
    for plan in plans:  # harness.files is checked before any case runs
        harness_files(plan.package, Path("workspace"))
    names = [plan.name for plan in plans]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise HarnessParseError(f"{duplicate}: case names must be unique", label=duplicate,
                                field="name")
    return package, plans


# -- running ------------------------------------------------------------------------------------


def _identity(env: Mapping[str, str]) -> tuple[Signer | None, Keyring, str]:
    """The signing identity (None when missing or misconfigured), the verification
    keyring, and the hint to print when the identity is missing."""
    try:
        signer = require_signer(env)
    except SigningConfigError as exc:
        return None, Keyring(), str(exc)
    return signer, keyring_from_env(env), ""


def _harness_error(path: str, exc: BaseException) -> HarnessError:
    hint = getattr(exc, "hint", "") if isinstance(exc, ReceiptIndexStaleError) else ""
    if isinstance(exc, HarnessParseError):
        hint = "fix the package or fixture file named above; no case ran"
    return HarnessError(f"{_PREFIX}{path}: {exc}", path=path, hint=str(hint or ""))


async def _run_plans(plans: Sequence[PlannedCase], *, output_dir: Path,
                     env: Mapping[str, str], cwd: str | os.PathLike[str],
                     stop_on_failure: bool) -> tuple[list[CaseResult], str]:
    signer, keyring, hint = _identity(env)
    output = ReceiptStore(output_dir, verifier=Verifier(keyring=keyring))
    scratch = scratch_root(env, cwd)
    results: list[CaseResult] = []
    try:
        scratch.mkdir(parents=True)
        ctx = CaseContext(scratch=scratch, signer=signer, keyring=keyring, env=env,
                          output=output)
        for index, plan in enumerate(plans):
            result = await run_case(index, plan, ctx)
            results.append(result)
            if stop_on_failure and not result.passed:
                break
    finally:
        await trio.to_thread.run_sync(lambda: shutil.rmtree(scratch, ignore_errors=True))
    return results, hint


async def run_package(target: str | os.PathLike[str], *, env: Mapping[str, str],
                      cwd: str | os.PathLike[str],
                      receipt_dir: str | os.PathLike[str] | None = None) -> HarnessReport:
    """Run a package's cases and fixtures (§8.1 package mode) and return the report.

    *env* is the process environment (signing identity, ``RUNX_RECEIPT_DIR``,
    ``RUNX_CWD`` …); *receipt_dir* is ``-R``.

    Checkpoint: always.
    Raises:
        HarnessError: a parse error, an unloadable package, or an output directory that
            refused a receipt (a stale index carries its ``hint``). Nothing is reported.
    """
    await trio.lowlevel.checkpoint()
    path = str(target)
    output_dir = resolve_receipt_dir(receipt_dir, env, cwd)
    try:
        _, plans = _plan_package(Path(cwd) / target)
        if not plans:
            return HarnessReport(status="not_declared", receipt_dir=str(output_dir))
        results, hint = await _run_plans(plans, output_dir=output_dir, env=env, cwd=cwd,
                                         stop_on_failure=False)
    except (HarnessParseError, ReceiptError, OSError) as exc:
        raise _harness_error(path, exc) from exc
    status = "failed" if any(not r.passed for r in results) else "passed"
    return HarnessReport(status=status, cases=tuple(results), hint=hint,
                         receipt_dir=str(output_dir))


@attrs.frozen(kw_only=True)
class FixtureRun:
    """Fixture mode's outcome: each fixture's result in order (it stops at the first
    failure), and the signing hint."""

    results: tuple[CaseResult, ...]
    single: bool
    hint: str = ""

    @property
    def passed(self) -> bool:
        """True when every fixture's cases passed."""
        return all(result.passed for result in self.results)

    @property
    def exit_code(self) -> int:
        """0 when every fixture passed, else 1 (loop-host §9.1)."""
        return EXIT_PASSED if self.passed else EXIT_FAILED

    def receipts_json(self) -> Any:
        """Each fixture's top receipt (null when it produced none): an object for one
        fixture, an array for several."""
        bodies = [None if r.receipt is None else r.receipt.to_json() for r in self.results]
        return bodies[0] if self.single else bodies


async def run_fixtures(paths: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str],
                       cwd: str | os.PathLike[str],
                       receipt_dir: str | os.PathLike[str] | None = None) -> FixtureRun:
    """Run fixture files in order (§8.1 fixture mode), stopping at the first failure.

    Checkpoint: always.
    Raises:
        HarnessError: as :func:`run_package` (every fixture is parsed before any runs).
    """
    await trio.lowlevel.checkpoint()
    output_dir = resolve_receipt_dir(receipt_dir, env, cwd)
    current = str(paths[0]) if paths else ""
    try:
        plans = []
        for path in paths:
            current = str(path)
            plans.append(_plan_fixture(_read_fixture(Path(cwd) / path)))
            harness_files(plans[-1].package, Path("workspace"))
        current = str(paths[0]) if len(paths) == 1 else ", ".join(map(str, paths))
        results, hint = await _run_plans(plans, output_dir=output_dir, env=env, cwd=cwd,
                                         stop_on_failure=True)
    except (HarnessParseError, ReceiptError, OSError) as exc:
        raise _harness_error(current, exc) from exc
    return FixtureRun(results=tuple(results), single=len(paths) == 1, hint=hint)


# -- the command ---------------------------------------------------------------------------------


def _stderr(*lines: str) -> str:
    return "".join(line + "\n" for line in lines if line)


def _failed(exc: BaseException, code: int, as_json: bool, line: str,
            hint: str = "") -> CommandResult:
    """*line* and *hint* on stderr; with *as_json* also one JSON error object on stdout."""
    from .._clierror import error_json

    return CommandResult(exit_code=code,
                         stdout=error_json("harness", exc, code, hint) if as_json else "",
                         stderr=_stderr(line, f"hint: {hint}" if hint else ""))


def harness_command(targets: Sequence[str], *, receipt_dir: str | None = None,
                    as_json: bool = False, env: Mapping[str, str],
                    cwd: str | os.PathLike[str]) -> CommandResult:
    """``runx-actors harness <target…> [-R D] [--json]`` (§8) as a function: what to
    print and the exit code. Runs its own trio loop (call it from synchronous code).

    Exit codes: 0 ``passed`` / ``not_declared`` (fixture mode: every fixture passed);
    1 ``failed`` or a harness error; 64 a usage error. A harness error or usage error
    is also, with *as_json*, the CLI's one JSON error object on stdout
    (``runx_actors._clierror.error_document``, RUN-CLI-2). Raises nothing.
    """
    try:
        chosen = classify_targets(targets, cwd)
    except HarnessUsageError as exc:
        return _failed(exc, EXIT_USAGE, as_json,
                       f"runx-actors: harness: {exc}", "see `runx-actors harness --help`")
    except HarnessError as exc:
        return _failed(exc, EXIT_FAILED, as_json, str(exc), str(getattr(exc, "hint", "")))
    try:
        if chosen.package is not None:
            report = trio.run(lambda: run_package(chosen.package or Path(), env=env, cwd=cwd,
                                                  receipt_dir=receipt_dir))
            return CommandResult(exit_code=report.exit_code,
                                 stdout=format_report(report, as_json=as_json),
                                 stderr=_stderr(report.hint))
        run = trio.run(lambda: run_fixtures(chosen.fixtures, env=env, cwd=cwd,
                                            receipt_dir=receipt_dir))
    except HarnessError as exc:
        return _failed(exc, EXIT_FAILED, as_json, str(exc), str(getattr(exc, "hint", "")))
    if not run.passed:
        failed = run.results[-1]
        return CommandResult(exit_code=EXIT_FAILED, stderr=_stderr(
            *failed.errors, f"runx-actors: harness: fixture {failed.name} failed", run.hint))
    text = json.dumps(run.receipts_json(), indent=2, ensure_ascii=False) + "\n"
    return CommandResult(exit_code=EXIT_PASSED, stdout=text, stderr=_stderr(run.hint))
