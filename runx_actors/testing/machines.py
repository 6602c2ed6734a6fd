"""Hypothesis state machines for a store of your own (RUN-CMP-2; issue 13 item 7).

:func:`store_machine` builds a ``RuleBasedStateMachine`` that drives *your* store (from a
:data:`~runx_actors.testing.conformance.StoreFactory`) and the in-memory reference store
side by side: the same creations, the loop's next commands (``plan_next`` on the
reference's snapshot: prepare, withdraw, start, settle with every outcome, approve), any
command family whether the state allows it or not (refusals must agree), replays of
earlier command ids with the same or different content (first wins), takeovers (a new
writer opens the scope), commits through the fenced writers, and batches of 2–3 such
commands (RUN-CMT-9), which your store must answer as the reference answers the same
requests committed one by one, stopping at the first refusal. After every step the
answers (accepted / already applied / the refusal's class), the facts of each group, each
Run's record and the loaded snapshot must be the reference's; a disagreement fails with
the expected (reference) and the actual (your store) value.

:func:`run_store_machine` runs it (bounded by the hypothesis profile in force, or the
``settings`` you pass). The pytest plugin runs it as ``test_store_machine`` with
``--runx-store``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from ..protocol import commands as C
from ..protocol.commit import CommitRequest, CommitStatus, Snapshot, envelope
from ..protocol.errors import RunxError
from ..protocol.plan import (
    NeedModelRequest,
    StartModelCall,
    StartToolCalls,
    WithdrawPrepared,
    plan_next,
    recovery_command,
    recovery_targets,
)
from ..protocol.state import ModelStep, ToolStep
from ..protocol.values import ModelStepStatus, NewRun, ResponsePolicy, RunStatus, ToolCallStatus
from ..store.base import commit_batch
from . import builders as b
from ._trio_thread import Hosted, TrioLoopThread
from .conformance import StoreFactory
from .executor_conformance import expect

__all__ = ["store_machine", "run_store_machine", "differences", "FAMILIES", "SCOPE", "RUNS"]

SCOPE = "machine"
RUNS = 2
MAX_TAKEOVERS = 2
#: Command families the "any command" rule draws from.
FAMILIES = ("accept_input", "prepare", "prepare_stale", "withdraw", "start_model",
            "model_tools", "model_text", "model_malformed", "model_failed", "recover",
            "start_tool", "tool_ok", "tool_failed", "tool_unknown", "approve", "reject",
            "decline", "cancel")
#: The tools every Prepare offers: t0 direct, t1 behind an approval.
TOOLS = ("t0", b.tool_spec("t1", policy=ResponsePolicy.APPROVAL_REQUIRED))


@attrs.frozen
class Submitted:
    r: int
    cid: str
    command: C.Command
    base: int


def _run(r: int) -> str:
    return f"run-{r}"


def build(state: Any, position: int, family: str, index: int) -> tuple[str, C.Command, int] | None:
    """The command *family* names on the reference snapshot (None: no target at all).

    Builders derive; they do not check that the state allows the command, so this is what
    a confused or late caller sends too."""
    base = position
    try:
        if family == "accept_input":
            cid, cmd = b.accept_input(state, f"in-{index + 1}")
        elif family == "prepare":
            cid, cmd = b.prepare(state, position, tools=TOOLS)
        elif family == "prepare_stale":
            base = max(position - 1, 0)
            cid, cmd = b.prepare(state, base, tools=TOOLS)
        elif family == "cancel":
            cid, cmd = b.cancel(state)
        elif family == "withdraw":
            cid, cmd = b.withdraw(state)
        elif family == "start_model":
            cid, cmd = b.start_model(state)
        elif family == "model_tools":
            cid, cmd = b.model_result(state, tool_calls=[("t0", "{}"), ("t1", "{}")])
        elif family == "model_text":
            cid, cmd = b.model_result(state, text="done")
        elif family == "model_malformed":
            cid, cmd = b.reject_model_result(state)
        elif family == "model_failed":
            cid, cmd = b.model_failure(state)
        elif family == "recover":
            targets = recovery_targets(state)
            if not targets:
                return None
            cid, cmd = recovery_command(targets[index % len(targets)])
        elif family == "start_tool":
            cid, cmd = b.start_tool(state, index)
        elif family == "tool_ok":
            cid, cmd = b.tool_result(state, index, '{"ok":true}')
        elif family in ("tool_failed", "tool_unknown"):
            from ..protocol.values import FailureClass, ToolFailureOutcome

            unknown = family == "tool_unknown"
            cid, cmd = b.tool_failure(
                state, index,
                failure_class=FailureClass.EFFECT_UNKNOWN if unknown else
                FailureClass.EXECUTION_FAILED,
                outcome=ToolFailureOutcome.UNKNOWN if unknown else ToolFailureOutcome.KNOWN)
        elif family == "approve":
            cid, cmd = b.approve(state, index)
        elif family == "reject":
            cid, cmd = b.reject(state, index, "no")
        elif family == "decline":
            cid, cmd = b.decline(state, index)
        else:
            raise ValueError(family)
    except (ValueError, AssertionError):  # no such target (no model step, no such call)
        return None
    return cid, cmd, base


def next_family(state: Any, model: str, tool: str) -> tuple[str, int] | None:
    """What the loop (then the executor) does next, following the real ``plan_next``."""
    if state.status is not RunStatus.ACTIVE:
        return None
    action = plan_next(state)
    cur = state.current
    if isinstance(action, NeedModelRequest):
        return "prepare", 0
    if isinstance(action, WithdrawPrepared):
        return "withdraw", 0
    if isinstance(action, StartModelCall):
        return "start_model", 0
    if isinstance(action, StartToolCalls):
        assert isinstance(cur, ToolStep)
        return "start_tool", next(i for i, c in enumerate(cur.calls)
                                  if c.call_id == action.call_ids[0])
    if isinstance(cur, ModelStep) and cur.status is ModelStepStatus.EXECUTING:
        return model, 0
    if isinstance(cur, ToolStep):
        for i, c in enumerate(cur.calls):
            if c.status is ToolCallStatus.EXECUTING:
                return tool, i
            if c.status is ToolCallStatus.WAITING:
                return "approve", i
    return None


async def _commit(writer: Any, request: CommitRequest) -> tuple[str, tuple[Any, ...]]:
    try:
        result = await writer.run_store().commit(request)
    except RunxError as exc:
        return type(exc).__name__, ()
    status = "accepted" if result.status is CommitStatus.ACCEPTED else "already_applied"
    return status, tuple(result.facts)


class _OneByOne:
    """The reference's RunStore without ``commit_batch``: ``store.base.commit_batch``
    commits a batch's requests one by one through it (the definition, RUN-CMT-9)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def commit(self, request: CommitRequest) -> Any:
        return await self.inner.commit(request)


