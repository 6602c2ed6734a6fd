"""Receipts ``runx.receipt.v1`` (loop-host §4): canonical form, the byte-exact §4.7
vectors, sealing, signing identity, and every §4.6 verification finding.

Acceptance scenarios of loop-host §10 implemented here under their names:
1 ``receipt_id_and_digest_formulas``, 2 ``signature_over_digest_string``,
3 ``exclusion_rules``, 4 ``tamper_detection``, 5 ``production_vs_local_signatures``,
6 ``signing_env_required`` (the library part: the identity resolution every governed
path calls).
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import hashlib
import json
import math
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st
from receipt_helpers import (
    DEMO_ENV,
    VECTOR_UNSEALED,
    reseal,
    seal_step,
    step_draft,
    vector_receipt,
)

from runx_actors import RunxError
from runx_actors.host.receipts import (
    SIGNING_REQUIRED_MESSAGE,
    Disposition,
    FindingCode,
    IssuerType,
    Keyring,
    KeyringConfigError,
    Lineage,
    Receipt,
    ReceiptCanonicalizationError,
    ReceiptError,
    ReceiptInputError,
    ReceiptSealError,
    Reference,
    SignatureMode,
    SignatureStatus,
    Signer,
    SigningConfigError,
    Verifier,
    bytes_hash,
    claim_content_hash,
    demo_signer_from_env,
    enforcement_profile_hash,
    fact_log_commitment,
    format_created_at,
    format_verdict,
    graph_disposition,
    graph_locator,
    graph_reason_code,
    graph_step_reason_code,
    keyring_from_env,
    parse_receipt_json,
    receipt_canonical_json,
    receipt_hash,
    require_signer,
    run_binding_commitment,
    seal_receipt,
    seal_summary,
    signer_from_env,
    step_locator,
    step_reason_code,
    verdict_to_json,
    verify_receipt_bytes,
)
from runx_actors.host.receipts._verify import VERIFIER_ERROR_PREFIX

DEMO_VERIFIER = Verifier(keyring=Signer.demo().keyring())
OTHER_SIGNER = Signer.from_seed("runx-demo-key", b"\x07" * 32, IssuerType.HOSTED)

# --------------------------------------------------------------------------- §4.1 C(x)


def test_c14n_synthetic_vector_is_byte_exact() -> None:
    value = {"b": 1, "a": "é", "c": [2, {"z": None, "y": True}]}
    assert receipt_canonical_json(value) == '{"a":"é","b":1,"c":[2,{"y":true,"z":null}]}'.encode()
    assert receipt_hash(value) == (
        "sha256:fa1cccf0b67af32a68930759f8f7e3a105aa89d13e854a78ee0ec1354502bf8e")


_JSON_NO_FLOATS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(
        alphabet=st.characters(codec="utf-8")),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(alphabet=st.characters(codec="utf-8")),
                      children, max_size=4),
    max_leaves=20,
)


@given(_JSON_NO_FLOATS)
def test_c14n_is_json_dumps_sort_keys(value: Any) -> None:
    """§4.1 defines C(x) as json.dumps(sort_keys, compact separators, raw UTF-8)."""
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode("utf-8")
    assert receipt_canonical_json(value) == expected
    assert receipt_canonical_json(value, strict=False) == expected


def test_c14n_sorts_keys_by_code_point_not_utf16() -> None:
    value = {"\U0001f600": 1, "\ue000": 2}  # UTF-16: D83D… < E000; code point: E000 < 1F600
    assert receipt_canonical_json(value) == '{"\ue000":2,"\U0001f600":1}'.encode()
    assert rfc8785.dumps(value) != receipt_canonical_json(value)  # JCS orders differently


def test_c14n_integral_float_is_written_as_int() -> None:
    assert receipt_canonical_json({"n": 3.0, "m": -0.0, "k": 2.0**53}) == (
        b'{"k":9007199254740992,"m":0,"n":3}')


@pytest.mark.parametrize("bad", [1.5, math.nan, math.inf, -math.inf, 2.0**60, 1e21])
def test_sealer_rejects_other_floats_with_type_error(bad: float) -> None:
    with pytest.raises(TypeError) as info:
        receipt_canonical_json({"x": [bad]})
    assert isinstance(info.value, ReceiptCanonicalizationError)
    assert info.value.path == "/x/0"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("value", "text"), [
    (1.5, "1.5"), (1e-7, "1e-7"), (1e21, "1e+21"), (0.1, "0.1"), (2.0**60, "1152921504606847000"),
])
def test_verifier_formats_foreign_floats_as_ecmascript(value: float, text: str) -> None:
    assert receipt_canonical_json(value, strict=False) == text.encode()


@pytest.mark.parametrize("bad", ["\ud800", {"\udfff": 1}, {1: "x"}, {"x": b"bytes"}])
def test_c14n_rejects_lone_surrogates_and_non_json(bad: Any) -> None:
    with pytest.raises(ReceiptCanonicalizationError):
        receipt_canonical_json(bad)


@pytest.mark.parametrize("text", [
    b'{"a":1,"a":2}', b'{"a":NaN}', b'{"a":1e400}', b'{"a":"\\ud800"}', b'{} x', b"\xff",
])
def test_parse_receipt_json_is_strict(text: bytes) -> None:
    with pytest.raises(ValueError):
        parse_receipt_json(text)


# --------------------------------------------------------------------------- §4.7 vectors


def test_demo_key_vector() -> None:
    signer = Signer.demo()
    assert signer.public_key is not None
    assert base64.urlsafe_b64encode(signer.public_key).rstrip(b"=").decode() == (
        "IVL40Zt5HSRFMkLhXy6rbLfP-ntqXtMAl5YOBpiB2xI")
    assert signer.issuer.public_key_sha256 == (
        "sha256:3097e2dee2cb4a34b53840cdb705aed71067c36f68db0e0f559c3f3fa043315f")


def test_signature_over_digest_string() -> None:
    """§10 scenario 2: the demo key signs the digest *text*; a signature over the raw hash
    bytes differs and fails verification."""
    signer = Signer.demo()
    digest = "sha256:bfcc6858a6616a613c6de3c9513fbaeab8ded4f1083200a44863da1b286c5ebc"
    assert signer.issuer.public_key_sha256 == (
        "sha256:3097e2dee2cb4a34b53840cdb705aed71067c36f68db0e0f559c3f3fa043315f")
    assert signer.sign(digest).value == (
        "base64:Gd6oQBPv3Ri95Hpuu7k6V9gD07qtWubr9ts-_n9m881p24b_uTy5Jg6KGHHNCkbAD4zHSaGGiVw9"
        "VrqmzNiABg")
    assert signer.seed is not None
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    raw_bytes_sig = Ed25519PrivateKey.from_private_bytes(signer.seed).sign(
        bytes.fromhex(digest[len("sha256:"):]))
    raw_value = "base64:" + base64.urlsafe_b64encode(raw_bytes_sig).rstrip(b"=").decode()
    assert raw_value.startswith("base64:Cu7k0biV")
    # Verification MUST reject it: put a raw-bytes signature on a real receipt.
    body = vector_receipt().to_json()
    body["signature"]["value"] = "base64:" + base64.urlsafe_b64encode(
        Ed25519PrivateKey.from_private_bytes(signer.seed).sign(
            bytes.fromhex(body["digest"][len("sha256:"):]))).rstrip(b"=").decode()
    assert DEMO_VERIFIER.verify(body).codes() == {FindingCode.SIGNATURE_INVALID}


def test_receipt_id_and_digest_formulas() -> None:
    """§10 scenario 1: the §4.7 unsealed receipt sealed with the demo seed.

    §4.7's JSON is the older shape (bare ``{value}`` commitments, no ``signals`` /
    ``decisions`` / ``acts``). It is still checked byte for byte because it seals the JSON
    as written and the §4.4 formulas did not change; the current shape has its own vector
    (``spec/vectors/receipt-success-turn-1.json``, checked in test_receipt_schema.py)."""
    receipt = vector_receipt()
    assert receipt.id == "sha256:8d32e82a8baebd1926a5bc86b7076f0e2c5379e70f95d07b35cfd0bb93b75f01"
    assert receipt.digest == (
        "sha256:919c436c3f2d1e9dbb4a0185e643db6edf0695081918534deb200e70d93e5b53")
    assert receipt.signature.value == (
        "base64:j-zj62ZpxpZFn3QS-Bs3GyQB_fhBzZQCeEnMFPsH5FHu_Gojy60UbjsSxSKnJsAgneLSU3MZ4qRX"
        "t-a0LFwLAg")
    assert receipt.receipt_digest == (
        "sha256:919ad8b7b3d02d117a0f2fbb15f40a1af4c8db564893e70d0f938f0964d71ded")
    assert len(receipt.canonical_bytes) == 1949
    assert not receipt.canonical_bytes.endswith(b"\n")
    assert receipt.canonical_bytes == receipt_canonical_json(receipt.body)
    assert DEMO_VERIFIER.verify(receipt).findings == ()


def test_vector_commitments_follow_the_formulas() -> None:
    """§4.7: fact-log placeholder, the run binding (12255c…) and the trigger (34f6…)."""
    fact_log = bytes_hash(b"fact-log-placeholder")
    assert fact_log == VECTOR_UNSEALED["subject"]["commitments"][0]["value"]
    assert run_binding_commitment(
        scope="demo", run_id="run_turn_5ef080227d47d7f1", runner="turn",
        run_status="completed", fact_count=12, fact_log_sha256=fact_log,
    ) == VECTOR_UNSEALED["subject"]["commitments"][1]["value"]
    assert receipt_hash({"schema": "runx_actors.turn_trigger.v1",
                         "loop_id": "loop-demo-success", "turn_index": 1,
                         "previous_receipt_id": None}) == (
        VECTOR_UNSEALED["idempotency"]["trigger_fingerprint"])


def test_enforcement_profile_hash_vector() -> None:
    assert enforcement_profile_hash() == (
        "sha256:635fdb0a7eef93911e3c6bd0b25b5e635edba32e0259133042b3a5f1fb19394e")


def test_graph_locator_vector() -> None:
    assert graph_locator(["sha256:" + "a" * 64]) == (
        "sha256:f9ba279457da0a8f4bbffd0ca4395465119ebc2f6b8730e7116b183cdeb49eee")


def test_context_artifact_id_vector() -> None:
    """§4.7 / §6.2: ``sha256(("runx.skill.context" \\0 ref \\0 hash).encode())``."""
    ref, meta_hash = "./context/loop-operator", "sha256:" + "0" * 64
    data = ("runx.skill.context" + "\0" + ref + "\0" + meta_hash).encode()
    assert bytes_hash(data) == (
        "sha256:638ddd3d7e9030be0359c94918c7711e6c0cc8b26b4375d9671a6116a13c1a04")


def _turn_payload(inputs: dict[str, Any], decision: str, reason_code: str,
                  next_allowed: bool, next_reason: str) -> dict[str, Any]:
    n = inputs["turn_index"]
    latest = (f"Turn {n} read context and proposed a bounded follow-up."
              if decision == "continue" else f"Turn {n} ended with {decision}: {reason_code}.")
    return {
        "schema": "runx.loop_turn.v1", "loop_id": inputs["loop_id"],
        "turn_id": f"{inputs['loop_id']}:turn-{n}", "turn_index": n,
        "max_turns": inputs["max_turns"], "objective": inputs["objective"],
        "previous_summary": inputs["previous_summary"],
        "requested_tool": inputs["requested_tool"], "allowed_tools": ["fs.read"],
        "decision": decision, "reason_code": reason_code, "next_turn_allowed": next_allowed,
        "next_turn_reason": next_reason,
        "projection_update": {"latest_summary": latest, "consumed_authority": {
            "tools": [inputs["requested_tool"]], "mutations": 0, "spend_minor": 0}},
        "handoff": ({"target": "loop-host", "next_turn_index": n + 1, "reason": next_reason}
                    if next_allowed else None),
        "receipt_notes": {"loop_state_owner": "outer-loop-host", "runx_turn_owner": "runx",
                          "context_boundary": "advisory-untrusted"},
    }


_SUCCESS_1 = {"loop_id": "loop-demo-success", "turn_index": 1, "max_turns": 3,
              "objective": "Draft, review, and ratify one tiny safe change.",
              "previous_summary": "No prior turn.", "requested_tool": "fs.read",
              "scenario": "success"}
_SUCCESS_2 = dict(_SUCCESS_1, turn_index=2,
                  previous_summary="Turn 1 read context and proposed a bounded follow-up.")
_REFUSAL_1 = {"loop_id": "loop-demo-refusal", "turn_index": 1, "max_turns": 3,
              "objective": "Try to mutate files without explicit authority.",
              "previous_summary": "No prior turn.", "requested_tool": "fs.write",
              "scenario": "refusal"}


@pytest.mark.parametrize(("inputs", "decision", "expected"), [
    pytest.param(_SUCCESS_1, ("continue", "bounded_next_turn_available", True,
                              "one more governed turn is allowed by policy"),
                 ("sha256:094bb8f8f8ba9f4dab69ac725fd2328b15c56227fb0631bec719373c094d2dae",
                  "sha256:5ef080227d47d7f1cf05b66164aa29367069af828dcea756bc26980df7f1e4c3",
                  "sha256:2cf53929a51ecb3bbce2180ba233d36361e121ad7867773a46820915832d815d",
                  "sha256:6e95a6fb5f36b3a20b3ca95a0f6d9b2e112c1f17920f900e77cddab0ac44602a"),
                 id="success-1"),
    pytest.param(_SUCCESS_2, ("done", "fixture_objective_complete", False,
                              "review accepted the bounded fixture result"),
                 ("sha256:9728333928d84ea1969306fc8766b1157301bd6db714a6949380e01cf4719e86",
                  "sha256:357c317b91ab43e92cc058336e3e6c0840b6357d063d8efaa0c922c36c7e8f8d",
                  "sha256:9c682f3974756d98a49ea4152f36d54ba479f524f5dfeebeca6451366f9200b4",
                  "sha256:61b4e80a290aa873699d606437e6a19f106e3dba4ae3d03c2f802f7744165b33"),
                 id="success-2"),
    pytest.param(_REFUSAL_1, ("refused", "tool_not_allowed", False,
                              "fs.write is not in allowed_tools"),
                 ("sha256:c62479f5634efd48d469b1261b7caa5290743a6a13340b025baf15ef2847e3a6",
                  "sha256:d79a1aecc8e1eb302bffdfa157fcf76068bdeffd6bad201b9c3a077420fc3e44",
                  "sha256:035047b2c50f952c39d360d01bb88e1553c07b20d76122b91bea8d46ca5eabd0",
                  "sha256:a943e2104c1f9243847abe6d21396a25ba59ab555a75216764fce7b32fe6a031"),
                 id="refusal-1"),
])
def test_demo_turn_vectors(inputs: dict[str, Any], decision: tuple[Any, ...],
                           expected: tuple[str, str, str, str]) -> None:
    inputs_sha256, turn_key, payload_hash, locator = expected
    payload = _turn_payload(inputs, *decision)
    assert receipt_hash(inputs) == inputs_sha256
    assert receipt_hash({"schema": "runx_actors.turn_key.v1", "loop_id": inputs["loop_id"],
                         "turn_index": inputs["turn_index"], "inputs": inputs}) == turn_key
    assert receipt_hash(payload) == payload_hash
    assert claim_content_hash(Disposition.CLOSED, payload) == payload_hash
    assert step_locator(Disposition.CLOSED, payload) == locator


# --------------------------------------------------------------------------- §4.4 sealing


def test_seal_verify_round_trip_from_typed_draft() -> None:
    receipt = seal_step()
    verification = DEMO_VERIFIER.verify(receipt)
    assert verification.valid and verification.findings == ()
    assert verification.signature_status is SignatureStatus.VERIFIED
    assert receipt.seal.disposition is Disposition.CLOSED
    assert receipt.issuer.kid == "runx-demo-key"
    assert receipt.lineage == Lineage()
    assert receipt.body["class"] == "executed"
    assert receipt.signature.value.startswith("base64:")
    assert Receipt.from_bytes(receipt.canonical_bytes) == receipt


def test_sealing_is_deterministic() -> None:
    """§2.3 step 8.3: a re-seal of the same draft with the same key is byte-identical."""
    assert seal_step().canonical_bytes == seal_step().canonical_bytes


def test_sealing_sets_issuer_from_the_signer() -> None:
    body = copy.deepcopy(VECTOR_UNSEALED)
    body["issuer"] = {"type": "ci", "kid": "someone-else", "public_key_sha256": "sha256:x"}
    body["metadata"] = {"note": "never written"}
    receipt = seal_receipt(body, Signer.demo())
    assert receipt == vector_receipt()  # issuer replaced, metadata dropped


def test_sealer_rejects_fractional_floats_in_the_body() -> None:
    body = copy.deepcopy(VECTOR_UNSEALED)
    body["seal"]["criteria"] = [{"criterion_id": "c", "score": 0.5}]
    with pytest.raises(TypeError):
        seal_receipt(body, Signer.demo())


def test_seal_verifies_immediately_and_refuses_an_invalid_receipt() -> None:
    """§4.4 step 5: an immediate verification failure raises and produces nothing."""
    body = copy.deepcopy(VECTOR_UNSEALED)
    body["decisions"] = [{"id": "d1", "selected_act_id": "missing"}]
    with pytest.raises(ReceiptSealError) as info:
        seal_receipt(body, Signer.demo())
    codes = {f.code for f in info.value.findings}  # type: ignore[attr-defined]
    assert codes == {FindingCode.STRUCTURE_INVALID}


def test_local_development_signer_shape() -> None:
    receipt = seal_step(Signer.local_development())
    assert receipt.body["issuer"] == {"type": "local", "kid": "runtime-skeleton",
                                      "public_key_sha256": "sha256:runtime-skeleton-public"}
    assert receipt.body["signature"] == {"alg": "Ed25519", "value": "sig:" + receipt.digest}


def test_exclusion_rules() -> None:
    """§10 scenario 3: metadata changes neither hash; lineage changes the digest only;
    any other field changes both."""
    base = vector_receipt()
    with_metadata = seal_receipt(dict(VECTOR_UNSEALED, metadata={"display": "x"}),
                                 Signer.demo())
    assert (with_metadata.id, with_metadata.digest) == (base.id, base.digest)
    body = base.to_json()
    body["metadata"] = {"display": "changed"}
    assert DEMO_VERIFIER.verify(body).findings == ()  # metadata is neither signed nor hashed

    relinked = seal_receipt(
        dict(VECTOR_UNSEALED, lineage={"children": [], "sync": [], "previous": {
            "type": "receipt", "uri": "runx:receipt:sha256:" + "a" * 64,
            "locator": "sha256:" + "b" * 64}}),
        Signer.demo())
    assert relinked.id == base.id and relinked.digest != base.digest

    for field, new in [("created_at", "2026-01-01T00:00:00.001Z"), ("class", "mediated"),
                       ("seal", dict(VECTOR_UNSEALED["seal"], summary="other"))]:
        changed = dict(VECTOR_UNSEALED, **{field: new})
        if field == "class":
            changed["evidence"] = [{"type": "harness", "uri": "hrn_x"}]
        other = seal_receipt(changed, Signer.demo())
        assert other.id != base.id and other.digest != base.digest, field


# --------------------------------------------------------------------------- §4.5 identity


def test_signing_env_required() -> None:
    """§10 scenario 6 (library part): governed paths resolve their identity with
    require_signer, which refuses no identity, a partial one and issuer type local."""
    with pytest.raises(SigningConfigError) as info:
        require_signer({})
    assert str(info.value) == SIGNING_REQUIRED_MESSAGE
    assert info.value.reason == "missing"  # type: ignore[attr-defined]
    two = {k: v for k, v in DEMO_ENV.items() if k != "RUNX_RECEIPT_SIGN_ISSUER_TYPE"}
    with pytest.raises(SigningConfigError) as info:
        require_signer(two)
    assert str(info.value).startswith(SIGNING_REQUIRED_MESSAGE)
    assert info.value.reason == "partial"  # type: ignore[attr-defined]
    for issuer_type in ("local", "verifier"):
        with pytest.raises(SigningConfigError) as info:
            require_signer(dict(DEMO_ENV, RUNX_RECEIPT_SIGN_ISSUER_TYPE=issuer_type))
        assert str(info.value).startswith(SIGNING_REQUIRED_MESSAGE)
        assert info.value.reason == "bad_issuer_type"  # type: ignore[attr-defined]
    assert isinstance(info.value, RunxError) and isinstance(info.value, ReceiptError)


def test_signer_from_env_reads_the_identity() -> None:
    signer = require_signer(DEMO_ENV)
    assert signer == Signer.demo()
    url_no_pad = base64.urlsafe_b64encode(b"\xfb" * 32).rstrip(b"=").decode()
    signer = require_signer(dict(DEMO_ENV, RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64=url_no_pad,
                                 RUNX_RECEIPT_SIGN_ISSUER_TYPE="ci"))
    assert signer.seed == b"\xfb" * 32 and signer.issuer_type is IssuerType.CI
    assert "\\xfb" not in repr(signer)  # the seed never shows in a repr


@pytest.mark.parametrize("seed", [base64.b64encode(b"B" * 31).decode(), "not base64!",
                                  base64.b64encode(b"B" * 33).decode()])
def test_signer_from_env_rejects_bad_seeds(seed: str) -> None:
    with pytest.raises(SigningConfigError) as info:
        signer_from_env(dict(DEMO_ENV, RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64=seed))
    assert info.value.reason == "bad_seed"  # type: ignore[attr-defined]


def test_demo_identity_is_used_only_when_nothing_is_set() -> None:
    assert demo_signer_from_env({}) == Signer.demo()
    env = dict(DEMO_ENV, RUNX_RECEIPT_SIGN_KID="ci-key", RUNX_RECEIPT_SIGN_ISSUER_TYPE="ci")
    assert demo_signer_from_env(env).kid == "ci-key"
    with pytest.raises(SigningConfigError):
        demo_signer_from_env({"RUNX_RECEIPT_SIGN_KID": "half"})


def test_keyring_from_env() -> None:
    assert keyring_from_env({}) == Keyring()
    demo_key = Signer.demo().public_key
    assert keyring_from_env(DEMO_ENV).get("runx-demo-key") == demo_key
    other = OTHER_SIGNER.public_key
    assert other is not None
    verify_env = {"RUNX_RECEIPT_VERIFY_KID": "ops",
                  "RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64":
                      base64.urlsafe_b64encode(other).rstrip(b"=").decode()}
    keyring = keyring_from_env({**DEMO_ENV, **verify_env})
    assert keyring.kids == ("ops", "runx-demo-key")
    with pytest.raises(KeyringConfigError):
        keyring_from_env({"RUNX_RECEIPT_VERIFY_KID": "ops"})
    with pytest.raises(KeyringConfigError):
        keyring_from_env(dict(verify_env, RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64="QkJC"))
    with pytest.raises(KeyringConfigError):  # one kid, two keys
        keyring_from_env({**DEMO_ENV, **verify_env, "RUNX_RECEIPT_VERIFY_KID": "runx-demo-key"})


# --------------------------------------------------------------------------- §4.6 findings


def _codes(body: Any, verifier: Verifier = DEMO_VERIFIER) -> set[FindingCode]:
    return verifier.verify(body).codes()


@pytest.mark.parametrize(("tamper", "path"), [
    (lambda b: b.pop("seal"), "/seal"),
    (lambda b: b.update(created_at=""), "/created_at"),
    (lambda b: b["idempotency"].update(intent_key="md5:abc"), "/idempotency/intent_key"),
    (lambda b: b["subject"]["commitments"][1].update(value="blake3:x"),
     "/subject/commitments/1/value"),
    (lambda b: b.update({"class": "witnessed"}), "/class"),
    (lambda b: b.update(schema="runx.receipt.v0"), "/schema"),
    (lambda b: b["seal"].update(disposition="pending"), "/seal/disposition"),
])
def test_finding_envelope_invalid(tamper: Any, path: str) -> None:
    body = vector_receipt().to_json()
    tamper(body)
    verification = DEMO_VERIFIER.verify(reseal(body))
    assert verification.codes() == {FindingCode.ENVELOPE_INVALID}
    assert [f.path for f in verification.findings] == [path]


def test_finding_envelope_invalid_for_an_unprefixed_key_hash() -> None:
    body = vector_receipt().to_json()
    body["issuer"]["public_key_sha256"] = body["issuer"]["public_key_sha256"][7:]
    verification = DEMO_VERIFIER.verify(reseal(body))
    assert [(f.code, f.path) for f in verification.findings] == [
        (FindingCode.ENVELOPE_INVALID, "/issuer/public_key_sha256"),
        (FindingCode.KEY_HASH_MISMATCH, "/issuer/public_key_sha256"),
    ]


def test_finding_envelope_invalid_for_malformed_id_and_digest() -> None:
    body = vector_receipt().to_json()
    body["id"] = "sha256:ABC"
    body["digest"] = "digest"
    codes = _codes(body)
    assert {FindingCode.ENVELOPE_INVALID, FindingCode.DIGEST_MISMATCH,
            FindingCode.CONTENT_ADDRESS_MISMATCH} <= codes


def test_missing_class_is_accepted() -> None:
    body = vector_receipt().to_json()
    del body["class"]
    assert _codes(reseal(body)) == set()


def test_finding_digest_mismatch() -> None:
    body = vector_receipt().to_json()
    body["digest"] = "sha256:" + "0" * 64  # the signature still covers the true digest
    verification = DEMO_VERIFIER.verify(body)
    assert verification.codes() == {FindingCode.DIGEST_MISMATCH}
    assert verification.digest_expected == "sha256:" + "0" * 64
    assert verification.digest_actual == vector_receipt().digest


def test_finding_content_address_mismatch() -> None:
    body = vector_receipt().to_json()
    body["id"] = "sha256:" + "1" * 64
    verification = DEMO_VERIFIER.verify(reseal(body, keep_id=True))
    assert verification.codes() == {FindingCode.CONTENT_ADDRESS_MISMATCH}
    assert verification.findings[0].path == "/id"


@pytest.mark.parametrize("issuer_type", ["verifier", "local", "root"])
def test_finding_issuer_not_trusted(issuer_type: str) -> None:
    body = vector_receipt().to_json()
    body["issuer"]["type"] = issuer_type
    verification = DEMO_VERIFIER.verify(reseal(body))
    assert verification.codes() == {FindingCode.ISSUER_NOT_TRUSTED}
    assert verification.signature_status is SignatureStatus.UNTRUSTED


@pytest.mark.parametrize("value", [
    "base64:abc", "sig:sha256:" + "0" * 64, "hex:00", "base64:" + "A" * 87 + "!",
    "base64:" + base64.urlsafe_b64encode(b"x" * 63).decode(),
])
def test_finding_signature_malformed(value: str) -> None:
    body = vector_receipt().to_json()
    body["signature"]["value"] = value
    verification = DEMO_VERIFIER.verify(body)
    assert verification.codes() == {FindingCode.SIGNATURE_MALFORMED}
    assert verification.signature_status is SignatureStatus.MALFORMED


def _signature_variants() -> list[tuple[str, str]]:
    """Other texts of the vector's signature bytes (issue 12: each used to verify)."""
    value = vector_receipt().signature.value[len("base64:"):]
    raw = base64.urlsafe_b64decode(value + "==")
    last = value[-1]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    sloppy = alphabet[alphabet.index(last) + 1]  # same 2 data bits, a non-zero pad bit
    assert base64.urlsafe_b64decode(value[:-1] + sloppy + "==") == raw
    return [
        ("padded", value + "=="),
        ("standard alphabet", base64.b64encode(raw).decode().rstrip("=")),
        ("standard alphabet, padded", base64.b64encode(raw).decode()),
        ("non-canonical trailing bits", value[:-1] + sloppy),
        ("surrounding whitespace", value + "\n"),
    ]


