"""One behaviour for every public async context manager that owns a trio nursery
(RUN-ACT-10): an exception raised by the caller's ``async with`` body comes out as
itself, never wrapped in the ``ExceptionGroup`` of the nursery it crossed.

Trio's nurseries are strict (every error leaves a nursery in an ``ExceptionGroup``), so a
``yield`` inside ``async with trio.open_nursery()`` hands the body's ``ValueError`` back as
``ExceptionGroup([ValueError])`` — or, with three nested managers, three groups deep.
Trio's guide ("Designing for multiple errors") leaves the unwrapping to the context
manager: only the manager knows that the group holds nothing but the body's own error.

:func:`body_errors_unwrapped` wraps such a manager. When the body raised *exc* and the
group the manager raised on exit holds nothing but *exc* and ``trio.Cancelled`` (the
cancellation the body's error caused in the background tasks), *exc* is re-raised as it
was raised (the same object, its ``__cause__`` and ``__context__`` untouched). A
background task's own error is never dropped: the group comes out as it is — one
``ExceptionGroup`` whose leaves are the task's error (and ``Cancelled``/the body's error,
when the body had raised too). A ``Cancelled`` dropped here is never the only sign of a
cancellation: trio re-delivers an outer scope's cancellation at the next checkpoint.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import ParamSpec, TypeVar

import trio

__all__ = ["body_errors_unwrapped", "only_body_error", "UnwrappingContext"]

T = TypeVar("T")
P = ParamSpec("P")


def only_body_error(group: BaseExceptionGroup, body: BaseException) -> bool:
    """Whether *group* (nested groups flattened) holds *body* itself and nothing else but
    ``trio.Cancelled``."""
    found = False
    stack: list[BaseException] = [group]
    while stack:
        item = stack.pop()
        if isinstance(item, BaseExceptionGroup):
            stack.extend(item.exceptions)
        elif item is body:
            found = True
        elif not isinstance(item, trio.Cancelled):
            return False
    return found


class UnwrappingContext(AbstractAsyncContextManager[T]):
    """*inner* (an async context manager) whose exit re-raises the body's own exception
    unwrapped when the group *inner* raised holds nothing else (see the module doc)."""

    __slots__ = ("_inner",)

    def __init__(self, inner: AbstractAsyncContextManager[T]) -> None:
        self._inner = inner

    async def __aenter__(self) -> T:
        return await self._inner.__aenter__()

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> bool | None:
        try:
            return await self._inner.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            if exc is None or not only_body_error(group, exc):
                raise
        # the group held only the body's error: returning False makes ``async with``
        # re-raise that very exception, outside any ``except`` (its context untouched)
        return False


def body_errors_unwrapped(
    fn: Callable[P, AbstractAsyncContextManager[T]],
) -> Callable[P, AbstractAsyncContextManager[T]]:
    """Decorate an async context manager factory (``@asynccontextmanager`` function)
    so that its managers are :class:`UnwrappingContext` (the body's error comes out
    unwrapped; RUN-ACT-10)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> AbstractAsyncContextManager[T]:
        return UnwrappingContext(fn(*args, **kwargs))

    return wrapper
