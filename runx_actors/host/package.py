"""Skill packages: loading ``X.yaml``, the package digest and the input contract
(loop-host §2.2, §3.1, §3.2, §6.1).

A package is a directory holding ``SKILL.md`` and ``X.yaml``. ``X.yaml`` is parsed with
PyYAML and structured with one cattrs converter that forbids unknown keys (that is how
"unknown keys are errors" is enforced) and refuses silent coercions (a number where a
string is declared, a string where a bool is declared).

Runners:

* ``scripted-run`` **[ours]**: one Run driven by a built-in deterministic model named by
  ``script``. ``tools`` is the catalog offered to the model, ``allowed_tools`` what the
  policy gate lets start, ``approval_required`` the catalog tools whose calls wait for a
  host-attested approval.
* ``graph``: one Run whose steps are agent tasks (``run.type: agent-task``); each step
  declares its inputs (``$input.<name>`` or a literal string), its string outputs, its
  context skills and its ``allowed_tools``.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import attrs
import cattrs
from cattrs.errors import ForbiddenExtraKeysError

from .._strictread import MalformedInputError, limit_for, loads_yaml, read_regular_file
from ..protocol.canonical import MAX_SAFE_INTEGER
from ..protocol.errors import ValidationError
from ._hashing import digest_bytes, digest_json
from ._strict import strict_converter
from .context import ContextSkill, read_front_matter, resolve_refs
from .errors import InputContractError, PackageError

__all__ = [
    "NO_DEFAULT",
    "INPUT_TYPES",
    "InputSpec",
    "ScriptedRunner",
    "AgentTaskRun",
    "GraphStep",
    "GraphRunner",
    "Runner",
    "HarnessSection",
    "PackageSpec",
    "Package",
    "load_package",
    "package_digest",
    "apply_input_contract",
    "converter",
]


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


#: Marks an input declared without a default.
NO_DEFAULT: Any = _NoDefault()
#: Input types of the contract (§3.2).
INPUT_TYPES = frozenset({"string", "number", "boolean"})
_OUTPUT_TYPES = frozenset({"string"})
_EXCLUDED_DIRS = frozenset({".runx", "__pycache__"})
_MAX_REQUESTED_TOOL = 128


@attrs.frozen(kw_only=True)
class InputSpec:
    """One declared input: ``type`` (``string``, ``number`` or ``boolean``),
    ``required`` and an optional ``default``."""

    type: str
    required: bool = False
    default: Any = NO_DEFAULT
    description: str = ""

    @property
    def has_default(self) -> bool:
        """True when X.yaml gives the input a default."""
        return self.default is not NO_DEFAULT


@attrs.frozen(kw_only=True)
class ScriptedRunner:
    """A ``scripted-run`` runner **[ours]**: one Run driven by the model ``script``."""

    type: Literal["scripted-run"]
    script: str
    default: bool = False
    description: str = ""
    timeout_seconds: float = 60.0
    tools: tuple[str, ...] = ()
    allowed_tools: tuple[str, ...] = ()
    approval_required: tuple[str, ...] = ()
    inputs: dict[str, InputSpec] = attrs.field(factory=dict)

    @property
    def kind(self) -> str:
        """``single`` (the ``runner_kind`` of ``run_opened``)."""
        return "single"


@attrs.frozen(kw_only=True)
class AgentTaskRun:
    """``run: {type: agent-task, agent, task}`` of a graph step."""

    type: Literal["agent-task"]
    agent: str
    task: str


@attrs.frozen(kw_only=True)
class GraphStep:
    """One agent-task step of a graph runner."""

    id: str
    run: AgentTaskRun
    inputs: dict[str, str] = attrs.field(factory=dict)
    outputs: dict[str, str] = attrs.field(factory=dict)
    context_skills: tuple[str, ...] = ()
    allowed_tools: tuple[str, ...] = ()
    instructions: str = ""


@attrs.frozen(kw_only=True)
class GraphRunner:
    """A ``graph`` runner: one Run, one agent task per step, in order."""

    type: Literal["graph"]
    graph: str
    steps: tuple[GraphStep, ...]
    default: bool = False
    description: str = ""
    timeout_seconds: float = 60.0
    inputs: dict[str, InputSpec] = attrs.field(factory=dict)

    @property
    def kind(self) -> str:
        """``graph`` (the ``runner_kind`` of ``run_opened``)."""
        return "graph"

    @property
    def allowed_tools(self) -> tuple[str, ...]:
        """The union of the steps' ``allowed_tools``, in declaration order."""
        out: list[str] = []
        for step in self.steps:
            out += [t for t in step.allowed_tools if t not in out]
        return tuple(out)