@pytest.mark.parametrize(("label", "text"), _signature_variants())
def test_signature_has_exactly_one_accepted_encoding(label: str, text: str) -> None:
    """Issue 12: base64url without padding, canonical trailing bits is the only encoding
    (§4.2); the same 64 bytes written any other way are SignatureMalformed."""
    body = vector_receipt().to_json()
    assert "standard" in label or text != body["signature"]["value"][7:]
    body["signature"]["value"] = "base64:" + text
    verification = DEMO_VERIFIER.verify(body)
    assert verification.codes() == {FindingCode.SIGNATURE_MALFORMED}
    assert not verification.valid


@pytest.mark.parametrize("extra", [{"kid": "runx-demo-key"}, {"value2": "x"}, {"": None}])
def test_unknown_keys_in_signature_are_refused(extra: dict[str, Any]) -> None:
    body = vector_receipt().to_json()
    body["signature"].update(extra)
    verification = DEMO_VERIFIER.verify(body)
    assert FindingCode.SIGNATURE_MALFORMED in verification.codes()
    assert not verification.valid


@pytest.mark.parametrize("disposition", [{"a": 1}, [1, 2], ["closed"], None, 7, 1.5, True,
                                         "", "CLOSED"])
def test_any_json_disposition_is_a_finding_never_a_crash(disposition: Any) -> None:
    body = vector_receipt().to_json()
    body["seal"]["disposition"] = disposition
    verification = DEMO_VERIFIER.verify(body)
    assert FindingCode.ENVELOPE_INVALID in verification.codes()
    assert not verification.valid
    assert all(not f.message.startswith(VERIFIER_ERROR_PREFIX) for f in verification.findings)


