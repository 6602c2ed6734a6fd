"""The chain digest of event rows (RUN-STO-3).

Every event row carries ``chain``: a SHA-256 over the previous row's chain (or the
stream's genesis value) and the row's own bytes, so a deleted, inserted, reordered or
edited row of a stream, and a deleted or edited ``commits`` row, is detected by the next
read of the stream (``record()``) and by ``runx-actors store check``::

    genesis(scope, stream) = sha256("runx-actors/chain/v1" 0x00 scope 0x00 stream)
    chain(row)             = sha256(prev ‖ u32be(len c) ‖ c ‖ u32be(len t) ‖ t ‖ data)

where ``c`` is the UTF-8 commit id of the row's commit, ``t`` the UTF-8 event type and
``data`` the stored event bytes (already produced by the encoder: nothing is
re-canonicalised). Pure; shared by the SQLite and PostgreSQL stores.
"""

from __future__ import annotations

import hashlib

__all__ = ["genesis", "link", "CHAIN_SIZE"]

#: Bytes of a chain value.
CHAIN_SIZE = 32
_TAG = b"runx-actors/chain/v1\x00"


def genesis(scope: str, stream: str) -> bytes:
    """The chain value before the first row of *stream* in *scope*."""
    return hashlib.sha256(_TAG + scope.encode("utf-8") + b"\x00"
                          + stream.encode("utf-8")).digest()


def link(prev: bytes, commit_id: str, type_: str, data: bytes) -> bytes:
    """The chain value of a row after *prev* (see the module docstring)."""
    c = commit_id.encode("utf-8")
    t = type_.encode("utf-8")
    h = hashlib.sha256(prev)
    h.update(len(c).to_bytes(4, "big"))
    h.update(c)
    h.update(len(t).to_bytes(4, "big"))
    h.update(t)
    h.update(data)
    return h.digest()
