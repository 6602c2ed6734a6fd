"""Shared builders for the receipt tests (loop-host §4, §5): the §4.7 vector receipt,
demo-signed drafts for steps and graph roots, and targeted re-sealing of tampered bodies.
"""

from __future__ import annotations

import copy
from typing import Any

from runx_actors.host.receipts import (
    Disposition,
    Idempotency,
    Lineage,
    Receipt,
    ReceiptDraft,
    Reference,
    Seal,
    Signer,
    Subject,
    SubjectKind,
    body_digest,
    commitments_for,
    content_address,
    graph_locator,
    harness_uri,
    local_runtime_authority,
    receipt_hash,
    seal_receipt,
    step_locator,
)

CREATED_AT = "2026-01-01T00:00:00.000Z"

#: The demo identity as environment variables (§4.5, §10 "the demo signing identity").
DEMO_ENV = {
    "RUNX_RECEIPT_SIGN_KID": "runx-demo-key",
    "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64": "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=",
    "RUNX_RECEIPT_SIGN_ISSUER_TYPE": "hosted",
}

#: The unsealed receipt of loop-host §4.7 ("Full receipt"), exactly as written there.
VECTOR_UNSEALED: dict[str, Any] = {
    "schema": "runx.receipt.v1", "created_at": "2026-01-01T00:00:00.000Z",
    "canonicalization": "runx.receipt.c14n.v1",
    "issuer": {"type": "hosted", "kid": "runx-demo-key",
               "public_key_sha256":
                   "sha256:3097e2dee2cb4a34b53840cdb705aed71067c36f68db0e0f559c3f3fa043315f"},
    "idempotency": {
        "intent_key": "sha256:5ef080227d47d7f1cf05b66164aa29367069af828dcea756bc26980df7f1e4c3",
        "trigger_fingerprint":
            "sha256:34f611019e0386e975daf05ffd5e1bfd9f932bc2dc3b693d0573c860666ec6cf",
        "content_hash":
            "sha256:2cf53929a51ecb3bbce2180ba233d36361e121ad7867773a46820915832d815d"},
    "class": "executed",
    "subject": {
        "kind": "skill",
        "ref": {"type": "harness", "uri": "hrn_run_turn_5ef080227d47d7f1_turn",
                "locator":
                    "sha256:6e95a6fb5f36b3a20b3ca95a0f6d9b2e112c1f17920f900e77cddab0ac44602a"},
        "commitments": [
            {"value": "sha256:76f4de23151f215a163757b5c9505751faf79937c0fa80d2d36ef5c1ed38910a"},
            {"value": "sha256:12255ce92c68ebf94a39cbe2798eccfbeb99549873da0b0386f9725d5deabd40"},
            {"value": "sha256:094bb8f8f8ba9f4dab69ac725fd2328b15c56227fb0631bec719373c094d2dae"},
        ]},
    "authority": {
        "actor_ref": {"type": "principal", "uri": "runx:principal:local_runtime"},
        "grant_refs": [], "scope_refs": [], "authority_proof_refs": [],
        "attenuation": {"parent_authority_ref": None, "subset_proof": None}, "terms": [],
        "enforcement": {
            "profile_hash":
                "sha256:635fdb0a7eef93911e3c6bd0b25b5e635edba32e0259133042b3a5f1fb19394e",
            "redaction_refs": [], "setup_refs": [], "teardown_refs": []}},
    "seal": {"disposition": "closed", "reason_code": "step_closed",
             "summary": "demo/run_turn_5ef080227d47d7f1 ended completed after 12 facts",
             "closed_at": "2026-01-01T00:00:00.000Z",
             "last_observed_at": "2026-01-01T00:00:00.000Z", "criteria": []},
    "lineage": {"children": [], "sync": []},
}

_COMMITMENTS = commitments_for(
    receipt_hash({"fact-log": "placeholder"}),
    receipt_hash({"run-binding": "placeholder"}),
    receipt_hash({"inputs": "placeholder"}),
)


def vector_receipt(signer: Signer | None = None) -> Receipt:
    """The §4.7 receipt sealed with *signer* (default: the demo identity)."""
    return seal_receipt(copy.deepcopy(VECTOR_UNSEALED), signer or Signer.demo())


def step_draft(
    run_id: str = "run_turn_0000000000000001",
    node: str = "turn",
    *,
    claim: Any = None,
    disposition: Disposition = Disposition.CLOSED,
    lineage: Lineage | None = None,
    intent: str = "intent",
    created_at: str = CREATED_AT,
    kind: SubjectKind = SubjectKind.SKILL,
    locator: str | None = None,
) -> ReceiptDraft:
    """A step receipt draft shaped like §4.3 (placeholder commitments)."""
    claim = {"node": node, "run_id": run_id} if claim is None else claim
    closed = disposition is Disposition.CLOSED
    return ReceiptDraft(
        created_at=created_at,
        idempotency=Idempotency(
            intent_key=receipt_hash({"intent": intent, "run_id": run_id}),
            trigger_fingerprint=receipt_hash({"trigger": run_id}),
            content_hash=receipt_hash(claim if closed else {}),
        ),
        subject=Subject(
            kind=kind,
            ref=Reference(type="harness", uri=harness_uri(run_id, node),
                          locator=locator or step_locator(disposition, claim)),
            commitments=_COMMITMENTS,
        ),
        authority=local_runtime_authority(),
        seal=Seal(disposition=disposition, reason_code=f"step_{disposition.value}",
                  summary=f"demo/{run_id} ended completed after 12 facts",
                  closed_at=created_at, last_observed_at=created_at),
        lineage=Lineage() if lineage is None else lineage,
    )


def seal_step(signer: Signer | None = None, **kwargs: Any) -> Receipt:
    return seal_receipt(step_draft(**kwargs), signer or Signer.demo())


def seal_root(children: list[Receipt], *, run_id: str = "run_graph_0000000000000001",
              signer: Signer | None = None, locators: list[str] | None = None,
              extra_children: list[Reference] | None = None) -> Receipt:
    """A graph root over *children* (§4.3): children edges with locator = child digest
    unless *locators* overrides them."""
    refs = [
        Reference(type="receipt", uri=f"runx:receipt:{child.id}",
                  locator=(locators[i] if locators else child.digest))
        for i, child in enumerate(children)
    ] + list(extra_children or [])
    draft = step_draft(run_id, "graph", claim={"graph": run_id},
                       lineage=Lineage(children=tuple(refs)), kind=SubjectKind.GRAPH,
                       locator=graph_locator([child.id for child in children]))
    return seal_receipt(draft, signer or Signer.demo())


def reseal(body: dict[str, Any], signer: Signer | None = None, *,
           keep_id: bool = False) -> dict[str, Any]:
    """Recompute the proof of a tampered *body* (id unless *keep_id*, digest, signature)
    with *signer*'s key, keeping the body's issuer exactly as tampered. The result is a
    receipt whose only defect is the tamper itself."""
    signer = signer or Signer.demo()
    result = copy.deepcopy(body)
    if not keep_id:
        result["id"] = content_address(result)
    result["digest"] = body_digest(result)
    result["signature"] = {"alg": "Ed25519", "value": signer.sign(result["digest"]).value}
    return result
