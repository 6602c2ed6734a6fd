"""Tool-argument checking against a tool's JSON Schema at ``validate`` (RUN-EXE-5).

Uses the ``jsonschema`` library (the validator class the schema's ``$schema`` names, or
Draft 2020-12). A schema that is itself invalid is reported as a violation, so a badly
declared tool fails ``validate`` with ``invalid_arguments`` instead of crashing.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import jsonschema_specifications
import referencing.exceptions
import referencing.jsonschema

__all__ = ["schema_errors", "schema_problem"]


@functools.lru_cache(maxsize=1024)
def _validator(schema_text: str) -> Any:
    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


def schema_problem(schema: Any) -> str | None:
    """Why *schema* (parsed JSON) cannot be a tool's parameters schema, or None.

    A tool's arguments are always a JSON object (``arguments_failure``), so the schema
    must be a JSON object that is valid for the validator class :func:`schema_errors`
    uses (the draft its ``$schema`` names — a ``$schema`` jsonschema does not know is
    refused, it would silently be read as 2020-12 —, else Draft 2020-12;
    ``check_schema``), whose
    every ``$ref`` resolves within the schema (nothing is fetched), and which, when it
    has a top-level ``type``, must allow ``"object"`` — otherwise every call
    would fail ``invalid_arguments`` and blame the model for the declaration (RUN-EXE-5).
    """
    if not isinstance(schema, dict):
        return f"the parameters schema must be a JSON object, not {type(schema).__name__}"
    dialect = _unknown_dialect(schema)
    if dialect is not None:
        return dialect
    declared = schema.get("type", "object")
    kinds = declared if isinstance(declared, list) else [declared]
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
        unresolved = _unresolvable_ref(schema, validator)
    except jsonschema.exceptions.SchemaError as exc:
        return f"the parameters schema is invalid: {exc.message}"
    except RecursionError:
        return "the parameters schema is nested too deeply"
    if unresolved is not None:
        return unresolved
    if "object" not in kinds:
        return f"the parameters schema must describe a JSON object, not type {declared!r}"
    return None


def _unknown_dialect(schema: dict[str, Any]) -> str | None:
    """Why *schema*'s ``$schema`` is not a draft jsonschema knows, or None (no
    ``$schema``): ``validator_for`` would quietly fall back to Draft 2020-12."""
    if "$schema" not in schema:
        return None
    uri = schema["$schema"]
    unknown = object()
    if isinstance(uri, str) and jsonschema.validators.validator_for(
            schema, default=unknown) is not unknown:
        return None
    return (f"the parameters schema's $schema {repr(uri)[:80]} is not a JSON Schema draft "
            "the executor knows (e.g. https://json-schema.org/draft/2020-12/schema)")


def _unresolvable_ref(schema: dict[str, Any], validator: Any) -> str | None:
    """Why a ``$ref`` of *schema* cannot be resolved (a JSON pointer to nothing, an
    unknown anchor, a remote URI: nothing is fetched), or None. Walks the schema's
    subschemas as the ``referencing`` library (jsonschema's) sees them for the validator's
    draft, so a ``$ref`` key inside ``enum`` / ``const`` data is not one, and a nested
    ``$id`` changes the base URI."""
    draft = referencing.jsonschema.specification_with(
        validator.META_SCHEMA.get("$schema", ""), default=referencing.jsonschema.DRAFT202012)
    root = draft.create_resource(schema)
    # the metaschemas are known, as to the validator (jsonschema_specifications)
    resolver = jsonschema_specifications.REGISTRY.with_resource(root.id() or "", root
                                                                ).resolver(root.id() or "")
    pending = [(root, resolver)]
    while pending:
        resource, scope = pending.pop()
        contents = resource.contents
        ref = contents.get("$ref") if isinstance(contents, dict) else None
        if isinstance(ref, str):
            try:
                scope.lookup(ref)
            except referencing.exceptions.Unresolvable as exc:
                shown = ref if len(ref) <= 200 else ref[:200] + "..."
                why = ("no such location in the schema"
                       if isinstance(exc, referencing.exceptions.PointerToNowhere) else
                       "no such anchor in the schema"
                       if isinstance(exc, referencing.exceptions.NoSuchAnchor) else
                       "not in the schema, and remote schemas are not fetched")
                return (f"the parameters schema has a $ref that does not resolve: {shown!r} "
                        f"({why})")
        pending.extend((sub, scope.in_subresource(sub)) for sub in resource.subresources())
    return None


def schema_errors(value: Any, schema: Any, path: str = "$") -> list[str]:
    """Return human-readable violations of *schema* by *value* (empty when it conforms).

    *value* is parsed JSON; *schema* a parsed JSON-Schema (``True``/``{}`` accept
    everything, ``False`` nothing). Messages are ``"<path>: <what>"``.
    """
    if schema is None:
        return []
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
    except jsonschema.exceptions.SchemaError as exc:
        return [f"{path}: the tool's schema is invalid: {exc.message}"]
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    out = []
    for error in errors:
        where = path + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        out.append(f"{where}: {error.message}")
    return out