@pytest.mark.parametrize(("path", "value"), [
    (("acts",), [{"id": {"x": 1}}]),
    (("decisions",), [{"selected_act_id": ["a"]}]),
    (("class",), {"x": 1}),
    (("class",), ["executed"]),
])
def test_unhashable_values_are_findings(path: tuple[str, ...], value: Any) -> None:
    body = vector_receipt().to_json()
    body[path[0]] = value
    verification = DEMO_VERIFIER.verify(body)
    assert not verification.valid
    assert all(not f.message.startswith(VERIFIER_ERROR_PREFIX) for f in verification.findings)


def test_finding_key_unknown() -> None:
    body = vector_receipt().to_json()
    body["issuer"]["kid"] = "unknown-kid"
    verification = DEMO_VERIFIER.verify(reseal(body))
    assert verification.codes() == {FindingCode.KEY_UNKNOWN}
    assert _codes(vector_receipt(), Verifier()) == {FindingCode.KEY_UNKNOWN}  # empty keyring


def test_finding_key_hash_mismatch() -> None:
    body = vector_receipt().to_json()
    body["issuer"]["public_key_sha256"] = "sha256:" + "2" * 64
    assert _codes(reseal(body)) == {FindingCode.KEY_HASH_MISMATCH}


def test_finding_signature_invalid() -> None:
    body = vector_receipt().to_json()
    body["signature"]["value"] = OTHER_SIGNER.sign(body["digest"]).value
    verification = DEMO_VERIFIER.verify(body)
    assert verification.codes() == {FindingCode.SIGNATURE_INVALID}
    assert verification.signature_status is SignatureStatus.FAILED


