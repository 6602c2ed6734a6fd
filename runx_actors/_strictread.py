"""Strict readers: the one way the project reads YAML, JSON and files it did not write.

Every reader of a package file (``X.yaml``, ``SKILL.md`` front matter, context skills),
a harness case or fixture, an answers file, an ``--input-json`` value, a receipt or a
receipt index goes through this module, so each of them refuses the same things with
the same typed error, :class:`MalformedInputError` (a :class:`~runx_actors.RunxError`
and a :class:`ValueError`). The readers above it re-raise it as their own error
(``PackageError``, ``AnswersError``…) keeping ``source``, ``line`` and ``reason``.

Refused, with ``reason``:

* ``duplicate_key`` — a key twice in one mapping or object (YAML and JSON). Otherwise
  the last one silently wins, and a reviewer reading the first sees another document.
* ``non_finite`` — ``NaN``, ``Infinity`` or a number outside the double range (JSON);
  ``.nan`` / ``.inf`` in YAML.
* ``too_deep`` — nesting deeper than ``max_depth`` (default :data:`MAX_DEPTH` = 64
  arrays/objects or sequences/mappings). JSON is scanned before it is parsed and YAML is
  limited while it is composed, so a hostile document never reaches a ``RecursionError``.
* ``too_large`` — more bytes than the cap of its kind (:data:`LIMITS`, overridable with
  ``RUNX_ACTORS_MAX_<KIND>_BYTES``, see :func:`limit_for`). A file is refused from its
  size before it is read, and never more than ``cap + 1`` bytes are read.
* ``not_regular`` / ``symlink`` — a file that is a symlink, a directory, a device, a
  FIFO or a socket (:func:`read_regular_file` opens with ``O_NOFOLLOW|O_NONBLOCK`` and
  checks ``S_ISREG`` on the open descriptor, so there is no check-then-open race).
* ``yaml_alias`` — YAML aliases that form a cycle or expand the document past
  :data:`MAX_YAML_NODES` nodes (an alias bomb); aliases also count towards the depth.
* ``yaml_merge`` — ``<<`` merge keys (a key may not arrive from elsewhere in the
  document).
* ``utf8`` — bytes that are not UTF-8; ``surrogate`` — a lone surrogate in a string.
* ``syntax`` — anything else the parser refuses (its line is kept when it knows it).
* ``not_mapping`` — a document whose top level must be a mapping and is not (an empty
  document included).

This module does no I/O except in :func:`read_regular_file`; the parsers are pure.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .protocol.canonical import JSONRefusal, refuse_constant, strict_float, strict_object_pairs
from .protocol.errors import RunxError

__all__ = [
    "MAX_DEPTH",
    "MAX_YAML_NODES",
    "LIMITS",
    "MalformedInputError",
    "limit_for",
    "loads_json",
    "loads_yaml",
    "read_regular_file",
    "read_json_file",
    "read_yaml_file",
]

#: The default nesting limit (arrays/objects or sequences/mappings) of every reader.
MAX_DEPTH = 64
#: A YAML document may expand (aliases followed) to at most this many nodes; a 1 MiB
#: document without aliases holds far fewer, an alias bomb far more.
MAX_YAML_NODES = 1_000_000

_MIB = 1024 * 1024
#: Size caps in bytes, by kind of input. ``limit_for(kind)`` applies the environment
#: override ``RUNX_ACTORS_MAX_<KIND>_BYTES`` (kind upper-cased).
LIMITS: Mapping[str, int] = {
    "package_manifest": 1 * _MIB,   # X.yaml
    "skill_md": 1 * _MIB,           # SKILL.md (its front matter is parsed)
    "package_file": 16 * _MIB,      # any other file hashed into the package digest
    "harness_case": 1 * _MIB,       # a harness fixture file
    "answers": 8 * _MIB,            # a resume answers file (or stdin)
    "input_json": 1 * _MIB,         # one --input-json / -i value
    "receipt": 10 * _MIB,           # one receipt file (as verify --receipt input)
    "receipt_index": 64 * _MIB,     # a receipt directory's index file
    "model_response": 8 * _MIB,     # one model response body
    "tool_output": 8 * _MIB,        # one tool result
}


class MalformedInputError(RunxError, ValueError):
    """A document or file was refused by a strict reader.

    Attributes: ``source`` (the file or what was read, e.g. ``"--input-json depth"``),
    ``reason`` (one of the codes in the module docstring), ``line`` (1-based, or
    ``None`` when the parser does not know it).
    """

    source: str
    reason: str
    line: int | None

    def __init__(self, message: str, *, source: str, reason: str,
                 line: int | None = None) -> None:
        where = source if line is None else f"{source}:{line}"
        super().__init__(f"{where}: {message}", source=source, reason=reason, line=line)
        self.source = source
        self.reason = reason
        self.line = line


def limit_for(kind: str, env: Mapping[str, str] | None = None) -> int:
    """The size cap of *kind* (a key of :data:`LIMITS`) in bytes: the environment's
    ``RUNX_ACTORS_MAX_<KIND>_BYTES`` when set to a positive integer, else the default.

    Raises:
        KeyError: *kind* is not a known kind.
        MalformedInputError: the override is set but not a positive integer
            (reason ``bad_limit``).
    """
    default = LIMITS[kind]
    name = f"RUNX_ACTORS_MAX_{kind.upper()}_BYTES"
    text = (os.environ if env is None else env).get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or int(text) <= 0:
        raise MalformedInputError(f"must be a positive integer, not {text[:32]!r}",
                                  source=name, reason="bad_limit")
    return int(text)


# --------------------------------------------------------------------------- text


def _text(data: bytes | bytearray | memoryview | str, source: str, cap: int | None) -> str:
    size = len(data) if isinstance(data, (bytes, bytearray)) else (
        data.nbytes if isinstance(data, memoryview) else None)
    if isinstance(data, str):
        if cap is not None and len(data) > cap:  # each character is at least one byte
            raise _too_large(source, cap)
        if cap is not None and len(data.encode("utf-8", "surrogatepass")) > cap:
            raise _too_large(source, cap)
        return data
    if cap is not None and size is not None and size > cap:
        raise _too_large(source, cap)
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedInputError(f"not valid UTF-8 (byte {exc.start})", source=source,
                                  reason="utf8") from None


def _too_large(source: str, cap: int) -> MalformedInputError:
    return MalformedInputError(f"larger than the limit of {cap} bytes", source=source,
                               reason="too_large")


def _too_deep(source: str, max_depth: int, line: int | None = None) -> MalformedInputError:
    return MalformedInputError(f"nested deeper than {max_depth} levels", source=source,
                               reason="too_deep", line=line)


def _check_surrogates(value: Any, source: str) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            _check_one(item, source)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            for key, sub in item.items():
                if isinstance(key, str):
                    _check_one(key, source)
                stack.append(sub)


def _check_one(text: str, source: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedInputError("a string holds a lone surrogate", source=source,
                                  reason="surrogate") from None


# --------------------------------------------------------------------------- JSON


#: The protocol's strict hooks (one definition of what strict JSON refuses); integers
#: stay ``int`` here, where the protocol's own reader makes every number a double.
_DECODER = json.JSONDecoder(object_pairs_hook=strict_object_pairs, parse_float=strict_float,
                            parse_constant=refuse_constant, strict=True)
#: A JSON string (so brackets inside strings are skipped) or one bracket.
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_OPENERS = frozenset("[{")


def _json_depth_ok(text: str, max_depth: int) -> bool:
    """True when no array/object nests deeper than *max_depth*. Cheap when the text holds
    fewer opening brackets than the limit (no scan at all)."""
    if text.count("[") + text.count("{") <= max_depth:
        return True
    depth = 0
    for match in _STRUCTURE.finditer(text):
        char = match.group()[0]
        if char in _OPENERS:
            depth += 1
            if depth > max_depth:
                return False
        elif char != '"':
            depth -= 1
    return True


def loads_json(data: bytes | bytearray | memoryview | str, *, source: str,
               max_bytes: int | None = None, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one strict JSON document (surrounding whitespace allowed).

    Integers stay ``int`` and fractions ``float``. Refuses what the module docstring
    lists: duplicate keys, NaN/Infinity/out-of-range numbers, nesting past *max_depth*
    (scanned before parsing), more than *max_bytes* bytes, non-UTF-8 bytes, lone
    surrogates, trailing data.

    Raises:
        MalformedInputError: naming *source* (and the line for syntax errors).
    """
    text = _text(data, source, max_bytes)
    if not _json_depth_ok(text, max_depth):
        raise _too_deep(source, max_depth)
    try:
        value = _DECODER.decode(text)
    except JSONRefusal as exc:
        raise MalformedInputError(str(exc), source=source, reason=exc.reason) from None
    except json.JSONDecodeError as exc:
        raise MalformedInputError(f"invalid JSON: {exc.msg} (column {exc.colno})",
                                  source=source, reason="syntax", line=exc.lineno) from None
    except ValueError as exc:  # e.g. an integer with more digits than int() accepts
        raise MalformedInputError(f"invalid JSON: {exc}", source=source,
                                  reason="syntax") from None
    _check_surrogates(value, source)
    return value


