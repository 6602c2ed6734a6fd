"""The Watcher (spec §6.7, §6.8; §8.5 #94-#97; RUN-EXE-17, INV-34).

Every timed test runs on trio's MockClock with autojump (the ``autojump_clock`` fixture of
pytest-trio): sleeps advance virtual time only, so the timings asserted are exact.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing

from runx_actors import effect
from runx_actors.protocol.errors import (
    ExecutionAbortedError,
    ExecutionNotFoundError,
    OutcomeCollectedError,
    OutcomeNotReadyError,
    OutcomeUnavailableError,
    SettlementsEvictedError,
    ValidationError,
)

KEY = effect.AssignmentKey("scope", "run-1", "effect-1")
KEY2 = effect.AssignmentKey("scope", "run-1", "effect-2")
OUTCOME = effect.Outcome(KEY, effect.Unknown("done"))
OUTCOME2 = effect.Outcome(KEY2, effect.Cancelled("stop"))


class FakePort:
    """An ExecutionPort whose reads and attachments the test scripts."""

    def __init__(self) -> None:
        self.outcomes: dict[effect.AssignmentKey, effect.Outcome] = {}
        self.read_errors: dict[effect.AssignmentKey, list[Exception]] = {}
        self.attach_states: dict[effect.AssignmentKey, effect.AttachmentState] = {}
        self.reads: list[tuple[float, effect.AssignmentKey]] = []
        self.attached: list[effect.Assignment] = []
        self.read_gate: trio.Event | None = None

    def read_count(self, key: effect.AssignmentKey = KEY) -> int:
        return sum(1 for _, k in self.reads if k == key)

    async def validate(self, a: effect.Assignment) -> effect.ToolFailure | None:
        raise AssertionError("the Watcher never validates")

    async def dispatch(self, a: effect.Assignment) -> None:
        raise AssertionError("the Watcher never dispatches")

    async def attach(self, a: effect.Assignment) -> effect.Attachment:
        await trio.lowlevel.checkpoint()
        self.attached.append(a)
        return effect.Attachment(
            state=self.attach_states.get(a.key, effect.AttachmentState.MISSING))

    async def abort(self, a: effect.Assignment) -> effect.Attachment:
        raise AssertionError("the Watcher never aborts")

    async def get_status(self, key: effect.AssignmentKey) -> effect.ExecutionStatus:
        raise AssertionError("the Watcher reads outcomes, not statuses")

    async def get_outcome(self, key: effect.AssignmentKey) -> effect.Outcome:
        self.reads.append((trio.current_time(), key))
        if self.read_gate is not None:
            await self.read_gate.wait()
        else:
            await trio.lowlevel.checkpoint()
        errors = self.read_errors.get(key)
        if errors:
            raise errors.pop(0)
        if key in self.outcomes:
            return self.outcomes[key]
        raise OutcomeNotReadyError("not yet")

    async def cancel(self, key: effect.AssignmentKey) -> None:
        raise AssertionError("the Watcher never cancels")


class RecoveringPort(FakePort):
    def __init__(self) -> None:
        super().__init__()
        self.recovered: list[tuple[float, effect.AssignmentKey]] = []

    async def recover_execution(self, key: effect.AssignmentKey) -> None:
        await trio.lowlevel.checkpoint()
        self.recovered.append((trio.current_time(), key))


class _Stream:
    def __init__(self, port: NotifyingPort, epoch: str, after: int) -> None:
        self._port = port
        self._send, self._receive = trio.open_memory_channel[Any](100)
        self._send.send_nowait(effect.Settlement(None, port.epoch, port.head))
        port.streams.append(self)
        port.subscriptions.append((epoch, after))

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> effect.Settlement:
        try:
            item = await self._receive.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None
        if isinstance(item, Exception):
            raise item
        assert isinstance(item, effect.Settlement)
        return item

    async def aclose(self) -> None:
        self._port.streams.remove(self)
        await trio.lowlevel.checkpoint()


class NotifyingPort(FakePort):
    """A FakePort that is also a SettlementPort."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch = "epoch-1"
        self.head = 0
        self.streams: list[_Stream] = []
        self.subscriptions: list[tuple[str, int]] = []

    def settlements(self, epoch: str, after: int) -> _Stream:
        return _Stream(self, epoch, after)

    def notify(self, key: effect.AssignmentKey) -> None:
        self.head += 1
        for stream in self.streams:
            stream._send.send_nowait(effect.Settlement(key, self.epoch, self.head))

    def break_streams(self, error: Exception) -> None:
        for stream in list(self.streams):
            stream._send.send_nowait(error)


