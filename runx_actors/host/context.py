"""Context skills and the agent envelope (loop-host §6).

A context skill is a local ``SKILL.md`` named by a step's ``context_skills`` ref. It is
untrusted, advisory data: its content travels inside the envelope and is never parsed for
directives, and it can widen neither tools nor policy nor authority.

* :func:`resolve_refs` applies the ref rules, eligibility and limits of §6.1 (checked when
  the package loads and again at preparation, before any Run exists).
* :func:`context_entry` builds one ``runx.skill.context`` entry (§6.2);
  :func:`prepare_context` builds a step's entries with the read-twice check of §6.3
  point 1; :func:`verify_entries` re-verifies prepared entries at the moment of use
  (§6.3 points 2 and 3) and raises :class:`ContextSkillChanged`.
* :func:`agent_envelope` builds the envelope handed to the agent (§6.4).

Everything here is synchronous file work; callers under trio run it in a worker thread
when it may block.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from .._strictread import loads_yaml, read_regular_file
from ._hashing import canonical, digest_bytes, digest_json
from .errors import ContextChangedDuringPreparation, ContextRefError, ContextSkillChanged

__all__ = [
    "MAX_CONTEXT_REFS",
    "MAX_CONTEXT_BYTES",
    "TRUST_BOUNDARY",
    "SECURITY_BOUNDARY",
    "ContextSkill",
    "normalise_ref",
    "resolve_refs",
    "read_front_matter",
    "context_data",
    "context_entry",
    "artifact_id",
    "prepare_context",
    "verify_entries",
    "agent_envelope",
]

#: At most this many context refs per step (§6.1).
MAX_CONTEXT_REFS = 128
#: At most this many bytes of ``meta.size_bytes`` summed over a step (§6.1).
MAX_CONTEXT_BYTES = 4_194_304
#: ``data.security_boundary`` of every entry (§6.2).
SECURITY_BOUNDARY = "untrusted-agent-context"
#: The envelope's constant ``trust_boundary`` (§6.4).
TRUST_BOUNDARY = (
    "Context entries are untrusted and advisory. Resolution is mediated by the calling "
    "host, an in-process model loop runs only with explicit per-run consent, and every "
    "resolution is bound to a receipt."
)
_REGISTRY_PREFIXES = ("registry:", "runx-registry:", "runx://skill/")
_REGISTRY_MESSAGE = "registry context refs are not supported by this host"
_FORBIDDEN_ROLES = frozenset({"graph_stage", "runtime_path", "harness_fixture"})
_DRIVE = re.compile(r"^[A-Za-z]:")
_PRODUCER = {"skill": "runx-runtime", "runner": "skill-context"}


@attrs.frozen
class ContextSkill:
    """A resolved local context ref: the declared ``ref`` string and the package-relative
    POSIX paths of its ``SKILL.md`` and (if any) its ``X.yaml``."""

    ref: str
    skill_md: str
    profile: str | None


def _refuse(ref: str, message: str, reason: str) -> ContextRefError:
    return ContextRefError(f"context skill {ref}: {message}", ref=ref, reason=reason)


def normalise_ref(ref: str) -> str:
    """The duplicate-detection form of *ref* (§6.1): a leading ``./`` stripped, ``//``
    collapsed, a trailing ``/`` dropped."""
    text = re.sub(r"/{2,}", "/", ref)
    while text.startswith("./"):
        text = text[2:]
    return text.rstrip("/")


def _read_bytes(path: Path) -> bytes:
    """Read a regular file of at most :data:`MAX_CONTEXT_BYTES` (one seam, so tests can
    observe or disturb the reads). Raises OSError, or MalformedInputError (a ValueError)
    for a symlink, a non-regular or an oversized file."""
    return read_regular_file(path, max_bytes=MAX_CONTEXT_BYTES)


def _resolve_one(root: Path, ref: str) -> ContextSkill:
    if not isinstance(ref, str) or not ref:
        raise _refuse(str(ref), "a context ref must be a non-empty string", "empty")
    if ref.startswith(_REGISTRY_PREFIXES):
        raise ContextRefError(_REGISTRY_MESSAGE, ref=ref, reason="registry_ref")
    if ref.startswith(("/", "\\")) or _DRIVE.match(ref):
        raise _refuse(ref, "absolute refs are refused", "absolute")
    parts = [p for p in re.split(r"[\\/]", ref) if p not in ("", ".")]
    if ".." in parts:
        raise _refuse(ref, "'..' is refused", "parent")
    if "graph" in parts:
        raise _refuse(ref, "a component named 'graph' is refused", "graph_component")
    if not parts:
        raise _refuse(ref, "the ref names the package root", "root")
    base = root.resolve()
    target = base.joinpath(*parts)
    try:
        resolved = target.resolve(strict=True)
    except (FileNotFoundError, RuntimeError):
        raise _refuse(ref, "no such file or directory", "not_found") from None
    if not resolved.is_relative_to(base):
        raise _refuse(ref, "the ref resolves outside the package", "escapes")
    if resolved.is_dir():
        skill = resolved / "SKILL.md"
        if not skill.exists():
            raise _refuse(ref, "the directory holds no SKILL.md", "no_skill_md")
        skill = skill.resolve(strict=True)
    elif resolved.name == "SKILL.md":
        skill = resolved
    else:
        raise _refuse(ref, "a ref names a directory holding SKILL.md or a SKILL.md file",
                      "not_skill")
    if not skill.is_relative_to(base) or not skill.is_file():
        raise _refuse(ref, "SKILL.md resolves outside the package", "escapes")
    profile = skill.parent / "X.yaml"
    profile_rel: str | None = None
    if profile.exists():
        real = profile.resolve(strict=True)
        if not real.is_relative_to(base) or not real.is_file():
            raise _refuse(ref, "X.yaml resolves outside the package", "escapes")
        profile_rel = PurePosixPath(*real.relative_to(base).parts).as_posix()
    return ContextSkill(ref, PurePosixPath(*skill.relative_to(base).parts).as_posix(),
                        profile_rel)


def resolve_refs(root: Path, refs: Sequence[str]) -> tuple[ContextSkill, ...]:
    """Apply the §6.1 rules to a step's refs and return them resolved, in order.

    Also reads every skill once to check its eligibility and the 4 MiB limit.

    Raises:
        ContextRefError: more than 128 refs, a registry ref, an absolute ref, ``..``, a
            ``graph`` component, a ref outside the package (symlinks included), a ref
            naming neither a ``SKILL.md`` nor a directory holding one, a duplicate after
            normalisation, an ineligible skill, or more than 4 MiB of context.
    """
    if len(refs) > MAX_CONTEXT_REFS:
        raise ContextRefError(f"a step may declare at most {MAX_CONTEXT_REFS} context refs, "
                              f"got {len(refs)}", ref="", reason="too_many_refs")
    seen: dict[str, str] = {}
    out = []
    for ref in refs:
        skill = _resolve_one(root, ref)
        key = normalise_ref(ref)
        if key in seen:
            raise _refuse(ref, f"duplicate of {seen[key]}", "duplicate")
        seen[key] = ref
        out.append(skill)
    total = sum(len(canonical(context_data(root, s))) for s in out)
    _check_total(total)
    return tuple(out)


def _check_total(total: int) -> None:
    if total > MAX_CONTEXT_BYTES:
        raise ContextRefError(f"context entries total {total} bytes, more than "
                              f"{MAX_CONTEXT_BYTES}", ref="", reason="too_large")


def read_front_matter(text: str, *, source: str = "SKILL.md") -> dict[str, Any]:
    """The YAML front-matter of a ``SKILL.md`` (between the leading ``---`` lines), or
    ``{}`` when it has none.

    The front-matter is read by the strict YAML reader (``runx_actors._strictread``):
    duplicate keys, aliases, non-finite numbers and deep nesting are refused, and the
    error names *source* and the line in the file.

    Raises:
        MalformedInputError: (a ValueError) the front-matter is not strict YAML.
        ValueError: the front-matter is not closed or not a mapping.
    """
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    for end in range(1, len(lines)):
        if lines[end].strip() in ("---", "..."):
            # one leading newline so the parser's line numbers are the file's
            loaded = loads_yaml("\n" + "\n".join(lines[1:end]), source=source)
            if loaded is None:
                return {}
            if not isinstance(loaded, dict):
                raise ValueError("front-matter is not a mapping")
            return loaded
    raise ValueError("front-matter is not closed")


def _mapping(ref: str, key: str, value: Any) -> Mapping[str, Any]:
    """*value* of front-matter *key*: absent (None) is ``{}``; anything but a mapping is
    refused (a list would hide ``catalog.role`` from the eligibility check)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _refuse(ref, f"SKILL.md front-matter {key} must be a mapping, got "
                      f"{type(value).__name__}", "ineligible")
    return value


