"""An executor written outside runx-actors, and a copy that starts a known key twice."""

import contextlib
import json

import attrs
import trio

from runx_actors import effect
from runx_actors.protocol.errors import (
    DispatchRejectedError,
    ExecutionAbortedError,
    ExecutionNotFoundError,
    OutcomeNotReadyError,
)
from runx_actors.protocol.values import ToolResult

S = effect.ExecutionStatus


@attrs.define
class _Rec:
    a: object
    status: S = S.ACCEPTED
    outcome: object = None
    scope: object = None


class TinyExecutor:
    def __init__(self, tools, nursery, dedupe=True):
        self.tools, self.nursery, self.dedupe = {t.ref: t for t in tools}, nursery, dedupe
        self.recs = {}

    async def validate(self, a):
        tool = self.tools.get(a.body.tool_ref)
        if tool is None:
            return effect.ToolFailure(effect.ToolFailureClass.TOOL_LOOKUP_FAILED, "no tool")
        if a.body.definition_digest != tool.definition_digest:
            return effect.ToolFailure(effect.ToolFailureClass.TOOL_DEFINITION_MISMATCH, "")
        return None

    async def dispatch(self, a):
        await trio.lowlevel.checkpoint()
        rec = self.recs.get(a.key)
        if rec is not None:
            if rec.status is S.ABORTED or rec.a != a:
                raise DispatchRejectedError("refused", key=a.key)
            if self.dedupe:
                return
        self.recs[a.key] = rec = _Rec(a)
        self.nursery.start_soon(self._run, rec)

    async def _run(self, rec):
        tool = self.tools[rec.a.body.tool_ref]
        rec.status = S.RUNNING
        with trio.CancelScope() as rec.scope:
            out = await tool.fn(**json.loads(rec.a.body.arguments))
            rec.status = S.COMPLETED
            rec.outcome = effect.Outcome(rec.a.key, effect.ToolExecutionSucceeded(
                ToolResult(json.dumps(out, separators=(",", ":"), sort_keys=True))))
            return
        rec.status = S.CANCELLED
        rec.outcome = effect.Outcome(rec.a.key, effect.Cancelled("cancelled"))

    def _state(self, rec):
        A = effect.AttachmentState
        if rec is None:
            return effect.Attachment(state=A.MISSING)
        if rec.status is S.ABORTED:
            return effect.Attachment(state=A.ABORTED)
        return effect.Attachment(state=A.TERMINAL if rec.status.is_terminal else A.ACTIVE)

    async def attach(self, a):
        await trio.lowlevel.checkpoint()
        return self._state(self.recs.get(a.key))

    async def abort(self, a):
        await trio.lowlevel.checkpoint()
        self.recs.setdefault(a.key, _Rec(a, S.ABORTED))
        return self._state(self.recs[a.key])

    async def get_status(self, key):
        await trio.lowlevel.checkpoint()
        rec = self.recs.get(key)
        return S.NOT_FOUND if rec is None else rec.status

    async def get_outcome(self, key):
        await trio.lowlevel.checkpoint()
        rec = self.recs.get(key)
        if rec is None:
            raise ExecutionNotFoundError("unknown", key=key)
        if rec.status is S.ABORTED:
            raise ExecutionAbortedError("aborted", key=key)
        if rec.outcome is None:
            raise OutcomeNotReadyError("running", key=key)
        return rec.outcome

    async def cancel(self, key):
        await trio.lowlevel.checkpoint()
        rec = self.recs.get(key)
        if rec is not None and rec.scope is not None:
            rec.scope.cancel()


@contextlib.asynccontextmanager
async def good_executor(tools):
    async with trio.open_nursery() as nursery:
        yield TinyExecutor(tools, nursery)
        nursery.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def twice_executor(tools):
    """Forgets deduplication: a known key dispatched again starts the tool again."""
    async with trio.open_nursery() as nursery:
        yield TinyExecutor(tools, nursery, dedupe=False)
        nursery.cancel_scope.cancel()
