"""LocalExecutor: the in-process reference executor (spec §6.11; architecture §5).

One execution record per key (accepted → dispatching → running → settled), abort
tombstones (a key is either accepted or aborted, never both: INV-31, RUN-EXE-16),
idempotent re-dispatch of identical content and refusal of different content (INV-36),
bounded retention of settled records (RUN-EXE-13), settlement notifications
(RUN-EXE-17), progress rings (RUN-EXE-12) and the recovery primitives (RUN-EXE-6,
RUN-EXE-9). Tools and models run as trio tasks in a nursery the executor is given or
opens (:func:`open_local_executor`).

Every state change of a record happens in a synchronous helper (no checkpoint inside), so
acceptance and abort of one key can never interleave.
"""

from __future__ import annotations

import logging
import random
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from contextlib import asynccontextmanager

import trio

from .._scoped import body_errors_unwrapped
from ..effect import (
    DEFAULT_PROGRESS_RING,
    DEFAULT_RETAINED_OUTCOMES,
    DEFAULT_SETTLEMENT_WINDOW,
    Assignment,
    AssignmentKey,
    Attachment,
    AttachmentState,
    Cancelled,
    ExecutionRef,
    ExecutionStatus,
    ModelAssignment,
    ModelFailed,
    Outcome,
    OutcomeResult,
    ProgressFrame,
    Settlement,
    ToolAssignment,
    ToolExecutionUnknown,
    ToolFailure,
    ToolFailureClass,
    Unknown,
)
from ..effect._escape import describe_error
from ..protocol.arguments import check_count, check_fraction, check_seconds
from ..protocol.digests import digest_model_request
from ..protocol.errors import (
    DispatchRejectedError,
    ExecutionAbortedError,
    ExecutionNotFoundError,
    OutcomeCollectedError,
    OutcomeNotReadyError,
    StateConflictError,
    ValidationError,
)
from ..protocol.values import ModelRef, ToolRef, ToolReplay
from ._attempt import retryable, run_model, run_tool
from ._models import Model
from ._records import LocalExecutorStatistics, Record, content_of
from ._streams import ProgressRing, ProgressSubscription, SettlementLog, SettlementSubscription
from ._tools import Tool

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_MAX_BACKOFF",
    "DEFAULT_MAX_RETRY_AFTER",
    "DEFAULT_MODEL_ATTEMPTS",
    "DEFAULT_MAX_MODEL_RESULT_BYTES",
    "DEFAULT_MAX_TOOL_OUTPUT_BYTES",
    "DEFAULT_RETAINED_TOMBSTONES",
    "LocalExecutorStatistics",
    "LocalExecutor",
    "open_local_executor",
]

_log = logging.getLogger("runx_actors.executors.local")

#: Abort tombstones kept before the oldest is forgotten (a forgotten tombstone no longer
#: blocks a late dispatch of its key; keep this well above the takeover rate).
DEFAULT_RETAINED_TOMBSTONES = 16384
#: Settled but not yet acknowledged Outcomes kept before the oldest is forgotten. Nobody
#: has settled these yet, so evicting one forces a takeover; keep it well above the
#: number of effects an owner can have in flight.
DEFAULT_RETAINED_UNREAD = 65536
#: Attempts of one model execution (the first and 2 retries) for failures whose code
#: allows a retry (rate_limited, provider_unavailable, connection_failed) (issue 9).
DEFAULT_MODEL_ATTEMPTS = 3
#: Seconds before the first retry; the pause doubles with each further retry.
DEFAULT_BACKOFF = 0.5
#: Seconds no backoff pause exceeds (a provider's Retry-After may ask for longer).
DEFAULT_MAX_BACKOFF = 30.0
#: Seconds of Retry-After honoured; a provider asking for longer ends the retries.
DEFAULT_MAX_RETRY_AFTER = 60.0
#: Largest canonical tool output (bytes of UTF-8) the executor freezes; a larger one is a
#: KNOWN ``too_large`` failure (8 MiB; issue 12).
DEFAULT_MAX_TOOL_OUTPUT_BYTES = 8 << 20
#: Largest model result (bytes of UTF-8 of its texts) the executor accepts from any
#: model; a larger one is ``malformed_result`` (8 MiB; issue 12).
DEFAULT_MAX_MODEL_RESULT_BYTES = 8 << 20


