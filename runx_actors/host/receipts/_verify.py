"""Receipt proof verification (loop-host §4.6): every check, every finding.

:class:`Verifier` holds the policy (``production`` or ``local-development``) and the
keyring. :meth:`Verifier.verify` runs all §4.6 checks on one receipt object and returns a
:class:`ReceiptVerification` with *every* finding, not just the first:

1. envelope → ``EnvelopeInvalid`` **[ours: §4.6 names no code for step 1]**;
2. digest recomputed by §4.4 step 3 → ``DigestMismatch``;
3. content address recomputed by §4.4 step 2 → ``ContentAddressMismatch``;
4. production signature → ``IssuerNotTrusted``, ``SignatureMalformed``, ``KeyUnknown``,
   ``KeyHashMismatch``, ``SignatureInvalid`` (over the *recomputed* digest string);
5. local development: issuer ``local`` with ``sig:<recomputed digest>`` is also accepted;
6. structure → ``StructureInvalid``;
7. ``DecisionIntegrityUnverified`` (informational).

Pure and synchronous; it reads no environment and no files.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from ._c14n import C14N_ID, bytes_hash, receipt_hash
from ._errors import ReceiptCanonicalizationError
from ._findings import Finding, FindingCode, is_valid
from ._json import pointer
from ._model import RECEIPT_SCHEMA, Disposition, Receipt, is_receipt_id
from ._signing import Keyring, decode_signature_value, ed25519_verify

__all__ = [
    "SignatureMode",
    "SignatureStatus",
    "ReceiptVerification",
    "Verifier",
    "REQUIRED_FIELDS",
    "body_digest",
    "content_address",
]

#: Fields the newest schema requires (§4.2); ``class`` is accepted when missing (§4.6).
REQUIRED_FIELDS = (
    "schema", "id", "created_at", "canonicalization", "issuer", "signature", "digest",
    "idempotency", "subject", "authority", "seal",
)

_DISPOSITIONS = frozenset(d.value for d in Disposition)
_CLASSES = ("executed", "mediated")
_PRODUCTION_ISSUERS = ("hosted", "ci")
_SIGNATURE_KEYS = frozenset({"alg", "value"})
#: The message prefix of the finding :meth:`Verifier.verify` returns when a check raised
#: (a bug: the fuzz suite asserts it never happens).
VERIFIER_ERROR_PREFIX = "the verifier could not check this receipt"


def _show(value: Any) -> str:
    """A short repr of a possibly hostile JSON value, for a finding's message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class SignatureMode(enum.Enum):
    """The verification policy (§4.6, §5.4 ``signature_mode``)."""

    PRODUCTION = "production"
    LOCAL_DEVELOPMENT = "local-development"


class SignatureStatus(enum.Enum):
    """Single-mode ``signature.status`` (§5.4)."""

    VERIFIED = "verified"
    FAILED = "failed"
    UNTRUSTED = "untrusted"
    MALFORMED = "malformed"


