"""A small JSON-Schema subset for checking tool arguments at ``validate`` (RUN-EXE-5).

Supported keywords: ``type`` (a name or a list of names), ``enum``, ``const``,
``properties``, ``required``, ``additionalProperties`` (a bool or a schema), ``items``
(a schema), ``minItems``/``maxItems``, ``minLength``/``maxLength``,
``minimum``/``maximum``. Every other keyword is ignored (treated as satisfied). This is
not a general JSON-Schema implementation: it checks the declarations tools actually use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["schema_errors"]

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
}


def schema_errors(value: Any, schema: Any, path: str = "$") -> list[str]:
    """Return human-readable violations of *schema* by *value* (empty when it conforms).

    *value* is parsed JSON; *schema* a parsed JSON-Schema object (``True``/``{}`` accept
    everything, ``False`` nothing).
    """
    if schema is True or schema is None:
        return []
    if schema is False:
        return [f"{path}: no value is allowed here"]
    if not isinstance(schema, Mapping):
        return [f"{path}: the schema is not an object"]
    errors: list[str] = []
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_TYPES.get(name, lambda _v: True)(value) for name in names):
            return [f"{path}: expected {' or '.join(map(str, names))}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: not one of the allowed values")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: not the required constant")
    if isinstance(value, dict):
        errors.extend(_object_errors(value, schema, path))
    elif isinstance(value, list):
        errors.extend(_array_errors(value, schema, path))
    elif isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']}")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: above {schema['maximum']}")
    return errors


def _object_errors(value: dict[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    properties = schema.get("properties") or {}
    for name in schema.get("required") or ():
        if name not in value:
            errors.append(f"{path}: missing required property {name!r}")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            errors.extend(schema_errors(item, properties[name], f"{path}.{name}"))
        elif extra is False:
            errors.append(f"{path}: unexpected property {name!r}")
        elif isinstance(extra, Mapping):
            errors.extend(schema_errors(item, extra, f"{path}.{name}"))
    return errors


def _array_errors(value: list[Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(f"{path}: fewer than {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path}: more than {schema['maxItems']} items")
    items = schema.get("items")
    if isinstance(items, Mapping | bool):
        for index, item in enumerate(value):
            errors.extend(schema_errors(item, items, f"{path}[{index}]"))
    return errors
