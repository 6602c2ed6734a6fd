"""Sealing a governed Run into receipts (loop-host §2.3 step 8, §3.5, §4.3, §4.4).

:func:`seal_run` is a function of the Run's evidence (its facts, its final answer, its
``run_opened`` and ``run_sealing`` bodies), the signing identity and the receipt store:
it adopts receipts a previous attempt already stored (``find``), and otherwise seals and
``put``s them, children before their root. Re-sealing the same evidence with the same key
gives identical bytes, so the ``put`` is then a no-op. It does blocking file work: call it
in a worker thread.

The output contract of a ``turn`` (§3.5) and of every loop turn's payload is checked here,
at sealing; a violation seals ``failed / output_contract_invalid`` with claim ``{}`` and
never rewrites the payload.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..protocol import facts as F
from ..protocol._codec import encode_fact
from ..protocol.state import MachineState
from ..protocol.values import RunStatus
from .package import GraphRunner, Runner, ScriptedRunner
from .receipts import (
    Disposition,
    Idempotency,
    Lineage,
    Receipt,
    ReceiptDraft,
    ReceiptRepository,
    ReceiptSigner,
    Reference,
    Seal,
    Subject,
    SubjectKind,
    claim_content_hash,
    commitments_for,
    fact_log_commitment,
    graph_disposition,
    graph_locator,
    graph_reason_code,
    graph_step_reason_code,
    harness_uri,
    local_runtime_authority,
    run_binding_commitment,
    seal_receipt,
    seal_summary,
    step_locator,
    step_reason_code,
)
from .turn import TOOL_NOT_ALLOWED, TurnInputError, turn_payload, turn_rule

__all__ = [
    "OUTPUT_CONTRACT_INVALID",
    "NO_RESULT",
    "StepEvidence",
    "RunEvidence",
    "SealedRun",
    "fact_log_hash",
    "base_disposition",
    "turn_contract_violation",
    "loop_payload_violation",
    "seal_run",
]

OUTPUT_CONTRACT_INVALID = "output_contract_invalid"
LOOP_TURN_SCRIPT = "loop-turn"


class _NoResult:
    def __repr__(self) -> str:
        return "NO_RESULT"


#: The Run has no final answer (it did not complete).
NO_RESULT: Any = _NoResult()


@attrs.frozen
class StepEvidence:
    """What a graph step's agent call ended with: ``answer`` (the whole committed
    response payload) when answered, else None; ``reached`` when the call exists;
    ``rejected`` when the response was rejected."""

    step_id: str
    reached: bool = False
    answer: Any = None
    rejected: bool = False


@attrs.frozen(kw_only=True)
class RunEvidence:
    """Everything a Run's receipts are a function of."""

    scope: str
    run_id: str
    runner_name: str
    runner: Runner
    facts: tuple[F.Fact, ...]
    state: MachineState
    opened: Mapping[str, Any]
    created_at: str
    override: str | None = None
    final: Any = NO_RESULT
    steps: tuple[StepEvidence, ...] = ()


@attrs.frozen
class SealedRun:
    """The receipts of a sealed Run: the top receipt, its children (graph steps, in step
    order), and the verified payload (None unless the top receipt is ``closed``)."""

    top: Receipt
    children: tuple[Receipt, ...]
    payload: Any
    adopted: bool

    @property
    def disposition(self) -> str:
        """The sealed disposition (``closed``, ``failed``, ``refused``, …) of the top receipt."""
        return str(self.top.body["seal"]["disposition"])


def fact_log_hash(scope: str, run_id: str, facts: Sequence[F.Fact]) -> str:
    """Commitment 1 (§4.3), recomputed from the Run's facts."""
    return fact_log_commitment(scope, run_id, [(f.WIRE_NAME, encode_fact(f)) for f in facts])


def base_disposition(state: MachineState, override: str | None) -> Disposition:
    """``completed`` → closed; ``failed`` → failed; ``stopped`` → the ``run_sealing``
    override (``timed_out`` / ``blocked``) or killed (§4.3)."""
    if state.status is RunStatus.COMPLETED:
        return Disposition.CLOSED
    if state.status is RunStatus.FAILED:
        return Disposition.FAILED
    if override:
        return Disposition(override)
    return Disposition.KILLED


def _run_detail(state: MachineState) -> str | None:
    result = state.result
    if result is None or state.status is RunStatus.COMPLETED:
        return None
    if state.status is RunStatus.FAILED and result.failure is not None:
        return result.failure.message or result.failure.class_
    return result.reason.value or None


def _tool_calls(facts: Sequence[F.Fact]) -> list[dict[str, Any]]:
    calls: dict[str, dict[str, Any]] = {}
    for fact in facts:
        match fact:
            case F.ToolStepOpened(calls=bindings):
                for b in bindings:
                    calls[b.call_id] = {"tool": b.tool_ref, "started": False,
                                        "status": "open", "class": None}
            case F.ToolCallStarted(call_id=cid) if cid in calls:
                calls[cid]["started"] = True
            case F.ToolCallCompleted(call_id=cid) if cid in calls:
                calls[cid]["status"] = "completed"
            case F.ToolCallFailed(call_id=cid, failure=failure) if cid in calls:
                calls[cid]["status"] = "failed"
                calls[cid]["class"] = failure.class_
    return list(calls.values())