async def _batch(writer: Any, requests: list[CommitRequest], one_by_one: bool
                 ) -> tuple[str, tuple[Any, ...]]:
    """(the refusal's class or "done", ((status, facts) per evaluated request))."""
    rs = writer.run_store()
    try:
        result = await commit_batch(_OneByOne(rs) if one_by_one else rs, requests)
    except RunxError as exc:
        return type(exc).__name__, ()
    answers = tuple((r.status.value, tuple(r.facts)) for r in result.results)
    return ("done" if result.error is None else type(result.error).__name__), answers


async def _create(writer: Any, r: int) -> tuple[str, tuple[Any, ...]]:
    try:
        result = await writer.create_run(NewRun(_run(r)), [b.agent_input("in-0")],
                                         commit_id=f"create:{_run(r)}")
    except RunxError as exc:
        return type(exc).__name__, ()
    return result.status.value, tuple(result.facts)


async def _view(writer: Any, run_id: str) -> tuple[Any, Any, Any]:
    """(facts, record, load) of one Run (an error's class name in place of a value)."""
    out: list[Any] = []
    reads: tuple[Callable[[], Any], ...] = (
        lambda: writer.run_facts(run_id), lambda: writer.record(run_id),
        lambda: writer.run_store().load(run_id))
    for read in reads:
        try:
            out.append(await read())
        except RunxError as exc:
            out.append(type(exc).__name__)
    return out[0], out[1], out[2]


#: Differences :func:`differences` lists before it says how many more there are.
MAX_DIFFERENCES = 8


def differences(actual: Any, expected: Any, path: str = "value", *,
                limit: int = MAX_DIFFERENCES) -> list[str]:
    """Where *actual* and *expected* differ: for each differing leaf the lines
    ``<path>:`` / ``  expected: <e!r>`` / ``  actual:   <a!r>``, the path going through
    tuple/list indexes (``[2]``), mapping keys (``['k']``) and attrs fields
    (``.status``), so a state machine failure shows the differing fact or field, not two
    whole snapshots. A length difference is one entry (``expected: 3 items`` /
    ``actual: 2 items (missing: ...)``) after the common prefix's. At most *limit*
    entries, then ``... and N more``."""
    found: list[tuple[str, str, str]] = []
    _diff(actual, expected, path, found)
    if not found:  # unequal, yet no differing part found: show both
        found = [(path, repr(expected), repr(actual))]
    out: list[str] = []
    for where, want, got in found[:limit]:
        out += [f"{where}:", f"  expected: {want}", f"  actual:   {got}"]
    if len(found) > limit:
        out.append(f"... and {len(found) - limit} more")
    return out