class Recorder:
    def __init__(self) -> None:
        self.delivered: list[tuple[float, effect.Outcome]] = []
        self.failed: list[tuple[float, effect.AssignmentKey, Exception]] = []

    def deliver(self, outcome: effect.Outcome) -> None:
        self.delivered.append((trio.current_time(), outcome))

    def fail(self, key: effect.AssignmentKey, error: Exception) -> None:
        self.failed.append((trio.current_time(), key, error))

    @property
    def outcomes(self) -> list[effect.Outcome]:
        return [o for _, o in self.delivered]

    @property
    def errors(self) -> list[Exception]:
        return [e for _, _, e in self.failed]


async def test_watcher_read_retries_transport_errors(autojump_clock: Any) -> None:
    """#94: transport errors on get_outcome are retried (paced by reconnect_pause, well
    before poll) and the Outcome is delivered exactly once (INV-34)."""
    port = FakePort()
    port.read_errors[KEY] = [ConnectionResetError("reset"), OSError("eof"),
                             RuntimeError("bad gateway")]
    port.outcomes[KEY] = OUTCOME
    seen = Recorder()
    async with effect.open_watcher(port, poll=30.0, reconnect_pause=1.0, probe=-1) as w:
        start = trio.current_time()
        registration = w.watch(KEY, seen.deliver, seen.fail)
        await trio.sleep(120)
        assert w.statistics().keys == 0
    assert seen.outcomes == [OUTCOME]
    assert seen.failed == []
    assert port.read_count() == 4
    assert seen.delivered[0][0] - start == pytest.approx(1 + 2 + 3)
    assert not registration.active


async def test_watcher_cancel_drops_registration(autojump_clock: Any) -> None:
    """#95: after Registration.cancel() an Outcome is delivered to nobody through it."""
    port = FakePort()
    a, b, c = Recorder(), Recorder(), Recorder()
    async with effect.open_watcher(port, poll=5.0, probe=-1) as w:
        first = w.watch(KEY, a.deliver, a.fail)
        w.watch(KEY, b.deliver, b.fail)
        await trio.sleep(1)
        first.cancel()
        first.cancel()  # idempotent
        assert not first.active
        port.outcomes[KEY] = OUTCOME
        await trio.sleep(10)
        assert a.delivered == [] and b.outcomes == [OUTCOME]

        # cancelling the last registration stops the key's reads altogether
        only = w.watch(KEY2, c.deliver, c.fail)
        await trio.sleep(1)
        only.cancel()
        reads = port.read_count(KEY2)
        port.outcomes[KEY2] = OUTCOME2
        await trio.sleep(60)
        assert port.read_count(KEY2) == reads
        assert c.delivered == [] and c.failed == []
        assert w.statistics().keys == 0


async def test_watcher_cancel_during_read_delivers_to_nobody(autojump_clock: Any) -> None:
    """An Outcome readable only after cancel() is delivered to nobody (§6.8)."""
    port = FakePort()
    port.outcomes[KEY] = OUTCOME
    port.read_gate = trio.Event()
    seen = Recorder()
    async with effect.open_watcher(port, poll=5.0, probe=-1) as w:
        registration = w.watch(KEY, seen.deliver, seen.fail)
        await trio.sleep(1)
        assert port.read_count() == 1  # the read is in flight
        registration.cancel()
        port.read_gate.set()
        await trio.sleep(30)
    assert seen.delivered == [] and seen.failed == []