def _without(document: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {key: value for key, value in document.items() if key not in keys}


def body_digest(document: Mapping[str, Any], *, strict: bool = False) -> str:
    """``H(receipt - {signature, digest, metadata})`` (§4.4 step 3).

    Raises:
        ReceiptCanonicalizationError: the body cannot be canonicalised.
    """
    return receipt_hash(_without(document, "signature", "digest", "metadata"), strict=strict)


def content_address(document: Mapping[str, Any], *, strict: bool = False) -> str:
    """``H(receipt - {id, signature, digest, metadata, lineage})`` (§4.4 step 2).

    Raises:
        ReceiptCanonicalizationError: the body cannot be canonicalised.
    """
    return receipt_hash(
        _without(document, "id", "signature", "digest", "metadata", "lineage"), strict=strict
    )


@attrs.frozen(kw_only=True)
class ReceiptVerification:
    """The §4.6 result for one receipt: the claimed and recomputed hashes, the signature
    status and every finding. ``valid`` ignores informational findings."""

    receipt_id: str | None
    mode: SignatureMode
    kid: str | None
    digest_expected: str | None
    digest_actual: str | None
    content_address_expected: str | None
    content_address_actual: str | None
    signature_status: SignatureStatus
    findings: tuple[Finding, ...]

    @property
    def valid(self) -> bool:
        """True iff every finding is informational (§4.6 step 7)."""
        return is_valid(self.findings)

    @property
    def digest_matches(self) -> bool:
        """The claimed ``digest`` equals the recomputed one (§4.6 step 2)."""
        return self.digest_actual is not None and self.digest_expected == self.digest_actual

    @property
    def content_address_matches(self) -> bool:
        """The claimed ``id`` equals the recomputed content address (§4.6 step 3)."""
        return (self.content_address_actual is not None
                and self.content_address_expected == self.content_address_actual)

    def codes(self) -> set[FindingCode]:
        """The set of finding codes (handy in tests and assertions)."""
        return {finding.code for finding in self.findings}


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, Mapping, list, tuple)) and not value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class _Check:
    """Collects the findings of one receipt."""

    def __init__(self) -> None:
        self.findings: list[Finding] = []

    def add(self, code: FindingCode, path: str, message: str) -> None:
        self.findings.append(Finding(code, path, message))

    def envelope(self, path: str, message: str) -> None:
        self.add(FindingCode.ENVELOPE_INVALID, path, message)

    def structure(self, path: str, message: str) -> None:
        self.add(FindingCode.STRUCTURE_INVALID, path, message)


def _check_envelope(doc: Mapping[str, Any], check: _Check) -> None:
    for field in REQUIRED_FIELDS:
        if field not in doc:
            check.envelope(pointer(field), f"required field {field} is missing")
        elif _empty(doc[field]):
            check.envelope(pointer(field), f"required field {field} is empty")
    if not _empty(doc.get("schema")) and doc["schema"] != RECEIPT_SCHEMA:
        check.envelope("/schema", f"schema is {doc['schema']!r}, not {RECEIPT_SCHEMA}")
    if not _empty(doc.get("canonicalization")) and doc["canonicalization"] != C14N_ID:
        check.envelope("/canonicalization",
                       f"canonicalization is {doc['canonicalization']!r}, not {C14N_ID}")
    for field in ("id", "digest"):
        if not _empty(doc.get(field)) and not is_receipt_id(doc[field]):
            check.envelope(pointer(field), f"{field} does not match ^sha256:[0-9a-f]{{64}}$")
    for field in ("issuer", "signature", "idempotency", "subject", "authority", "seal"):
        if not _empty(doc.get(field)) and not isinstance(doc[field], Mapping):
            check.envelope(pointer(field), f"{field} is not an object")
    issuer = doc.get("issuer")
    if isinstance(issuer, Mapping):
        for key in ("type", "kid"):
            if not _text(issuer.get(key)):
                check.envelope(pointer("issuer", key), f"issuer.{key} is not a non-empty string")
        key_hash = issuer.get("public_key_sha256")
        if not isinstance(key_hash, str) or not key_hash.startswith("sha256:"):
            check.envelope("/issuer/public_key_sha256",
                           "issuer.public_key_sha256 does not start with sha256:")
    idempotency = doc.get("idempotency")
    if isinstance(idempotency, Mapping):
        for key in ("intent_key", "trigger_fingerprint", "content_hash"):
            value = idempotency.get(key)
            if not isinstance(value, str) or not value.startswith("sha256:"):
                check.envelope(pointer("idempotency", key),
                               f"idempotency.{key} does not start with sha256:")
    subject = doc.get("subject")
    if isinstance(subject, Mapping) and "commitments" in subject:
        commitments = subject["commitments"]
        if not isinstance(commitments, (list, tuple)):
            check.envelope("/subject/commitments", "subject.commitments is not an array")
        else:
            for index, item in enumerate(commitments):
                value = item.get("value") if isinstance(item, Mapping) else None
                if not isinstance(value, str) or not value.startswith("sha256:"):
                    check.envelope(pointer("subject", "commitments", index, "value"),
                                   "commitment value does not start with sha256:")
    if "class" in doc and (not isinstance(doc["class"], str) or doc["class"] not in _CLASSES):
        check.envelope("/class", f"class {_show(doc['class'])} is not executed or mediated")
    seal = doc.get("seal")
    if isinstance(seal, Mapping):
        disposition = seal.get("disposition")
        if not isinstance(disposition, str) or disposition not in _DISPOSITIONS:
            check.envelope("/seal/disposition",
                           f"seal.disposition {_show(disposition)} is not a disposition")


