"""The ``C`` / ``H`` / ``Hb`` of loop-host notation, for the host's identities.

A thin adapter over the receipt canonicalization (``host.receipts``): the host never
re-implements it. Identities (turn keys, input digests, package digests, context hashes)
use the verifier's number form, so inputs holding a non-integral float (which the turn
then refuses, §3.2) still have a digest; the sealer's strict form is used by sealing only.
"""

from __future__ import annotations

from typing import Any

from .receipts import bytes_hash, receipt_canonical_json, receipt_hash

__all__ = ["canonical", "digest_json", "digest_bytes"]


def canonical(value: Any) -> bytes:
    """``C(value)`` (loop-host §4.1; verifier number form)."""
    return receipt_canonical_json(value, strict=False)


def digest_json(value: Any) -> str:
    """``H(value) = "sha256:" + hex(sha256(C(value)))``."""
    return receipt_hash(value, strict=False)


def digest_bytes(data: bytes) -> str:
    """``Hb(data) = "sha256:" + hex(sha256(data))``."""
    return bytes_hash(data)