@pytest.mark.parametrize("error", [
    ExecutionNotFoundError("never accepted"),
    OutcomeUnavailableError("undecodable"),
    OutcomeCollectedError("acknowledged"),
    ExecutionAbortedError("tombstoned"),
], ids=lambda e: type(e).__name__)
async def test_watcher_read_error_taxonomy(autojump_clock: Any, error: Exception) -> None:
    """#96: definitive read errors go to ``fail`` once, to every registration, and the
    key is dropped; nothing is delivered."""
    port = FakePort()
    port.read_errors[KEY] = [error]
    port.outcomes[KEY] = OUTCOME  # would be readable later: must not be delivered
    first, second = Recorder(), Recorder()
    async with effect.open_watcher(port, poll=5.0, probe=-1) as w:
        w.watch(KEY, first.deliver, first.fail)
        w.watch(KEY, second.deliver, second.fail)
        await trio.sleep(60)
        assert w.statistics().keys == 0
    assert first.errors == [error] and second.errors == [error]
    assert first.failed[0][1] == KEY
    assert first.delivered == [] and second.delivered == []
    assert port.read_count() == 1


async def test_watcher_read_error_taxonomy_not_ready_keeps_waiting(autojump_clock: Any) -> None:
    """#96: OutcomeNotReady keeps waiting (read again every ``poll``)."""
    port = FakePort()
    seen = Recorder()
    async with effect.open_watcher(port, poll=10.0, probe=-1) as w:
        w.watch(KEY, seen.deliver, seen.fail)
        await trio.sleep(35)
        assert seen.delivered == [] and seen.failed == []
        assert [t for t, _ in port.reads] == [0.0, 10.0, 20.0, 30.0]
        port.outcomes[KEY] = OUTCOME
        await trio.sleep(10)
    assert seen.outcomes == [OUTCOME] and seen.failed == []


@pytest.mark.parametrize("error", [
    ValueError("garbled"), trio.BrokenResourceError("transport"),
    SettlementsEvictedError("not a read error here"), TimeoutError("slow"),
], ids=lambda e: type(e).__name__)
async def test_watcher_read_error_taxonomy_other_errors_retry(autojump_clock: Any,
                                                              error: Exception) -> None:
    """#96: any other error says nothing about the execution: retried, never failed."""
    port = FakePort()
    port.read_errors[KEY] = [error, error]
    port.outcomes[KEY] = OUTCOME
    seen = Recorder()
    async with effect.open_watcher(port, poll=10.0, reconnect_pause=0.5, probe=-1) as w:
        w.watch(KEY, seen.deliver, seen.fail)
        await trio.sleep(30)
    assert seen.outcomes == [OUTCOME] and seen.failed == []
    assert port.read_count() == 3


async def test_watcher_probe_recovers_orphan_once(autojump_clock: Any) -> None:
    """#97: a key orphaned past ``probe`` triggers one recover_execution; again only after
    it was seen ACTIVE and then orphaned anew."""
    port = RecoveringPort()
    port.attach_states[KEY] = effect.AttachmentState.ORPHANED
    seen = Recorder()
    assignment = effect.Assignment(session="scope", run_id="run-1", effect="effect-1",
                                   body=effect.ToolAssignment(tool_ref="t", arguments="{}"))
    async with effect.open_watcher(port, poll=1000.0, probe=15.0) as w:
        w.watch(KEY, seen.deliver, seen.fail, assignment=assignment)
        await trio.sleep(14)
        assert port.attached == [] and port.recovered == []
        await trio.sleep(2)
        assert [k for _, k in port.recovered] == [KEY]
        assert port.recovered[0][0] == pytest.approx(15.0)
        assert port.attached[0] is assignment  # the registered Assignment is probed
        await trio.sleep(100)
        assert len(port.attached) > 3
        assert len(port.recovered) == 1  # still the same orphaned episode

        port.attach_states[KEY] = effect.AttachmentState.ACTIVE
        await trio.sleep(15)
        assert len(port.recovered) == 1
        port.attach_states[KEY] = effect.AttachmentState.ORPHANED
        await trio.sleep(15)
        assert len(port.recovered) == 2
        assert w.statistics().recoveries == 2

        port.outcomes[KEY] = OUTCOME  # a probe wake-up also reads the key
        await trio.sleep(15)
    assert seen.outcomes == [OUTCOME]