# --------------------------------------------------------------------------- YAML


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML is untyped
    """SafeLoader that bounds nesting while composing, bounds alias expansion, refuses
    merge keys, duplicate keys and non-finite floats."""

    def __init__(self, stream: str, *, source: str, max_depth: int) -> None:
        super().__init__(stream)
        self._source = source
        self._max_depth = max_depth
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if self._depth >= self._max_depth:
                raise _too_deep(self._source, self._max_depth, _line(event.start_mark))
            self._depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1
        return super().compose_node(parent, index)

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node, self._source, self._max_depth)
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise MalformedInputError("YAML merge keys (<<) are not accepted",
                                          source=self._source, reason="yaml_merge",
                                          line=_line(key_node.start_mark))
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise MalformedInputError("a mapping key is not a scalar",
                                          source=self._source, reason="syntax",
                                          line=_line(key_node.start_mark)) from None
            if duplicate:
                raise MalformedInputError(f"duplicate key {str(key)[:64]!r}",
                                          source=self._source, reason="duplicate_key",
                                          line=_line(key_node.start_mark))
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_float(self, node: Any) -> float:
        value = float(super().construct_yaml_float(node))
        if not math.isfinite(value):
            raise MalformedInputError(f"{node.value!r} is not a finite number",
                                      source=self._source, reason="non_finite",
                                      line=_line(node.start_mark))
        return value


    def construct_yaml_int(self, node: Any) -> int:
        try:
            return int(super().construct_yaml_int(node))
        except ValueError as exc:  # more digits than int() accepts (sys int_max_str_digits)
            raise MalformedInputError(f"invalid integer: {exc}", source=self._source,
                                      reason="syntax", line=_line(node.start_mark)) from None