Runner = ScriptedRunner | GraphRunner


@attrs.frozen(kw_only=True)
class HarnessSection:
    """``harness:`` of ``X.yaml``. ``cases`` are kept as parsed YAML: the harness
    structures them itself (with its own error messages, §8.2)."""

    files: dict[str, str] = attrs.field(factory=dict)
    cases: tuple[Any, ...] = ()


@attrs.frozen(kw_only=True)
class PackageSpec:
    """The structured ``X.yaml``."""

    name: str
    runners: dict[str, Runner]
    description: str = ""
    harness: HarnessSection | None = None


# -- the converter -----------------------------------------------------------------------


def _make_converter() -> cattrs.Converter:
    conv = strict_converter()

    def runner(value: Any, _: Any) -> Runner:
        if not isinstance(value, Mapping):
            raise TypeError(f"a runner must be a mapping, got {value!r}")
        kind = value.get("type")
        if kind == "scripted-run":
            return conv.structure(value, ScriptedRunner)
        if kind == "graph":
            return conv.structure(value, GraphRunner)
        raise ValueError(f"unknown runner type {kind!r} (expected scripted-run or graph)")

    conv.register_structure_hook(Runner, runner)
    return conv


#: The one converter that structures ``X.yaml`` (``forbid_extra_keys=True``).
converter = _make_converter()


def _describe(exc: BaseException) -> str:
    """*exc* of structuring X.yaml as ``<field path>: <problem>`` items joined by ``; ``
    (``runners['turn'].timeout_seconds: expected a number, got '1e999'``): cattrs'
    ``transform_error`` walks the error tree and names each field by its path in the
    document, never by cattrs' internal class and type names."""
    def problem(error: BaseException, _: Any) -> str:
        if isinstance(error, ForbiddenExtraKeysError):
            return f"unknown keys {sorted(error.extra_fields)}"
        return str(error)

    out = []
    for line in cattrs.transform_error(exc, path="$", format_exception=problem):
        message, _, where = line.rpartition(" @ ")
        where = where.removeprefix("$").removeprefix(".")
        out.append(f"{where}: {message}" if where else message)
    return "; ".join(out) or str(exc)


# -- loading ----------------------------------------------------------------------------


@attrs.frozen(eq=False)
class Package:
    """A loaded package: its ``root``, the structured ``X.yaml``, the ``SKILL.md``
    front-matter, the package digest (§2.2) and each step's resolved context skills."""

    root: Path
    spec: PackageSpec
    skill: dict[str, Any]
    digest: str
    context: dict[tuple[str, str], tuple[ContextSkill, ...]]

    @property
    def name(self) -> str:
        """The package's name (X.yaml ``name:``)."""
        return self.spec.name

    @property
    def default_runner(self) -> str:
        """The runner marked ``default: true`` (or the only runner)."""
        marked = [n for n, r in self.spec.runners.items() if r.default]
        if marked:
            return marked[0]
        return next(iter(self.spec.runners))

    def runner(self, name: str | None = None) -> Runner:
        """The runner *name* (the default runner for ``None``).

        Raises:
            PackageError: no such runner (reason ``unknown_runner``).
        """
        key = self.default_runner if name is None else name
        try:
            return self.spec.runners[key]
        except KeyError:
            raise PackageError(f"package {self.name} has no runner {key!r}",
                               path=str(self.root), reason="unknown_runner") from None