async def test_watcher_probe_disabled_and_without_recoverer(autojump_clock: Any) -> None:
    port = FakePort()
    port.attach_states[KEY] = effect.AttachmentState.ORPHANED
    seen = Recorder()
    async with effect.open_watcher(port, poll=1000.0, probe=-1) as w:
        w.watch(KEY, seen.deliver, seen.fail)
        await trio.sleep(500)
        assert port.attached == []
    async with effect.open_watcher(port, poll=1000.0, probe=5.0) as w:
        w.watch(KEY2, seen.deliver, seen.fail)  # bare key: a key-only Assignment is probed
        await trio.sleep(12)
        assert [a.key for a in port.attached] == [KEY2, KEY2]
        assert w.statistics().recoveries == 0


async def test_watcher_notice_prompts_read(autojump_clock: Any) -> None:
    """A settlement notice makes the Watcher read the key at once (RUN-EXE-17)."""
    port = NotifyingPort()
    seen = Recorder()
    async with effect.open_watcher(port, poll=1000.0, probe=-1) as w:
        await trio.sleep(1)
        assert w.statistics().subscribed and w.statistics().epoch == "epoch-1"
        w.watch(KEY, seen.deliver, seen.fail)
        await trio.sleep(10)
        assert port.read_count() == 1
        port.outcomes[KEY] = OUTCOME
        port.notify(KEY2)  # a notice for an unwatched key is ignored
        port.notify(KEY)
        await trio.sleep(1)
        assert seen.delivered == [(11.0, OUTCOME)]
        assert port.subscriptions == [("", 0)]


async def test_watcher_resubscribes_and_rereads_everything(autojump_clock: Any) -> None:
    """After a broken stream the Watcher pauses ``reconnect_pause``, resubscribes from
    where it was and reads every registered key again."""
    port = NotifyingPort()
    seen = Recorder()
    async with effect.open_watcher(port, poll=1000.0, reconnect_pause=2.0, probe=-1) as w:
        w.watch(KEY, seen.deliver, seen.fail)
        await trio.sleep(1)
        port.notify(KEY2)
        await trio.sleep(1)
        reads = port.read_count()
        port.break_streams(ConnectionResetError("gone"))
        await trio.sleep(1)
        assert not w.statistics().subscribed
        await trio.sleep(2)
        assert w.statistics().subscribed
        assert port.subscriptions == [("", 0), ("epoch-1", 1)]
        assert port.read_count() == reads + 1

        port.break_streams(SettlementsEvictedError("window moved"))
        await trio.sleep(3)
        assert port.subscriptions[-1] == ("", 0)  # evicted: from the head
        assert port.read_count() >= reads + 3  # eviction and resubscription re-read


async def test_watcher_new_epoch_starts_from_its_head(autojump_clock: Any) -> None:
    port = NotifyingPort()
    port.head = 40
    async with effect.open_watcher(port, poll=1000.0, reconnect_pause=1.0, probe=-1) as w:
        w.watch(KEY, Recorder().deliver, Recorder().fail)
        await trio.sleep(1)
        port.epoch, port.head = "epoch-2", 3
        port.break_streams(RuntimeError("executor restarted"))
        await trio.sleep(2)
        port.break_streams(RuntimeError("again"))
        await trio.sleep(2)
    assert port.subscriptions == [("", 0), ("epoch-1", 40), ("epoch-2", 3)]


async def test_watcher_fans_one_read_out(autojump_clock: Any) -> None:
    port = FakePort()
    port.outcomes[KEY] = OUTCOME
    recorders = [Recorder() for _ in range(3)]
    async with effect.open_watcher(port, probe=-1) as w:
        for r in recorders:
            w.watch(KEY, r.deliver, r.fail)
        await trio.sleep(1)
    assert all(r.outcomes == [OUTCOME] for r in recorders)
    assert port.read_count() == 1