class LocalExecutor:
    """In-process executor implementing :class:`~runx_actors.effect.ExecutionPort` and
    every optional capability (SettlementPort, Recoverer, Disposer, ProgressPort,
    Acknowledger) (spec §6.11; RUN-EXE-3, RUN-EXE-6, RUN-EXE-13, RUN-EXE-14, RUN-EXE-16).

    Construct it with a nursery that outlives it, or use :func:`open_local_executor`.

    * ``tools``: :class:`Tool` declarations, keyed by ``ref`` (duplicates refused).
    * ``models``: ``ModelRef → model`` (objects with ``async complete(request)``).
    * ``retain``: acknowledged (collected) records kept (default 1024); older ones read
      as not found / ``missing`` (§6.9). ``retain_unread``: settled records nobody has
      acknowledged yet, kept separately (default 65536) so a slow owner never loses an
      Outcome it has not settled. ``retain_tombstones``: abort tombstones kept.
    * ``settlement_window`` (4096) and ``progress_ring`` (256): notification bounds.
    * Retries inside the worker (RUN-EXE-11), only for failures whose disposition is
      ALLOWED (model codes rate_limited, provider_unavailable, connection_failed; tool
      failures raised with ``retry=ALLOWED``): ``max_attempts`` bounds the attempts of a
      model execution (default :data:`DEFAULT_MODEL_ATTEMPTS` = 3; 1 = no retry),
      ``tool_max_attempts`` those of a tool execution (default 1: tools are not retried
      unless asked). The pause before retry *n* (1-based) is
      ``min(max_backoff, backoff * 2**(n-1))`` seconds (defaults 0.5 s and 30 s: 0.5,
      1, 2 …), shortened by up to ``jitter`` (a fraction in [0, 1], default 0: none)
      drawn from ``random.Random(jitter_seed)`` (deterministic for a seed), and
      lengthened to a model's ``Retry-After`` (``ModelError.retry_after``); a
      Retry-After beyond ``max_retry_after`` (default 60 s) ends the retries and names
      it in the failure message. :meth:`cancel` stops the running attempt and every
      later one: after it, no attempt of the key starts.
    * ``model_timeout``: seconds per model attempt (``deadline_exceeded`` when it fires;
      default ``None``: the model's own deadline applies, e.g. OpenAIChatModel's
      ``timeout``).
    * ``max_tool_output_bytes``: largest canonical tool output frozen (bytes of UTF-8,
      default :data:`DEFAULT_MAX_TOOL_OUTPUT_BYTES` = 8 MiB); larger → KNOWN
      ``too_large``. ``max_model_result_bytes``: largest model result accepted from
      any model (bytes of UTF-8 of its texts, default
      :data:`DEFAULT_MAX_MODEL_RESULT_BYTES` = 8 MiB); larger → ``malformed_result``
      naming the size.

    Raises ``ValidationError`` (a ValueError; attribute ``argument`` names the argument)
    for a bound that is not an int >= 1 or a duration that is not a finite number >= 0
    (``model_timeout``: > 0 or None; ``jitter``: in [0, 1]), *tools* that are not
    :class:`Tool` objects, *models* that is not a mapping of refs to models (objects with
    ``complete``), and for two tools with the same ref or the same model-facing name.
    """

    def __init__(self, *, nursery: trio.Nursery, tools: Iterable[Tool] = (),
                 models: Mapping[ModelRef, Model] | None = None,
                 retain: int = DEFAULT_RETAINED_OUTCOMES,
                 retain_tombstones: int = DEFAULT_RETAINED_TOMBSTONES,
                 settlement_window: int = DEFAULT_SETTLEMENT_WINDOW,
                 progress_ring: int = DEFAULT_PROGRESS_RING,
                 max_attempts: int = DEFAULT_MODEL_ATTEMPTS,
                 backoff: float = DEFAULT_BACKOFF, model_timeout: float | None = None,
                 provider: str = "local", epoch: str | None = None,
                 retain_unread: int = DEFAULT_RETAINED_UNREAD,
                 max_tool_output_bytes: int = DEFAULT_MAX_TOOL_OUTPUT_BYTES,
                 tool_max_attempts: int = 1, max_backoff: float = DEFAULT_MAX_BACKOFF,
                 jitter: float = 0.0, jitter_seed: int = 0,
                 max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
                 max_model_result_bytes: int = DEFAULT_MAX_MODEL_RESULT_BYTES) -> None:
        table = _catalog(tools)
        model_table = _model_table(models)
        _check_bounds(retain, retain_tombstones, settlement_window, progress_ring,
                      max_attempts, backoff, model_timeout, max_tool_output_bytes,
                      max_model_result_bytes, retain_unread)
        _check_retry(tool_max_attempts, max_backoff, jitter, max_retry_after, provider,
                     epoch)
        self._nursery = nursery
        self._tools = table
        self._models: dict[ModelRef, Model] = model_table
        self._retain = retain
        self._retain_unread = retain_unread
        self._retain_tombstones = retain_tombstones
        self._ring_size = progress_ring
        self._max_attempts = max_attempts
        self._tool_max_attempts = tool_max_attempts
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._jitter = jitter
        self._random = random.Random(jitter_seed)
        self._max_retry_after = max_retry_after
        self._model_timeout = model_timeout
        self._max_tool_output = max_tool_output_bytes
        self._max_model_result = max_model_result_bytes
        self._provider = provider
        self._epoch = epoch or f"{provider}-{secrets.token_hex(8)}"
        self._log = SettlementLog(self._epoch, settlement_window)
        self._records: dict[AssignmentKey, Record] = {}
        # Settled records in settlement order: unacknowledged ones (bounded by
        # retain_unread) and acknowledged ones (collected, bounded by retain) (RUN-EXE-13).
        self._settled: OrderedDict[AssignmentKey, None] = OrderedDict()
        self._collected: OrderedDict[AssignmentKey, None] = OrderedDict()
        self._tombstones: OrderedDict[AssignmentKey, None] = OrderedDict()
        self._closed = False
        self._accepted = 0
        self._started = 0
        self._evicted = 0
        self._refs = 0

    # -- properties ---------------------------------------------------------------------

    @property
    def epoch(self) -> str:
        """This incarnation's settlement epoch."""
        return self._epoch

    @property
    def closed(self) -> bool:
        """True after :meth:`aclose`: dispatch is refused, records stay readable."""
        return self._closed

    @property
    def tools(self) -> Mapping[ToolRef, Tool]:
        """The tool catalog, by ref."""
        return dict(self._tools)

    @property
    def models(self) -> frozenset[ModelRef]:
        """The model refs this executor serves (a model step naming another ref is
        refused at ``validate``/``dispatch``). Not a checkpoint."""
        return frozenset(self._models)

    def serves_model(self, ref: ModelRef) -> bool:
        """True when *ref* is one of :attr:`models`: what a runtime asks at open to
        refuse a mistyped model ref before any Run freezes it (issue 9). Not a
        checkpoint; raises nothing."""
        return ref in self._models

    def tool_offers(self) -> tuple[Tool, ...]:
        """Every tool, in catalog order, as an offer: each has the model-facing
        ``definition`` and ``spec()`` (the Run-side :class:`ToolSpec` ``validate``
        accepts), i.e. it is a ``runx_actors.runtime.ToolOffer``. A runtime can take its
        offers from here (``open_runtime(..., tools=ex.tool_offers())``) or check its own
        against them (same ``spec()``), so a mismatch is found at open, not by the model
        (issue 9). Not a checkpoint; raises nothing."""
        return tuple(self._tools.values())

    # -- ExecutionPort ------------------------------------------------------------------

    async def validate(self, a: Assignment) -> ToolFailure | None:
        """Side-effect-free check before the start barrier (RUN-EXE-5, §8.4 #85).

        Model: ``provider_failure`` unless the ModelRef is served. Tool: unknown ref →
        ``tool_lookup_failed``; a declared definition digest, policy, replay or placement
        that differs from the tool → ``tool_definition_mismatch``; arguments that are not
        strict JSON, not an object, fail the schema or the tool's check →
        ``invalid_arguments``, and so does any exception raised while checking (a
        ``check`` hook that raises). ``a.effect`` may be empty.

        Checkpoint: always, first.
        Cancellation: only at the checkpoint, before anything was read or changed.
        Raises: nothing (a refusal is the returned ToolFailure).
        """
        await trio.lowlevel.checkpoint()
        body = a.body
        if isinstance(body, ModelAssignment):
            if body.model not in self._models:
                return ToolFailure(ToolFailureClass.PROVIDER_FAILURE,
                                   f"model {body.model!r} is not served by this executor")
            return None
        found = self._tools.get(body.tool_ref)
        if found is None:
            return ToolFailure(ToolFailureClass.TOOL_LOOKUP_FAILED,
                               f"no tool {body.tool_ref!r}")
        try:
            return found.declaration_failure(body) or found.arguments_failure(body.arguments)
        except Exception as error:  # never escapes into the caller's runtime (issue 9)
            return ToolFailure(ToolFailureClass.INVALID_ARGUMENTS, (
                f"validation raised {describe_error(error)}")[:500])

    async def dispatch(self, a: Assignment) -> None:
        """Accept *a* and start it in a task; returns once accepted (RUN-EXE-3).

        A known key with identical content is confirmed and nothing starts (also after
        acknowledgement); nothing is compared for the opaque ``target``.

        Checkpoint: always, first.
        Cancellation: only at the checkpoint: nothing was accepted.
        Raises:
            DispatchRejectedError: empty effect; the executor is closed; the key is
                aborted (INV-31) or taken by other content (INV-36); a model Assignment
                without its inline request, or whose request does not match
                ``request_digest``; an unknown model or tool; a tool declaration that
                differs from the tool.
        """
        await trio.lowlevel.checkpoint()
        self._accept_nowait(a)

    async def attach(self, a: Assignment) -> Attachment:
        """Observe the record of ``a.key`` (only the key is read; RUN-EXE-3).

        ``missing`` (no record, or evicted), ``active`` (accepted or running),
        ``orphaned`` (its worker was lost), ``terminal`` (settled, acknowledged
        included) or ``aborted`` (tombstone).

        Checkpoint: always, first.
        Cancellation: only at the checkpoint, before anything was read or changed.
        Raises: nothing.
        """
        await trio.lowlevel.checkpoint()
        return self._attachment(a.key)

    async def abort(self, a: Assignment) -> Attachment:
        """Tombstone ``a.key`` unless an acceptance won it (INV-31, RUN-EXE-16).

        Returns ``ABORTED`` when the tombstone is (or already was) written, otherwise the
        live state of the accepted record. Deciding and writing the tombstone happen with
        no checkpoint in between, so a concurrent ``dispatch`` either wins or is refused.

        Checkpoint: always, first.
        Cancellation: only at the checkpoint: no tombstone was written.
        Raises: nothing.
        """
        await trio.lowlevel.checkpoint()
        key = a.key
        if key in self._tombstones or key not in self._records:
            self._tombstone_nowait(key)
            return Attachment(state=AttachmentState.ABORTED)
        return self._attachment(key)

    async def get_status(self, key: AssignmentKey) -> ExecutionStatus:
        """The record's status; ``NOT_FOUND`` for unknown or evicted keys, ``ABORTED``
        for tombstones.

        Checkpoint: always, first.
        Cancellation: only at the checkpoint, before anything was read or changed.
        Raises: nothing.
        """
        await trio.lowlevel.checkpoint()
        if key in self._tombstones:
            return ExecutionStatus.ABORTED
        record = self._records.get(key)
        return ExecutionStatus.NOT_FOUND if record is None else record.status

    async def get_outcome(self, key: AssignmentKey) -> Outcome:
        """The key's Outcome (RUN-EXE-2); a pure read that returns at once.

        Checkpoint: always, first.
        Cancellation: only at the checkpoint, before anything was read or changed.
        Raises:
            OutcomeNotReadyError: not settled yet.
            ExecutionNotFoundError: never accepted, or evicted by retention.
            ExecutionAbortedError: the key is tombstoned.
            OutcomeCollectedError: read after ``acknowledge``.
        """
        await trio.lowlevel.checkpoint()
        if key in self._tombstones:
            raise ExecutionAbortedError("the key was aborted", key=key)
        record = self._records.get(key)
        if record is None:
            raise ExecutionNotFoundError("no execution for this key", key=key)
        if record.acknowledged:
            raise OutcomeCollectedError("the outcome was acknowledged", key=key)
        if record.outcome is None:
            raise OutcomeNotReadyError("not settled yet", key=key, status=record.status)
        return record.outcome

    async def cancel(self, key: AssignmentKey) -> None:
        """Ask the execution to stop; its Outcome becomes ``Cancelled`` unless it finished
        first. The running attempt is cancelled and no later attempt (retry) of the key
        starts, also when the attempt reports a retryable failure instead of stopping.
        No-op for settled or aborted keys.

        Checkpoint: always, first.
        Cancellation: only at the checkpoint: nothing was asked.
        Raises: ExecutionNotFoundError for an unknown key.
        """
        await trio.lowlevel.checkpoint()
        if key in self._tombstones:
            return
        record = self._require(key)
        if record.outcome is not None:
            return
        record.status = ExecutionStatus.CANCEL_REQUESTED
        record.history.append("cancel_requested")
        self._stop_nowait(record, Cancelled("cancelled"))

    # -- optional capabilities ----------------------------------------------------------

    def settlements(self, epoch: str, after: int) -> AsyncIterator[Settlement]:
        """Subscribe to settlement notices (SettlementPort, RUN-EXE-17): an announcement
        with this incarnation's epoch and head, then every notice after *after* (from
        the head when *epoch* is not this incarnation's). Raises
        ``SettlementsEvictedError`` while iterating if the window moved past the cursor.
        """
        return SettlementSubscription(self._log, epoch, after)

    async def recover_execution(self, key: AssignmentKey) -> None:
        """Adopt an orphaned record (Recoverer, RUN-EXE-6, RUN-EXE-9): a model effect is
        restarted (same frozen request, new ExecutionRef and progress generation); a
        tool effect is restarted only if its replay policy is ALLOWED, otherwise it is
        settled ``ToolExecutionUnknown("adopted_without_replay")``. No-op for records
        that are live or settled.

        Checkpoint: always, first.
        Cancellation: only at the checkpoint: nothing was adopted.
        Raises: ExecutionNotFoundError (unknown key), ExecutionAbortedError (tombstone).
        """
        await trio.lowlevel.checkpoint()
        if key in self._tombstones:
            raise ExecutionAbortedError("the key was aborted", key=key)
        record = self._require(key)
        if record.outcome is not None or not record.orphaned:
            return
        record.orphaned = False
        record.history.append("execution_adopted")
        body = record.assignment.body
        if isinstance(body, ToolAssignment) and body.replay is not ToolReplay.ALLOWED:
            self._settle_nowait(record, ToolExecutionUnknown(ToolFailure(
                ToolFailureClass.EXECUTION_FAILED, "adopted_without_replay")))
            return
        if self._closed:
            self._settle_nowait(record, Unknown("executor closed before adoption"))
            return
        self._spawn_nowait(record)

    async def dispose(self, key: AssignmentKey) -> None:
        """Close an unfinished record with ``Unknown("disposed")`` (Disposer, RUN-EXE-6);
        a running worker is cancelled first. No-op for settled or aborted keys.

        Checkpoint: always, first.
        Cancellation: only at the checkpoint: nothing was disposed.
        Raises: ExecutionNotFoundError for an unknown key.
        """
        await trio.lowlevel.checkpoint()
        if key in self._tombstones:
            return
        record = self._require(key)
        if record.outcome is None:
            record.history.append("dispose_requested")
            self._stop_nowait(record, Unknown("disposed"))

    def progress(self, key: AssignmentKey) -> AsyncIterator[ProgressFrame]:
        """The key's progress frames (ProgressPort, RUN-EXE-12): every retained frame
        from the oldest, then new ones, ending after ``END``. Iterating raises
        ExecutionNotFoundError (unknown key) or ExecutionAbortedError (tombstone)."""
        if key in self._tombstones:
            return ProgressSubscription(None, ExecutionAbortedError("aborted", key=key))
        record = self._records.get(key)
        if record is None:
            return ProgressSubscription(None, ExecutionNotFoundError("no execution", key=key))
        return ProgressSubscription(record.ring)

    async def acknowledge(self, key: AssignmentKey) -> None:
        """Record ``outcome_acknowledged`` (Acknowledger, RUN-EXE-13); the record stays:
        ``attach`` → terminal, ``get_status`` → its terminal status, ``get_outcome`` →
        OutcomeCollectedError. Idempotent.

        Checkpoint: always, first.
        Cancellation: only at the checkpoint: nothing was recorded.
        Raises:
            ExecutionNotFoundError: unknown (or evicted) key.
            StateConflictError: the record is not settled, or the key is aborted.
        """
        await trio.lowlevel.checkpoint()
        if key in self._tombstones:
            raise StateConflictError("an aborted key has no outcome", key=key)
        record = self._require(key)
        if record.outcome is None:
            raise StateConflictError("the record is not settled", key=key,
                                     status=record.status)
        if not record.acknowledged:
            record.acknowledged = True
            record.history.append("outcome_acknowledged")
            if self._settled.pop(key, 0) is None:
                self._collected[key] = None
                while len(self._collected) > self._retain:
                    self._evict_nowait(self._collected)

    # -- lifetime, introspection, fault injection ---------------------------------------

    async def aclose(self) -> None:
        """Refuse further dispatches and stop every live execution (each settles
        ``Cancelled("executor closed")``). Records stay readable. Idempotent.

        Checkpoint: always, after closing.
        Cancellation: the executor is closed before the checkpoint.
        Raises: nothing.
        """
        self._close_nowait()
        await trio.lowlevel.checkpoint()

    def statistics(self) -> LocalExecutorStatistics:
        """A frozen snapshot of the counters (not a checkpoint)."""
        return LocalExecutorStatistics(
            epoch=self._epoch, accepted=self._accepted, started=self._started,
            live=sum(1 for r in self._records.values() if r.outcome is None),
            retained=len(self._settled) + len(self._collected), tombstones=len(self._tombstones),
            evicted=self._evicted, settlement_head=self._log.head)

    def history(self, key: AssignmentKey) -> tuple[str, ...]:
        """The execution-ledger event names of *key* (§6.11), oldest first; ``()`` when
        unknown, ``("execution_aborted",)`` for a tombstone."""
        if key in self._tombstones:
            return ("execution_aborted",)
        record = self._records.get(key)
        return () if record is None else tuple(record.history)

    def execution_ref(self, key: AssignmentKey) -> tuple[ExecutionRef, tuple[ExecutionRef, ...]]:
        """``(current ExecutionRef, superseded refs)`` of a known key (RUN-EXE-9).

        Raises ExecutionNotFoundError for an unknown key.
        """
        record = self._require(key)
        return record.execution, tuple(record.superseded)

    def orphan_nowait(self, key: AssignmentKey) -> None:
        """Fault injection: lose the worker of a live record without settling it. The
        record then attaches as ``orphaned`` until :meth:`recover_execution` adopts it.

        Raises: ExecutionNotFoundError (unknown key), StateConflictError (settled).
        """
        record = self._require(key)
        if record.outcome is not None:
            raise StateConflictError("the record is settled", key=key)
        record.orphaned = True
        record.history.append("worker_lost")
        record.worker += 1  # whatever the old worker finds, it no longer owns the record
        record.running = False
        record.scope.cancel()

    # -- synchronous core (no checkpoints) ----------------------------------------------

    def _require(self, key: AssignmentKey) -> Record:
        record = self._records.get(key)
        if record is None:
            raise ExecutionNotFoundError("no execution for this key", key=key)
        return record

    def _attachment(self, key: AssignmentKey) -> Attachment:
        if key in self._tombstones:
            return Attachment(state=AttachmentState.ABORTED)
        record = self._records.get(key)
        if record is None:
            return Attachment(state=AttachmentState.MISSING)
        if record.outcome is not None:
            return Attachment(state=AttachmentState.TERMINAL, execution=record.execution,
                              backend_attached=True)
        if record.orphaned:
            return Attachment(state=AttachmentState.ORPHANED, execution=record.execution)
        return Attachment(state=AttachmentState.ACTIVE, execution=record.execution,
                          owner=self._epoch,
                          backend_attached=record.status in (ExecutionStatus.RUNNING,
                                                             ExecutionStatus.CANCEL_REQUESTED))

    def _refuse(self, a: Assignment, reason: str) -> DispatchRejectedError:
        return DispatchRejectedError(f"dispatch refused: {reason}", key=a.key, reason=reason)

    def _accept_nowait(self, a: Assignment) -> None:
        key = a.key
        if not key.effect:
            raise self._refuse(a, "the Assignment has no effect")
        if key in self._tombstones:
            raise self._refuse(a, "the key was aborted")
        record = self._records.get(key)
        if record is not None:
            if record.content != content_of(a):
                raise self._refuse(a, "the key is taken by other content")
            return  # the same Assignment again: acceptance confirmed, nothing starts
        if self._closed:
            raise self._refuse(a, "the executor is closed")
        self._check_dispatchable(a)
        self._refs += 1
        execution = ExecutionRef(self._provider, f"{self._epoch}/{self._refs}")
        record = Record(a, content_of(a), execution, ProgressRing(key, self._ring_size))
        record.history += ["execution_accepted", "execution_bound", "execution_claimed"]
        self._records[key] = record
        self._accepted += 1
        self._spawn_nowait(record)

    def _check_dispatchable(self, a: Assignment) -> None:
        body = a.body
        if isinstance(body, ModelAssignment):
            if body.request is None:
                raise self._refuse(a, "a model dispatch needs the frozen request inline")
            try:
                digest = digest_model_request(body.request)
            except ValidationError as error:
                raise self._refuse(a, f"the request cannot be frozen: {error}") from error
            if digest != body.request_digest:
                raise self._refuse(a, "the inline request does not match request_digest")
            if body.model not in self._models:
                raise self._refuse(a, f"model {body.model!r} is not served")
            return
        found = self._tools.get(body.tool_ref)
        if found is None:
            raise self._refuse(a, f"no tool {body.tool_ref!r}")
        mismatch = found.declaration_failure(body)
        if mismatch is not None:
            raise self._refuse(a, mismatch.message)

    def _tombstone_nowait(self, key: AssignmentKey) -> None:
        if key in self._tombstones:
            return
        self._tombstones[key] = None
        while len(self._tombstones) > self._retain_tombstones:
            self._tombstones.popitem(last=False)
        self._log.append_nowait(key)

    def _spawn_nowait(self, record: Record) -> None:
        record.worker += 1
        record.scope = trio.CancelScope()
        record.running = False
        if record.status is ExecutionStatus.ACCEPTED:
            record.status = ExecutionStatus.DISPATCHING
            record.history.append("execution_started")
        # named by the effect id itself: the key's string, no new one per call (issue 11)
        self._nursery.start_soon(self._work, record, record.worker, record.scope,
                                 name=record.key.effect)

    def _stop_nowait(self, record: Record, result: OutcomeResult) -> None:
        """Stop a live record with *result* (settled at once when no worker runs)."""
        if record.stop is None:
            record.stop = result
        if record.running:
            record.scope.cancel()
        else:
            record.worker += 1  # a worker that has not started yet must not run
            record.scope.cancel()
            self._settle_nowait(record, record.stop)

    def _settle_nowait(self, record: Record, result: OutcomeResult) -> None:
        if record.outcome is not None:
            return
        record.outcome = Outcome(record.key, result)
        record.status = record.outcome.status()
        record.running = False
        record.history.append("execution_settled")
        record.ring.end_nowait()
        key = record.key
        self._settled[key] = None
        while len(self._settled) > self._retain_unread:
            self._evict_nowait(self._settled)
        self._log.append_nowait(key)

    def _evict_nowait(self, table: OrderedDict[AssignmentKey, None]) -> None:
        old, _ = table.popitem(last=False)
        del self._records[old]
        self._evicted += 1

    def _close_nowait(self) -> None:
        if self._closed:
            return
        self._closed = True
        for record in list(self._records.values()):
            if record.outcome is None and not record.orphaned:
                self._stop_nowait(record, Cancelled("executor closed"))

    # -- workers --------------------------------------------------------------------------

    async def _work(self, record: Record, worker: int, scope: trio.CancelScope) -> None:
        if record.outcome is not None or record.worker != worker:
            return
        record.running = True
        result: OutcomeResult | None = None
        try:
            with scope:
                while True:  # the attempts, retries included (RUN-EXE-11)
                    result = await self._attempt(record)
                    pause, result = self._retry_pause(record, result)
                    if pause is None:
                        break
                    # cancelled, disposed or orphaned meanwhile: no new attempt starts
                    if record.stop is not None or record.worker != worker:
                        result = record.stop or result
                        break
                    await trio.sleep(pause)
                    if record.stop is not None or record.worker != worker:
                        result = record.stop or result
                        break
        except trio.Cancelled:  # the executor's nursery is going away: settle, re-raise
            if record.worker == worker:
                self._settle_nowait(record, record.stop or Cancelled("executor shut down"))
            raise
        except Exception as error:  # a bug in the executor itself: never leave it hanging
            _log.exception("local executor worker failed for %r", record.key)
            result = Unknown(f"executor error: {describe_error(error)}")
        if record.worker != worker:
            return  # orphaned or superseded meanwhile
        if result is None or scope.cancelled_caught:
            result = record.stop or Cancelled("cancelled")
        self._settle_nowait(record, result)

    def _retry_pause(self, record: Record, result: OutcomeResult
                     ) -> tuple[float | None, OutcomeResult]:
        """``(seconds to wait before the next attempt, result)``, or ``(None, result)``
        when the result is final (not retryable, attempts used up, or a Retry-After
        beyond ``max_retry_after``, which is then named in the result's message)."""
        asked, record.retry_after = record.retry_after, None
        if not retryable(result):
            return None, result
        model = isinstance(record.assignment.body, ModelAssignment)
        if record.attempts >= (self._max_attempts if model else self._tool_max_attempts):
            return None, result
        pause = min(self._max_backoff, self._backoff * 2.0 ** min(record.attempts - 1, 64))
        if self._jitter:
            pause *= 1.0 - self._jitter * self._random.random()
        if asked is not None:
            if asked > self._max_retry_after:
                if isinstance(result, ModelFailed):
                    result = ModelFailed(result.code, (
                        f"{result.message} (Retry-After {asked:g} s is beyond "
                        f"max_retry_after={self._max_retry_after:g} s: not retried)"))
                return None, result
            pause = max(pause, asked)
        return pause, result

    def _attempt(self, record: Record) -> Awaitable[OutcomeResult]:
        """Begin one attempt (bookkeeping, synchronously) and return the awaitable that
        runs it: a plain function, so a running attempt holds no coroutine frame of its
        own below the worker's."""
        if record.attempts > 0:  # a retry or an adoption: restart (RUN-EXE-9)
            record.superseded += (record.execution,)
            self._refs += 1
            record.execution = ExecutionRef(self._provider, f"{self._epoch}/{self._refs}")
            record.history.append("execution_restarted")
            record.ring.restart_nowait()
        record.attempts += 1
        record.retry_after = None
        self._started += 1
        if record.status is not ExecutionStatus.CANCEL_REQUESTED:
            record.status = ExecutionStatus.RUNNING
        record.history.append("execution_running")
        body = record.assignment.body
        if isinstance(body, ModelAssignment):
            assert body.request is not None  # checked on acceptance
            return run_model(self._models[body.model], body.request,
                             record.ring.emit_nowait, self._model_timeout,
                             record.note_retry_after, self._max_model_result)
        return run_tool(self._tools[body.tool_ref], record.assignment, body.arguments,
                        record.ring.emit_nowait, self._max_tool_output)