def _signature_production(
    doc: Mapping[str, Any], digest_actual: str | None, keyring: Keyring, check: _Check
) -> None:
    issuer, signature = _obj(doc.get("issuer")), _obj(doc.get("signature"))
    issuer_type = issuer.get("type")
    if issuer_type not in _PRODUCTION_ISSUERS:
        check.add(FindingCode.ISSUER_NOT_TRUSTED, "/issuer/type",
                  f"issuer type {issuer_type!r} is not trusted (only hosted or ci)")
    raw: bytes | None = None
    if signature.get("alg") != "Ed25519":
        check.add(FindingCode.SIGNATURE_MALFORMED, "/signature/alg",
                  f"signature alg {_show(signature.get('alg'))} is not Ed25519")
    extra = sorted(str(key) for key in signature if key not in _SIGNATURE_KEYS)
    if extra:
        check.add(FindingCode.SIGNATURE_MALFORMED, "/signature",
                  f"signature holds keys other than alg and value: {', '.join(extra)}")
    value = signature.get("value")
    if isinstance(value, str) and value.startswith("base64:"):
        try:
            raw = decode_signature_value(value[len("base64:"):])
        except ValueError:
            raw = None
    if raw is None:
        check.add(FindingCode.SIGNATURE_MALFORMED, "/signature/value",
                  "signature value is not base64: plus the canonical unpadded base64url "
                  "text of 64 bytes")
    kid = issuer.get("kid")
    key = keyring.get(kid) if isinstance(kid, str) else None
    if key is None:
        check.add(FindingCode.KEY_UNKNOWN, "/issuer/kid", f"kid {kid!r} is not in the keyring")
        return
    if bytes_hash(key) != issuer.get("public_key_sha256"):
        check.add(FindingCode.KEY_HASH_MISMATCH, "/issuer/public_key_sha256",
                  f"public_key_sha256 does not match the key trusted for kid {kid!r}")
    if raw is not None and (
        digest_actual is None or not ed25519_verify(key, raw, digest_actual.encode("utf-8"))
    ):
        check.add(FindingCode.SIGNATURE_INVALID, "/signature/value",
                  "Ed25519 signature does not verify over the recomputed digest")


def _signature_status(findings: list[Finding]) -> SignatureStatus:
    codes = {f.code for f in findings}
    if FindingCode.SIGNATURE_MALFORMED in codes:
        return SignatureStatus.MALFORMED
    if codes & {FindingCode.ISSUER_NOT_TRUSTED, FindingCode.KEY_UNKNOWN,
                FindingCode.KEY_HASH_MISMATCH}:
        return SignatureStatus.UNTRUSTED
    if FindingCode.SIGNATURE_INVALID in codes:
        return SignatureStatus.FAILED
    return SignatureStatus.VERIFIED


def _items(value: Any) -> list[tuple[int, Mapping[str, Any]]]:
    if not isinstance(value, (list, tuple)):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, Mapping)]


