"""Harness cases and fixtures: their format and how they are parsed (loop-host §8.2).

Inline cases (``harness.cases[]`` of ``X.yaml``) and fixture files are structured with one
cattrs converter built with ``forbid_extra_keys=True``: that is how "unknown keys are
errors" is enforced at every level. Scalars are strict: a number is never read as a
string, nor a string as a bool. Structuring errors are translated into the messages of
§8.2:

* a retired ``expect.receipt`` key → ``expect.receipt.<key> is a retired field``;
* any other unknown key → ``<path>.<key> is not a known field`` (so under
  ``expect.receipt`` it reads ``expect.receipt.<key> is not a known field``).

Every message starts with the case (or fixture) label: ``<name>: …``. A parse error
aborts the harness (:class:`HarnessParseError`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import attrs
import cattrs
from cattrs.errors import (
    BaseValidationError,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)

from ..protocol.errors import RunxError
from ._strict import strict_converter

__all__ = [
    "RETIRED_RECEIPT_KEYS",
    "EXPECT_STATUSES",
    "FIXTURE_KINDS",
    "SUPPORTED_FIXTURE_KINDS",
    "MAX_SETUP_RECEIPTS",
    "MISSING",
    "HarnessParseError",
    "ExpectReceipt",
    "OutputExpect",
    "Expect",
    "Caller",
    "Case",
    "Setup",
    "Fixture",
    "FixtureFile",
    "converter",
    "parse_case",
    "parse_fixture",
    "case_label",
    "normalise_case_name",
]

#: ``expect.receipt`` keys of older runx versions (§8.2).
RETIRED_RECEIPT_KEYS = frozenset({
    "kind", "skill_name", "source_type", "graph_name", "owner", "skill_execution",
    "graph_execution",
})
#: Values of ``expect.status`` (§8.2); ``needs_approval`` is ours.
EXPECT_STATUSES = ("sealed", "failure", "needs_agent", "policy_denied", "escalated",
                   "needs_approval")
#: Fixture kinds that parse (§8.2).
FIXTURE_KINDS = ("skill", "graph", "a2a", "agent", "agent_task", "mcp")
#: Fixture kinds this host runs; the others parse but are refused as unsupported.
SUPPORTED_FIXTURE_KINDS = ("skill", "graph")
#: At most this many ``setup.receipts`` (§8.2).
MAX_SETUP_RECEIPTS = 32

_RECEIPT_STATES = ("sealed", "deferred")
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


class HarnessParseError(RunxError):
    """A case or fixture cannot be parsed (§8.2). The harness stops: no report, stderr
    ``runx-actors: package harness failed for <path>: <message>``, exit 1. Attributes:
    ``label`` (the case or fixture), ``field`` (dotted path of the offending key, ``""``
    when the problem is not one key)."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


#: Marks an ``expect.output.exact`` that was not given (``null`` is a valid exact value).
MISSING: Any = _Missing()


@attrs.frozen(kw_only=True)
class ExpectReceipt:
    """``expect.receipt`` (§8.2). ``None`` means "not compared"; ``schema`` is always
    compared (default ``runx.receipt.v1``)."""

    schema: str = "runx.receipt.v1"
    body_digest: str | None = None
    receipt_digest: str | None = None
    receipt_id: str | None = None
    harness_id: str | None = None
    state: str | None = None
    disposition: str | None = None
    reason_code: str | None = None
    act_ids: tuple[str, ...] | None = None
    decision_ids: tuple[str, ...] | None = None
    child_receipt_refs: tuple[str, ...] | None = None
    child_receipt_count: int | None = None
    verification_refs: tuple[str, ...] | None = None


@attrs.frozen(kw_only=True)
class OutputExpect:
    """``{exact}`` or ``{subset}`` (§8.3)."""

    exact: Any = MISSING
    subset: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class Expect:
    """``expect`` (§8.2)."""

    status: str | None = None
    receipt: ExpectReceipt | None = None
    steps: tuple[str, ...] | None = None
    output: OutputExpect | None = None
    step_outputs: dict[str, OutputExpect] | None = None


@attrs.frozen(kw_only=True)
class Caller:
    """``caller`` (§8.2): answers and approvals supplied through the resume path. The
    ``http_*`` entries must be empty in v1. Approval values are checked by the resume path
    (§7.2, §7.4)."""

    answers: dict[str, Any] = attrs.field(factory=dict)
    approvals: dict[str, Any] = attrs.field(factory=dict)
    http_responses: Any = ()
    http_exchanges: Any = ()

    @property
    def has_values(self) -> bool:
        return bool(self.answers or self.approvals)

    def answers_document(self) -> dict[str, Any]:
        """The §7.2 answers file these values make."""
        return {"answers": dict(self.answers), "approvals": dict(self.approvals)}


@attrs.frozen(kw_only=True)
class Case:
    """An inline case (§8.2)."""

    name: str
    runner: str | None = None
    inputs: dict[str, Any] = attrs.field(factory=dict)
    env: dict[str, str] = attrs.field(factory=dict)
    caller: Caller = attrs.field(factory=Caller)
    expect: Expect = attrs.field(factory=Expect)


