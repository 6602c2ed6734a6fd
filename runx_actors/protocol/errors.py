"""The exception hierarchy of runx_actors (spec §0.6).

Every exception derives from :class:`RunxError`. Grouping bases (``CommandRefusedError``,
``LoopError``, ``DispatchError``, ``ReadError``, ``ReconcileError``,
``ExecutionStoreError``) exist for ``except`` clauses only and refuse direct
instantiation. Errors carry the data needed to act on them as keyword attributes, and callers act on
those; the message is the text a user reads, and tests/protocol/test_messages.py pins
the exact text of every error the commit path (commit, decide, evolve, ids) raises.

This module is pure (tier T1) so that every tier can raise these types; the public path of
each class is ``runx_actors.<Name>``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "RunxError",
    "SettleTimeoutError",
    "CommandRefusedError",
    "StaleRuntimeError",
    "CommandConflictError",
    "RunTerminalError",
    "RunNotFoundError",
    "PreconditionError",
    "EvolveError",
    "CorruptLogError",
    "ValidationError",
    "CanonicalJSONError",
    "DecodeError",
    "RunExistsError",
    "OwnershipLostError",
    "ProjectionDivergenceError",
    "FrozenValueMissingError",
    "LoopError",
    "RunAlreadyRunningError",
    "ModelUnavailableError",
    "PrepareStalledError",
    "EffectNotExecutingError",
    "DriveCancelledError",
    "RuntimeClosedError",
    "ToolOfferError",
    "DispatchError",
    "DispatchRetryableError",
    "DispatchUnknownError",
    "DispatchRejectedError",
    "ReadError",
    "OutcomeNotReadyError",
    "ExecutionNotFoundError",
    "OutcomeUnavailableError",
    "OutcomeCollectedError",
    "ExecutionAbortedError",
    "SettlementsEvictedError",
    "ReconcileError",
    "TargetWithoutEffectError",
    "MissingPolicyPortsError",
    "AbandonWithExecutorError",
    "NoExecutionPortError",
    "ExecutionStoreError",
    "LedgerConflictError",
    "StateConflictError",
    "FencedError",
    "LeaseLostError",
    "SchemaVersionError",
    "CorruptStoreError",
    "CorruptRecordError",
    "StoreOpenError",
    "StoreBusyError",
    "RunConflictError",
]


class RunxError(Exception):
    """Base of every runx_actors error.

    Keyword arguments become attributes (``err.command``, ``err.status`` …) so callers can
    act on them; the message is for people (callers should not parse it).
    """

    _abstract = False

    def __init__(self, message: str = "", **attrs: Any) -> None:
        if type(self).__dict__.get("_abstract", False):
            raise TypeError(f"{type(self).__name__} is a grouping class; raise a subclass")
        super().__init__(message or type(self).__name__)
        self.message = message
        self.attrs = attrs
        for key, value in attrs.items():
            setattr(self, key, value)

    def __reduce__(self) -> Any:  # keep attributes across pickling (worker processes)
        return (_rebuild, (type(self), self.message, self.attrs))


def _rebuild(cls: type[RunxError], message: str, attrs: dict[str, Any]) -> RunxError:
    return cls(message, **attrs)



class CommandRefusedError(RunxError):
    """Grouping base: a command was refused by the commit path; nothing was written."""

    _abstract = True


class StaleRuntimeError(CommandRefusedError):
    """The state forbids the command, the effect is not the running one, or a Prepare's
    base is out of date (RUN-CMT-3/4). Retriable: reload and derive again."""


class CommandConflictError(CommandRefusedError):
    """The ids do not add up: empty effect, a non-derived command id, a duplicate input id
    (RUN-WIR-3, INV-8). Attributes: ``command``, ``expected`` where known."""


class RunTerminalError(CommandRefusedError):
    """A fresh command reached an ended Run (INV-2). Attribute: ``status``."""


class RunNotFoundError(CommandRefusedError):
    """The RunID is unknown in this scope (RUN-CMT-1). Attribute: ``run_id``."""


class PreconditionError(RunxError):
    """``decide`` refused the command: this state does not allow it. Attributes:
    ``command``, ``reason``. ``evaluate_commit`` re-raises it as StaleRuntimeError."""


class EvolveError(RunxError):
    """``evolve`` refused a fact: its guard failed (§2.7). Attributes: ``fact``, ``reason``."""


class CorruptLogError(EvolveError):
    """A stored log does not fold: attributes ``index`` (0-based fact position) and
    ``wire_name`` of the offending fact, plus ``run_id`` when known."""


class ValidationError(RunxError, ValueError):
    """An invalid value or state (also a ValueError)."""


class CanonicalJSONError(ValidationError):
    """A value cannot be canonicalised, or text is not strict JSON (§3.5)."""


class DecodeError(ValidationError):
    """A wire record (fact, command, frozen body) does not decode strictly. Attributes:
    ``record`` (the type/wire name being decoded) and ``reason``; the codec adds
    ``errors``, one ``"<problem> @ <JSON path>"`` entry per failure."""

    record: str
    reason: str


class RunExistsError(RunxError):
    """``create_run`` for a RunID whose stream already exists (RUN-NEW-1, INV-1)."""


class RunConflictError(CommandConflictError):
    """``Runtime.create_run`` for an existing RunID under the same commit id but with other
    inputs or causation (APP-NEW-1): nothing was written, the new inputs were not accepted.
    Attributes: ``run_id``, ``commit_id``, ``existing`` and ``requested`` (tuples of input
    digests)."""


class OwnershipLostError(RunxError):
    """Another writer opened the scope with a higher epoch; the append was fenced and wrote
    nothing (RUN-CMT-6, INV-28). Attributes: ``scope``, ``epoch``, ``current_epoch``."""


class ProjectionDivergenceError(RunxError):
    """``record`` folded a state different from the projection at the same head."""


class FrozenValueMissingError(RunxError):
    """A frozen body is not in the FrozenStore. Attributes: ``digest``; ``result`` when
    raised by ``deliver`` after a recovery was committed (D-7)."""


class SchemaVersionError(RunxError):
    """A store's on-disk schema version is unknown to this build."""