def _check_structure(doc: Mapping[str, Any], check: _Check) -> None:
    acts = _items(doc.get("acts"))
    act_ids = {act.get("id") for _, act in acts if isinstance(act.get("id"), str)}
    for name in ("signals", "decisions", "acts", "evidence"):
        if name in doc and not isinstance(doc[name], (list, tuple)):
            check.structure(pointer(name), f"{name} is not an array")
    for index, decision in _items(doc.get("decisions")):
        selected = decision.get("selected_act_id")
        if selected is not None and (not isinstance(selected, str) or selected not in act_ids):
            check.structure(pointer("decisions", index, "selected_act_id"),
                            f"selected_act_id {selected!r} is not an act of this receipt")
    for index, act in acts:
        form = act.get("form")
        for detail in ("revision", "verification"):
            has_detail = act.get(detail) is not None
            if has_detail and form != detail:
                check.structure(pointer("acts", index, detail),
                                f"{detail} details on an act of form {form!r}")
            elif form == detail and not has_detail:
                check.structure(pointer("acts", index, "form"),
                                f"act of form {detail} lacks {detail} details")
    seal = _obj(doc.get("seal"))
    criteria = seal.get("criteria", [])
    for index, criterion in enumerate(criteria if isinstance(criteria, (list, tuple)) else []):
        path = pointer("seal", "criteria", index)
        criterion_id = criterion.get("criterion_id") if isinstance(criterion, Mapping) else None
        if criterion_id is None:
            check.structure(path, "seal criterion has no criterion_id")
            continue
        act_id = criterion.get("act_id")
        backing = [act for _, act in acts if act_id is None or act.get("id") == act_id]
        if not any(binding.get("criterion_id") == criterion_id
                   for act in backing for _, binding in _items(act.get("criterion_bindings"))):
            check.structure(path, f"seal criterion {criterion_id!r} is not backed by an act "
                                  "criterion")
    authority = _obj(doc.get("authority"))
    attenuation = authority.get("attenuation")
    if isinstance(attenuation, Mapping) and attenuation.get("parent_authority_ref") is not None:
        parent = attenuation["parent_authority_ref"]
        proof = attenuation.get("subset_proof")
        cited = proof.get("parent_authority_ref") if isinstance(proof, Mapping) else None
        parent_uri = parent.get("uri") if isinstance(parent, Mapping) else None
        cited_uri = cited.get("uri") if isinstance(cited, Mapping) else None
        if parent_uri is None or cited_uri != parent_uri:
            check.structure("/authority/attenuation/subset_proof",
                            "parent_authority_ref has no subset_proof citing the same parent")
    evidence = _items(doc.get("evidence"))
    effect = [i for i, entry in evidence if _is_effect_evidence(entry)]
    if effect and _empty(authority.get("grant_refs")):
        check.structure("/authority/grant_refs",
                        f"effect evidence (evidence/{effect[0]}) without grant_refs")
    if doc.get("class") == "mediated" and _empty(doc.get("evidence")):
        check.structure("/evidence", "a mediated receipt requires a non-empty evidence[]")
    lineage = doc.get("lineage")
    if lineage is not None and not isinstance(lineage, Mapping):
        check.structure("/lineage", "lineage is not an object")
    elif isinstance(lineage, Mapping):
        children = lineage.get("children", [])
        if not isinstance(children, (list, tuple)):
            check.structure("/lineage/children", "lineage.children is not an array")
        else:
            for index, child in enumerate(children):
                if not isinstance(child, Mapping) or child.get("type") != "receipt":
                    check.structure(pointer("lineage", "children", index, "type"),
                                    "lineage child is not of type receipt")


def _is_effect_evidence(entry: Mapping[str, Any]) -> bool:
    if entry.get("proof_kind") == "effect_evidence":
        return True
    return any(isinstance(value, Mapping) and value.get("proof_kind") == "effect_evidence"
               for value in entry.values())


def _check_decision_integrity(doc: Mapping[str, Any], check: _Check) -> None:
    for index, decision in _items(doc.get("decisions")):
        cited = [key for key, value in decision.items()
                 if "signal" in key and not _empty(value)]
        if cited:
            check.add(FindingCode.DECISION_INTEGRITY_UNVERIFIED, pointer("decisions", index),
                      f"decision cites signals ({', '.join(sorted(cited))}) this verifier "
                      "cannot resolve")


