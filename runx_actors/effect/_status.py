"""ExecutionStatus and AttachmentState with its reconcile verdicts (spec §6.4; RUN-EXE-3)."""

from __future__ import annotations

import enum

__all__ = ["ExecutionStatus", "TERMINAL_STATUSES", "AttachmentState", "Verdict"]


class ExecutionStatus(enum.Enum):
    """Where the executor's record of one key stands (RUN-EXE-3).

    ``ACCEPTED`` guarantees nothing has begun; ``DISPATCHING`` means it may have begun;
    ``RUNNING`` means the backend took it. ``COMPLETED``, ``FAILED``, ``CANCELLED``,
    ``UNKNOWN`` and ``ABORTED`` (tombstoned before any acceptance) are terminal.
    """

    NOT_FOUND = "not_found"
    ACCEPTED = "accepted"
    DISPATCHING = "dispatching"
    RUNNING = "running"
    CANCEL_REQUESTED = "cancel_requested"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"
    ABORTED = "aborted"

    @property
    def is_terminal(self) -> bool:
        """True for the five terminal statuses."""
        return self in TERMINAL_STATUSES


#: Exactly the terminal statuses (acceptance scenario #39).
TERMINAL_STATUSES: frozenset[ExecutionStatus] = frozenset({
    ExecutionStatus.COMPLETED,
    ExecutionStatus.FAILED,
    ExecutionStatus.CANCELLED,
    ExecutionStatus.UNKNOWN,
    ExecutionStatus.ABORTED,
})


class Verdict(enum.Enum):
    """What takeover does with one EXECUTING target (spec §6.10; RUN-CMT-7)."""

    KEEP = "keep"
    DEFER = "defer"
    REDISPATCH = "redispatch"
    DISPOSE = "dispose"


class AttachmentState(enum.Enum):
    """What ``attach``/``abort`` report about a key: exactly five values (RUN-EXE-3).

    ``MISSING`` says only that no record exists *at this moment*; ``ORPHANED`` never shows
    that nothing happened. :attr:`verdict` is the reconcile verdict of §6.4 and
    :attr:`needs_abort` tells whether that verdict holds only after a won ``abort``.
    """

    MISSING = "missing"
    ACTIVE = "active"
    ORPHANED = "orphaned"
    TERMINAL = "terminal"
    ABORTED = "aborted"

    @property
    def verdict(self) -> Verdict:
        """``MISSING``/``ABORTED`` → DISPOSE, ``ACTIVE``/``TERMINAL`` → KEEP,
        ``ORPHANED`` → DEFER."""
        return _VERDICTS[self]

    @property
    def needs_abort(self) -> bool:
        """True only for ``MISSING``: dispose only after ``abort`` wins the key (INV-31)."""
        return self is AttachmentState.MISSING


_VERDICTS: dict[AttachmentState, Verdict] = {
    AttachmentState.MISSING: Verdict.DISPOSE,
    AttachmentState.ACTIVE: Verdict.KEEP,
    AttachmentState.ORPHANED: Verdict.DEFER,
    AttachmentState.TERMINAL: Verdict.KEEP,
    AttachmentState.ABORTED: Verdict.DISPOSE,
}