_ACT = {"id": "a1", "form": "reply", "criterion_bindings": [{"criterion_id": "c1"}]}


@pytest.mark.parametrize(("tamper", "path"), [
    (lambda b: b.update(acts=[_ACT], decisions=[{"id": "d", "selected_act_id": "a2"}]),
     "/decisions/0/selected_act_id"),
    (lambda b: b.update(acts=[dict(_ACT, revision={"summary": "x"})]), "/acts/0/revision"),
    (lambda b: b.update(acts=[dict(_ACT, form="verification")]), "/acts/0/form"),
    (lambda b: (b.update(acts=[_ACT]),
                b["seal"].update(criteria=[{"criterion_id": "c9", "status": "verified"}])),
     "/seal/criteria/0"),
    (lambda b: b["authority"]["attenuation"].update(parent_authority_ref={
        "type": "grant", "uri": "runx:grant:p"}, subset_proof={
        "parent_authority_ref": {"type": "grant", "uri": "runx:grant:other"}}),
     "/authority/attenuation/subset_proof"),
    (lambda b: b.update(evidence=[{"type": "harness", "uri": "hrn_x",
                                   "proof_kind": "effect_evidence"}]),
     "/authority/grant_refs"),
    (lambda b: b["lineage"].update(children=[{"type": "harness", "uri": "hrn_x",
                                              "locator": "sha256:1"}]),
     "/lineage/children/0/type"),
    (lambda b: b.update({"class": "mediated"}), "/evidence"),
])
def test_finding_structure_invalid(tamper: Any, path: str) -> None:
    body = vector_receipt().to_json()
    tamper(body)
    verification = DEMO_VERIFIER.verify(reseal(body))
    assert verification.codes() == {FindingCode.STRUCTURE_INVALID}
    assert [f.path for f in verification.findings] == [path]


