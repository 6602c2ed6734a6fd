"""RUN-ACT-10: every public async context manager that owns a nursery lets an exception
raised by the caller's ``async with`` body out as itself (not in an ExceptionGroup); a
background task's own error comes out in an ExceptionGroup (never dropped); a
cancellation is never swallowed.

Each manager is opened the way an application opens it; the background failure is a task
started in the manager's own nursery (the one its workers run in).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from runx_actors._scoped import body_errors_unwrapped, only_body_error
from runx_actors.app import open_sqlite_runtime
from runx_actors.effect import open_watcher
from runx_actors.executors import open_local_executor
from runx_actors.runtime import ActorRuntime, open_runtime
from runx_actors.store.memory import MemoryStore


class Boom(Exception):
    """The background task's failure."""


@contextlib.asynccontextmanager
async def _executor() -> AsyncIterator[tuple[Any, Any]]:
    async with open_local_executor() as ex:
        yield ex, ex._nursery


@contextlib.asynccontextmanager
async def _watcher() -> AsyncIterator[tuple[Any, Any]]:
    async with open_local_executor() as ex, open_watcher(ex) as w:
        yield w, w._nursery


@contextlib.asynccontextmanager
async def _runtime() -> AsyncIterator[tuple[Any, Any]]:
    async with open_local_executor() as ex, open_runtime(MemoryStore(), ex) as rt:
        yield rt, rt.runtime._nursery


@contextlib.asynccontextmanager
async def _actor_runtime() -> AsyncIterator[tuple[Any, Any]]:
    store = MemoryStore()
    async with open_local_executor() as ex:
        writer = await store.open("default")
        async with ActorRuntime(writer, ex) as rt:
            yield rt, rt._nursery


def _sqlite_runtime(tmp: Path) -> Callable[[], Any]:
    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[tuple[Any, Any]]:
        async with open_sqlite_runtime(tmp / "runs.sqlite3", model="", models={}) as rt:
            yield rt, rt.runtime._nursery

    return opened


def _managers(tmp: Path) -> dict[str, Callable[[], Any]]:
    return {"open_local_executor": _executor, "open_watcher": _watcher,
            "open_runtime": _runtime, "ActorRuntime": _actor_runtime,
            "open_sqlite_runtime": _sqlite_runtime(tmp)}


NAMES = ["open_local_executor", "open_watcher", "open_runtime", "ActorRuntime",
         "open_sqlite_runtime"]


@pytest.mark.parametrize("name", NAMES)
async def test_body_error_comes_out_unwrapped(name: str, tmp_path: Path) -> None:
    error = ValueError("from the body")
    cause = KeyError("its cause")
    with pytest.raises(ValueError) as caught:
        async with _managers(tmp_path)[name]():
            raise error from cause
    assert caught.value is error
    assert error.__cause__ is cause  # the caller's chain is left as it was
    assert error.__context__ is None  # not the group it crossed


@pytest.mark.parametrize("name", NAMES)
async def test_body_error_after_a_checkpoint_comes_out_unwrapped(name: str,
                                                                 tmp_path: Path) -> None:
    with pytest.raises(KeyError):
        async with _managers(tmp_path)[name]():
            await trio.lowlevel.checkpoint()
            raise KeyError("k")


@pytest.mark.parametrize("name", NAMES)
async def test_background_failure_comes_out_in_a_group(name: str, tmp_path: Path) -> None:
    async def fail() -> None:
        raise Boom("background")

    reached = False
    with pytest.raises(BaseExceptionGroup) as caught:
        async with _managers(tmp_path)[name]() as (_, nursery):
            nursery.start_soon(fail)
            await trio.sleep_forever()  # cancelled by the task's failure
            reached = True
    assert not reached
    assert caught.group_contains(Boom)


@pytest.mark.parametrize("name", NAMES)
async def test_body_error_and_background_failure_both_come_out(name: str,
                                                               tmp_path: Path) -> None:
    async def fail() -> None:
        raise Boom("background")

    with pytest.raises(BaseExceptionGroup) as caught:
        async with _managers(tmp_path)[name]() as (_, nursery):
            nursery.start_soon(fail)
            await trio.sleep(0)  # let the task run and fail first
            await trio.sleep(0)
            raise ValueError("body")  # pragma: no cover - the failure cancels the body
    assert caught.group_contains(Boom)


@pytest.mark.parametrize("name", NAMES)
async def test_cancellation_is_not_swallowed(name: str, tmp_path: Path) -> None:
    after = False
    with trio.CancelScope() as scope:
        async with _managers(tmp_path)[name]():
            scope.cancel()
            await trio.sleep_forever()
        after = True  # the cancellation must leave the manager
    assert scope.cancelled_caught
    assert not after


@pytest.mark.parametrize("name", NAMES)
async def test_cancelled_raised_in_the_body_propagates(name: str, tmp_path: Path) -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            async with _managers(tmp_path)[name]():
                await trio.lowlevel.checkpoint()
    assert not scope.cancelled_caught  # pytest.raises took it: a Cancelled came out


def test_only_body_error_judges_the_leaves() -> None:
    body = ValueError("b")
    other = KeyError("o")
    cancelled = _a_cancelled()
    assert only_body_error(BaseExceptionGroup("g", [body]), body)
    assert only_body_error(BaseExceptionGroup("g", [BaseExceptionGroup("h", [body]),
                                                    cancelled]), body)
    assert not only_body_error(BaseExceptionGroup("g", [body, other]), body)
    assert not only_body_error(BaseExceptionGroup("g", [cancelled]), body)
    assert not only_body_error(BaseExceptionGroup("g", [ValueError("b")]), body)


def _a_cancelled() -> trio.Cancelled:
    got: list[trio.Cancelled] = []

    async def main() -> None:
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                await trio.lowlevel.checkpoint()
            except trio.Cancelled as exc:
                got.append(exc)
                raise

    trio.run(main)
    return got[0]


async def test_the_decorator_keeps_the_managers_result() -> None:
    @body_errors_unwrapped
    @contextlib.asynccontextmanager
    async def opened(value: int) -> AsyncIterator[int]:
        async with trio.open_nursery():
            yield value

    async with opened(7) as got:
        assert got == 7