_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)
# YAML 1.2's floats that PyYAML's YAML 1.1 resolver reads as strings: an exponent without
# a dot or without a sign (1e308, 2.5e3, .5E-3). Past the double range they are refused
# like .inf (non_finite, construct_yaml_float).
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def _check_expansion(root: Any, source: str, max_depth: int) -> None:
    """Refuse a composed YAML graph whose aliases make it cyclic, nest it past
    *max_depth* or expand it past :data:`MAX_YAML_NODES` nodes (an alias bomb). Iterative,
    each node visited once."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = (1 if children or isinstance(
                node, (yaml.SequenceNode, yaml.MappingNode)) else 0) + max(
                (depth[id(c)] for c in children), default=0)
            if size[key] > MAX_YAML_NODES:
                raise MalformedInputError(
                    f"aliases expand the document past {MAX_YAML_NODES} nodes", source=source,
                    reason="yaml_alias", line=_line(node.start_mark))
            if depth[key] > max_depth:
                raise _too_deep(source, max_depth, _line(node.start_mark))
            continue
        if key in size:
            continue
        if key in on_path:
            raise MalformedInputError("a YAML alias refers to its own ancestor",
                                      source=source, reason="yaml_alias",
                                      line=_line(node.start_mark))
        on_path.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                raise MalformedInputError("a YAML alias refers to its own ancestor",
                                          source=source, reason="yaml_alias",
                                          line=_line(child.start_mark))
            if id(child) not in size:
                stack.append((child, False))


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _line(mark: Any) -> int | None:
    return None if mark is None else int(mark.line) + 1


def loads_yaml(data: bytes | bytearray | memoryview | str, *, source: str,
               max_bytes: int | None = None, max_depth: int = MAX_DEPTH,
               mapping: bool = False) -> Any:
    """Parse one strict YAML document (PyYAML's safe schema, one document).

    Refuses duplicate keys, cyclic or exploding aliases, merge keys, ``.nan``/``.inf``, nesting past
    *max_depth* (limited while composing), more than *max_bytes* bytes and non-UTF-8
    bytes. With ``mapping=True`` the top level must be a mapping (an empty document is
    refused too, reason ``not_mapping``).

    Raises:
        MalformedInputError: naming *source* and, when the parser knows it, the line.
    """
    text = _text(data, source, max_bytes)
    loader: _StrictLoader | None = None
    try:
        # the reader checks the characters in the constructor: inside the try
        loader = _StrictLoader(text, source=source, max_depth=max_depth)
        value = loader.get_single_data()
    except MalformedInputError:
        raise
    except yaml.MarkedYAMLError as exc:
        problem = exc.problem or exc.context or "invalid YAML"
        raise MalformedInputError(f"invalid YAML: {problem}", source=source, reason="syntax",
                                  line=_line(exc.problem_mark)) from None
    except yaml.YAMLError as exc:
        raise MalformedInputError(f"invalid YAML: {exc}", source=source,
                                  reason="syntax") from None
    finally:
        if loader is not None:
            loader.dispose()
    _check_surrogates(value, source)
    if mapping and not isinstance(value, dict):
        kind = "empty" if value is None else f"a {_yaml_kind(value)}"
        raise MalformedInputError(f"the document must be a mapping, and it is {kind}",
                                  source=source, reason="not_mapping")
    return value


def _yaml_kind(value: Any) -> str:
    if isinstance(value, list):
        return "sequence"
    return f"scalar ({type(value).__name__})"


# --------------------------------------------------------------------------- files


def read_regular_file(path: str | os.PathLike[str], *, max_bytes: int,
                      source: str | None = None, follow_symlinks: bool = False) -> bytes:
    """The bytes of the regular file at *path*, at most *max_bytes* of them.

    Opens with ``O_NOFOLLOW | O_NONBLOCK`` (a symlink as the last component is refused, a
    FIFO does not block the open) and checks ``S_ISREG`` on the open descriptor, then
    reads at most ``max_bytes + 1`` bytes, so ``/dev/zero`` or a growing file cannot
    exhaust memory. ``follow_symlinks=True`` (for a file the user names on the command
    line, never for a package file) drops ``O_NOFOLLOW``; the target must still be a
    regular file.

    Raises:
        FileNotFoundError: nothing at *path* (callers give their own message).
        MalformedInputError: a symlink (``symlink``), not a regular file
            (``not_regular``), larger than *max_bytes* (``too_large``), or unreadable
            (``unreadable``).
    """
    name = str(path) if source is None else source
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise MalformedInputError("is a symlink", source=name, reason="symlink") from None
        raise MalformedInputError(f"cannot be opened: {exc.strerror or exc}", source=name,
                                  reason="unreadable") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MalformedInputError(f"is not a regular file ({_mode_name(info.st_mode)})",
                                      source=name, reason="not_regular")
        if info.st_size > max_bytes:
            raise _too_large(name, max_bytes)
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise _too_large(name, max_bytes)
        return b"".join(chunks)
    except OSError as exc:
        raise MalformedInputError(f"cannot be read: {exc.strerror or exc}", source=name,
                                  reason="unreadable") from None
    finally:
        os.close(fd)


def _mode_name(mode: int) -> str:
    for test, label in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                        (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return label
    return "not a regular file"


def read_json_file(path: str | os.PathLike[str], *, max_bytes: int,
                   max_depth: int = MAX_DEPTH) -> Any:
    """:func:`read_regular_file` then :func:`loads_json`, both naming *path*."""
    data = read_regular_file(path, max_bytes=max_bytes)
    return loads_json(data, source=str(path), max_depth=max_depth)


def read_yaml_file(path: str | os.PathLike[str], *, max_bytes: int,
                   max_depth: int = MAX_DEPTH, mapping: bool = False) -> Any:
    """:func:`read_regular_file` then :func:`loads_yaml`, both naming *path*."""
    data = read_regular_file(path, max_bytes=max_bytes)
    return loads_yaml(data, source=str(Path(path)), max_depth=max_depth, mapping=mapping)