def turn_contract_violation(runner: ScriptedRunner, inputs: Mapping[str, Any],
                            facts: Sequence[F.Fact], payload: Any) -> str | None:
    """The §3.5 output contract of a completed ``loop-turn`` Run: the final result equals
    ``turn_payload(inputs)``, and the fact log agrees with the rule that fired. Returns
    the violation, or None."""
    try:
        rule = turn_rule(inputs, runner.allowed_tools)
        expected = turn_payload(inputs, runner.allowed_tools)
    except TurnInputError as exc:
        return f"the inputs admit no payload ({exc})"
    if payload is NO_RESULT or payload != expected:
        return "the final result is not turn_payload(inputs)"
    calls = _tool_calls(facts)
    if rule == 1:
        if calls:
            return "rule 1 fired but the Run opened a tool step"
        return None
    tool = expected["requested_tool"]
    if len(calls) != 1 or calls[0]["tool"] != tool:
        return f"rule {rule} fired but the Run does not hold exactly one {tool} call"
    call = calls[0]
    if rule == 2:
        if call["status"] != "failed" or call["class"] != TOOL_NOT_ALLOWED or call["started"]:
            return f"rule 2 fired but {tool} was not declined with {TOOL_NOT_ALLOWED}"
        return None
    if call["status"] != "completed":
        return f"rule {rule} fired but the {tool} call did not complete"
    return None


def loop_payload_violation(turn_index: int, payload: Any) -> str | None:
    """The shape every loop turn's payload must have for the host to act on it:
    ``next_turn_allowed`` a bool, ``projection_update.latest_summary`` a string, and
    ``handoff`` an object naming ``next_turn_index == turn_index + 1`` exactly when the
    next turn is allowed (``null`` otherwise) (§2.4, §3.4, §3.5)."""
    if not isinstance(payload, Mapping):
        return "the payload is not an object"
    allowed = payload.get("next_turn_allowed")
    if not isinstance(allowed, bool):
        return "next_turn_allowed is not a boolean"
    update = payload.get("projection_update")
    if not isinstance(update, Mapping) or not isinstance(update.get("latest_summary"), str):
        return "projection_update.latest_summary is not a string"
    if "handoff" not in payload:
        return "handoff is missing"
    handoff = payload["handoff"]
    if not allowed:
        return None if handoff is None else "handoff is set although no next turn is allowed"
    if not isinstance(handoff, Mapping):
        return "handoff is not an object although the next turn is allowed"
    index = handoff.get("next_turn_index")
    if isinstance(index, bool) or index != turn_index + 1:
        return f"handoff.next_turn_index is {index!r}, the host expects {turn_index + 1}"
    return None


def _adopt(store: ReceiptRepository, intent_key: str, uri: str,
           fact_log: str) -> Receipt | None:
    """A stored receipt for (intent, uri) committing to the same fact log, if any."""
    for receipt in store.find(intent_key, uri):
        commitments = receipt.body.get("subject", {}).get("commitments", ())
        if commitments and commitments[0].get("value") == fact_log:
            found: Receipt = receipt
            return found
    return None


def _store(store: ReceiptRepository, draft: ReceiptDraft, signer: ReceiptSigner) -> Receipt:
    receipt = seal_receipt(draft, signer)
    store.put(receipt)
    return receipt