def _catalog(tools: object) -> dict[ToolRef, Tool]:
    """The tools by ref. Raises ValidationError (a ValueError) for *tools* that is not an
    iterable of :class:`Tool` (``None``, a str …), and for a ref or a model-facing name
    given twice: a model calls a tool by name, so a second tool with the same name could
    never be called (RUN-EXE-5)."""
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        raise ValidationError(f"tools must be an iterable of Tool, not "
                              f"{type(tools).__name__}", argument="tools")
    table: dict[ToolRef, Tool] = {}
    names: dict[str, ToolRef] = {}
    for n, item in enumerate(tools):
        if not isinstance(item, Tool):
            raise ValidationError(f"tools[{n}] is {type(item).__name__}, not a Tool "
                                  "(python_tool(...))", argument="tools", index=n)
        if item.ref in table:
            raise ValidationError(f"duplicate tool ref {item.ref!r}", tool_ref=item.ref)
        if item.name in names:
            raise ValidationError(
                f"tools {names[item.name]!r} and {item.ref!r} have the same model-facing "
                f"name {item.name!r}; a model could never call the second one",
                tool_ref=item.ref, name=item.name)
        table[item.ref] = item
        names[item.name] = item.ref
    return table


def _model_table(models: object) -> dict[ModelRef, Model]:
    """*models* (None or a mapping of non-empty str refs to objects with an async
    ``complete``) as a dict. Raises ValidationError (``argument="models"``)."""
    if models is None:
        return {}
    if not isinstance(models, Mapping):
        raise ValidationError(f"models must be a mapping of model refs to models, not "
                              f"{type(models).__name__}", argument="models")
    for ref, model in models.items():
        if not isinstance(ref, str) or not ref:
            raise ValidationError(f"a model ref must be a non-empty str, not {ref!r:.64}",
                                  argument="models")
        if not callable(getattr(model, "complete", None)):
            raise ValidationError(f"models[{ref!r}] is {type(model).__name__}, not a model "
                                  "(an object with async complete(request))",
                                  argument="models", model=ref)
    return dict(models)