class CorruptStoreError(RunxError):
    """A store is damaged: its file cannot be a store (truncated, garbage, zero bytes,
    an unknown header format, not in WAL mode), a table is missing, a persisted epoch is
    invalid, the commit-id index disagrees with the facts, or a row's chain digest does
    not match (RUN-STO-1 … RUN-STO-3). Nothing was written. Attributes (those that
    apply): ``path`` (file or DSN), ``table``, ``row`` (the row's key as text), ``scope``,
    ``run_id``, ``position``, ``reason``.
    """


class CorruptRecordError(CorruptStoreError):
    """One stored row is damaged: it does not decode, is missing from its stream, or its
    chain digest does not match. Attributes name it: ``table``, ``row``, ``scope``,
    ``run_id`` (or ``stream``), ``position``."""


class StoreOpenError(RunxError):
    """A durable store cannot be opened or created at its path, and nothing was written
    (RUN-STO-1): the path is a directory (``reason="is_directory"``), its directory does
    not exist (``missing_directory``), or the operating system refuses to create or open
    the file there (``cannot_open``: not writable, a read-only file system …; the driver's
    or OS's error is ``__cause__``). The message names the path. Attributes: ``path``,
    ``reason``. A file that is there but is not a store is CorruptStoreError or
    SchemaVersionError instead."""


class StoreBusyError(StoreOpenError):
    """Another connection held a lock on a SQLite store for longer than the store's busy
    timeout (``busy_timeout``, seconds: 30 by default), so a read or a write could not
    run (``sqlite3``'s ``database is locked``, SQLITE_BUSY / SQLITE_LOCKED). Nothing of
    the refused operation was written; trying again once the other connection has
    finished is safe (a write's derived commit ids make a repeat replay). Attributes:
    ``path``, ``reason`` (``"busy"``), ``timeout`` (the seconds waited), ``hint`` (what
    to do). The CLI exits 1."""

    hint = ("another process holds the store's lock (an open `sqlite3` shell, a running "
            "app or command using the same file): let it finish, then run the command again")


class LoopError(RunxError):
    """Grouping base for loop (runtime) errors."""

    _abstract = True


class RunAlreadyRunningError(LoopError):
    """A second driver for a Run that already has one in this runtime (RUN-CMT-6)."""


