"""The policy gate: an ExecutionPort decorator enforcing ``allowed_tools`` (loop-host §1,
§3.5).

At ``validate`` the gate checks a tool Assignment's ``tool_ref`` against the allowlist
*before anything else*. A refused tool gets ``ToolFailure("tool_not_allowed", "<tool> is
not in allowed_tools")``, so the inner loop commits ``DeclineToolCall``: the call fails
KNOWN with an empty effect and no ``ToolCallStarted`` is ever written. The wrapped
executor is not consulted at all — it sees no ``validate`` and no ``dispatch`` for a
refused tool; ``dispatch`` re-checks and refuses with ``DispatchRejectedError`` as a
second line of defence. Unknown tool names take the same path, so they never reach
``tool_lookup_failed``. Approval never bypasses the gate: an approved call goes back to
PENDING and passes ``validate`` again before it can start.

Model Assignments and every other port method pass through unchanged. The gate offers
exactly the optional capabilities (settlements, recovery, disposal, progress,
acknowledgement) of the executor it wraps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

import trio

from .. import effect
from ..effect import Assignment, AssignmentKey, ToolAssignment, ToolFailure
from ..protocol.errors import DispatchRejectedError
from .turn import TOOL_NOT_ALLOWED

__all__ = ["TOOL_NOT_ALLOWED", "PolicyGate", "policy_gate", "refusal"]

#: ``allowed(assignment)`` → the tool refs allowed for that Assignment's Run.
AllowedTools = Collection[str] | Callable[[Assignment], Collection[str]]


def refusal(tool: str) -> ToolFailure:
    """The gate's refusal of *tool*: class ``tool_not_allowed``, message ``<tool> is not
    in allowed_tools`` (§3.5)."""
    return ToolFailure(TOOL_NOT_ALLOWED, f"{tool} is not in allowed_tools")


class PolicyGate:
    """Wraps an ExecutionPort and refuses tools outside ``allowed_tools`` (see module
    docstring). Build one with :func:`policy_gate`, which also forwards the wrapped
    executor's optional capabilities.

    *allowed* is a collection of tool refs, or a function of the Assignment returning
    one (for executors shared by Runs of different runners).
    """

    def __init__(self, inner: Any, allowed: AllowedTools) -> None:
        self.inner = inner
        self._allowed = allowed

    def allowed_for(self, a: Assignment) -> Collection[str]:
        """The tool refs allowed for *a*'s Run."""
        if callable(self._allowed):
            return self._allowed(a)
        return self._allowed

    def check(self, a: Assignment) -> ToolFailure | None:
        """The gate's verdict on *a*: None (allowed, or a model) or the refusal.
        Synchronous; consults nothing but the allowlist."""
        body = a.body
        if isinstance(body, ToolAssignment) and body.tool_ref not in self.allowed_for(a):
            return refusal(body.tool_ref)
        return None

    async def validate(self, a: Assignment) -> ToolFailure | None:
        """Refuse a disallowed tool before consulting the wrapped executor; otherwise
        delegate. Checkpoint: always (the refusal path too). Raises nothing of its own."""
        refused = self.check(a)
        if refused is not None:
            await trio.lowlevel.checkpoint()
            return refused
        result: ToolFailure | None = await self.inner.validate(a)
        return result

    async def dispatch(self, a: Assignment) -> None:
        """Delegate, unless the tool is refused (``DispatchRejectedError``, nothing
        reaches the wrapped executor)."""
        refused = self.check(a)
        if refused is not None:
            await trio.lowlevel.checkpoint()
            raise DispatchRejectedError(f"dispatch refused: {refused.message}", key=a.key,
                                        reason=TOOL_NOT_ALLOWED)
        await self.inner.dispatch(a)

    async def attach(self, a: Assignment) -> effect.Attachment:
        result: effect.Attachment = await self.inner.attach(a)
        return result

    async def abort(self, a: Assignment) -> effect.Attachment:
        result: effect.Attachment = await self.inner.abort(a)
        return result

    async def get_status(self, key: AssignmentKey) -> effect.ExecutionStatus:
        result: effect.ExecutionStatus = await self.inner.get_status(key)
        return result

    async def get_outcome(self, key: AssignmentKey) -> effect.Outcome:
        result: effect.Outcome = await self.inner.get_outcome(key)
        return result

    async def cancel(self, key: AssignmentKey) -> None:
        await self.inner.cancel(key)


class _Settlements:
    inner: Any

    def settlements(self, epoch: str, after: int) -> AsyncIterator[effect.Settlement]:
        result: AsyncIterator[effect.Settlement] = self.inner.settlements(epoch, after)
        return result


class _Recoverer:
    inner: Any

    async def recover_execution(self, key: AssignmentKey) -> None:
        await self.inner.recover_execution(key)


class _Disposer:
    inner: Any

    async def dispose(self, key: AssignmentKey) -> None:
        await self.inner.dispose(key)


class _Progress:
    inner: Any

    def progress(self, key: AssignmentKey) -> AsyncIterator[effect.ProgressFrame]:
        result: AsyncIterator[effect.ProgressFrame] = self.inner.progress(key)
        return result


class _Acknowledger:
    inner: Any

    async def acknowledge(self, key: AssignmentKey) -> None:
        await self.inner.acknowledge(key)


_CAPABILITIES: tuple[tuple[type, type], ...] = (
    (effect.SettlementPort, _Settlements),
    (effect.Recoverer, _Recoverer),
    (effect.Disposer, _Disposer),
    (effect.ProgressPort, _Progress),
    (effect.Acknowledger, _Acknowledger),
)
_CLASSES: dict[tuple[type, ...], type[PolicyGate]] = {}


def policy_gate(inner: Any, allowed: AllowedTools) -> PolicyGate:
    """A :class:`PolicyGate` over *inner* that also offers exactly *inner*'s optional
    capabilities (detected with ``isinstance`` on the runtime-checkable ports)."""
    mixins = tuple(mixin for port, mixin in _CAPABILITIES if isinstance(inner, port))
    cls = _CLASSES.get(mixins)
    if cls is None:
        cls = type("PolicyGate", (*mixins, PolicyGate), {"__module__": __name__})
        _CLASSES[mixins] = cls
    return cls(inner, allowed)