def _check_bounds(retain: int, retain_tombstones: int, settlement_window: int,
                  progress_ring: int, max_attempts: int, backoff: float,
                  model_timeout: float | None, max_tool_output_bytes: int,
                  max_model_result_bytes: int, retain_unread: int) -> None:
    """ValidationError (``argument`` names it) unless every count is an int >= 1 and
    ``backoff`` a finite number of seconds >= 0, ``model_timeout`` None or > 0 and
    finite."""
    for what, value in (("retain", retain), ("retain_tombstones", retain_tombstones),
                        ("settlement_window", settlement_window),
                        ("progress_ring", progress_ring), ("max_attempts", max_attempts),
                        ("max_tool_output_bytes", max_tool_output_bytes),
                        ("max_model_result_bytes", max_model_result_bytes),
                        ("retain_unread", retain_unread)):
        check_count(value, what, minimum=1)
    check_seconds(backoff, "backoff")
    if model_timeout is not None:
        check_seconds(model_timeout, "model_timeout", positive=True)


def _check_retry(tool_max_attempts: int, max_backoff: float, jitter: float,
                 max_retry_after: float, provider: str, epoch: str | None) -> None:
    check_count(tool_max_attempts, "tool_max_attempts", minimum=1)
    check_seconds(max_backoff, "max_backoff")
    check_fraction(jitter, "jitter")
    check_seconds(max_retry_after, "max_retry_after")
    if not isinstance(provider, str) or not provider:
        raise ValidationError(f"provider must be a non-empty str, not {provider!r:.64}",
                              argument="provider")
    if epoch is not None and (not isinstance(epoch, str) or not epoch):
        raise ValidationError(f"epoch must be a non-empty str or None, not {epoch!r:.64}",
                              argument="epoch")


