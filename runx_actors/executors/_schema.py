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

__all__ = ["schema_errors"]


@functools.lru_cache(maxsize=1024)
def _validator(schema_text: str) -> Any:
    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


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