class ModelUnavailableError(LoopError):
    """The executor cannot serve the model; the step stays PREPARED (RUN-EXE-5).

    Attributes: ``model`` (the ModelRef that is not served, when known) and ``failure``
    (the executor's refusal, when there was one). The message names the ref and says how
    to get out: a Run whose prepared step froze the ref stays ACTIVE and is refused the
    same way on every drive until the executor serves that ref, or until the Run is ended
    with ``rt.cancel(run_id)`` (CancelRun; ``runx_actors.runtime.cancel_run`` on a store).
    """

    def __init__(self, message: str = "", **attrs: Any) -> None:
        self._base = message
        model = attrs.get("model")
        if model is not None:
            failure = attrs.get("failure")
            why = getattr(failure, "message", "") if failure is not None else ""
            message = (
                f"{message or 'the executor cannot serve this model'}: model ref {model!r} "
                f"is not served by the executor{f' ({why})' if why else ''}. A Run whose "
                f"prepared step froze {model!r} stays ACTIVE and is refused on every drive: "
                f"serve {model!r} from the executor and drive it again, or end the Run with "
                f"`await rt.cancel(run_id)` (CancelRun)")
        super().__init__(message, **attrs)

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), self._base, self.attrs))


class PrepareStalledError(LoopError):
    """A Prepare was refused while the position did not move (INV-42)."""


class EffectNotExecutingError(LoopError):
    """A redispatch named an effect that is not EXECUTING."""


class DriveCancelledError(LoopError):
    """Another task stopped the drive with ``RunHandle.cancel_drive()`` (D-1)."""


class RuntimeClosedError(LoopError):
    """The ActorRuntime is closed or closing, or the Run's actor stopped, before the request
    was answered (RUN-ACT-3). Nothing more is done for the request; what it committed
    before stays committed."""


class SettleTimeoutError(LoopError):
    """A shielded section of the loop — a start barrier or a settlement — did not finish
    within ``Settings.settle_timeout`` seconds (RUN-ACT-3, RUN-LOP-5). What it committed
    before stays committed; the Run is reloaded from the log on its next drive. The
    instance the runtime raises is also a ``trio.TooSlowError``."""


class ToolOfferError(LoopError):
    """A tool the runtime offers the model is unknown to the executor or declared
    differently there, or two offers share a ref or a model-facing name; found when the
    runtime opens (RUN-ACT-8). Attributes: ``tool_ref``, ``failure`` (the executor's
    ToolFailure; None for a duplicate, which also sets ``name``)."""


class DispatchError(RunxError):
    """Grouping base for dispatch errors (§6.3)."""

    _abstract = True


class DispatchRetryableError(DispatchError):
    """Definitely not accepted; may be retried."""


class DispatchUnknownError(DispatchError):
    """Unknown whether the executor accepted the assignment. Attribute ``dispatched``:
    keys dispatched before it in the same batch (D-4)."""


class DispatchRejectedError(DispatchError):
    """Definitely not accepted and never will be."""


class ReadError(RunxError):
    """Grouping base for executor read errors (§6.7)."""

    _abstract = True


class OutcomeNotReadyError(ReadError):
    """The execution has no outcome yet."""


class ExecutionNotFoundError(ReadError):
    """The executor does not know the key."""


class OutcomeUnavailableError(ReadError):
    """The outcome cannot be read any more."""


class OutcomeCollectedError(OutcomeUnavailableError):
    """The outcome was acknowledged and collected."""


class ExecutionAbortedError(OutcomeUnavailableError):
    """The key was aborted (tombstoned) before it ran."""


class SettlementsEvictedError(ReadError):
    """A settlement subscription fell behind and lost notifications."""


class ReconcileError(RunxError):
    """Grouping base for reconciler errors (§6.10)."""

    _abstract = True


class TargetWithoutEffectError(ReconcileError):
    """A recovery target without an EffectID."""


class MissingPolicyPortsError(ReconcileError):
    """REDISPATCH_MISSING without a ledger or a redispatch port."""


class AbandonWithExecutorError(ReconcileError):
    """``abandon=True`` given together with an executor."""


class NoExecutionPortError(ReconcileError):
    """No executor and no explicit ``abandon``."""


class ExecutionStoreError(RunxError):
    """Grouping base for execution-store / ledger errors."""

    _abstract = True


class LedgerConflictError(ExecutionStoreError):
    """A ledger append with a stale sequence."""


class StateConflictError(ExecutionStoreError):
    """A ledger transition not allowed in its current state."""


class FencedError(ExecutionStoreError):
    """An append from an epoch lower than the highest seen."""


class LeaseLostError(ExecutionStoreError):
    """A worker's lease on an execution was lost."""


for _name in __all__:
    globals()[_name].__module__ = "runx_actors"
del _name
