"""Receipts against the shape constraints of ``spec/receipt-schema.md`` (issue 12
deliverable 5): the current-shape full-receipt vector of ``spec/vectors``, re-derived
independently, and every receipt the demo and the harness seal, validated with
``jsonschema`` against ``spec/receipt.schema.json``.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from loop_support import EXAMPLE

from runx_actors.cli import main
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
    Verifier,
    bytes_hash,
    commitments_for,
    local_runtime_authority,
    run_binding_commitment,
    seal_receipt,
)

SPEC = Path(__file__).resolve().parents[2] / "spec"
SCHEMA = json.loads((SPEC / "receipt.schema.json").read_text(encoding="utf-8"))
VECTOR_FILE = SPEC / "vectors" / "receipt-success-turn-1.json"
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
DEMO_SEED = b"B" * 32
#: The table of spec/receipt-schema.md "Full-receipt vector for the current shape".
EXPECTED = {
    "id": "sha256:1176308afa0f7ec33c0e11a43e59de7841f99cf9da4de797c6732699fa8957eb",
    "digest": "sha256:202be39d146195f848b16c9674c7ed4e35b3d6d6850e18b9d28438c5543dacd0",
    "signature": "base64:eZrMcNLFtC1rVa3oJRwUnZwwnXTaKoXt7KS8UNW2IGygnk_MXN5ZkBbUJTuvYbd9wRiyq6o"
                 "ZkMdat5bDJrTvDA",
    "receipt_digest": "sha256:88230c0e1ccd9b8ca20c7a28407b9bec0f2c450d8a739545ceb91977e16ef9f1",
    "size": 2235,
}
CREATED = "2026-01-01T00:00:00.000Z"


def _vector_by_implementation() -> Receipt:
    """The §4.7 success-turn-1 receipt built through the typed sealing path."""
    fact_log = bytes_hash(b"fact-log-placeholder")
    binding = run_binding_commitment(scope="demo", run_id="run_turn_5ef080227d47d7f1",
                                     runner="turn", run_status="completed", fact_count=12,
                                     fact_log_sha256=fact_log)
    draft = ReceiptDraft(
        created_at=CREATED,
        idempotency=Idempotency(
            intent_key="sha256:5ef080227d47d7f1cf05b66164aa29367069af828dcea756bc26980df7f1e4c3",
            trigger_fingerprint=(
                "sha256:34f611019e0386e975daf05ffd5e1bfd9f932bc2dc3b693d0573c860666ec6cf"),
            content_hash=(
                "sha256:2cf53929a51ecb3bbce2180ba233d36361e121ad7867773a46820915832d815d")),
        subject=Subject(
            kind=SubjectKind.SKILL,
            ref=Reference(type="harness", uri="hrn_run_turn_5ef080227d47d7f1_turn",
                          locator="sha256:6e95a6fb5f36b3a20b3ca95a0f6d9b2e112c1f17920f900e"
                                  "77cddab0ac44602a"),
            commitments=commitments_for(
                fact_log, binding,
                "sha256:094bb8f8f8ba9f4dab69ac725fd2328b15c56227fb0631bec719373c094d2dae")),
        authority=local_runtime_authority(),
        seal=Seal(disposition=Disposition.CLOSED, reason_code="step_closed",
                  summary="demo/run_turn_5ef080227d47d7f1 ended completed after 12 facts",
                  closed_at=CREATED, last_observed_at=CREATED),
        lineage=Lineage(),
    )
    return seal_receipt(draft, Signer.demo())


def _c(value: Any) -> bytes:
    """loop-host §4.1 written out again, independently of the implementation."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def _h(value: Any) -> str:
    return "sha256:" + hashlib.sha256(_c(value)).hexdigest()


def test_vector_file_is_what_the_implementation_seals() -> None:
    receipt = _vector_by_implementation()
    assert receipt.canonical_bytes == VECTOR_FILE.read_bytes()
    assert receipt.id == EXPECTED["id"]
    assert receipt.digest == EXPECTED["digest"]
    assert receipt.signature.value == EXPECTED["signature"]
    assert receipt.receipt_digest == EXPECTED["receipt_digest"]
    assert len(receipt.canonical_bytes) == EXPECTED["size"]
    assert Verifier(keyring=Signer.demo().keyring()).verify(receipt).findings == ()


