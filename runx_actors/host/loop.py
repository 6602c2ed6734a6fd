"""The loop host (loop-host §1, §2): chains governed turns, one Run per turn.

``await LoopHost(store, config).run(spec)`` runs §2.3:

1. commit ``loop_opened`` (or find it; a stored body that differs from *spec* raises
   :class:`LoopConfigMismatch` and nothing is written);
2. fold the loop record and verify every recorded turn (§2.5; :class:`LoopIntegrityError`);
3. adopt a submitted turn's Run (never a second Run for an index);
4. apply the stop policy (§2.4) to the last recorded turn;
5. build turn n from the fixed inputs, the host's own counter and the previous payload's
   ``latest_summary``; create its Run together with ``run_opened`` and ``turn_submitted``;
6. drive it until it ends or parks (``timeout_seconds`` bounds active driving);
7. a parked Run returns ``paused`` with its requests and records nothing;
8. seal and record: ``run_sealing``, receipts (adopted or sealed, children first), then
   ``run_sealed`` + ``turn_recorded`` in one commit;
9. back to 4.

Every step is idempotent under derived commit ids, so the host may die at any
instruction and be restarted with the same spec (§2.6). The loop record lives in the same
store as the Runs; a turn never sees it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio

from ..protocol import facts as F
from ..protocol.commit import CommitStatus
from ..protocol.errors import RunTerminalError, ValidationError
from ..protocol.values import RunStatus
from ._governed import GovernedSession, Phase, open_session
from ._governed import HostConfig as HostConfig
from ._governed import utc_now as utc_now
from ._hashing import digest_json
from ._records import (
    LOOP_OPENED,
    TURN_SUBMITTED,
    LoopRecord,
    TurnRecord,
    fold_governed,
    fold_loop,
    governed_stream,
    loop_event,
    loop_open_commit,
    loop_stream,
    turn_submit_commit,
)
from ._sealing import fact_log_hash
from .errors import HostError, InputContractError, LoopConfigMismatch, LoopIntegrityError
from .package import Package, apply_input_contract
from .receipts import Disposition, Receipt, ReceiptError, step_locator, verify_chain

__all__ = [
    "HostConfig",
    "utc_now",
    "DEFAULT_SCOPE",
    "LOOP_MANAGED_INPUTS",
    "LoopSpec",
    "TurnSummary",
    "LoopOutcome",
    "LoopHost",
    "InputRefusedError",
    "derive_turn_key",
    "derive_turn_run_id",
    "derive_turn_trigger",
    "stop_policy",
    "projection",
]

#: The scope used when none is given.
DEFAULT_SCOPE = "default"
#: Inputs the host sets on every turn; ``fixed_inputs`` may not set them.
LOOP_MANAGED_INPUTS = ("loop_id", "turn_index", "max_turns", "previous_summary")


class InputRefusedError(HostError):
    """An input offered to the loop cannot be recorded in any turn: no turn is accepting
    inputs (none is running, or the running one already produced its final answer), or
    the turn ended meanwhile. The sender keeps the input. Attributes: ``loop_id``."""

    default_reason = "input_refused"


def derive_turn_key(loop_id: str, turn_index: int, inputs: Mapping[str, Any]) -> str:
    """``H({"schema": "runx_actors.turn_key.v1", "loop_id", "turn_index", "inputs"})``:
    the idempotency key of a turn and its receipt's ``intent_key`` (§2.2)."""
    return digest_json({"schema": "runx_actors.turn_key.v1", "loop_id": loop_id,
                        "turn_index": turn_index, "inputs": dict(inputs)})


def derive_turn_run_id(runner: str, turn_key: str) -> str:
    """``"run_" + runner.replace("-", "_") + "_" + turn_key[7:23]`` (§2.2)."""
    return "run_" + runner.replace("-", "_") + "_" + turn_key[7:23]