def test_structure_accepts_consistent_acts_and_decisions() -> None:
    body = vector_receipt().to_json()
    body["acts"] = [_ACT, {"id": "a2", "form": "revision", "revision": {"summary": "r"}}]
    body["decisions"] = [{"id": "d", "selected_act_id": "a2"}]
    body["seal"]["criteria"] = [{"criterion_id": "c1", "act_id": "a1"}]
    assert _codes(reseal(body)) == set()


def test_finding_decision_integrity_unverified_is_informational() -> None:
    body = vector_receipt().to_json()
    body["signals"] = [{"type": "signal", "uri": "runx:signal:s1"}]
    body["decisions"] = [{"id": "d1", "signal_refs": [{"type": "signal",
                                                       "uri": "runx:signal:s1"}]}]
    verification = DEMO_VERIFIER.verify(reseal(body))
    assert verification.codes() == {FindingCode.DECISION_INTEGRITY_UNVERIFIED}
    assert verification.valid


def test_verification_returns_every_finding() -> None:
    body = vector_receipt().to_json()
    body["idempotency"]["content_hash"] = "nope"
    body["issuer"]["type"] = "verifier"
    body["lineage"]["children"] = [{"type": "x"}]
    codes = _codes(body)
    assert codes == {FindingCode.ENVELOPE_INVALID, FindingCode.DIGEST_MISMATCH,
                     FindingCode.CONTENT_ADDRESS_MISMATCH, FindingCode.ISSUER_NOT_TRUSTED,
                     FindingCode.SIGNATURE_INVALID, FindingCode.STRUCTURE_INVALID}