def test_vector_values_rederived_independently() -> None:
    """Every value of the vector from the file alone: hashlib, json and cryptography."""
    data = VECTOR_FILE.read_bytes()
    body = json.loads(data)
    assert _c(body) == data and not data.endswith(b"\n")
    unsigned = {k: v for k, v in body.items() if k not in ("signature", "digest")}
    address = {k: v for k, v in unsigned.items() if k not in ("id", "lineage")}
    assert _h(address) == body["id"] == EXPECTED["id"]
    assert _h(unsigned) == body["digest"] == EXPECTED["digest"]
    key = Ed25519PrivateKey.from_private_bytes(DEMO_SEED)
    signature = key.sign(body["digest"].encode("utf-8"))
    text = "base64:" + base64.urlsafe_b64encode(signature).decode().rstrip("=")
    assert text == body["signature"]["value"] == EXPECTED["signature"]
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert body["issuer"]["public_key_sha256"] == "sha256:" + hashlib.sha256(public).hexdigest()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == EXPECTED["receipt_digest"]
    commitments = body["subject"]["commitments"]
    assert [(c["scope"], c["canonicalization"]) for c in commitments] == [
        ("output", "runx_actors.fact_log.v1"), ("output", "runx_actors.run_binding.v1"),
        ("input", "runx.receipt.c14n.v1")]
    assert commitments[0]["value"] == "sha256:" + hashlib.sha256(
        b"fact-log-placeholder").hexdigest()
    assert commitments[1]["value"] == _h({
        "schema": "runx_actors.run_binding.v1", "scope": "demo",
        "run_id": "run_turn_5ef080227d47d7f1", "runner": "turn", "run_status": "completed",
        "fact_count": 12, "fact_log_sha256": commitments[0]["value"]})
    assert body["signals"] == body["decisions"] == body["acts"] == []


def test_vector_validates_against_the_schema() -> None:
    VALIDATOR.validate(json.loads(VECTOR_FILE.read_bytes()))


def _mutations() -> list[tuple[str, Any]]:
    def drop_scope(b: dict[str, Any]) -> None:
        del b["subject"]["commitments"][0]["scope"]

    def bare_commitments(b: dict[str, Any]) -> None:
        b["subject"]["commitments"] = [{"value": c["value"]} for c in b["subject"]["commitments"]]

    def extra_commitment_key(b: dict[str, Any]) -> None:
        b["subject"]["commitments"][2]["note"] = "x"

    def md5(b: dict[str, Any]) -> None:
        b["subject"]["commitments"][1]["algorithm"] = "md5"

    def bad_scope(b: dict[str, Any]) -> None:
        b["subject"]["commitments"][1]["scope"] = "everything"

    def no_signals(b: dict[str, Any]) -> None:
        del b["signals"]

    def acts_object(b: dict[str, Any]) -> None:
        b["acts"] = {}

    def signature_extra(b: dict[str, Any]) -> None:
        b["signature"]["kid"] = "runx-demo-key"

    def signature_padded(b: dict[str, Any]) -> None:
        b["signature"]["value"] += "=="

    def signature_standard(b: dict[str, Any]) -> None:
        b["signature"]["value"] = b["signature"]["value"].replace("-", "+").replace("_", "/")

    def disposition_object(b: dict[str, Any]) -> None:
        b["seal"]["disposition"] = {"closed": True}

    def unknown_top_level(b: dict[str, Any]) -> None:
        b["metadata"] = {}

    def no_class(b: dict[str, Any]) -> None:
        del b["class"]

    return [(f.__name__, f) for f in (
        drop_scope, bare_commitments, extra_commitment_key, md5, bad_scope, no_signals,
        acts_object, signature_extra, signature_padded, signature_standard,
        disposition_object, unknown_top_level, no_class)]


@pytest.mark.parametrize(("name", "mutate"), _mutations())
def test_schema_refuses_the_old_and_malformed_shapes(name: str, mutate: Any) -> None:
    body = json.loads(VECTOR_FILE.read_bytes())
    mutated = copy.deepcopy(body)
    mutate(mutated)
    assert mutated != body, name
    assert list(VALIDATOR.iter_errors(mutated)), name


def _invoke(args: list[str], tmp_path: Path, env: dict[str, str]) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        base = {"RUNX_RECEIPT_SIGN_KID": None, "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64": None,
                "RUNX_RECEIPT_SIGN_ISSUER_TYPE": None, "RUNX_RECEIPT_DIR": None,
                "RUNX_PROJECT_DIR": None, "RUNX_RUN_ID": None, "RUNX_ACTORS_STORE": None,
                "RUNX_CWD": str(tmp_path)}
        return CliRunner().invoke(main, args, env={**base, **env}, catch_exceptions=False)


def test_sealed_demo_and_harness_receipts_validate(tmp_path: Path) -> None:
    """Every receipt the demo (three loop turns) and the example's harness (single-runner
    steps, a graph step and its root) seal validates against spec/receipt.schema.json."""
    demo = tmp_path / "demo"
    result = _invoke(["demo", "loop-orchestration"], tmp_path,
                     {"RUNX_LOOP_RECEIPT_DIR": str(demo)})
    assert result.exit_code == 0, result.output
    signing = {"RUNX_RECEIPT_SIGN_KID": "runx-demo-key",
               "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64": base64.b64encode(DEMO_SEED).decode(),
               "RUNX_RECEIPT_SIGN_ISSUER_TYPE": "hosted"}
    harness = tmp_path / "harness"
    result = _invoke(["harness", str(EXAMPLE), "-R", str(harness)], tmp_path, signing)
    assert result.exit_code == 0, result.output
    files = sorted(demo.glob("sha256-*.json")) + sorted(harness.glob("sha256-*.json"))
    assert len(files) == 7
    kinds = set()
    for path in files:
        body = json.loads(path.read_bytes())
        VALIDATOR.validate(body)
        kinds.add((body["subject"]["kind"], bool(body["lineage"]["children"])))
    assert kinds == {("skill", False), ("graph", True)}