def derive_turn_trigger(loop_id: str, turn_index: int, previous_receipt_id: str | None) -> str:
    """``H({"schema": "runx_actors.turn_trigger.v1", "loop_id", "turn_index",
    "previous_receipt_id"})`` (§2.2)."""
    return digest_json({"schema": "runx_actors.turn_trigger.v1", "loop_id": loop_id,
                        "turn_index": turn_index, "previous_receipt_id": previous_receipt_id})


def _non_empty_str(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValidationError(f"LoopSpec.{attribute.name} must be a non-empty str, not "
                              f"{type(value).__name__} {repr(value)[:64]}",
                              argument=attribute.name)


def _package(_: Any, __: Any, value: Any) -> None:
    if not isinstance(value, Package):
        raise ValidationError(f"LoopSpec.package must be a Package (load_package(path)), "
                              f"not {type(value).__name__}", argument="package")


def _inputs(_: Any, __: Any, value: Any) -> None:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ValidationError(f"LoopSpec.fixed_inputs must be a mapping of str names to "
                              f"values, not {type(value).__name__}", argument="fixed_inputs")


@attrs.frozen(kw_only=True)
class LoopSpec:
    """What a loop is: its id, package and runner, the max-turn budget, the inputs every
    turn shares, and the scope (Session) its record and Runs live in (§2.3).

    Construction raises ValidationError (attribute ``argument``) for a ``loop_id``,
    ``runner`` or ``scope`` that is not a non-empty str, a ``package`` that is not a
    :class:`Package`, or ``fixed_inputs`` that is not a mapping with str keys (``None``
    was a builtin TypeError from ``LoopHost.run``); ``max_turns`` is checked by the
    runner's input contract when the loop runs (InputContractError)."""

    loop_id: str = attrs.field(validator=_non_empty_str)
    package: Package = attrs.field(validator=_package)
    runner: str = attrs.field(default="turn", validator=_non_empty_str)
    max_turns: Any  # checked by the runner's input contract (InputContractError)
    fixed_inputs: Mapping[str, Any] = attrs.field(factory=dict, validator=_inputs)
    scope: str = attrs.field(default=DEFAULT_SCOPE, validator=_non_empty_str)

    def opened_body(self) -> dict[str, Any]:
        """The ``loop_opened`` body (§2.1)."""
        return {"loop_id": self.loop_id, "max_turns": self.max_turns, "runner": self.runner,
                "package_name": self.package.name, "package_digest": self.package.digest,
                "fixed_inputs": dict(self.fixed_inputs), "scope": self.scope}

    def turn_inputs(self, turn_index: int, previous_summary: str | None) -> dict[str, Any]:
        """Turn *turn_index*'s canonical inputs: the fixed inputs plus ``loop_id``,
        ``turn_index``, ``max_turns`` and ``previous_summary`` (the contract default for
        ``None``), checked against the runner's input contract (§3.2).

        Raises: InputContractError.
        """
        managed = [k for k in LOOP_MANAGED_INPUTS if k in self.fixed_inputs]
        if managed:
            raise InputContractError(f"input_contract_invalid: fixed_inputs may not set "
                                     f"{managed[0]}", field=managed[0])
        raw = {**self.fixed_inputs, "loop_id": self.loop_id, "turn_index": turn_index,
               "max_turns": self.max_turns}
        if previous_summary is not None:
            raw["previous_summary"] = previous_summary
        return apply_input_contract(self.package.runner(self.runner), raw)


@attrs.frozen
class TurnSummary:
    """One turn as the outcome reports it."""

    turn_index: int
    run_id: str
    state: str  # "recorded" | "submitted"
    receipt_id: str | None = None
    disposition: str | None = None
    reason_code: str | None = None
    payload: Any = None

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON-ready data (the ``--json`` shape of ``loop run``/``status``:
        ``turn_index``, ``run_id``, ``state``, ``receipt_id``, ``disposition``,
        ``reason_code``, ``payload``)."""
        return attrs.asdict(self)


@attrs.frozen(kw_only=True)
class LoopOutcome:
    """The result of :meth:`LoopHost.run` (§2.3): ``status`` is ``stopped``, ``paused``
    or ``failed``; ``stop_reason`` is ``next_turn_not_allowed``, ``max_turns_reached``,
    ``turn_paused`` or ``turn_failed``; ``requests`` are the parked turn's requests;
    ``exit_code`` follows §2.4 (0, 2 or 1); ``projection`` is §2.5's."""

    loop_id: str
    status: str
    stop_reason: str
    turns: tuple[TurnSummary, ...]
    requests: tuple[Mapping[str, Any], ...] = ()
    exit_code: int
    projection: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def needs(self) -> str | None:
        """For a paused loop: ``needs_approval`` if an approval waits, else
        ``needs_agent`` (§2.4 row 1); None otherwise."""
        if self.status != "paused":
            return None
        if any(r.get("kind") == "approval" for r in self.requests):
            return "needs_approval"
        return "needs_agent"


def stop_policy(turn: TurnSummary, max_turns: Any) -> tuple[str, str, int] | None:
    """§2.4 for a recorded turn (first match wins): ``(status, stop_reason, exit)`` or
    None (submit the next turn). Parked turns are handled before this is asked."""
    if turn.disposition != Disposition.CLOSED.value:
        return "failed", "turn_failed", 1
    payload = turn.payload
    if not (isinstance(payload, Mapping) and payload.get("next_turn_allowed") is True):
        return "stopped", "next_turn_not_allowed", 0
    if not (isinstance(max_turns, int | float) and turn.turn_index < max_turns):
        return "stopped", "max_turns_reached", 0
    return None


def projection(turns: Sequence[TurnSummary]) -> dict[str, Any]:
    """``{latest_summary, consumed_authority: {tools, mutations, spend_minor},
    last_receipt_id}`` from verified payloads only (§2.5)."""
    latest: str | None = None
    tools: list[Any] = []
    mutations = spend = 0
    last: str | None = None
    for turn in turns:
        if turn.receipt_id is not None:
            last = turn.receipt_id
        update = turn.payload.get("projection_update") if isinstance(turn.payload,
                                                                     Mapping) else None
        if not isinstance(update, Mapping):
            continue
        if isinstance(update.get("latest_summary"), str):
            latest = update["latest_summary"]
        authority = update.get("consumed_authority")
        if isinstance(authority, Mapping):
            tools += list(authority.get("tools") or ())
            mutations += _number(authority.get("mutations"))
            spend += _number(authority.get("spend_minor"))
    return {"latest_summary": latest,
            "consumed_authority": {"tools": tools, "mutations": mutations,
                                   "spend_minor": spend},
            "last_receipt_id": last}


def check_max_turns(value: Any) -> None:
    """Raise InputContractError (``field="max_turns"``) unless *value* is a positive
    integer (an integral float such as ``3.0`` is accepted, as §3.2 normalises it).
    Checked before any loop fact is written (§2.3); the input contract, checked next,
    refuses a number past ±(2^53−1), as it does for every number input.

    The budget is the host's own counter (§2.4 row 4, ``n == max_turns``): 0, -1 or 2.5
    never equal a turn number, so the loop would run a governed turn — a model effect —
    that only the example's scripted model refuses (§3.2's runtime validation belongs to
    a turn Run, e.g. a standalone ``skill`` run given such inputs); a number past
    ±(2^53−1) is stored as another double (D-11) and the loop refused on every later call.
    A non-number is left to the input contract (``max_turns: number``)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return
    if not (value >= 1 and float(value).is_integer()):
        raise InputContractError(f"input_contract_invalid: max_turns must be a positive "
                                 f"integer (the host counts turns against it), not "
                                 f"{value!r}", field="max_turns")


def _number(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class LoopHost:
    """Runs loops over one run store (see module docstring).

    *store* is a SessionStore (memory or SQLite); *config* names the receipt store, the
    signing identity, the workspace and the clock. One host drives a loop at a time: the
    Session's single writer makes a second host either lose ownership
    (``OwnershipLostError``, it stops) or replay derived commit ids.
    """

    def __init__(self, store: Any, config: HostConfig) -> None:
        self.store = store
        self.config = config
        self._live: dict[str, GovernedSession] = {}

    async def run(self, spec: LoopSpec) -> LoopOutcome:
        """Run *spec*'s loop until the stop policy says stop, a turn parks or fails.

        Checkpoint: always.
        Cancellation: the host may be cancelled (or killed) anywhere; calling ``run`` again
            with the same spec continues exactly where the record stands (§2.6).
        Raises:
            InputContractError: the turn inputs violate the contract, or ``max_turns``
                is not a positive integer of at most 2^53−1 (nothing written, no Run).
            LoopConfigMismatch: the stored loop differs from *spec* (nothing written).
            LoopIntegrityError: a recorded turn fails verification (nothing submitted).
            OwnershipLostError: another host took over the scope; this one stopped.
        """
        check_max_turns(spec.max_turns)
        spec.turn_inputs(1, None)  # the contract holds before any loop fact
        reader = await self.store.reader(spec.scope)
        record = fold_loop(spec.loop_id, await reader.read_stream(loop_stream(spec.loop_id)))
        if record is not None:
            self._check_config(spec, record)
        turns = await self._verify(reader, spec, record)
        if record is not None and record.turns and record.turns[-1].state == "recorded":
            decided = stop_policy(turns[-1], spec.max_turns)
            if decided is not None:
                return self._outcome(spec, turns, decided)
        async with open_session(self.store, spec.scope, spec.package, spec.runner,
                                self.config) as session:
            self._live[spec.loop_id] = session
            try:
                return await self._run(session, spec, record, list(turns))
            finally:
                self._live.pop(spec.loop_id, None)

    # -- phase A: read-only checks ---------------------------------------------------------

    @staticmethod
    def _check_config(spec: LoopSpec, record: LoopRecord) -> None:
        wanted = spec.opened_body()
        for key, value in wanted.items():
            if digest_json(record.opened.get(key)) != digest_json(value):
                raise LoopConfigMismatch(
                    f"loop {spec.loop_id} was opened with another {key}", loop_id=spec.loop_id,
                    field=key)

    async def _verify(self, reader: Any, spec: LoopSpec,
                      record: LoopRecord | None) -> list[TurnSummary]:
        """§2.5 for every recorded turn, in order."""
        out: list[TurnSummary] = []
        store = self.config.receipts
        for turn in record.turns if record else ():
            if turn.state != "recorded":
                out.append(TurnSummary(turn.turn_index, turn.run_id, turn.state))
                continue

            def fail(check: str, message: str, turn: TurnRecord = turn) -> LoopIntegrityError:
                return LoopIntegrityError(
                    f"loop {spec.loop_id}: turn {turn.turn_index}: {message}",
                    loop_id=spec.loop_id, turn_index=turn.turn_index, check=check)

            receipt_id = str(turn.receipt_id)
            try:
                receipt: Receipt = await trio.to_thread.run_sync(store.get, receipt_id)
            except ReceiptError as exc:
                raise fail("receipt", f"receipt {receipt_id} does not verify: {exc}") from exc
            body = receipt.body
            subject = body["subject"]
            if not str(subject["ref"]["uri"]).startswith(f"hrn_{turn.run_id}_"):
                raise fail("subject", "the receipt's subject names another run")
            disposition = str(body["seal"]["disposition"])
            closed = disposition == Disposition.CLOSED.value
            if closed != (turn.payload is not None):
                raise fail("payload", "the recorded payload does not match the disposition")
            if closed and subject.get("kind") == "skill" and subject["ref"].get("locator") \
                    != step_locator(Disposition.CLOSED, turn.payload):
                raise fail("locator", "the recorded payload does not match the locator")
            if closed and subject.get("kind") == "graph" and \
                    body["idempotency"]["content_hash"] != digest_json(turn.payload):
                raise fail("locator", "the recorded payload does not match the content hash")
            facts = await reader.run_facts(turn.run_id)
            commitments: Sequence[Any] = subject.get("commitments") or ({},)
            if commitments[0].get("value") != fact_log_hash(spec.scope, turn.run_id, facts):
                raise fail("fact_log", "the fact log does not match the receipt's commitment")
            gov = fold_governed(turn.run_id,
                                await reader.read_stream(governed_stream(turn.run_id)))
            if gov.sealed is None or gov.sealed.get("receipt_id") != receipt_id:
                raise fail("run_sealed", "run_sealed does not name the recorded receipt")
            out.append(TurnSummary(turn.turn_index, turn.run_id, "recorded", receipt_id,
                                   disposition, str(body["seal"]["reason_code"]),
                                   turn.payload))
        recorded = [t.receipt_id for t in out if t.receipt_id is not None]
        chain = await trio.to_thread.run_sync(verify_chain, store, recorded)
        if not chain.valid:
            first = chain.findings[0]
            raise LoopIntegrityError(
                f"loop {spec.loop_id}: the turn receipts do not chain: {first.code.value} "
                f"at {first.path}: {first.message}", loop_id=spec.loop_id, turn_index=None,
                check="lineage")
        return out

    def _outcome(self, spec: LoopSpec, turns: Sequence[TurnSummary],
                 decided: tuple[str, str, int],
                 requests: Sequence[Mapping[str, Any]] = ()) -> LoopOutcome:
        status, reason, code = decided
        return LoopOutcome(loop_id=spec.loop_id, status=status, stop_reason=reason,
                           turns=tuple(turns), requests=tuple(requests), exit_code=code,
                           projection=projection(turns))

    # -- phase B: the writer ---------------------------------------------------------------

    async def _open_loop(self, session: GovernedSession, spec: LoopSpec) -> None:
        self.config.hit("before_loop_opened", loop_id=spec.loop_id)
        await session.writer.append_events(
            loop_open_commit(spec.loop_id),
            [loop_event(spec.loop_id, LOOP_OPENED, spec.opened_body())])
        record = await self._record(session, spec)
        assert record is not None
        self._check_config(spec, record)

    async def _record(self, session: GovernedSession, spec: LoopSpec) -> LoopRecord | None:
        events = await session.writer.read_stream(loop_stream(spec.loop_id))
        return fold_loop(spec.loop_id, events)

    async def _run(self, session: GovernedSession, spec: LoopSpec,
                   record: LoopRecord | None, turns: list[TurnSummary]) -> LoopOutcome:
        if record is None:
            await self._open_loop(session, spec)
        else:
            # a racing host may have moved on since phase A: read again under ownership
            record = await self._record(session, spec)
            assert record is not None
            turns = await self._verify(session.writer, spec, record)
        while True:
            last = turns[-1] if turns else None
            if last is not None and last.state == "submitted":
                run_id = last.run_id
                n = last.turn_index
            else:
                if last is not None:
                    decided = stop_policy(last, spec.max_turns)
                    if decided is not None:
                        return self._outcome(spec, turns, decided)
                n = 1 if last is None else last.turn_index + 1
                run_id = await self._submit(session, spec, n, last)
                turns.append(TurnSummary(n, run_id, "submitted"))
            phase = await session.drive(run_id)
            if phase == Phase.PARKED:
                requests = [r.to_json() for r in await session.waiting_requests(run_id)]
                return self._outcome(spec, turns, ("paused", "turn_paused", 2), requests)
            sealed = await session.seal_and_record(run_id)
            seal = sealed.top.body["seal"]
            turns[-1] = TurnSummary(n, run_id, "recorded", sealed.top.id,
                                    str(seal["disposition"]), str(seal["reason_code"]),
                                    sealed.payload)

    async def _submit(self, session: GovernedSession, spec: LoopSpec, n: int,
                      last: TurnSummary | None) -> str:
        """Create turn *n*'s Run with ``run_opened`` and ``turn_submitted`` (§2.3 step 5)."""
        previous_summary = None
        if last is not None and isinstance(last.payload, Mapping):
            update = last.payload.get("projection_update")
            if isinstance(update, Mapping) and isinstance(update.get("latest_summary"), str):
                previous_summary = update["latest_summary"]
        inputs = spec.turn_inputs(n, previous_summary)
        turn_key = derive_turn_key(spec.loop_id, n, inputs)
        run_id = derive_turn_run_id(spec.runner, turn_key)
        trigger = derive_turn_trigger(spec.loop_id, n, last.receipt_id if last else None)
        opened = session.run_opened_body(run_id=run_id, inputs=inputs, intent_key=turn_key,
                                         trigger_fingerprint=trigger, loop_id=spec.loop_id,
                                         turn_index=n)
        submitted = loop_event(spec.loop_id, TURN_SUBMITTED, {
            "loop_id": spec.loop_id, "turn_index": n, "turn_key": turn_key, "run_id": run_id})
        self.config.hit("before_creation_commit", loop_id=spec.loop_id, turn_index=n)
        status = await session.open_run(opened, commit_id=turn_submit_commit(spec.loop_id, n),
                                        extra_events=[submitted])
        if status is CommitStatus.ALREADY_APPLIED:
            record = await self._record(session, spec)
            stored = record.turns[n - 1] if record and len(record.turns) >= n else None
            if stored is None or stored.turn_key != turn_key:
                raise LoopConfigMismatch(
                    f"loop {spec.loop_id}: turn {n} was submitted with other inputs",
                    loop_id=spec.loop_id, field="turn_key")
        self.config.hit("after_creation_commit", loop_id=spec.loop_id, turn_index=n)
        return run_id

    # -- inputs offered while the loop runs (failure-scenarios 10) ---------------------------

    async def submit_input(self, loop_id: str, text: str) -> str:
        """Offer *text* as an input to the loop's running turn; return the run id it was
        recorded in.

        An input is recorded in exactly one Run, or refused: while no turn is running,
        once the running turn has produced its final answer (so a stream of arrivals
        cannot keep a turn alive), or when the turn ends first. Every turn still decides
        only from its declared inputs.

        Raises:
            InputRefusedError: the input was not recorded anywhere.
            OwnershipLostError: the host lost the scope.
        """
        session = self._live.get(loop_id)
        if session is None:
            await trio.lowlevel.checkpoint()
            raise InputRefusedError(f"loop {loop_id} has no running turn", loop_id=loop_id)
        spec_record = fold_loop(loop_id, await session.writer.read_stream(loop_stream(loop_id)))
        last = spec_record.last if spec_record else None
        if last is None or last.state != "submitted":
            raise InputRefusedError(f"loop {loop_id} has no running turn", loop_id=loop_id)
        state = await session.state(last.run_id)
        facts = await session.writer.run_facts(last.run_id)
        if state.status is not RunStatus.ACTIVE or _answered(facts):
            raise InputRefusedError(f"turn {last.turn_index} of loop {loop_id} no longer "
                                    "accepts inputs", loop_id=loop_id)
        try:
            await session.rt.accept_input(last.run_id, text)
        except RunTerminalError as exc:
            raise InputRefusedError(f"turn {last.turn_index} of loop {loop_id} has ended",
                                    loop_id=loop_id) from exc
        return last.run_id


def _answered(facts: Sequence[Any]) -> bool:
    """True once the Run produced a final answer (a completed model step that opened no
    tool step)."""
    completed = sum(1 for f in facts if isinstance(f, F.ModelStepCompleted))
    opened = sum(1 for f in facts if isinstance(f, F.ToolStepOpened))
    return completed > opened