async def test_watcher_callback_error_does_not_stop_fan_out(autojump_clock: Any) -> None:
    port = FakePort()
    port.outcomes[KEY] = OUTCOME
    good = Recorder()

    def explode(outcome: effect.Outcome) -> None:
        raise RuntimeError("buggy consumer")

    async with effect.open_watcher(port, probe=-1) as w:
        w.watch(KEY, explode, good.fail)
        w.watch(KEY, good.deliver, good.fail)
        await trio.sleep(1)
        port.outcomes[KEY2] = OUTCOME2
        w.watch(KEY2, good.deliver, good.fail)
        await trio.sleep(1)
    assert good.outcomes == [OUTCOME, OUTCOME2]


async def test_await_outcome(autojump_clock: Any) -> None:
    port = FakePort()
    port.read_errors[KEY2] = [ExecutionAbortedError("tombstone")]
    async with effect.open_watcher(port, poll=3.0, probe=-1) as w:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_set_later, port, 7.0)
            start = trio.current_time()
            assert await w.await_outcome(KEY) == OUTCOME
            assert trio.current_time() - start == pytest.approx(9.0)  # next poll after 7 s
        with pytest.raises(ExecutionAbortedError):
            await w.await_outcome(KEY2)
        with trio.move_on_after(5):
            await w.await_outcome(effect.AssignmentKey("scope", "run-1", "never"))
        assert w.statistics().keys == 0  # the cancelled wait left nothing behind


async def _set_later(port: FakePort, delay: float) -> None:
    await trio.sleep(delay)
    port.outcomes[KEY] = OUTCOME


async def test_watcher_close_releases_waiters(autojump_clock: Any) -> None:
    port = FakePort()
    seen = Recorder()
    async with effect.open_watcher(port, probe=-1) as w:
        registration = w.watch(KEY2, seen.deliver, seen.fail)

        async def waiter() -> None:
            with pytest.raises(trio.ClosedResourceError):
                await w.await_outcome(KEY)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.sleep(1)
            await w.aclose()
        assert w.closed and not registration.active
        await w.aclose()  # idempotent
        with pytest.raises(trio.ClosedResourceError):
            w.watch(KEY, seen.deliver, seen.fail)
    assert seen.delivered == [] and seen.failed == []