@attrs.frozen(kw_only=True)
class Setup:
    """``setup`` of a fixture: receipts ``put`` into the case's receipt store first."""

    receipts: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class Fixture:
    """A fixture file (§8.2)."""

    name: str
    kind: str
    target: str | None = None
    runner: str | None = None
    setup: Setup = attrs.field(factory=Setup)
    inputs: dict[str, Any] = attrs.field(factory=dict)
    env: dict[str, str] = attrs.field(factory=dict)
    caller: Caller = attrs.field(factory=Caller)
    expect: Expect = attrs.field(factory=Expect)
    metadata: dict[str, Any] = attrs.field(factory=dict)

    def as_case(self) -> Case:
        """The case this fixture runs."""
        return Case(name=self.name, runner=self.runner, inputs=self.inputs, env=self.env,
                    caller=self.caller, expect=self.expect)



@attrs.frozen
class FixtureFile:
    """A parsed fixture and the file it was read from."""

    fixture: Fixture
    path: Path

    def target_path(self) -> Path:
        """``target``, relative to the fixture file."""
        assert self.fixture.target is not None
        return (self.path.parent / self.fixture.target).resolve()


# -- the converter -----------------------------------------------------------------------


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _mapping_hook(value: Any, _: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a mapping, got {_show(value)}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise TypeError(f"keys must be strings, got {bad[0]!r}")
    return dict(value)


def _string_list_hook(value: Any, _: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise TypeError(f"expected a list of strings, got {_show(value)}")
    bad = [v for v in value if not isinstance(v, str)]
    if bad:
        raise TypeError(f"expected a list of strings, got an item {_show(bad[0])}")
    return tuple(value)


def _make_converter() -> cattrs.Converter:
    conv = strict_converter(show=_show)
    conv.register_structure_hook_func(lambda t: t == dict[str, Any], _mapping_hook)
    conv.register_structure_hook_func(lambda t: t == tuple[str, ...], _string_list_hook)
    return conv


#: The one converter of cases and fixtures (``forbid_extra_keys=True``).
converter = _make_converter()


def _leaf_errors(exc: BaseException, path: tuple[str, ...]) -> Iterator[
        tuple[tuple[str, ...], BaseException]]:
    """Flatten a cattrs error tree into ``(path, leaf error)`` pairs."""
    if isinstance(exc, ClassValidationError):
        with_names, without = exc.group_exceptions()
        for sub, name in with_names:
            yield from _leaf_errors(sub, (*path, name.name))
        for sub in without:
            yield from _leaf_errors(sub, path)
        return
    if isinstance(exc, IterableValidationError):
        with_index, rest = exc.group_exceptions()
        for sub, where in with_index:
            step = f"[{where.index}]" if isinstance(where.index, int) else str(where.index)
            yield from _leaf_errors(sub, (*path, step))
        for sub in rest:
            yield from _leaf_errors(sub, path)
        return
    if isinstance(exc, BaseValidationError):
        for sub in exc.exceptions:
            yield from _leaf_errors(sub, path)
        return
    yield path, exc


def _dotted(path: tuple[str, ...]) -> str:
    out = ""
    for step in path:
        out += step if step.startswith("[") or not out else "." + step
    return out


def _messages(exc: BaseException) -> list[tuple[str, str]]:
    """``(field, message)`` for each problem, in a stable order."""
    found: list[tuple[str, str]] = []
    for path, leaf in _leaf_errors(exc, ()):
        where = _dotted(path)
        if isinstance(leaf, ForbiddenExtraKeysError):
            for key in sorted(leaf.extra_fields):
                field = f"{where}.{key}" if where else key
                if where == "expect.receipt" and key in RETIRED_RECEIPT_KEYS:
                    found.append((field, f"{field} is a retired field"))
                else:
                    found.append((field, f"{field} is not a known field"))
        elif isinstance(leaf, KeyError):
            found.append((where, f"{where} is required"))
        else:
            found.append((where, f"{where or 'the document'}: {leaf}"))
    # retired fields first: they name the one fix a user of older runx needs
    found.sort(key=lambda item: (" is a retired field" not in item[1], item[0]))
    return found


def case_label(raw: Any, fallback: str) -> str:
    """The name a case or fixture is reported under: its ``name`` if it is a non-empty
    string, else *fallback* (``cases[<i>]`` or the file name)."""
    if isinstance(raw, Mapping):
        name = raw.get("name")
        if isinstance(name, str) and name:
            return name
    return fallback


def normalise_case_name(name: str) -> str:
    """A case name as a run-id part: characters outside ``[A-Za-z0-9_.-]`` become ``_``."""
    return _NAME_CHARS.sub("_", name)


def _fail(label: str, field: str, message: str) -> HarnessParseError:
    return HarnessParseError(f"{label}: {message}", label=label, field=field)


def _structure(raw: Any, cls: type[Any], label: str) -> Any:
    if not isinstance(raw, Mapping):
        raise _fail(label, "", f"expected a mapping, got {_show(raw)}")
    try:
        return converter.structure(dict(raw), cls)
    except (BaseValidationError, TypeError, ValueError, KeyError) as exc:
        problems = _messages(exc) or [("", str(exc))]
        field = problems[0][0]
        raise _fail(label, field, "; ".join(m for _, m in problems)) from None


def _check_output(label: str, where: str, output: OutputExpect) -> None:
    given = [k for k, v in (("exact", output.exact is not MISSING),
                            ("subset", output.subset is not None)) if v]
    if len(given) != 1:
        raise _fail(label, where, f"{where} needs exactly one of exact or subset")


def _check_common(label: str, caller: Caller, expect: Expect) -> None:
    for key in ("http_responses", "http_exchanges"):
        if getattr(caller, key):
            raise _fail(label, f"caller.{key}",
                        f"caller.{key} must be empty (HTTP replay is not supported)")
    if expect.status is not None and expect.status not in EXPECT_STATUSES:
        raise _fail(label, "expect.status",
                    f"expect.status: {expect.status!r} is not one of "
                    f"{', '.join(EXPECT_STATUSES)}")
    if expect.receipt is not None and expect.receipt.state is not None \
            and expect.receipt.state not in _RECEIPT_STATES:
        raise _fail(label, "expect.receipt.state",
                    f"expect.receipt.state: {expect.receipt.state!r} is not sealed or deferred")
    if expect.output is not None:
        _check_output(label, "expect.output", expect.output)
    for step, output in (expect.step_outputs or {}).items():
        _check_output(label, f"expect.step_outputs.{step}", output)


def parse_case(raw: Any, index: int) -> Case:
    """Structure ``harness.cases[index]`` (§8.2).

    Raises:
        HarnessParseError: unknown or retired keys, wrong types, an unknown
            ``expect.status``, non-empty ``caller.http_*``, an ``expect.output`` without
            exactly one of ``exact`` / ``subset``.
    """
    label = case_label(raw, f"cases[{index}]")
    case: Case = _structure(raw, Case, label)
    if not case.name:
        raise _fail(label, "name", "name must be non-empty")
    _check_common(label, case.caller, case.expect)
    return case


def _normalise_setup_path(label: str, ref: str) -> str:
    if not ref or ref.startswith("/") or "\\" in ref or re.match(r"^[A-Za-z]:", ref):
        raise _fail(label, "setup.receipts",
                    f"setup.receipts: {ref!r} must be a package-relative path")
    parts = [p for p in PurePosixPath(ref).parts if p not in ("", ".")]
    if not parts or ".." in parts:
        raise _fail(label, "setup.receipts",
                    f"setup.receipts: {ref!r} must stay inside the package")
    path = "/".join(parts)
    if not path.endswith(".json"):
        raise _fail(label, "setup.receipts", f"setup.receipts: {ref!r} is not a .json file")
    return path


def parse_fixture(raw: Any, path: Path) -> FixtureFile:
    """Structure a fixture file read from *path* (§8.2).

    Raises:
        HarnessParseError: as :func:`parse_case`; an unknown ``kind``; a missing
            ``target`` (required except for ``agent_task``); an unsupported kind (``mcp``,
            ``a2a``, ``agent``, ``agent_task``); more than 32, duplicate or non-package
            ``setup.receipts``; ``metadata.graph_shape: fixture_replay``.
    """
    label = case_label(raw, path.name)
    fixture: Fixture = _structure(raw, Fixture, label)
    if not fixture.name:
        raise _fail(label, "name", "name must be non-empty")
    if fixture.kind not in FIXTURE_KINDS:
        raise _fail(label, "kind", f"kind: {fixture.kind!r} is not one of "
                    f"{', '.join(FIXTURE_KINDS)}")
    if fixture.target is None and fixture.kind != "agent_task":
        raise _fail(label, "target", "target is required")
    if fixture.kind not in SUPPORTED_FIXTURE_KINDS:
        raise _fail(label, "kind", f"kind: {fixture.kind} fixtures are not supported by "
                    "this host")
    if fixture.metadata.get("graph_shape") == "fixture_replay":
        raise _fail(label, "metadata.graph_shape",
                    "metadata.graph_shape: fixture_replay is not supported by this host")
    receipts = [_normalise_setup_path(label, ref) for ref in fixture.setup.receipts]
    if len(receipts) > MAX_SETUP_RECEIPTS:
        raise _fail(label, "setup.receipts",
                    f"setup.receipts: at most {MAX_SETUP_RECEIPTS} receipts, got {len(receipts)}")
    if len(set(receipts)) != len(receipts):
        raise _fail(label, "setup.receipts", "setup.receipts: duplicate paths")
    _check_common(label, fixture.caller, fixture.expect)
    return FixtureFile(attrs.evolve(fixture, setup=Setup(receipts=tuple(receipts))), path)