def test_a_non_object_is_one_envelope_finding() -> None:
    verification = DEMO_VERIFIER.verify([1, 2])  # type: ignore[arg-type]
    assert verification.codes() == {FindingCode.ENVELOPE_INVALID}


def test_tamper_detection() -> None:
    """§10 scenario 4: one flipped body byte (JSON still valid) → DigestMismatch and
    SignatureInvalid; the same kid mapped to another key → KeyHashMismatch."""
    receipt = vector_receipt()
    data = receipt.canonical_bytes
    at = data.index(b"after 12 facts")
    flipped = data[:at] + b"after 13 facts" + data[at + len(b"after 12 facts"):]
    verification = DEMO_VERIFIER.verify(parse_receipt_json(flipped))
    assert {FindingCode.DIGEST_MISMATCH, FindingCode.SIGNATURE_INVALID} <= verification.codes()
    assert not verification.valid

    assert OTHER_SIGNER.public_key is not None
    rotated = Verifier(keyring=Keyring.of({"runx-demo-key": OTHER_SIGNER.public_key}))
    assert FindingCode.KEY_HASH_MISMATCH in rotated.verify(receipt).codes()


def test_production_vs_local_signatures() -> None:
    """§10 scenario 5: a local-development receipt fails production (IssuerNotTrusted and
    SignatureMalformed, exit 3) and passes local-development; a ``verifier`` issuer fails
    production."""
    local = seal_step(Signer.local_development())
    production = Verifier(keyring=Signer.demo().keyring())
    verdict = verify_receipt_bytes(local.canonical_bytes, keyring=production.keyring)
    assert {FindingCode.ISSUER_NOT_TRUSTED, FindingCode.SIGNATURE_MALFORMED} <= {
        f.code for f in verdict.findings}
    assert verdict.exit_code == 3
    relaxed = verify_receipt_bytes(local.canonical_bytes, keyring=production.keyring,
                                   mode=SignatureMode.LOCAL_DEVELOPMENT)
    assert relaxed.valid and relaxed.exit_code == 0
    assert relaxed.verification.signature_status is SignatureStatus.VERIFIED
    # production receipts still verify in local-development mode
    assert Verifier(keyring=production.keyring,
                    mode=SignatureMode.LOCAL_DEVELOPMENT).verify(seal_step()).valid
    body = seal_step().to_json()
    body["issuer"]["type"] = "verifier"
    assert FindingCode.ISSUER_NOT_TRUSTED in production.verify(reseal(body)).codes()