@attrs.frozen(kw_only=True)
class Verifier:
    """The §4.6 verifier: a keyring and a signature policy. Immutable; share freely."""

    keyring: Keyring = attrs.field(factory=Keyring)
    mode: SignatureMode = SignatureMode.PRODUCTION

    def verify(self, receipt: Receipt | Mapping[str, Any]) -> ReceiptVerification:
        """Run every §4.6 check on *receipt* (a sealed :class:`Receipt` or a parsed JSON
        object, possibly tampered) and return all findings. Raises nothing."""
        doc: Any = receipt.body if isinstance(receipt, Receipt) else receipt
        if not isinstance(doc, Mapping):
            finding = Finding(FindingCode.ENVELOPE_INVALID, "", "a receipt is a JSON object")
            return ReceiptVerification(
                receipt_id=None, mode=self.mode, kid=None, digest_expected=None,
                digest_actual=None, content_address_expected=None,
                content_address_actual=None, signature_status=SignatureStatus.MALFORMED,
                findings=(finding,),
            )
        try:
            return self._verify(doc)
        except Exception as exc:  # verify is documented to raise nothing
            # A hostile shape the checks above did not foresee: a finding, never valid.
            # Tests assert this message never appears (tests/host/test_fuzz_receipts.py).
            finding = Finding(FindingCode.ENVELOPE_INVALID, "",
                              f"{VERIFIER_ERROR_PREFIX}: {type(exc).__name__}")
            return ReceiptVerification(
                receipt_id=_text(doc.get("id")), mode=self.mode, kid=None,
                digest_expected=_text(doc.get("digest")), digest_actual=None,
                content_address_expected=_text(doc.get("id")), content_address_actual=None,
                signature_status=SignatureStatus.MALFORMED, findings=(finding,),
            )

    def _verify(self, doc: Mapping[str, Any]) -> ReceiptVerification:
        check = _Check()
        _check_envelope(doc, check)
        try:
            digest_actual: str | None = body_digest(doc)
            address_actual: str | None = content_address(doc)
        except ReceiptCanonicalizationError as exc:
            digest_actual = address_actual = None
            where = getattr(exc, "path", "")
            check.envelope(where if isinstance(where, str) else "",
                           f"cannot canonicalise the receipt: {exc}")
        digest_expected, address_expected = _text(doc.get("digest")), _text(doc.get("id"))
        if digest_actual is None or digest_expected != digest_actual:
            check.add(FindingCode.DIGEST_MISMATCH, "/digest",
                      f"digest is {digest_expected!r}, recomputed {digest_actual!r}")
        if address_actual is None or address_expected != address_actual:
            check.add(FindingCode.CONTENT_ADDRESS_MISMATCH, "/id",
                      f"id is {address_expected!r}, recomputed {address_actual!r}")
        signature_findings = _Check()
        if self._local_signature(doc):
            value = doc["signature"]["value"]
            if digest_actual is None or value != "sig:" + digest_actual:
                signature_findings.add(
                    FindingCode.SIGNATURE_INVALID, "/signature/value",
                    "local-development signature does not name the recomputed digest")
        else:
            _signature_production(doc, digest_actual, self.keyring, signature_findings)
        check.findings.extend(signature_findings.findings)
        _check_structure(doc, check)
        _check_decision_integrity(doc, check)
        issuer = doc.get("issuer")
        return ReceiptVerification(
            receipt_id=address_expected,
            mode=self.mode,
            kid=_text(issuer.get("kid")) if isinstance(issuer, Mapping) else None,
            digest_expected=digest_expected,
            digest_actual=digest_actual,
            content_address_expected=address_expected,
            content_address_actual=address_actual,
            signature_status=_signature_status(signature_findings.findings),
            findings=tuple(check.findings),
        )

    def _local_signature(self, doc: Mapping[str, Any]) -> bool:
        """True when §4.6 step 5 applies: local-development policy, issuer ``local`` and
        a ``sig:`` value."""
        if self.mode is not SignatureMode.LOCAL_DEVELOPMENT:
            return False
        issuer, signature = doc.get("issuer"), doc.get("signature")
        return (isinstance(issuer, Mapping) and issuer.get("type") == "local"
                and isinstance(signature, Mapping)
                and isinstance(signature.get("value"), str)
                and signature["value"].startswith("sig:"))
