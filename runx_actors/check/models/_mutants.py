"""Single-edit mutants of the real protocol core, for the core model's broken variants.

A mutant is the shipped source of one ``runx_actors.protocol`` module with one textual
edit (the bug), executed as a *separate* module object; nothing is patched, the shipped
module is untouched. :func:`mutant_module` builds one; :func:`rebind` copies a shipped
function with some of its globals replaced (so the real ``evaluate_commit`` calls a
mutated ``decide``), which keeps every class (facts, snapshots, errors) the shipped one.

Every edit must match the source exactly once: when the shipped code changes so that an
edit no longer applies, building the variant raises ``MutantError`` instead of silently
checking the unmodified core.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import types
from collections.abc import Callable
from typing import Any

__all__ = ["MutantError", "mutant_module", "mutant_function", "rebind"]


class MutantError(RuntimeError):
    """An edit of a mutant does not match the shipped source exactly once."""


@functools.cache
def mutant_module(module: str, edits: tuple[tuple[str, str], ...]) -> types.ModuleType:
    """The module *module* (dotted name) executed from its source with *edits* applied.

    ``edits`` are ``(old, new)`` pairs of exact source text, each applied once. The result
    is a fresh module named ``<module>__mutant`` in the same package (relative imports
    resolve to the shipped modules). Cached: the same edits give the same module.

    Raises:
        MutantError: an ``old`` text occurs zero or several times.
    """
    shipped = importlib.import_module(module)
    source = inspect.getsource(shipped)
    for old, new in edits:
        count = source.count(old)
        if count != 1:
            raise MutantError(f"{module}: edit {old!r} matches {count} times, expected once")
        source = source.replace(old, new)
    name = f"{module}__mutant"
    mutant = types.ModuleType(name)
    mutant.__package__ = shipped.__package__
    mutant.__file__ = f"<mutant of {shipped.__file__}>"
    exec(compile(source, mutant.__file__, "exec"), mutant.__dict__)
    return mutant


def rebind(func: Callable[..., Any], **globals_: Any) -> Callable[..., Any]:
    """A copy of the shipped function *func* whose globals named in *globals_* are
    replaced (everything else is the shipped module's)."""
    for key in globals_:
        if key not in func.__globals__:
            raise MutantError(f"{func.__qualname__} has no global {key!r}")
    copy = types.FunctionType(func.__code__, {**func.__globals__, **globals_},
                              func.__name__, func.__defaults__, func.__closure__)
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__qualname__ = func.__qualname__ + "[mutant]"
    return copy


def mutant_function(module: str, func: str, edits: tuple[tuple[str, str], ...],
                    **globals_: Any) -> Callable[..., Any]:
    """The function *func* of *module* compiled from its mutated source (see
    :func:`mutant_module`) but bound to the *shipped* module's globals (plus *globals_*),
    so it builds and recognises the shipped classes (``Replay``, ``Append``, facts).

    Raises:
        MutantError: an edit does not match exactly once, or *func* is not a function.
    """
    mutated = getattr(mutant_module(module, edits), func, None)
    if not isinstance(mutated, types.FunctionType):
        raise MutantError(f"{module}.{func} is not a function")
    shipped = importlib.import_module(module)
    copy = types.FunctionType(mutated.__code__, {**shipped.__dict__, **globals_},
                              mutated.__name__, mutated.__defaults__, mutated.__closure__)
    copy.__kwdefaults__ = mutated.__kwdefaults__
    copy.__qualname__ = mutated.__qualname__ + "[mutant]"
    return copy