def test_local_signature_over_a_tampered_body_is_invalid_in_local_mode() -> None:
    body = seal_step(Signer.local_development()).to_json()
    body["seal"]["summary"] = "rewritten"
    verifier = Verifier(mode=SignatureMode.LOCAL_DEVELOPMENT)
    assert verifier.verify(body).codes() == {FindingCode.DIGEST_MISMATCH,
                                             FindingCode.CONTENT_ADDRESS_MISMATCH,
                                             FindingCode.SIGNATURE_INVALID}


# --------------------------------------------------------------------------- §4.3 content


def test_step_locator_and_content_hash_for_non_closed_receipts() -> None:
    failure = receipt_hash({"status": "failure", "claim": {}})
    assert step_locator(Disposition.FAILED, {"anything": 1}) == failure
    assert claim_content_hash(Disposition.KILLED, {"x": 1}) == receipt_hash({})


def test_fact_log_commitment_formula() -> None:
    facts = [("runx/run/RunCreated", b"v1:a"), ("runx/run/RunEnded", b"v1:b")]
    assert fact_log_commitment("demo", "run_1", facts) == receipt_hash({
        "schema": "runx_actors.fact_log.v1", "scope": "demo", "run_id": "run_1",
        "facts": [
            {"position": 0, "name": "runx/run/RunCreated",
             "sha256": "sha256:" + hashlib.sha256(b"v1:a").hexdigest()},
            {"position": 1, "name": "runx/run/RunEnded",
             "sha256": "sha256:" + hashlib.sha256(b"v1:b").hexdigest()},
        ]})


