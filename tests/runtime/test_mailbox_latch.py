"""The actor's mailbox and request latch: lazily built, single receiver, cancel-safe."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from runx_actors.runtime._mailbox import Latch, Mailbox


async def test_latch_wakes_every_waiter_and_survives_cancelled_ones(
        autojump_clock: Any) -> None:
    latch = Latch()
    woken: list[int] = []

    async def wait(i: int, scope: trio.CancelScope) -> None:
        with scope:
            await latch.wait()
            woken.append(i)

    scopes = [trio.CancelScope() for _ in range(4)]
    async with trio.open_nursery() as nursery:
        for i, scope in enumerate(scopes):
            nursery.start_soon(wait, i, scope)
        await trio.testing.wait_all_tasks_blocked()
        scopes[0].cancel()  # the first (lone) waiter leaves
        scopes[2].cancel()  # and one that joined later
        await trio.testing.wait_all_tasks_blocked()
        assert not latch.is_set() and woken == []
        latch.set()
        latch.set()  # idempotent
    assert sorted(woken) == [1, 3]
    await latch.wait()  # already set: a checkpoint only


async def test_latch_single_waiter_cancelled_then_set(autojump_clock: Any) -> None:
    latch = Latch()
    with trio.move_on_after(1):
        await latch.wait()
    latch.set()  # nobody waits any more: nothing to wake
    assert latch.is_set()


async def test_mailbox_is_lazy_and_serves_internal_first(autojump_clock: Any) -> None:
    box = Mailbox(2)
    assert box.empty() and box.statistics().external_used == 0
    got: list[Any] = []

    async def receive() -> None:
        for _ in range(3):
            got.append(await box.get())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.BusyResourceError):
            await box.get()  # one receiver only
        await box.put("external")
        box.put_internal_nowait("internal")
        await trio.testing.wait_all_tasks_blocked()
        box.put_internal_nowait("last")
    assert sorted(got) == ["external", "internal", "last"]
    assert box.empty()
    await box.put("request")
    box.put_internal_nowait("outcome")
    assert box.statistics().external_used == 1 and box.statistics().internal_used == 1
    assert [await box.get(), await box.get()] == ["outcome", "request"]  # internal first
    assert box.empty()


async def test_mailbox_put_waits_for_room(autojump_clock: Any) -> None:
    box = Mailbox(1)
    await box.put(1)
    done = trio.Event()

    async def second() -> None:
        await box.put(2)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set() and box.statistics().senders_waiting == 1
        assert box.get_nowait() == 1
        await done.wait()
    assert box.get_nowait() == 2 and box.get_nowait() is None
    with trio.move_on_after(1):  # cancel-safe while parked
        await box.get()
    box.put_internal_nowait("after")
    assert await box.get() == "after"