@body_errors_unwrapped
@asynccontextmanager
async def open_local_executor(*, tools: Iterable[Tool] = (),
                              models: Mapping[ModelRef, Model] | None = None,
                              retain: int = DEFAULT_RETAINED_OUTCOMES,
                              retain_tombstones: int = DEFAULT_RETAINED_TOMBSTONES,
                              settlement_window: int = DEFAULT_SETTLEMENT_WINDOW,
                              progress_ring: int = DEFAULT_PROGRESS_RING,
                              max_attempts: int = DEFAULT_MODEL_ATTEMPTS,
                              backoff: float = DEFAULT_BACKOFF,
                              model_timeout: float | None = None, provider: str = "local",
                              epoch: str | None = None,
                              retain_unread: int = DEFAULT_RETAINED_UNREAD,
                              max_tool_output_bytes: int = DEFAULT_MAX_TOOL_OUTPUT_BYTES,
                              tool_max_attempts: int = 1,
                              max_backoff: float = DEFAULT_MAX_BACKOFF,
                              jitter: float = 0.0, jitter_seed: int = 0,
                              max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
                              max_model_result_bytes: int = DEFAULT_MAX_MODEL_RESULT_BYTES,
                              ) -> AsyncIterator[LocalExecutor]:
    """Open a :class:`LocalExecutor` (same keyword arguments) whose workers run in a
    nursery of this block.

    Leaving the block closes the executor: live executions are cancelled (each settles
    ``Cancelled("executor closed")``) and their tasks finish before the block exits.
    Raises ``ValidationError`` (a ValueError), before anything starts, for every argument
    :class:`LocalExecutor` refuses (out-of-range or wrongly typed bounds and durations,
    *tools* that are not Tools, *models* that are not models; attribute ``argument``) and
    for two tools with the same ref or the same model-facing name (RUN-EXE-5).

    An exception raised in the block comes out as itself, not in an ExceptionGroup; an error
    of a background task comes out in an ExceptionGroup (RUN-ACT-10).
    """
    tools = tuple(_catalog(tools).values())
    _model_table(models)
    _check_bounds(retain, retain_tombstones, settlement_window, progress_ring, max_attempts,
                  backoff, model_timeout, max_tool_output_bytes, max_model_result_bytes,
                  retain_unread)
    _check_retry(tool_max_attempts, max_backoff, jitter, max_retry_after, provider,
                 epoch)
    async with trio.open_nursery() as nursery:
        executor = LocalExecutor(
            nursery=nursery, tools=tools, models=models, retain=retain,
            retain_tombstones=retain_tombstones, settlement_window=settlement_window,
            progress_ring=progress_ring, max_attempts=max_attempts, backoff=backoff,
            model_timeout=model_timeout, provider=provider, epoch=epoch,
            retain_unread=retain_unread, max_tool_output_bytes=max_tool_output_bytes,
            tool_max_attempts=tool_max_attempts, max_backoff=max_backoff, jitter=jitter,
            jitter_seed=jitter_seed, max_retry_after=max_retry_after,
            max_model_result_bytes=max_model_result_bytes)
        try:
            yield executor
        finally:
            executor._close_nowait()
