"""What our receipts contain (loop-host §4.3): locators, commitments, authority, seal
text, reason codes and edges. Pure functions; the loop host composes them into a
:class:`ReceiptDraft`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence
from typing import Any

from ._c14n import C14N_ID, bytes_hash, receipt_hash
from ._model import (
    Attenuation,
    Authority,
    Commitment,
    Disposition,
    Enforcement,
    Reference,
    receipt_uri,
)

__all__ = [
    "ENFORCEMENT_PROFILE_ID",
    "LOCAL_RUNTIME_PRINCIPAL",
    "FACT_LOG_SCHEMA",
    "commitments_for",
    "RUN_BINDING_SCHEMA",
    "format_created_at",
    "harness_uri",
    "step_locator",
    "graph_locator",
    "claim_content_hash",
    "fact_log_commitment",
    "run_binding_commitment",
    "enforcement_profile_hash",
    "local_runtime_authority",
    "seal_summary",
    "step_reason_code",
    "graph_step_reason_code",
    "graph_reason_code",
    "graph_disposition",
]

ENFORCEMENT_PROFILE_ID = "runx.runtime.enforcement.profile.v1"
FACT_LOG_SCHEMA = "runx_actors.fact_log.v1"
RUN_BINDING_SCHEMA = "runx_actors.run_binding.v1"
#: The default ``authority.actor_ref`` (§4.3; configurable).
LOCAL_RUNTIME_PRINCIPAL = Reference(type="principal", uri="runx:principal:local_runtime")


def format_created_at(moment: _dt.datetime) -> str:
    """RFC 3339 UTC with milliseconds, ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (§4.2 ``created_at``).

    Raises:
        ValueError: *moment* is naive (it must carry a time zone).
    """
    if moment.tzinfo is None:
        raise ValueError("created_at needs an aware datetime")
    utc = moment.astimezone(_dt.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def harness_uri(run_id: str, node: str) -> str:
    """``hrn_<run_id>_<node>`` (§4.3): node is the runner name, a step id or ``graph``."""
    return f"hrn_{run_id}_{node}"


def step_locator(disposition: Disposition, claim: Any) -> str:
    """``H({"status": "success"|"failure", "claim": claim})`` (§4.3 step locator).

    ``success`` iff *disposition* is ``closed``; otherwise the claim is replaced by ``{}``.
    """
    closed = disposition is Disposition.CLOSED
    return receipt_hash({"status": "success" if closed else "failure",
                         "claim": claim if closed else {}})


def graph_locator(child_ids: Sequence[str]) -> str:
    """``H([runx:receipt:<child id>, …])`` in step order (§4.3 graph locator)."""
    return receipt_hash([receipt_uri(child_id) for child_id in child_ids])


def claim_content_hash(disposition: Disposition, claim: Any) -> str:
    """``idempotency.content_hash = H(claim)``, the claim being ``{}`` unless closed
    (§4.3)."""
    return receipt_hash(claim if disposition is Disposition.CLOSED else {})


def fact_log_commitment(scope: str, run_id: str, facts: Iterable[tuple[str, bytes]]) -> str:
    """Commitment 1 (§4.3): ``H({"schema": "runx_actors.fact_log.v1", scope, run_id,
    facts: [{position, name, sha256: Hb(stored fact data)}…]})``.

    *facts* are ``(wire name, stored typed envelope bytes)`` from ``RunCreated``
    (position 0) to ``RunEnded``.
    """
    entries = [{"position": position, "name": name, "sha256": bytes_hash(data)}
               for position, (name, data) in enumerate(facts)]
    return receipt_hash({"schema": FACT_LOG_SCHEMA, "scope": scope, "run_id": run_id,
                         "facts": entries})


def run_binding_commitment(
    *, scope: str, run_id: str, runner: str, run_status: str, fact_count: int,
    fact_log_sha256: str,
) -> str:
    """Commitment 2 (§4.3): ``H({"schema": "runx_actors.run_binding.v1", scope, run_id,
    runner, run_status, fact_count, fact_log_sha256})``; *run_status* is ``completed``,
    ``failed`` or ``stopped``."""
    return receipt_hash({
        "schema": RUN_BINDING_SCHEMA, "scope": scope, "run_id": run_id, "runner": runner,
        "run_status": run_status, "fact_count": fact_count,
        "fact_log_sha256": fact_log_sha256,
    })


def commitments_for(fact_log_sha256: str, run_binding_sha256: str,
                    inputs_sha256: str) -> tuple[Commitment, Commitment, Commitment]:
    """Our three ``subject.commitments`` (§4.3), in order: the fact log (scope ``output``,
    canonicalization ``runx_actors.fact_log.v1``), the run binding (scope ``output``,
    ``runx_actors.run_binding.v1``) and the inputs (scope ``input``,
    ``runx.receipt.c14n.v1``), each with algorithm ``sha256``.

    Raises:
        ValueError: a value does not start with ``sha256:``.
    """
    return (
        Commitment(scope="output", value=fact_log_sha256, canonicalization=FACT_LOG_SCHEMA),
        Commitment(scope="output", value=run_binding_sha256,
                   canonicalization=RUN_BINDING_SCHEMA),
        Commitment(scope="input", value=inputs_sha256, canonicalization=C14N_ID),
    )


def enforcement_profile_hash(
    redaction_refs: Sequence[Any] = (), setup_refs: Sequence[Any] = (),
    teardown_refs: Sequence[Any] = (),
) -> str:
    """``H({"profile_id": "runx.runtime.enforcement.profile.v1", redaction_refs,
    setup_refs, teardown_refs})`` (§4.3). With empty lists it is
    ``sha256:635fdb0a…394e``."""
    return receipt_hash({"profile_id": ENFORCEMENT_PROFILE_ID,
                         "redaction_refs": list(redaction_refs),
                         "setup_refs": list(setup_refs),
                         "teardown_refs": list(teardown_refs)})


def local_runtime_authority(actor_ref: Reference = LOCAL_RUNTIME_PRINCIPAL) -> Authority:
    """Our ``authority`` (§4.3): empty ref lists, null attenuation, no terms, and the
    empty enforcement profile."""
    return Authority(
        actor_ref=actor_ref,
        attenuation=Attenuation(),
        enforcement=Enforcement(profile_hash=enforcement_profile_hash()),
    )


def seal_summary(
    *, scope: str, run_id: str, run_status: str, fact_count: int,
    detail: str | None = None, output_contract_detail: str | None = None,
) -> str:
    """``"<scope>/<run_id> ended <run_status> after <fact_count> facts"`` (§4.3), plus
    ``": <failure message or stop reason>"`` for a failed or stopped Run, plus
    ``"; output contract violated: <detail>"`` for an output-contract failure."""
    text = f"{scope}/{run_id} ended {run_status} after {fact_count} facts"
    if detail:
        text += f": {detail}"
    if output_contract_detail:
        text += f"; output contract violated: {output_contract_detail}"
    return text


def step_reason_code(disposition: Disposition) -> str:
    """``step_<disposition>`` for a single runner (§4.3); ``output_contract_invalid`` is
    chosen by the caller."""
    return f"step_{disposition.value}"


def graph_step_reason_code(disposition: Disposition) -> str:
    """``agent_act_<disposition>`` for a graph step (§4.3)."""
    return f"agent_act_{disposition.value}"


def graph_disposition(step_dispositions: Sequence[Disposition]) -> Disposition:
    """A graph root is ``closed`` iff every step is, else the first non-closed step's
    disposition (§4.3)."""
    for disposition in step_dispositions:
        if disposition is not Disposition.CLOSED:
            return disposition
    return Disposition.CLOSED


def graph_reason_code(disposition: Disposition) -> str:
    """``graph_<disposition>`` for a graph root (§4.3)."""
    return f"graph_{disposition.value}"