def seal_run(evidence: RunEvidence, *, signer: ReceiptSigner, store: ReceiptRepository,
             actor_ref: Reference | None = None,
             previous: Reference | None = None) -> SealedRun:
    """Seal (or adopt) the receipts of a terminal Run and store them, children first.

    Blocking (file I/O): run it in a worker thread.

    Raises:
        ReceiptCanonicalizationError, ReceiptSealError: the receipt cannot be sealed.
        ReceiptInvalidError, ReceiptAlreadyExistsError, OSError: the store refused it.
    """
    ev = evidence
    opened = ev.opened
    fact_log = fact_log_hash(ev.scope, ev.run_id, ev.facts)
    run_status = ev.state.status.value
    binding = run_binding_commitment(scope=ev.scope, run_id=ev.run_id, runner=ev.runner_name,
                                     run_status=run_status, fact_count=len(ev.facts),
                                     fact_log_sha256=fact_log)
    commitments = commitments_for(fact_log, binding, str(opened["inputs_sha256"]))
    intent_key = str(opened["intent_key"])
    trigger = str(opened["trigger_fingerprint"])
    authority = local_runtime_authority() if actor_ref is None \
        else local_runtime_authority(actor_ref)
    base = base_disposition(ev.state, ev.override)
    detail = _run_detail(ev.state)

    def draft(*, kind: SubjectKind, uri: str, locator: str, disposition: Disposition,
              reason_code: str, claim: Any, contract: str | None = None,
              lineage: Lineage) -> ReceiptDraft:
        summary = seal_summary(scope=ev.scope, run_id=ev.run_id, run_status=run_status,
                               fact_count=len(ev.facts), detail=detail,
                               output_contract_detail=contract)
        return ReceiptDraft(
            created_at=ev.created_at,
            idempotency=Idempotency(intent_key=intent_key, trigger_fingerprint=trigger,
                                    content_hash=claim_content_hash(disposition, claim)),
            subject=Subject(kind=kind, ref=Reference(type="harness", uri=uri,
                                                     locator=locator),
                            commitments=commitments),
            authority=authority,
            seal=Seal(disposition=disposition, reason_code=reason_code, summary=summary,
                      closed_at=ev.created_at, last_observed_at=ev.created_at),
            lineage=lineage)

    if isinstance(ev.runner, ScriptedRunner):
        uri = harness_uri(ev.run_id, ev.runner_name)
        adopted = _adopt(store, intent_key, uri, fact_log)
        payload = ev.final
        disposition, reason, contract = base, step_reason_code(base), None
        if base is Disposition.CLOSED:
            if ev.runner.script == LOOP_TURN_SCRIPT:
                contract = turn_contract_violation(ev.runner, opened.get("inputs") or {},
                                                   ev.facts, payload)
            if contract is None and opened.get("loop_id") is not None:
                contract = loop_payload_violation(int(opened["turn_index"]), payload)
            if contract is not None:
                disposition, reason = Disposition.FAILED, OUTPUT_CONTRACT_INVALID
        claim = payload if disposition is Disposition.CLOSED else {}
        if adopted is None:
            adopted_flag = False
            top = _store(store, draft(
                kind=SubjectKind.SKILL, uri=uri, locator=step_locator(disposition, claim),
                disposition=disposition, reason_code=reason, claim=claim, contract=contract,
                lineage=Lineage(previous=previous)), signer)
        else:
            adopted_flag, top = True, adopted
        closed = top.body["seal"]["disposition"] == Disposition.CLOSED.value
        return SealedRun(top, (), payload if closed else None, adopted_flag)

    assert isinstance(ev.runner, GraphRunner)
    root_uri = harness_uri(ev.run_id, "graph")
    adopted_root = _adopt(store, intent_key, root_uri, fact_log)
    claims, dispositions = _graph_steps(ev.runner, ev.steps, base)
    children: list[Receipt] = []
    for step, claim, disposition in zip(ev.runner.steps, claims, dispositions):
        if adopted_root is not None:
            break
        uri = harness_uri(ev.run_id, step.id)
        child = _adopt(store, intent_key, uri, fact_log)
        if child is None:
            child = _store(store, draft(
                kind=SubjectKind.SKILL, uri=uri, locator=step_locator(disposition, claim),
                disposition=disposition, reason_code=graph_step_reason_code(disposition),
                claim=claim, lineage=Lineage()), signer)
        children.append(child)
    root_disposition = graph_disposition(dispositions)
    payload = claims[-1] if root_disposition is Disposition.CLOSED else None
    if adopted_root is not None:
        refs = adopted_root.body.get("lineage", {}).get("children", ())
        children = [store.get(str(ref.get("uri", "")).removeprefix("runx:receipt:"))
                    for ref in refs]
        return SealedRun(adopted_root, tuple(children), payload, True)
    root_claim = payload if payload is not None else {}
    root = _store(store, draft(
        kind=SubjectKind.GRAPH, uri=root_uri, locator=graph_locator([c.id for c in children]),
        disposition=root_disposition, reason_code=graph_reason_code(root_disposition),
        claim=root_claim,
        lineage=Lineage(previous=previous, children=tuple(c.reference for c in children))),
        signer)
    return SealedRun(root, tuple(children), payload, False)


def _graph_steps(runner: GraphRunner, steps: Sequence[StepEvidence],
                 base: Disposition) -> tuple[list[Any], list[Disposition]]:
    by_id = {s.step_id: s for s in steps}
    claims: list[Any] = []
    dispositions: list[Disposition] = []
    for step in runner.steps:
        found = by_id.get(step.id, StepEvidence(step.id))
        disposition: Disposition
        if base is not Disposition.CLOSED:
            disposition = base
        elif found.answer is not None and isinstance(found.answer, Mapping):
            closure = found.answer.get("closure")
            value = closure.get("disposition") if isinstance(closure, Mapping) else None
            disposition = Disposition(value) if value else Disposition.CLOSED
        elif found.rejected:
            disposition = Disposition.DECLINED
        else:
            earlier = [d for d in dispositions if d is not Disposition.CLOSED]
            disposition = earlier[0] if earlier else Disposition.FAILED
        claim: Any = {}
        if disposition is Disposition.CLOSED and isinstance(found.answer, Mapping):
            claim = {k: found.answer[k] for k in step.outputs if k in found.answer}
        claims.append(claim)
        dispositions.append(disposition)
    return claims, dispositions