def _diff(a: Any, e: Any, path: str, out: list[tuple[str, str, str]]) -> None:
    if a == e:
        return
    if type(a) is not type(e):
        out.append((path, repr(e), repr(a)))
    elif isinstance(e, (tuple, list)):
        for i, (x, y) in enumerate(zip(a, e, strict=False)):
            _diff(x, y, f"{path}[{i}]", out)
        if len(a) > len(e):
            out.append((path, f"{len(e)} items", f"{len(a)} items (extra: {a[len(e):]!r})"))
        elif len(a) < len(e):
            out.append((path, f"{len(e)} items", f"{len(a)} items (missing: {e[len(a):]!r})"))
    elif isinstance(e, dict):
        for k in sorted(set(a) | set(e), key=repr):
            if k in a and k in e:
                _diff(a[k], e[k], f"{path}[{k!r}]", out)
            else:
                out.append((f"{path}[{k!r}]", repr(e[k]) if k in e else "(absent)",
                            repr(a[k]) if k in a else "(absent)"))
    elif attrs.has(type(e)):
        before = len(out)
        for f in attrs.fields(type(e)):
            _diff(getattr(a, f.name), getattr(e, f.name), f"{path}.{f.name}", out)
        if len(out) == before:  # equal fields, unequal objects (a custom __eq__)
            out.append((path, repr(e), repr(a)))
    else:
        out.append((path, repr(e), repr(a)))