@pytest.mark.parametrize("kwargs", [
    {"poll": 0}, {"poll": -1}, {"poll": float("inf")}, {"reconnect_pause": -1},
    {"probe": 0}, {"probe": float("nan")},
])
async def test_watcher_settings_are_validated(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        async with effect.open_watcher(FakePort(), **kwargs):
            pass


async def test_watcher_with_nursery_argument(autojump_clock: Any) -> None:
    port = FakePort()
    port.outcomes[KEY] = OUTCOME
    async with trio.open_nursery() as nursery:
        watcher = effect.Watcher(port, nursery=nursery, probe=-1)
        assert watcher.port is port
        assert await watcher.await_outcome(KEY) == OUTCOME
        await watcher.aclose()


# -- one timer task and short-lived readers for every key (no task per waiting key) -----


def _watcher_tasks() -> list[str]:
    names: list[str] = []
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        if task.name.startswith("runx-watch"):
            names.append(task.name)
        todo.extend(t for n in task.child_nurseries for t in n.child_tasks)
    return names


async def test_watcher_many_waiting_keys_hold_no_task_each(autojump_clock: Any) -> None:
    """Waiting keys cost no task: only the timer task stays while 200 keys wait, each
    is still read every ``poll``, and each Outcome reaches its own key only."""
    port = FakePort()
    keys = [effect.AssignmentKey("scope", "run-1", f"e{i}") for i in range(200)]
    recorders = {k: Recorder() for k in keys}
    async with effect.open_watcher(port, poll=10.0, probe=-1) as w:
        for k in keys:
            w.watch(k, recorders[k].deliver, recorders[k].fail)
        await trio.sleep(1)
        assert _watcher_tasks() == ["runx-watcher-timers"]
        assert w.statistics().keys == 200
        assert all(port.read_count(k) == 1 for k in keys)
        await trio.sleep(10)
        assert all(port.read_count(k) == 2 for k in keys)  # the poll still reads each key
        port.outcomes[keys[7]] = effect.Outcome(keys[7], effect.Unknown("seven"))
        await trio.sleep(10)
        assert recorders[keys[7]].outcomes == [port.outcomes[keys[7]]]
        assert all(r.delivered == [] and r.failed == []
                   for k, r in recorders.items() if k != keys[7])
        assert w.statistics().keys == 199
        assert _watcher_tasks() == ["runx-watcher-timers"]


async def test_watcher_notice_wakes_only_its_key(autojump_clock: Any) -> None:
    """A notice reads the key it names and no other (one reader for every key)."""
    port = NotifyingPort()
    keys = [effect.AssignmentKey("scope", "run-1", f"e{i}") for i in range(50)]
    seen = Recorder()
    async with effect.open_watcher(port, poll=1000.0, probe=-1) as w:
        for k in keys:
            w.watch(k, seen.deliver, seen.fail)
        await trio.sleep(1)
        before = {k: port.read_count(k) for k in keys}
        port.outcomes[keys[3]] = effect.Outcome(keys[3], effect.Unknown("three"))
        port.notify(keys[3])
        await trio.sleep(1)
        assert seen.outcomes == [port.outcomes[keys[3]]]
        assert {k: port.read_count(k) for k in keys if k != keys[3]} == \
            {k: n for k, n in before.items() if k != keys[3]}


async def test_watcher_one_slow_read_delays_no_other_key(autojump_clock: Any) -> None:
    """A read that hangs holds one reader; other keys are still read and delivered."""

    class SlowPort(FakePort):
        async def get_outcome(self, key: effect.AssignmentKey) -> effect.Outcome:
            if key == KEY:
                self.reads.append((trio.current_time(), key))
                await trio.sleep_forever()
            return await super().get_outcome(key)

    port = SlowPort()
    port.outcomes[KEY2] = OUTCOME2
    slow, fast = Recorder(), Recorder()
    async with effect.open_watcher(port, poll=5.0, probe=-1) as w:
        w.watch(KEY, slow.deliver, slow.fail)
        w.watch(KEY2, fast.deliver, fast.fail)
        await trio.sleep(1)
        assert fast.outcomes == [OUTCOME2]
        assert slow.delivered == [] and port.read_count(KEY) == 1
        await trio.sleep(30)
        assert port.read_count(KEY) == 1  # one read of a key at a time, never two


async def test_watcher_cancelling_one_waiter_leaves_the_others(autojump_clock: Any) -> None:
    """Cancelling one await_outcome (or one registration) disturbs no other waiter."""
    port = FakePort()
    keys = [effect.AssignmentKey("scope", "run-1", f"e{i}") for i in range(3)]
    results: dict[int, effect.Outcome] = {}

    async def wait(i: int) -> None:
        results[i] = await w.await_outcome(keys[i])

    async with effect.open_watcher(port, poll=2.0, probe=-1) as w:
        async with trio.open_nursery() as nursery:
            scopes = []
            for i in range(3):
                scope = trio.CancelScope()
                scopes.append(scope)

                async def run(i: int = i, scope: trio.CancelScope = scope) -> None:
                    with scope:
                        await wait(i)

                nursery.start_soon(run)
            shared = Recorder()
            w.watch(keys[0], shared.deliver, shared.fail)  # a second interest in key 0
            await trio.sleep(1)
            scopes[0].cancel()
            await trio.sleep(1)
            assert w.statistics().keys == 3  # key 0 is still watched (the Recorder)
            for k in keys:
                port.outcomes[k] = effect.Outcome(k, effect.Unknown(k.effect))
        assert sorted(results) == [1, 2]
        assert results[1].key == keys[1] and results[2].key == keys[2]
        assert shared.outcomes == [port.outcomes[keys[0]]]
        assert w.statistics().keys == 0


async def test_watcher_close_wakes_every_waiter(autojump_clock: Any) -> None:
    """Closing the Watcher raises ClosedResourceError in every pending await_outcome and
    leaves no task behind."""
    port = FakePort()
    keys = [effect.AssignmentKey("scope", "run-1", f"e{i}") for i in range(20)]
    closed: list[int] = []

    async with effect.open_watcher(port, poll=3.0, probe=-1) as w:

        async def wait(i: int) -> None:
            try:
                await w.await_outcome(keys[i % 10])  # two waiters per key
            except trio.ClosedResourceError:
                closed.append(i)

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(wait, i)
            await trio.sleep(5)
            await w.aclose()
        assert sorted(closed) == list(range(20))
        assert w.statistics().keys == 0
    assert port.read_count(keys[0]) >= 2  # it was polled while waiting


async def test_watcher_keeps_no_deadline_for_finished_or_dropped_keys(
        autojump_clock: Any) -> None:
    """Once no key waits, no timer is pending: an autojumping clock is not pushed to a
    stale poll deadline (e.g. while the owner waits on a thread)."""
    port = NotifyingPort()
    seen = Recorder()
    async with effect.open_watcher(port, poll=100.0, probe=-1) as w:
        w.watch(KEY, seen.deliver, seen.fail)
        dropped = w.watch(KEY2, seen.deliver, seen.fail)
        await trio.testing.wait_all_tasks_blocked()
        assert trio.lowlevel.current_statistics().seconds_to_next_deadline == \
            pytest.approx(100.0)
        port.outcomes[KEY] = OUTCOME
        port.notify(KEY)
        dropped.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert seen.outcomes == [OUTCOME]
        assert trio.lowlevel.current_statistics().seconds_to_next_deadline == math.inf
        assert trio.current_time() == 0.0


class ReceiverRecorder(Recorder):
    """A :class:`effect.Receiver`: the Recorder's lists, filled through the receiver's
    two methods (``watch_for``)."""

    def outcome_arrived(self, outcome: effect.Outcome) -> None:
        self.deliver(outcome)

    def read_failed(self, key: effect.AssignmentKey, error: Exception) -> None:
        self.fail(key, error)


async def test_watch_for_hands_the_outcome_to_the_receiver(autojump_clock: Any) -> None:
    """``watch_for``: one Receiver instead of two callbacks (issue 11: a waiting Run's
    registration holds no bound method). The Outcome reaches ``outcome_arrived``, a
    definitive read error ``read_failed(key, error)``, each once, fanned out beside a
    callback registration of the same key."""
    port = FakePort()
    port.outcomes[KEY] = OUTCOME
    port.read_errors[KEY2] = [ExecutionNotFoundError("never accepted")]
    receiver, plain, failing = ReceiverRecorder(), Recorder(), ReceiverRecorder()
    async with effect.open_watcher(port, probe=-1) as w:
        registration = w.watch_for(KEY, receiver)
        w.watch(KEY, plain.deliver, plain.fail)
        w.watch_for(KEY2, failing)
        assert registration.key == KEY and registration.active
        await trio.sleep(1)
        assert w.statistics().keys == 0
        assert not registration.active
    assert receiver.outcomes == [OUTCOME] and receiver.failed == []
    assert plain.outcomes == [OUTCOME]
    assert failing.delivered == [] and [(k, type(e)) for _, k, e in failing.failed] == [
        (KEY2, ExecutionNotFoundError)]
    assert port.read_count(KEY) == 1 and port.read_count(KEY2) == 1  # one read each


async def test_watch_for_cancel_delivers_to_nobody(autojump_clock: Any) -> None:
    """A cancelled ``watch_for`` registration is dropped like a ``watch`` one: the key's
    reads stop and nothing reaches the receiver."""
    port = FakePort()
    receiver = ReceiverRecorder()
    async with effect.open_watcher(port, poll=5.0, probe=-1) as w:
        registration = w.watch_for(KEY, receiver)
        await trio.sleep(1)
        registration.cancel()
        assert w.statistics().keys == 0
        port.outcomes[KEY] = OUTCOME
        await trio.sleep(60)
    assert receiver.delivered == [] and receiver.failed == []