def _check_spec(root: Path, spec: PackageSpec) -> dict[tuple[str, str], tuple[ContextSkill,
                                                                              ...]]:
    where = str(root)
    if not spec.name:
        raise PackageError("X.yaml: name must be non-empty", path=where)
    if not spec.runners:
        raise PackageError("X.yaml: at least one runner is required", path=where)
    if sum(1 for r in spec.runners.values() if r.default) > 1:
        raise PackageError("X.yaml: more than one runner is marked default", path=where)
    context: dict[tuple[str, str], tuple[ContextSkill, ...]] = {}
    for name, runner in spec.runners.items():
        for key, item in runner.inputs.items():
            if item.type not in INPUT_TYPES:
                raise PackageError(f"runner {name}: input {key} has unknown type {item.type}",
                                   path=where)
            if item.has_default:  # the package author's mistake, not the caller's
                try:
                    _check_value(key, item, item.default)
                except InputContractError as exc:
                    shown = repr(item.default)
                    shown = shown if len(shown) <= 80 else shown[:77] + "..."
                    raise PackageError(
                        f"runner {name}: input {key}: the default {shown} does not fit its "
                        f"declared type {item.type}: "
                        f"{exc.message.removeprefix('input_contract_invalid: ')}",
                        path=where, reason="invalid_default", runner=name, field=key
                    ) from None
        if runner.timeout_seconds <= 0:
            raise PackageError(f"runner {name}: timeout_seconds must be positive", path=where)
        if isinstance(runner, ScriptedRunner):
            stray = [t for t in runner.approval_required if t not in runner.tools]
            if stray:
                raise PackageError(f"runner {name}: approval_required names tools not in "
                                   f"tools: {stray}", path=where)
            # the executor holds exactly the catalog (tools): an allowed tool outside it
            # would pass the gate and fail every call tool_lookup_failed (§3.3)
            stray = [t for t in runner.allowed_tools if t not in runner.tools]
            if stray:
                raise PackageError(
                    f"runner {name}: allowed_tools names {', '.join(map(repr, stray))}, not "
                    f"in its tools {list(runner.tools)}: a scripted-run runner can only "
                    "call the tools its catalog offers", path=where,
                    reason="allowed_tool_not_offered", tools=stray)
            continue
        if not runner.steps:
            raise PackageError(f"runner {name}: a graph needs at least one step", path=where)
        ids = [s.id for s in runner.steps]
        if len(set(ids)) != len(ids) or not all(ids):
            raise PackageError(f"runner {name}: step ids must be unique and non-empty",
                               path=where)
        for step in runner.steps:
            for key, value in step.inputs.items():
                if value.startswith("$input."):
                    if value[len("$input."):] not in runner.inputs:
                        raise PackageError(f"runner {name}: step {step.id} input {key} names "
                                           f"an undeclared input {value}", path=where)
                elif value.startswith("$"):
                    raise PackageError(f"runner {name}: step {step.id} input {key}: "
                                       f"unsupported reference {value}", path=where)
            bad = [k for k, t in step.outputs.items() if t not in _OUTPUT_TYPES]
            if bad or not step.outputs:
                raise PackageError(f"runner {name}: step {step.id} needs string outputs",
                                   path=where)
            context[(name, step.id)] = resolve_refs(root, step.context_skills)
    return context


