"""The receipt model ``runx.receipt.v1`` (loop-host §4.2, §4.3): frozen attrs values.

* Typed records (:class:`Reference`, :class:`Issuer`, :class:`Subject`,
  :class:`Authority`, :class:`Seal`, :class:`Lineage` …) are what the host builds.
* :class:`ReceiptDraft` is an unsealed receipt: everything but ``id``, ``digest``,
  ``signature`` and ``issuer``, which sealing adds (§4.4).
* :class:`Receipt` is a sealed receipt. It holds the whole JSON object (``body``, frozen)
  because a verifier must hash exactly what was signed, including fields of foreign runx
  receipts this product never emits (``signals``, ``acts`` …). Typed views of the
  envelope are read from it on demand.

JSON conversion lives in ``_codec`` (style §3.4: classes know nothing about JSON).
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable
from typing import Any

import attrs

from ._c14n import parse_receipt_json, receipt_canonical_json, receipt_hash
from ._json import FrozenMap, freeze_json, thaw_json

__all__ = [
    "RECEIPT_SCHEMA",
    "Disposition",
    "COMMITMENT_SCOPES",
    "IssuerType",
    "ReceiptClass",
    "SubjectKind",
    "ProofKind",
    "Reference",
    "Issuer",
    "Signature",
    "Idempotency",
    "Commitment",
    "Subject",
    "Attenuation",
    "Enforcement",
    "Authority",
    "Seal",
    "Lineage",
    "ReceiptDraft",
    "Receipt",
    "receipt_uri",
    "receipt_file_name",
    "is_receipt_id",
]

#: The ``schema`` of every receipt (§4.2).
RECEIPT_SCHEMA = "runx.receipt.v1"

_RECEIPT_ID = re.compile(r"^sha256:[0-9a-f]{64}$")
_CREATED_AT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


class Disposition(enum.Enum):
    """``seal.disposition`` (§4.2)."""

    CLOSED = "closed"
    DEFERRED = "deferred"
    SUPERSEDED = "superseded"
    DECLINED = "declined"
    BLOCKED = "blocked"
    FAILED = "failed"
    KILLED = "killed"
    TIMED_OUT = "timed_out"


class IssuerType(enum.Enum):
    """``issuer.type`` (§4.2). Production signing uses only ``HOSTED`` or ``CI``."""

    HOSTED = "hosted"
    CI = "ci"
    LOCAL = "local"
    VERIFIER = "verifier"


class ReceiptClass(enum.Enum):
    """``class`` (§4.2). Ours is always ``EXECUTED``."""

    EXECUTED = "executed"
    MEDIATED = "mediated"


class SubjectKind(enum.Enum):
    """``subject.kind`` (§4.2)."""

    SKILL = "skill"
    GRAPH = "graph"


class ProofKind(enum.Enum):
    """``Reference.proof_kind`` (§4.2)."""

    EFFECT_EVIDENCE = "effect_evidence"
    EFFECT_FINALITY = "effect_finality"
    CREDENTIAL_RESOLUTION = "credential_resolution"


def _non_empty(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{attribute.name} must be a non-empty string, got {value!r}")


def _optional_non_empty(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _non_empty(_, attribute, value)


def _sha256_prefixed(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.startswith("sha256:"):
        raise ValueError(f"{attribute.name} must start with 'sha256:', got {value!r}")


def _created_at(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or _CREATED_AT.match(value) is None:
        raise ValueError(
            f"{attribute.name} must be RFC 3339 UTC with milliseconds "
            f"(YYYY-MM-DDTHH:MM:SS.mmmZ), got {value!r}"
        )


def _references(value: Iterable[Reference]) -> tuple[Reference, ...]:
    return tuple(value)


def _commitments(value: Iterable[Commitment]) -> tuple[Commitment, ...]:
    return tuple(value)


def _frozen_tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(freeze_json(item) if isinstance(item, (dict, list)) else item
                 for item in value)


def is_receipt_id(value: object) -> bool:
    """True iff *value* is ``sha256:`` + 64 lowercase hex (§4.2 ``id``)."""
    return isinstance(value, str) and _RECEIPT_ID.match(value) is not None


def receipt_uri(receipt_id: str) -> str:
    """Return ``runx:receipt:<id>``, the uri of a receipt edge (§4.3, §5.3)."""
    return "runx:receipt:" + receipt_id


def receipt_file_name(receipt_id: str) -> str:
    """Return ``sha256-<hex>.json``, the store's file name for *receipt_id* (§5.1).

    Raises:
        ValueError: *receipt_id* is not ``sha256:<64 hex>``.
    """
    if not is_receipt_id(receipt_id):
        raise ValueError(f"{receipt_id!r} is not a receipt id")
    return "sha256-" + receipt_id[7:] + ".json"


@attrs.frozen(kw_only=True)
class Reference:
    """A ``runx.reference.v1`` (§4.2): ``{type, uri}`` plus optional fields, all
    non-empty strings when present."""

    type: str = attrs.field(validator=_non_empty)
    uri: str = attrs.field(validator=_non_empty)
    provider: str | None = attrs.field(default=None, validator=_optional_non_empty)
    locator: str | None = attrs.field(default=None, validator=_optional_non_empty)
    label: str | None = attrs.field(default=None, validator=_optional_non_empty)
    observed_at: str | None = attrs.field(default=None, validator=_optional_non_empty)
    schema: str | None = attrs.field(default=None, validator=_optional_non_empty)
    proof_kind: ProofKind | None = None

    @classmethod
    def to_receipt(cls, receipt: Receipt) -> Reference:
        """The edge to *receipt*: ``{type: receipt, uri: runx:receipt:<id>, locator:
        <digest>}``, used for ``lineage.children[]`` and ``lineage.previous`` (§4.3)."""
        return cls(type="receipt", uri=receipt_uri(receipt.id), locator=receipt.digest)


@attrs.frozen(kw_only=True)
class Issuer:
    """``issuer`` (§4.2): ``public_key_sha256 = Hb(raw 32-byte Ed25519 public key)``."""

    type: IssuerType
    kid: str = attrs.field(validator=_non_empty)
    public_key_sha256: str = attrs.field(validator=_sha256_prefixed)


@attrs.frozen(kw_only=True)
class Signature:
    """``signature`` (§4.2): ``value`` is ``base64:<base64url, no padding>`` or, in
    local-development mode, ``sig:<digest>``."""

    alg: str = attrs.field(default="Ed25519", validator=_non_empty)
    value: str = attrs.field(validator=_non_empty)


@attrs.frozen(kw_only=True)
class Idempotency:
    """``idempotency`` (§4.2, §4.3); each value carries the ``sha256:`` prefix."""

    intent_key: str = attrs.field(validator=_sha256_prefixed)
    trigger_fingerprint: str = attrs.field(validator=_sha256_prefixed)
    content_hash: str = attrs.field(validator=_sha256_prefixed)


#: ``subject.commitments[].scope`` values of upstream's published schema (§4.2).
COMMITMENT_SCOPES = frozenset({"input", "output", "stdout", "stderr", "error"})


def _commitment_scope(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in COMMITMENT_SCOPES:
        raise ValueError(f"{attribute.name} must be one of {sorted(COMMITMENT_SCOPES)}, "
                         f"got {value!r}")


def _sha256_algorithm(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value != "sha256":
        raise ValueError(f"{attribute.name} must be 'sha256', got {value!r}")


@attrs.frozen(kw_only=True)
class Commitment:
    """One ``subject.commitments[]`` entry (§4.2, §4.3): ``{scope, algorithm, value,
    canonicalization}``, the four keys upstream's published ``runx.receipt.v1`` schema
    requires (and no others). ``scope`` is one of :data:`COMMITMENT_SCOPES`,
    ``algorithm`` is ``sha256``, ``value`` a ``sha256:`` hash and ``canonicalization``
    names how the hashed document was serialised (ours: ``runx_actors.fact_log.v1``,
    ``runx_actors.run_binding.v1``, ``runx.receipt.c14n.v1``)."""

    scope: str = attrs.field(validator=_commitment_scope)
    algorithm: str = attrs.field(default="sha256", validator=_sha256_algorithm)
    value: str = attrs.field(validator=_sha256_prefixed)
    canonicalization: str = attrs.field(validator=_non_empty)


@attrs.frozen(kw_only=True)
class Subject:
    """``subject`` (§4.2, §4.3). ``input_context`` and ``paid_invocation`` are not
    emitted by this product and are not modelled."""

    kind: SubjectKind
    ref: Reference
    commitments: tuple[Commitment, ...] = attrs.field(default=(), converter=_commitments)


@attrs.frozen(kw_only=True)
class Attenuation:
    """``authority.attenuation`` (§4.2); ours is all nulls."""

    parent_authority_ref: Reference | None = None
    subset_proof: Any = attrs.field(default=None, converter=freeze_json)


@attrs.frozen(kw_only=True)
class Enforcement:
    """``authority.enforcement`` (§4.3)."""

    profile_hash: str = attrs.field(validator=_sha256_prefixed)
    redaction_refs: tuple[Reference, ...] = attrs.field(default=(), converter=_references)
    setup_refs: tuple[Reference, ...] = attrs.field(default=(), converter=_references)
    teardown_refs: tuple[Reference, ...] = attrs.field(default=(), converter=_references)


@attrs.frozen(kw_only=True)
class Authority:
    """``authority`` (§4.2, §4.3)."""

    actor_ref: Reference
    grant_refs: tuple[Reference, ...] = attrs.field(default=(), converter=_references)
    scope_refs: tuple[Reference, ...] = attrs.field(default=(), converter=_references)
    authority_proof_refs: tuple[Reference, ...] = attrs.field(default=(), converter=_references)
    attenuation: Attenuation = attrs.field(factory=Attenuation)
    terms: tuple[Any, ...] = attrs.field(default=(), converter=_frozen_tuple)
    mandate_ref: Reference | None = None
    enforcement: Enforcement


@attrs.frozen(kw_only=True)
class Seal:
    """``seal`` (§4.2, §4.3)."""

    disposition: Disposition
    reason_code: str = attrs.field(validator=_non_empty)
    summary: str = attrs.field(validator=_non_empty)
    closed_at: str = attrs.field(validator=_non_empty)
    last_observed_at: str = attrs.field(validator=_non_empty)
    criteria: tuple[Any, ...] = attrs.field(default=(), converter=_frozen_tuple)


@attrs.frozen(kw_only=True)
class Lineage:
    """``lineage`` (§4.2, §4.3, §5.3). ``children`` are tree edges; ``previous`` is the
    loop-turn chain link (not an edge); ``sync`` and ``resume_ref`` are not edges."""

    parent: Reference | None = None
    previous: Reference | None = None
    children: tuple[Reference, ...] = attrs.field(default=(), converter=_references)
    sync: tuple[Any, ...] = attrs.field(default=(), converter=_frozen_tuple)
    resume_ref: Reference | None = None


@attrs.frozen(kw_only=True)
class ReceiptDraft:
    """An unsealed receipt (§4.4 step 1): every §4.2 field except ``id``, ``digest``,
    ``signature`` and ``issuer`` (sealing sets the issuer from the signing identity).

    ``created_at`` is RFC 3339 UTC with milliseconds. ``lineage=None`` omits the field;
    our receipts always carry one (§4.3).
    """

    created_at: str = attrs.field(validator=_created_at)
    idempotency: Idempotency
    receipt_class: ReceiptClass = ReceiptClass.EXECUTED
    subject: Subject
    authority: Authority
    seal: Seal
    lineage: Lineage | None = attrs.field(factory=Lineage)


@attrs.frozen
class Receipt:
    """A sealed ``runx.receipt.v1`` (§4.2, §4.4): the whole JSON object, frozen.

    Obtain one from :func:`seal_receipt`, :meth:`ReceiptStore.get` or
    :meth:`from_json` / :meth:`from_bytes` (which do *not* verify; use a
    :class:`Verifier`). Two receipts are equal iff their bodies are equal.
    """

    body: FrozenMap = attrs.field(converter=freeze_json)

    @body.validator
    def _check_body(self, _: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, FrozenMap):
            raise TypeError("a receipt body is a JSON object")

    @classmethod
    def from_json(cls, document: Any) -> Receipt:
        """Wrap a parsed receipt object (no verification).

        Raises:
            TypeError: *document* is not a JSON object.
        """
        return cls(document)

    @classmethod
    def from_bytes(cls, data: bytes) -> Receipt:
        """Parse receipt file bytes (no verification).

        Raises:
            ValueError: not strict JSON (see ``parse_receipt_json``).
            TypeError: not a JSON object.
        """
        return cls(parse_receipt_json(data))

    # ---------------------------------------------------------------- raw fields

    @property
    def id(self) -> str:
        """``id``: the content address (§4.4 step 2)."""
        return str(self.body["id"])

    @property
    def digest(self) -> str:
        """``digest``: the body hash (§4.4 step 3)."""
        return str(self.body["digest"])

    @property
    def created_at(self) -> str:
        """``created_at`` (§4.2): RFC 3339 UTC with milliseconds."""
        return str(self.body["created_at"])

    @property
    def file_name(self) -> str:
        """``sha256-<hex>.json`` (§5.1)."""
        return receipt_file_name(self.id)

    @property
    def uri(self) -> str:
        """``runx:receipt:<id>``."""
        return receipt_uri(self.id)

    @property
    def reference(self) -> Reference:
        """The edge to this receipt (see :meth:`Reference.to_receipt`)."""
        return Reference.to_receipt(self)

    # ---------------------------------------------------------------- typed views

    @functools.cached_property
    def issuer(self) -> Issuer:
        """Typed view of ``issuer`` (§4.2)."""
        from ._codec import structure

        return structure(self.body["issuer"], Issuer)

    @functools.cached_property
    def signature(self) -> Signature:
        """Typed view of ``signature`` (§4.2)."""
        from ._codec import structure

        return structure(self.body["signature"], Signature)

    @functools.cached_property
    def idempotency(self) -> Idempotency:
        """Typed view of ``idempotency`` (§4.2, §4.3)."""
        from ._codec import structure

        return structure(self.body["idempotency"], Idempotency)

    @functools.cached_property
    def subject(self) -> Subject:
        """Typed view of ``subject`` (§4.2, §4.3)."""
        from ._codec import structure

        return structure(self.body["subject"], Subject)

    @functools.cached_property
    def seal(self) -> Seal:
        """Typed view of ``seal`` (§4.2, §4.3)."""
        from ._codec import structure

        return structure(self.body["seal"], Seal)

    @functools.cached_property
    def lineage(self) -> Lineage | None:
        """The typed ``lineage``, or None when the receipt has none."""
        from ._codec import structure

        raw = self.body.get("lineage")
        return None if raw is None else structure(raw, Lineage)

    # ---------------------------------------------------------------- bytes

    def to_json(self) -> dict[str, Any]:
        """A mutable deep copy of the body (edit it to build tampered test inputs)."""
        result: dict[str, Any] = thaw_json(self.body)
        return result

    @functools.cached_property
    def canonical_bytes(self) -> bytes:
        """``C(receipt)``: exactly the stored file (§4.4 step 6), no trailing newline.
        Foreign floats are written in the verifier's form."""
        return receipt_canonical_json(self.body, strict=False)

    @property
    def receipt_digest(self) -> str:
        """``H(sealed receipt)``, signature included: the harness ``receipt_digest``
        (§4.7, §8.2)."""
        return receipt_hash(self.body, strict=False)