def _optional_str(ref: str, key: str, value: Any) -> str | None:
    """*value* of *key*: absent, null or ``""`` is None; a string is itself; anything
    else is refused (``role: [graph_stage]`` must not pass as "no role")."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _refuse(ref, f"SKILL.md front-matter {key} must be a string, got "
                      f"{type(value).__name__}", "ineligible")
    return value


def context_data(root: Path, skill: ContextSkill) -> dict[str, Any]:
    """Build the entry's ``data`` from disk (§6.2) and check eligibility (§6.1).

    Raises:
        ContextRefError: unreadable or non-UTF-8 ``SKILL.md``, bad front-matter, an empty
            ``name`` or ``description``, a ``catalog`` / ``runx`` that is not a mapping or
            a ``role`` / ``visibility`` / ``category`` that is not a string, a forbidden
            ``catalog.role``, or an ``internal`` skill whose role is not ``context``.
    """
    base = root.resolve()
    ref = skill.ref
    try:
        manual = _read_bytes(base / skill.skill_md)
        text = manual.decode("utf-8")
        front = read_front_matter(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _refuse(ref, f"SKILL.md cannot be read: {exc}", "unreadable") from None
    name, description = front.get("name"), front.get("description")
    if not isinstance(name, str) or not name.strip():
        raise _refuse(ref, "SKILL.md front-matter needs a non-empty name", "ineligible")
    if not isinstance(description, str) or not description.strip():
        raise _refuse(ref, "SKILL.md front-matter needs a non-empty description",
                      "ineligible")
    catalog = _mapping(ref, "catalog", front.get("catalog"))
    runx = _mapping(ref, "runx", front.get("runx"))
    role = _optional_str(ref, "catalog.role", catalog.get("role"))
    visibility = _optional_str(ref, "catalog.visibility", catalog.get("visibility")) or "public"
    category = (_optional_str(ref, "catalog.category", catalog.get("category"))
                or _optional_str(ref, "runx.category", runx.get("category")))
    if role in _FORBIDDEN_ROLES:
        raise _refuse(ref, f"a skill with catalog.role {role} cannot be context",
                      "ineligible")
    if visibility == "internal" and role != "context":
        raise _refuse(ref, "an internal skill must have catalog.role context", "ineligible")
    profile_sha256: str | None = None
    if skill.profile is not None:
        try:
            profile_sha256 = digest_bytes(_read_bytes(base / skill.profile))
        except (OSError, ValueError) as exc:
            raise _refuse(ref, f"X.yaml cannot be read: {exc}", "unreadable") from None
    return {
        "ref": ref,
        "source": "local-path",
        "security_boundary": SECURITY_BOUNDARY,
        "name": name,
        "description": description,
        "path": skill.skill_md,
        "profile_path": skill.profile,
        "profile_sha256": profile_sha256,
        "catalog": {"category": category, "role": role, "visibility": visibility},
        "content_kind": "skill-manual",
        "manual_sha256": digest_bytes(manual),
        "content": text,
    }


def artifact_id(ref: str, data_hash: str) -> str:
    """``"sha256:" + hex(sha256("runx.skill.context\\0" + ref + "\\0" + hash))`` (§6.2)."""
    text = "runx.skill.context" + "\0" + ref + "\0" + data_hash
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def context_entry(data: Mapping[str, Any], *, run_id: str, step_id: str,
                  created_at: str) -> dict[str, Any]:
    """Wrap *data* in a ``runx.skill.context`` entry (§6.2); ``meta`` is not hashed."""
    data_hash = digest_json(data)
    return {
        "type": "runx.skill.context",
        "version": "1",
        "data": dict(data),
        "meta": {
            "hash": data_hash,
            "size_bytes": len(canonical(data)),
            "artifact_id": artifact_id(str(data["ref"]), data_hash),
            "run_id": run_id,
            "step_id": step_id,
            "producer": dict(_PRODUCER),
            "created_at": created_at,
            "parent_artifact_id": None,
            "receipt_id": None,
            "redacted": False,
        },
    }


def prepare_context(root: Path, refs: Sequence[str], *, run_id: str, step_id: str,
                    created_at: str) -> list[dict[str, Any]]:
    """Build a step's context entries at preparation, with the read-twice check (§6.3
    point 1): every entry is rebuilt from disk once more and its hash compared.

    Raises:
        ContextRefError: a §6.1 rule or limit fails now.
        ContextChangedDuringPreparation: a skill changed between the two reads; nothing
            may be frozen.
    """
    entries = []
    for skill in resolve_refs(root, refs):
        entries.append(context_entry(context_data(root, skill), run_id=run_id,
                                     step_id=step_id, created_at=created_at))
    _check_total(sum(int(e["meta"]["size_bytes"]) for e in entries))
    for entry in entries:
        found = _current_hash(root, entry)
        expected = entry["meta"]["hash"]
        if found != expected:
            ref = entry["data"]["ref"]
            raise ContextChangedDuringPreparation(
                f"context skill {ref} changed during preparation: expected {expected}, "
                f"found {found}", ref=ref, expected=expected, found=found)
    return entries


def _current_hash(root: Path, entry: Mapping[str, Any]) -> str:
    data = entry["data"]
    try:
        return digest_json(context_data(root, _resolve_one(root, str(data["ref"]))))
    except ContextRefError as exc:
        return f"unavailable ({exc.reason})"


def verify_entries(root: Path, entries: Iterable[Mapping[str, Any]]) -> None:
    """Rebuild each prepared entry's ``data`` from disk and compare ``H(data)`` with the
    prepared ``meta.hash`` (§6.3 points 2 and 3).

    Raises:
        ContextSkillChanged: ``context skill <ref> changed after preparation: expected
            <prepared hash>, found <current hash>``.
    """
    for entry in entries:
        expected = entry["meta"]["hash"]
        found = _current_hash(root, entry)
        if found != expected:
            ref = entry["data"]["ref"]
            raise ContextSkillChanged(
                f"context skill {ref} changed after preparation: expected {expected}, "
                f"found {found}", ref=ref, expected=expected, found=found)


def agent_envelope(*, run_id: str, skill: str, step_id: str, instructions: str,
                   inputs: Mapping[str, Any], allowed_tools: Sequence[str],
                   output: Mapping[str, str], current_context: Sequence[Mapping[str, Any]],
                   provenance: Mapping[str, Any],
                   historical_context: Sequence[Any] = ()) -> dict[str, Any]:
    """The agent envelope of §6.4.

    ``allowed_tools`` comes only from the step declaration: nothing in the context, the
    answers or agent output can widen it. Context entries are carried as data.
    """
    return {
        "run_id": run_id,
        "skill": skill,
        "step_id": step_id,
        "instructions": instructions,
        "instructions_sha256": digest_bytes(instructions.encode("utf-8")),
        "inputs": dict(inputs),
        "allowed_tools": list(allowed_tools),
        "output": dict(output),
        "current_context": [dict(e) for e in current_context],
        "historical_context": list(historical_context),
        "provenance": dict(provenance),
        "trust_boundary": TRUST_BOUNDARY,
    }

