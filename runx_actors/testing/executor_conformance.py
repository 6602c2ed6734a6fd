"""The ExecutionPort conformance suite (spec §6; RUN-EXE-3, -12, -13, -16; RUN-CMP-2).

Every scenario is an ``async def test_executor_*(executor_factory)`` written once against
an *executor factory*: a callable that takes the tools a scenario needs (a sequence of
:class:`runx_actors.executors.Tool`) and returns an async context manager yielding a fresh
``ExecutionPort`` that runs exactly those tools. ``lambda tools:
open_local_executor(tools=tools)`` is the LocalExecutor's. An executor of your own runs a
tool of an Assignment by its ``tool_ref``: ``await tool.fn(**arguments)`` (every tool here
is async; with ``tool.context`` true the first argument is an object with
``progress(payload)``), and reports its JSON return value as
``ToolExecutionSucceeded(ToolResult(canonical JSON))``.

What is checked (each assertion message shows the expected and the actual value):

* ``validate`` is side-effect free and names unknown tools (``tool_lookup_failed``) and
  declarations that do not match the tool (``tool_definition_mismatch``);
* ``dispatch`` of a known key is idempotent (the tool starts once, whatever the number of
  dispatches, concurrent or after settlement); other content under the key is refused with
  ``DispatchRejectedError`` (INV-36);
* ``abort`` tombstones a key nothing was accepted for (later dispatches refused, reads
  give ``ExecutionAbortedError``), and returns the live state when an acceptance won
  (INV-31, RUN-EXE-16);
* ``cancel`` stops a running execution and an Outcome still follows;
* reads: unknown keys (``NOT_FOUND`` / ``ExecutionNotFoundError`` / ``MISSING``), a live
  key (``OutcomeNotReadyError``), a settled key (the same Outcome every time);
* acknowledgement (optional ``Acknowledger``): ``StateConflictError`` before settlement,
  idempotent, the record kept, ``OutcomeCollectedError`` afterwards (RUN-EXE-13);
* progress (optional ``ProgressPort``): one generation, sequences increasing from 1, one
  final ``END`` frame (RUN-EXE-12).

Run it with the pytest plugin (``pytest --runx-executor=pkg.mod:factory``) or import the
scenarios into a test module next to an ``executor_factory`` fixture.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeAlias

import attrs
import trio

from .. import effect
from ..executors import Tool, python_tool
from ..protocol.errors import (
    DispatchRejectedError,
    ExecutionAbortedError,
    ExecutionNotFoundError,
    OutcomeCollectedError,
    OutcomeNotReadyError,
    StateConflictError,
)

__all__ = [
    "ExecutorFactory", "Probe", "SCENARIOS", "SESSION", "expect", "local_executor_factory",
    "test_executor_validate", "test_executor_dispatch_is_idempotent",
    "test_executor_different_content_is_rejected", "test_executor_abort_tombstones",
    "test_executor_acceptance_wins_over_abort", "test_executor_cancel",
    "test_executor_outcome_reads", "test_executor_acknowledge", "test_executor_progress",
]

#: ``factory(tools) -> async context manager yielding an ExecutionPort`` running *tools*.
ExecutorFactory: TypeAlias = Callable[[Sequence[Tool]], AbstractAsyncContextManager[Any]]

#: The session (scope) of every Assignment the suite builds.
SESSION = "conformance"
#: Seconds a scenario waits for an Outcome or a start before it fails.
WAIT = 20.0


def local_executor_factory(tools: Sequence[Tool]) -> AbstractAsyncContextManager[Any]:
    """The LocalExecutor over *tools* (the reference executor of the suite)."""
    from ..executors import open_local_executor

    return open_local_executor(tools=list(tools))


def expect(actual: Any, expected: Any, what: str) -> None:
    """``assert actual == expected`` with a message showing both. Hidden from pytest's
    traceback (``__tracebackhide__``): a failure is located at the scenario or state
    machine rule that called it, not here."""
    __tracebackhide__ = True
    if actual != expected:
        raise AssertionError(f"{what}\n  expected: {expected!r}\n  actual:   {actual!r}")


class Probe:
    """The tools of one scenario and what they saw.

    ``count`` (ref ``conformance.count``) records each start and returns
    ``{"run": n, "args": arguments}``; ``gate`` (``conformance.gate``) records its start
    and waits until :meth:`release` (or until cancelled); ``steps`` (``conformance.steps``,
    with context) emits ``n`` progress frames then returns.
    """

    def __init__(self) -> None:
        self.starts: list[str] = []
        self.started = trio.Event()
        self._release = trio.Event()
        params = {"type": "object"}

        async def count(**arguments: Any) -> dict[str, Any]:
            self.starts.append("count")
            self.started.set()
            await trio.lowlevel.checkpoint()
            return {"run": self.starts.count("count"), "args": arguments}

        async def gate(**arguments: Any) -> dict[str, Any]:
            self.starts.append("gate")
            self.started.set()
            await self._release.wait()
            return {"released": True}

        async def steps(context: Any, n: int = 2) -> dict[str, Any]:
            self.starts.append("steps")
            for i in range(n):
                context.progress({"step": i})
                await trio.lowlevel.checkpoint()
            return {"steps": n}

        self.count = python_tool(count, ref="conformance.count", parameters=params)
        self.gate = python_tool(gate, ref="conformance.gate", parameters=params)
        self.steps = python_tool(steps, ref="conformance.steps", context=True,
                                 parameters={"type": "object",
                                             "properties": {"n": {"type": "integer"}}})
        self.tools = [self.count, self.gate, self.steps]

    def release(self) -> None:
        self._release.set()

    def assignment(self, tool: Tool, arguments: Any = None, *, effect_id: str = "effect-1",
                   run_id: str = "run-1") -> effect.Assignment:
        """A tool Assignment declaring exactly what *tool* declares."""
        spec = tool.spec()
        body = effect.ToolAssignment(
            tool_ref=spec.ref, definition_digest=spec.definition_digest,
            arguments=json.dumps(arguments or {}, separators=(",", ":"), sort_keys=True),
            policy=spec.policy, replay=spec.replay, placement=spec.placement)
        return effect.Assignment(session=SESSION, run_id=run_id, step_id="step-1",
                                 call_id=f"call-{effect_id}", effect=effect_id, body=body)


async def outcome_of(port: Any, key: effect.AssignmentKey) -> effect.Outcome:
    """Poll ``get_outcome`` until the key settles (fails after :data:`WAIT` seconds)."""
    with trio.fail_after(WAIT):
        while True:
            try:
                outcome: effect.Outcome = await port.get_outcome(key)
                return outcome
            except OutcomeNotReadyError:
                await trio.sleep(0.001)


async def _started(probe: Probe) -> None:
    with trio.fail_after(WAIT):
        await probe.started.wait()


async def _quiet(port: Any, key: effect.AssignmentKey | None = None) -> None:
    """Let the executor run whatever it (wrongly) started: its tasks and a few ms."""
    for _ in range(20):
        await trio.sleep(0.001)


def _succeeded(outcome: effect.Outcome, what: str) -> Any:
    if not isinstance(outcome.result, effect.ToolExecutionSucceeded):
        raise AssertionError(f"{what}\n  expected: ToolExecutionSucceeded(...)\n"
                             f"  actual:   {outcome.result!r}")
    return json.loads(outcome.result.result.output)


# -- scenarios ----------------------------------------------------------------------------


async def test_executor_validate(executor_factory: ExecutorFactory) -> None:
    """RUN-EXE-5: validate names unknown tools and mismatched declarations, and has no
    side effects."""
    probe = Probe()
    async with executor_factory(probe.tools) as port:
        a = probe.assignment(probe.count, {"x": 1})
        expect(await port.validate(a), None, "validate of a well-declared tool call")
        body = a.body
        assert isinstance(body, effect.ToolAssignment)
        unknown = attrs.evolve(a, body=attrs.evolve(body, tool_ref="conformance.nope"))
        failure = await port.validate(unknown)
        expect(getattr(failure, "class_", failure), effect.ToolFailureClass.TOOL_LOOKUP_FAILED,
               "validate of an unknown tool ref: the failure class")
        mismatch = attrs.evolve(a, body=attrs.evolve(body, definition_digest="sha256:" +
                                                     "0" * 64))
        failure = await port.validate(mismatch)
        expect(getattr(failure, "class_", failure),
               effect.ToolFailureClass.TOOL_DEFINITION_MISMATCH,
               "validate of a declaration whose definition digest differs: the class")
        await _quiet(port)
        expect(probe.starts, [], "tool starts after validate only")
        expect(await port.get_status(a.key), effect.ExecutionStatus.NOT_FOUND,
               "status of a key that was only validated")


async def test_executor_dispatch_is_idempotent(executor_factory: ExecutorFactory) -> None:
    """RUN-EXE-3 / INV-36: the same Assignment dispatched again starts nothing more —
    sequentially, concurrently, after settlement."""
    probe = Probe()
    async with executor_factory(probe.tools) as port:
        a = probe.assignment(probe.count, {"x": 1})
        await port.dispatch(a)
        await port.dispatch(a)
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(port.dispatch, a)
        outcome = await outcome_of(port, a.key)
        expect(outcome.key, a.key, "the Outcome's key")
        expect(_succeeded(outcome, "the Outcome of the dispatched call"),
               {"run": 1, "args": {"x": 1}}, "the tool output")
        await port.dispatch(a)  # after settlement
        await _quiet(port)
        expect(probe.starts, ["count"], "tool starts for one key dispatched six times")
        expect(await port.get_outcome(a.key), outcome, "the Outcome read again")


async def test_executor_different_content_is_rejected(
        executor_factory: ExecutorFactory) -> None:
    """INV-36: other content under a known key is refused; the record is untouched."""
    probe = Probe()
    async with executor_factory(probe.tools) as port:
        a = probe.assignment(probe.count, {"x": 1})
        await port.dispatch(a)
        for other in (probe.assignment(probe.count, {"x": 2}),
                      attrs.evolve(a, call_id="call-other")):
            expect(other.key, a.key, "the changed Assignment keeps the key")
            try:
                await port.dispatch(other)
            except DispatchRejectedError:
                pass
            else:
                raise AssertionError(f"dispatch of different content under a known key\n"
                                     f"  expected: DispatchRejectedError\n"
                                     f"  actual:   accepted ({other.body!r})")
        _succeeded(await outcome_of(port, a.key), "the original call's Outcome")
        await _quiet(port)
        expect(probe.starts, ["count"], "tool starts")


async def test_executor_abort_tombstones(executor_factory: ExecutorFactory) -> None:
    """RUN-EXE-16: abort before any acceptance tombstones the key for good."""
    probe = Probe()
    async with executor_factory(probe.tools) as port:
        a = probe.assignment(probe.count)
        expect((await port.abort(a)).state, effect.AttachmentState.ABORTED,
               "abort of a key nothing was accepted for")
        expect((await port.abort(a)).state, effect.AttachmentState.ABORTED, "abort again")
        try:
            await port.dispatch(a)
        except DispatchRejectedError:
            pass
        else:
            raise AssertionError("dispatch of a tombstoned key\n  expected: "
                                 "DispatchRejectedError\n  actual:   accepted")
        expect(await port.get_status(a.key), effect.ExecutionStatus.ABORTED,
               "status of a tombstoned key")
        expect((await port.attach(a)).state, effect.AttachmentState.ABORTED,
               "attach of a tombstoned key")
        try:
            got: Any = await port.get_outcome(a.key)
        except ExecutionAbortedError:
            got = "ExecutionAbortedError"
        expect(got, "ExecutionAbortedError", "get_outcome of a tombstoned key")
        await _quiet(port)
        expect(probe.starts, [], "tool starts of a tombstoned key")


async def test_executor_acceptance_wins_over_abort(executor_factory: ExecutorFactory) -> None:
    """INV-31: an abort after the acceptance reports the live record and stops nothing."""
    probe = Probe()
    async with executor_factory(probe.tools) as port:
        a = probe.assignment(probe.gate)
        await port.dispatch(a)
        state = (await port.abort(a)).state
        if state not in (effect.AttachmentState.ACTIVE, effect.AttachmentState.ORPHANED):
            raise AssertionError(f"abort after acceptance\n  expected: ACTIVE or ORPHANED\n"
                                 f"  actual:   {state}")
        await _started(probe)
        probe.release()
        _succeeded(await outcome_of(port, a.key), "the accepted call's Outcome")
        expect((await port.abort(a)).state, effect.AttachmentState.TERMINAL,
               "abort of a settled key")
        expect(await port.get_status(a.key), effect.ExecutionStatus.COMPLETED,
               "status after the abort that lost")


async def test_executor_cancel(executor_factory: ExecutorFactory) -> None:
    """RUN-EXE-3: cancel asks a running execution to stop; an Outcome still follows."""
    probe = Probe()
    async with executor_factory(probe.tools) as port:
        a = probe.assignment(probe.gate)
        await port.dispatch(a)
        await _started(probe)
        await port.cancel(a.key)
        outcome = await outcome_of(port, a.key)
        expect(outcome.status(), effect.ExecutionStatus.CANCELLED,
               "the Outcome after cancelling a running tool")
        expect(await port.get_status(a.key), effect.ExecutionStatus.CANCELLED,
               "status after cancel")
        await port.cancel(a.key)  # settled: nothing to stop
        expect(await port.get_outcome(a.key), outcome, "the Outcome after a second cancel")
        expect(probe.starts, ["gate"], "tool starts")


async def test_executor_outcome_reads(executor_factory: ExecutorFactory) -> None:
    """RUN-EXE-3 / §6.7: reads of unknown, live and settled keys."""
    probe = Probe()
    async with executor_factory(probe.tools) as port:
        a = probe.assignment(probe.gate)
        expect(await port.get_status(a.key), effect.ExecutionStatus.NOT_FOUND,
               "status of an unknown key")
        expect((await port.attach(a)).state, effect.AttachmentState.MISSING,
               "attach of an unknown key")
        try:
            got: Any = await port.get_outcome(a.key)
        except ExecutionNotFoundError:
            got = "ExecutionNotFoundError"
        expect(got, "ExecutionNotFoundError", "get_outcome of an unknown key")
        await port.dispatch(a)
        await _started(probe)
        live = await port.get_status(a.key)
        if live not in (effect.ExecutionStatus.ACCEPTED, effect.ExecutionStatus.DISPATCHING,
                        effect.ExecutionStatus.RUNNING):
            raise AssertionError(f"status of a running key\n  expected: ACCEPTED, "
                                 f"DISPATCHING or RUNNING\n  actual:   {live}")
        try:
            got = await port.get_outcome(a.key)
        except OutcomeNotReadyError:
            got = "OutcomeNotReadyError"
        expect(got, "OutcomeNotReadyError", "get_outcome of a running key")
        probe.release()
        outcome = await outcome_of(port, a.key)
        expect(_succeeded(outcome, "the released call"), {"released": True}, "tool output")
        for _ in range(2):
            expect(await port.get_outcome(a.key), outcome, "a settled Outcome read again")
            expect(await port.get_status(a.key), effect.ExecutionStatus.COMPLETED,
                   "status of a settled key")
        expect((await port.attach(a)).state, effect.AttachmentState.TERMINAL,
               "attach of a settled key")


async def test_executor_acknowledge(executor_factory: ExecutorFactory) -> None:
    """RUN-EXE-13 (optional Acknowledger): acknowledgement keeps the record."""
    import pytest

    probe = Probe()
    async with executor_factory(probe.tools) as port:
        capable = isinstance(port, effect.Acknowledger)
        if not capable:
            pytest.skip("the executor has no acknowledge (optional capability)")
        a = probe.assignment(probe.gate)
        for when, error in (("unknown", ExecutionNotFoundError), ("running", StateConflictError)):
            if when == "running":
                await port.dispatch(a)
                await _started(probe)
            try:
                await port.acknowledge(a.key)
                got = "acknowledged"
            except error:
                got = error.__name__
            expect(got, error.__name__, f"acknowledge of a {when} key")
        probe.release()
        await outcome_of(port, a.key)
        await port.acknowledge(a.key)
        await port.acknowledge(a.key)  # idempotent
        expect(await port.get_status(a.key), effect.ExecutionStatus.COMPLETED,
               "status of an acknowledged key")
        expect((await port.attach(a)).state, effect.AttachmentState.TERMINAL,
               "attach of an acknowledged key")
        try:
            got = repr(await port.get_outcome(a.key))
        except OutcomeCollectedError:
            got = "OutcomeCollectedError"
        expect(got, "OutcomeCollectedError", "get_outcome of an acknowledged key")
        await port.dispatch(a)
        await _quiet(port)
        expect(probe.starts, ["gate"], "tool starts after acknowledging then re-dispatching")


async def test_executor_progress(executor_factory: ExecutorFactory) -> None:
    """RUN-EXE-12 (optional ProgressPort): one generation, increasing sequences, END last."""
    import pytest

    probe = Probe()
    async with executor_factory(probe.tools) as port:
        capable = isinstance(port, effect.ProgressPort)
        if not capable:
            pytest.skip("the executor has no progress (optional capability)")
        a = probe.assignment(probe.steps, {"n": 3})
        await port.dispatch(a)
        with trio.fail_after(WAIT):
            frames = [f async for f in port.progress(a.key)]
        kinds = [f.kind for f in frames]
        expect(kinds[-1:], [effect.ProgressKind.END], "the last progress frame's kind")
        expect(kinds.count(effect.ProgressKind.END), 1, "END frames")
        expect({f.generation for f in frames}, {0}, "generations of a first execution")
        sequences = [f.sequence for f in frames]
        expect(sequences, sorted(set(sequences)), "sequences (strictly increasing)")
        if sequences and sequences[0] < 1:
            raise AssertionError(f"first sequence\n  expected: >= 1\n  actual:   "
                                 f"{sequences[0]}")
        payloads = [json.loads(f.payload) for f in frames
                    if f.kind is effect.ProgressKind.TOOL_PROGRESS]
        expect(payloads, [{"step": i} for i in range(3)], "tool progress payloads")
        expect({f.key for f in frames}, {a.key}, "the frames' key")
        _succeeded(await outcome_of(port, a.key), "the stepping call")


SCENARIOS: dict[str, Callable[[ExecutorFactory], Any]] = {
    name: fn for name, fn in globals().items() if name.startswith("test_executor_")
}