def load_package(path: str | os.PathLike[str]) -> Package:
    """Load the package at *path* (a directory, or its ``SKILL.md`` / ``X.yaml``).

    Checks the context refs of every step (§6.1) and computes the package digest.

    ``X.yaml`` and ``SKILL.md`` are read by the strict readers of
    ``runx_actors._strictread``: regular files only (``X.yaml`` itself may not be a
    symlink, a device or a FIFO), at most 1 MiB each (``RUNX_ACTORS_MAX_PACKAGE_MANIFEST_BYTES``,
    ``RUNX_ACTORS_MAX_SKILL_MD_BYTES``), no duplicate keys, aliases, merge keys,
    non-finite numbers or nesting past 64 levels; the top level of ``X.yaml`` must be a
    mapping.

    Raises:
        PackageError: unreadable or invalid files, unknown keys, bad values, a symlink or
            a non-regular file inside the package; ``reason`` is the strict reader's
            (``duplicate_key``, ``too_large``, ``too_deep``, ``not_mapping``, ``symlink``,
            ``not_regular``…) and ``line`` the line when the parser knows it; an input
            default its own declaration refuses is ``invalid_default`` (``runner``,
            ``field``), an ``allowed_tools`` entry outside a scripted-run runner's
            ``tools`` ``allowed_tool_not_offered`` (``tools``).
        ContextRefError: a context ref breaks a §6.1 rule.
        ValidationError: *path* is not a ``str``/``os.PathLike[str]`` (``None``, ``5``,
            bytes: a builtin TypeError before), is empty or contains NUL (attribute
            ``argument="path"``).
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path or "\x00" in path:
        what = "an empty path" if path == "" else (
            "a path with NUL" if isinstance(path, str) else type(path).__name__)
        raise ValidationError(f"load_package: the package path must be a str or "
                              f"os.PathLike[str] naming a directory or file, not {what}",
                              argument="path", value=repr(path)[:64])
    root = Path(path)
    if root.is_file():
        root = root.parent
    root = root.resolve()
    raw = _read_yaml_mapping(root, "X.yaml", "package_manifest")
    try:
        spec = converter.structure(raw, PackageSpec)
    except (cattrs.errors.BaseValidationError, TypeError, ValueError, KeyError,
            AttributeError) as exc:
        raise PackageError(f"X.yaml is invalid: {_describe(exc)}", path=str(root)) from None
    front: dict[str, Any] = {}
    if (root / "SKILL.md").exists() or (root / "SKILL.md").is_symlink():
        text = _read_package_text(root, "SKILL.md", "skill_md")
        try:
            front = read_front_matter(text, source=str(root / "SKILL.md"))
        except MalformedInputError as exc:
            raise _strict_error(root, exc) from None
        except ValueError as exc:
            raise PackageError(f"SKILL.md is invalid: {exc}", path=str(root)) from None
    context = _check_spec(root, spec)
    return Package(root=root, spec=spec, skill=front, digest=package_digest(root),
                   context=context)


def _strict_error(root: Path, exc: MalformedInputError) -> PackageError:
    return PackageError(str(exc), path=str(root), reason=exc.reason, line=exc.line)


def _read_package_text(root: Path, name: str, kind: str) -> str:
    """The UTF-8 text of the package file *name*: a regular file (not a symlink, a
    device or a FIFO) of at most ``limit_for(kind)`` bytes. Raises PackageError."""
    path = root / name
    try:
        data = read_regular_file(path, max_bytes=limit_for(kind))
    except FileNotFoundError:
        raise PackageError(f"{path} does not exist", path=str(root),
                           reason="not_a_package") from None
    except MalformedInputError as exc:
        raise _strict_error(root, exc) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PackageError(f"{path}: not valid UTF-8 (byte {exc.start})", path=str(root),
                           reason="utf8") from None


def _read_yaml_mapping(root: Path, name: str, kind: str) -> dict[str, Any]:
    """Strict YAML (``runx_actors._strictread``) whose top level is a mapping."""
    text = _read_package_text(root, name, kind)
    try:
        value: dict[str, Any] = loads_yaml(text, source=str(root / name), mapping=True)
    except MalformedInputError as exc:
        raise _strict_error(root, exc) from None
    return value


def package_digest(root: str | os.PathLike[str]) -> str:
    """``H({"schema": "runx_actors.package_digest.v1", "files": [{"path", "sha256"}…]})``
    over every regular file under *root*, sorted by POSIX path; ``.runx/`` and
    ``__pycache__/`` are excluded (§2.2).

    Raises:
        PackageError: a symlink inside the package (reason ``symlink``), a device, FIFO
            or socket (``not_regular``), a file over 16 MiB (``too_large``;
            ``RUNX_ACTORS_MAX_PACKAGE_FILE_BYTES``), or an unreadable file.
    """
    base = Path(root).resolve()
    files: list[tuple[str, Path]] = []
    for current, dirs, names in os.walk(base, followlinks=False):
        here = Path(current)
        for d in list(dirs):
            if (here / d).is_symlink():
                raise PackageError(f"symlink in package: {here / d}", path=str(base),
                                   reason="symlink")
        dirs[:] = sorted(d for d in dirs if d not in _EXCLUDED_DIRS)
        for name in names:
            full = here / name
            try:
                mode = full.lstat().st_mode
            except OSError as exc:
                raise PackageError(f"{full} cannot be read: {exc.strerror or exc}",
                                   path=str(base)) from None
            if stat.S_ISLNK(mode):
                raise PackageError(f"symlink in package: {full}", path=str(base),
                                   reason="symlink")
            # devices, FIFOs and sockets are refused by read_regular_file below
            files.append((PurePosixPath(*full.relative_to(base).parts).as_posix(), full))
    files.sort(key=lambda item: item[0])
    cap = limit_for("package_file")
    entries = []
    for rel, full in files:
        try:
            data = read_regular_file(full, max_bytes=cap)
        except MalformedInputError as exc:
            raise _strict_error(base, exc) from None
        except OSError as exc:
            raise PackageError(f"{full} cannot be read: {exc.strerror or exc}",
                               path=str(base)) from None
        entries.append({"path": rel, "sha256": digest_bytes(data)})
    return digest_json({"schema": "runx_actors.package_digest.v1", "files": entries})


# -- the input contract (§3.2) ----------------------------------------------------------


def _contract_error(key: str, message: str) -> InputContractError:
    return InputContractError(f"input_contract_invalid: {message}", field=key)


def _is_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _check_value(key: str, spec: InputSpec, value: Any) -> Any:
    if spec.type == "string":
        if not isinstance(value, str):
            raise _contract_error(key, f"input {key} must be a string")
        if key == "requested_tool" and not 0 < len(value) <= _MAX_REQUESTED_TOOL:
            raise _contract_error(key, f"input {key} must be 1 to {_MAX_REQUESTED_TOOL} "
                                  "characters")
        return value
    if spec.type == "number":
        if not _is_number(value):
            raise _contract_error(key, f"input {key} must be a number")
        if abs(value) > MAX_SAFE_INTEGER:  # recorded as a double (D-11): the Run's own
            raise _contract_error(key, (  # record would then refuse its inputs forever
                f"input {key} must be at most {MAX_SAFE_INTEGER} in magnitude (JSON "
                f"numbers are doubles)"))
        if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
            return int(value)
        return value
    if not isinstance(value, bool):
        raise _contract_error(key, f"input {key} must be a boolean")
    return value


def apply_input_contract(runner: Runner, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Check *inputs* against *runner*'s contract and apply its defaults (§3.2).

    Returns the canonical inputs: declared keys only, defaults filled in, integral
    numbers as ints, keys in declaration order. Pure.

    Raises:
        InputContractError: (reason ``input_contract_invalid``) an unknown key, a missing
            required key, a value of the wrong type, a number past ±(2^53−1) (D-11), or
            an empty or over-long ``requested_tool``.
    """
    if not isinstance(inputs, Mapping):
        raise _contract_error("", "inputs must be an object")
    unknown = [k for k in inputs if k not in runner.inputs]
    if unknown:
        raise _contract_error(str(unknown[0]), f"unknown input {unknown[0]}")
    out: dict[str, Any] = {}
    for key, spec in runner.inputs.items():
        if key in inputs:
            out[key] = _check_value(key, spec, inputs[key])
        elif spec.required:
            raise _contract_error(key, f"input {key} is required")
        elif spec.has_default:
            out[key] = spec.default
    return out