def store_machine(factory: StoreFactory) -> type[RuleBasedStateMachine]:
    """A state machine comparing the store *factory* makes with the memory store."""

    class StoreAgreesWithReference(RuleBasedStateMachine):
        submitted = Bundle("submitted")

        def __init__(self) -> None:
            super().__init__()
            self.loop = TrioLoopThread()
            self.hosts = [Hosted(self.loop, factory),
                          Hosted(self.loop, _memory_factory)]
            self.stores = [h.value for h in self.hosts]
            self.writers = [self.loop.call(s.open, SCOPE) for s in self.stores]
            self.fenced: list[list[Any]] = []
            self.created: set[int] = set()
            self.takeovers = 0

        def teardown(self) -> None:
            for h in self.hosts:
                h.close()
            self.loop.close()

        # -- the two sides ------------------------------------------------------------
        def _both(self, what: str, afn: Callable[..., Any], *args_per_side: Any,
                  parts: tuple[str, ...] = ()) -> Any:
            """*afn* on your store and on the reference; AssertionError listing where the
            answers differ (*parts*: the names of a tuple answer's items)."""
            __tracebackhide__ = True  # the failure is located at the rule / invariant
            yours, ref = (self.loop.call(afn, *args) for args in args_per_side)
            if yours != ref:
                if parts and len(yours) == len(ref) == len(parts):
                    lines = [line for name, a, e in zip(parts, yours, ref, strict=True)
                             if a != e for line in differences(a, e, name)]
                else:
                    lines = differences(yours, ref)
                raise AssertionError(
                    f"{what}: your store (actual) vs the reference (expected) differ at\n"
                    + "\n".join(f"  {line}" for line in lines))
            return ref

        def _snapshot(self, r: int) -> Snapshot | None:
            if r not in self.created:
                return None
            try:
                snap: Snapshot = self.loop.call(self.writers[1].run_store().load, _run(r))
            except RunxError:
                return None
            return snap

        def _submit(self, r: int, built: tuple[str, C.Command, int] | None,
                    writers: list[Any] | None = None) -> Any:
            if built is None:
                return None
            cid, cmd, base = built
            request = CommitRequest(base, envelope(_run(r), cid, cmd))
            pair = writers or self.writers
            self._both(f"commit {type(cmd).__name__} to {_run(r)} (base {base})", _commit,
                       (pair[0], request), (pair[1], request))
            return Submitted(r, cid, cmd, base)

        # -- rules --------------------------------------------------------------------
        @rule(r=st.integers(0, RUNS - 1))
        def create(self, r: int) -> None:
            self._both(f"create {_run(r)}", _create, (self.writers[0], r), (self.writers[1], r))
            self.created.add(r)

        @rule(target=submitted, r=st.integers(0, RUNS - 1),
              model=st.sampled_from(["model_tools", "model_tools", "model_text",
                                     "model_malformed", "model_failed"]),
              tool=st.sampled_from(["tool_ok", "tool_ok", "tool_failed", "tool_unknown"]))
        def loop_step(self, r: int, model: str, tool: str) -> Any:
            snap = self._snapshot(r)
            nxt = None if snap is None else next_family(snap.state, model, tool)
            if snap is None or nxt is None:
                return None
            return self._submit(r, build(snap.state, snap.position, *nxt))

        @rule(target=submitted, r=st.integers(0, RUNS - 1), family=st.sampled_from(FAMILIES),
              index=st.integers(0, 1))
        def any_command(self, r: int, family: str, index: int) -> Any:
            snap = self._snapshot(r)
            if snap is None:
                return None
            return self._submit(r, build(snap.state, snap.position, family, index))

        @rule(old=submitted, fresh=st.booleans())
        def replay(self, old: Any, fresh: bool) -> None:
            if old is None:
                return
            command = old.command
            snap = self._snapshot(old.r)
            if fresh and snap is not None:  # the same id with other content: first wins
                other = build(snap.state, snap.position, "cancel", 0)
                command = other[1] if other is not None else command
            self._submit(old.r, (old.cid, command, old.base))

        @rule()
        def takeover(self) -> None:
            if self.takeovers >= MAX_TAKEOVERS:
                return
            self.takeovers += 1
            self.fenced.append(self.writers)
            self.writers = [self.loop.call(s.open, SCOPE) for s in self.stores]
            old, new = self.fenced[-1][0].epoch, self.writers[0].epoch
            expect(new > old, True, f"a takeover raises your store's epoch (the fenced "
                                    f"writer's {old}, the new writer's {new})")

        @rule(r=st.integers(0, RUNS - 1), family=st.sampled_from(FAMILIES),
              index=st.integers(0, 1))
        def fenced_commit(self, r: int, family: str, index: int) -> None:
            if not self.fenced:
                return
            snap = self._snapshot(r)
            if snap is None:
                return
            self._submit(r, build(snap.state, snap.position, family, index),
                         writers=self.fenced[-1])

        @rule(target=submitted, r=st.integers(0, RUNS - 1),
              steps=st.lists(st.one_of(st.just(("loop", 0)),  # the loop's chains, often
                                       st.tuples(st.sampled_from(FAMILIES), st.integers(0, 1))),
                             min_size=2, max_size=3),
              model=st.sampled_from(["model_tools", "model_text", "model_failed"]),
              tool=st.sampled_from(["tool_ok", "tool_failed"]), fenced=st.booleans())
        def batch(self, r: int, steps: list[tuple[str, int]], model: str, tool: str,
                  fenced: bool) -> Any:
            snap = self._snapshot(r)
            if snap is None:
                return None
            requests: list[CommitRequest] = []
            state, position = snap.state, snap.position
            for family, index in steps:
                nxt = next_family(state, model, tool) if family == "loop" else (family, index)
                built = None if nxt is None else build(state, position, *nxt)
                if built is None:
                    continue
                cid, cmd, base = built
                requests.append(CommitRequest(base, envelope(_run(r), cid, cmd)))
                try:  # predict the state the next command is built from
                    state, facts = b.decide_and_fold(state, cmd)
                    position += len(facts)
                except RunxError:
                    pass  # a refusal inside the batch: the next is built from the same state
            if not requests:
                return None
            writers = self.fenced[-1] if fenced and self.fenced else self.writers
            names = ", ".join(type(q.envelope.command).__name__ for q in requests)
            self._both(f"batch [{names}] to {_run(r)}", _batch,
                       (writers[0], requests, False), (writers[1], requests, True))
            last = requests[-1]
            return Submitted(r, last.envelope.id, last.envelope.command, last.base)

        # -- invariants -----------------------------------------------------------------
        @invariant()
        def logs_agree(self) -> None:
            for r in sorted(self.created):
                self._both(f"facts, record and load of {_run(r)}", _view,
                           (self.writers[0], _run(r)), (self.writers[1], _run(r)),
                           parts=("facts", "record", "load"))

    return StoreAgreesWithReference


def _memory_factory() -> Any:
    from .conformance import memory_store_factory

    return memory_store_factory()


def run_store_machine(factory: StoreFactory, *, max_examples: int | None = None,
                      stateful_step_count: int = 30) -> None:
    """Run :func:`store_machine` for *factory*; raises AssertionError with the failing
    steps (hypothesis prints them) when your store disagrees with the reference."""
    overrides: dict[str, Any] = {"stateful_step_count": stateful_step_count,
                                 "deadline": None,
                                 "suppress_health_check": [HealthCheck.too_slow]}
    if max_examples is not None:
        overrides["max_examples"] = max_examples
    run_state_machine_as_test(store_machine(factory), settings=settings(**overrides))

