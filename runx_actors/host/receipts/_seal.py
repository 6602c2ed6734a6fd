"""Sealing (loop-host §4.4): content address, body digest, signature, immediate check.

:func:`seal_receipt` is a pure function of the draft and the signer, so a re-seal of the
same draft with the same key gives identical bytes (§2.3 step 8.3, §2.6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._c14n import receipt_canonical_json
from ._codec import draft_to_json, unstructure
from ._errors import ReceiptSealError
from ._json import thaw_json
from ._model import Receipt, ReceiptDraft
from ._verify import SignatureMode, Verifier, body_digest, content_address

if TYPE_CHECKING:
    from ._ports import ReceiptSigner

__all__ = ["seal_receipt"]

_PROOF_FIELDS = ("id", "signature", "digest", "metadata")


def seal_receipt(draft: ReceiptDraft | Mapping[str, Any], signer: ReceiptSigner) -> Receipt:
    """Seal *draft* with *signer* (loop-host §4.4; a :class:`~._signing.Signer`, or
    anything :class:`~._ports.ReceiptSigner` describes) and return the sealed receipt.

    1. Build the body without ``id``, ``signature``, ``digest`` (and ``metadata``, which
       we never write), and set ``issuer`` from the signing identity.
    2. ``id = H(body - {id, signature, digest, metadata, lineage})``.
    3. ``digest = H(body - {signature, digest, metadata})`` (includes ``id`` and
       ``lineage``).
    4. ``signature.value = "base64:" + base64url_nopad(Ed25519(seed).sign(digest
       .encode()))``; the message is the 71-character digest string.
    5. Verify at once (the signer's own key; local-development policy for the
       local-development identity).

    *draft* is a :class:`ReceiptDraft` or an unsealed JSON object (any ``id``,
    ``signature``, ``digest``, ``metadata`` and ``issuer`` in it are replaced). The file
    to store is ``receipt.canonical_bytes``.

    Raises:
        ReceiptCanonicalizationError: (a ``TypeError``) the body holds a float other than
            an integral one within ±2^53, NaN, infinity or a lone surrogate (§4.1).
        ReceiptSealError: the sealed receipt does not verify (step 5); ``findings`` says
            why. Nothing was produced.
    """
    if isinstance(draft, ReceiptDraft):
        body = draft_to_json(draft)
    else:
        body = {key: thaw_json(value) for key, value in draft.items()
                if key not in _PROOF_FIELDS}
    body["issuer"] = unstructure(signer.issuer)
    receipt_canonical_json(body, strict=True)  # the sealer's float and string rules
    body["id"] = content_address(body, strict=True)
    body["digest"] = body_digest(body, strict=True)
    body["signature"] = unstructure(signer.sign(body["digest"]))
    receipt = Receipt(body)
    mode = (SignatureMode.LOCAL_DEVELOPMENT if signer.is_local_development
            else SignatureMode.PRODUCTION)
    verification = Verifier(keyring=signer.keyring(), mode=mode).verify(receipt)
    if not verification.valid:
        raise ReceiptSealError(
            "sealed receipt failed verification: "
            + "; ".join(f"{f.code.value} at {f.path or '/'}" for f in verification.findings),
            findings=verification.findings,
        )
    return receipt