def test_seal_text_and_reason_codes() -> None:
    assert seal_summary(scope="demo", run_id="r", run_status="completed", fact_count=12) == (
        "demo/r ended completed after 12 facts")
    assert seal_summary(scope="s", run_id="r", run_status="failed", fact_count=5,
                        detail="loop turn failed: x", output_contract_detail="y") == (
        "s/r ended failed after 5 facts: loop turn failed: x; output contract violated: y")
    assert step_reason_code(Disposition.TIMED_OUT) == "step_timed_out"
    assert graph_step_reason_code(Disposition.CLOSED) == "agent_act_closed"
    assert graph_reason_code(Disposition.DECLINED) == "graph_declined"
    assert graph_disposition([Disposition.CLOSED, Disposition.DECLINED,
                              Disposition.FAILED]) is Disposition.DECLINED
    assert graph_disposition([]) is Disposition.CLOSED


def test_format_created_at() -> None:
    moment = dt.datetime(2026, 1, 1, 1, 0, 0, 123999, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert format_created_at(moment) == "2026-01-01T00:00:00.123Z"
    with pytest.raises(ValueError):
        format_created_at(dt.datetime(2026, 1, 1))


def test_draft_validators() -> None:
    with pytest.raises(ValueError):
        step_draft(created_at="2026-01-01T00:00:00Z")
    with pytest.raises(ValueError):
        Reference(type="receipt", uri="")


def test_reference_to_receipt_is_the_edge_shape() -> None:
    receipt = seal_step()
    assert receipt.reference == Reference(type="receipt", uri=f"runx:receipt:{receipt.id}",
                                          locator=receipt.digest)


# --------------------------------------------------------------------------- §5.4 verdict


def test_verdict_json_shape() -> None:
    receipt = vector_receipt()
    verdict = verify_receipt_bytes(receipt.canonical_bytes, keyring=Signer.demo().keyring())
    assert verdict_to_json(verdict) == {
        "schema": "runx.verify_verdict.v1", "receipt_id": receipt.id, "valid": True,
        "digest": {"status": "match", "expected": receipt.digest, "actual": receipt.digest},
        "content_address": {"status": "match", "expected": receipt.id, "actual": receipt.id},
        "signature": {"mode": "production", "status": "verified", "kid": "runx-demo-key"},
        "lineage": {"status": "unverified", "children": 0, "parent": None},
        "findings": [],
    }
    assert json.loads(format_verdict(verdict, as_json=True)) == verdict_to_json(verdict)
    text = format_verdict(verdict)
    assert text.startswith(f"receipt {receipt.id} valid\n")
    assert "signature: verified (production, kid runx-demo-key)" in text


def test_verdict_reports_mismatches() -> None:
    body = vector_receipt().to_json()
    body["seal"]["summary"] = "edited"
    verdict = verify_receipt_bytes(receipt_canonical_json(body),
                                   keyring=Signer.demo().keyring())
    doc = verdict_to_json(verdict)
    assert doc["valid"] is False
    assert doc["digest"]["status"] == doc["content_address"]["status"] == "mismatch"
    assert doc["signature"]["status"] == "failed"
    assert "DigestMismatch /digest" in format_verdict(verdict)


@pytest.mark.parametrize("data", [b"not json", b"[1]", b"{", b"x" * (10 * 1024 * 1024 + 1)])
def test_verdict_input_errors(data: bytes) -> None:
    with pytest.raises(ReceiptInputError):
        verify_receipt_bytes(data, keyring=Keyring())


@given(st.text(min_size=1, alphabet=st.characters(codec="utf-8")))
def test_any_summary_edit_is_detected(summary: str) -> None:
    receipt = vector_receipt()
    body = receipt.to_json()
    body["seal"]["summary"] = summary
    codes = DEMO_VERIFIER.verify(body).codes()
    if summary == receipt.seal.summary:
        assert codes == set()
    else:
        assert {FindingCode.DIGEST_MISMATCH, FindingCode.SIGNATURE_INVALID} <= codes
