"""The ExecutionPort and its optional capabilities (spec §6.2, §6.8, §6.9, §6.11).

RUN-EXE-3 / RUN-EXE-16: the owner talks to an executor only through these ports. There are
no callbacks into the owner: the executor answers reads, and notifications are only hints
to read (RUN-EXE-8, RUN-EXE-17). Optional capabilities are detected with ``isinstance``
on the runtime-checkable Protocols below (which check method names only).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

import attrs

from ._assignment import Assignment, AssignmentKey
from ._failure import ToolFailure
from ._outcome import Outcome
from ._progress import ProgressFrame
from ._status import AttachmentState, ExecutionStatus
from ._validators import any_str, non_negative_int

__all__ = [
    "ExecutionRef",
    "Attachment",
    "Settlement",
    "DEFAULT_SETTLEMENT_WINDOW",
    "DEFAULT_RETAINED_OUTCOMES",
    "ExecutionPort",
    "SettlementPort",
    "Recoverer",
    "Disposer",
    "ProgressPort",
    "Acknowledger",
    "Redispatcher",
]

#: Settlement notifications an executor keeps for re-subscription (spec §6.8).
DEFAULT_SETTLEMENT_WINDOW = 4096
#: Terminal records an in-process executor retains before evicting the oldest (§6.9).
DEFAULT_RETAINED_OUTCOMES = 1024


@attrs.frozen
class ExecutionRef:
    """Which backend execution serves a key: provider name and its reference (RUN-EXE-9)."""

    provider: str = attrs.field(validator=any_str)
    ref: str = attrs.field(validator=any_str)


@attrs.frozen(kw_only=True)
class Attachment:
    """What ``attach``/``abort`` observed for a key (RUN-EXE-3, RUN-EXE-16).

    ``owner``/``fencing_epoch``/``lease_until_unix_milli`` describe the worker lease when
    the executor has one; ``backend_attached`` is true once the backend took the work.
    """

    state: AttachmentState = attrs.field(
        validator=attrs.validators.instance_of(AttachmentState))
    execution: ExecutionRef | None = None
    owner: str = attrs.field(default="", validator=any_str)
    fencing_epoch: int = attrs.field(default=0, validator=non_negative_int)
    lease_until_unix_milli: int = attrs.field(default=0, validator=non_negative_int)
    backend_attached: bool = False


@attrs.frozen
class Settlement:
    """A notification: "read this key now" (RUN-EXE-17). Never carries the Outcome.

    ``key=None`` is the announcement every subscription yields first, with the executor's
    incarnation ``epoch`` and the current head ``sequence``.
    """

    key: AssignmentKey | None
    epoch: str = attrs.field(validator=any_str)
    sequence: int = attrs.field(validator=non_negative_int)

    @property
    def is_announcement(self) -> bool:
        """True for the subscription's opening announcement."""
        return self.key is None


@runtime_checkable
class ExecutionPort(Protocol):
    """The executor boundary (RUN-EXE-3). Every method is async and a checkpoint.

    * ``validate(a)`` — side-effect-free check ahead of the start barrier (RUN-EXE-5):
      ``None`` or a :class:`ToolFailure` (``tool_lookup_failed``,
      ``tool_definition_mismatch``, ``invalid_arguments``; ``provider_failure`` for a model).
    * ``dispatch(a)`` — returns once the Assignment is **accepted**. The same key with the
      same content is idempotent; different content → ``DispatchRejectedError`` (INV-36).
      Raises ``DispatchRejectedError`` / ``DispatchRetryableError`` /
      ``DispatchUnknownError`` (§6.3).
    * ``attach(a)`` / ``abort(a)`` — identify the record by ``a.key`` only; ``abort``
      tombstones a key nothing was accepted for and returns ``ABORTED``, or the live state
      when an acceptance won (INV-31).
    * ``get_status(key)`` / ``get_outcome(key)`` — pure reads that return at once; read
      errors per §6.7.
    * ``cancel(key)`` — asks the execution to stop; an Outcome (usually ``Cancelled``)
      still follows.
    """

    async def validate(self, a: Assignment) -> ToolFailure | None: ...
    async def dispatch(self, a: Assignment) -> None: ...
    async def attach(self, a: Assignment) -> Attachment: ...
    async def abort(self, a: Assignment) -> Attachment: ...
    async def get_status(self, key: AssignmentKey) -> ExecutionStatus: ...
    async def get_outcome(self, key: AssignmentKey) -> Outcome: ...
    async def cancel(self, key: AssignmentKey) -> None: ...


@runtime_checkable
class SettlementPort(Protocol):
    """Settlement notifications (RUN-EXE-17): one subscription serves every key.

    ``settlements(epoch, after)`` yields first an announcement (``key=None``, the current
    epoch and head), then every settlement with ``sequence > after``. An unknown or empty
    ``epoch`` subscribes from the head. Raises ``SettlementsEvictedError`` (while
    iterating) when the bounded window moved past the requested sequence.
    """

    def settlements(self, epoch: str, after: int) -> AsyncIterator[Settlement]: ...


@runtime_checkable
class Recoverer(Protocol):
    """``recover_execution(key)`` asks the executor to adopt an orphaned record,
    restarting it per its replay policy (RUN-EXE-6, RUN-EXE-9)."""

    async def recover_execution(self, key: AssignmentKey) -> None: ...


@runtime_checkable
class Disposer(Protocol):
    """``dispose(key)`` closes an unfinished record with ``Unknown("disposed")``
    (RUN-EXE-6)."""

    async def dispose(self, key: AssignmentKey) -> None: ...


@runtime_checkable
class ProgressPort(Protocol):
    """``progress(key)`` streams a key's progress frames (RUN-EXE-12); the stream ends
    after the ``END`` frame."""

    def progress(self, key: AssignmentKey) -> AsyncIterator[ProgressFrame]: ...


@runtime_checkable
class Acknowledger(Protocol):
    """``acknowledge(key)`` after a successful settlement commit (RUN-EXE-13).

    Raises ``StateConflictError`` for a non-terminal record and
    ``ExecutionNotFoundError`` for an unknown key.
    """

    async def acknowledge(self, key: AssignmentKey) -> None: ...


@runtime_checkable
class Redispatcher(Protocol):
    """Owner-side route that offers a key's rebuilt Assignment to ``dispatch`` once
    (RUN-EXE-15; the reconciler's ``redispatch`` port, implemented by the runtime)."""

    async def redispatch(self, key: AssignmentKey) -> None: ...
