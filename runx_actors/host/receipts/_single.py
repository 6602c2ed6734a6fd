"""Single-mode verification: ``runx-actors verify --receipt <path|->`` (loop-host §5.4).

A single receipt cannot prove lineage, so the verdict's ``lineage.status`` is always
``unverified``. Input is at most 10 MiB.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import attrs

from ..._strictread import MalformedInputError, read_regular_file
from ._c14n import parse_receipt_json
from ._errors import ReceiptInputError
from ._findings import Finding
from ._signing import Keyring
from ._verify import ReceiptVerification, SignatureMode, Verifier

__all__ = ["VERDICT_SCHEMA", "MAX_SINGLE_INPUT_BYTES", "Verdict", "read_receipt_input",
           "verify_receipt_bytes"]

VERDICT_SCHEMA = "runx.verify_verdict.v1"
#: Single-mode input limit (§5.4): 10 MiB.
MAX_SINGLE_INPUT_BYTES = 10 * 1024 * 1024


@attrs.frozen(kw_only=True)
class Verdict:
    """A ``runx.verify_verdict.v1`` (§5.4): the §4.6 verification of one receipt plus
    what its lineage claims (``children`` count, ``parent`` uri), unverified."""

    verification: ReceiptVerification
    children: int
    parent: str | None

    @property
    def receipt_id(self) -> str | None:
        """The ``id`` the receipt claims (None if it has none)."""
        return self.verification.receipt_id

    @property
    def valid(self) -> bool:
        """True iff every finding is informational (§4.6 step 7)."""
        return self.verification.valid

    @property
    def findings(self) -> tuple[Finding, ...]:
        """Every §4.6 finding of the receipt."""
        return self.verification.findings

    @property
    def exit_code(self) -> int:
        """0 when valid, else 3 (§5.4)."""
        return 0 if self.valid else 3


def read_receipt_input(
    source: str, *, stdin: BinaryIO | None = None, cwd: str | os.PathLike[str] = ".",
) -> bytes:
    """Read ``--receipt`` input: a path (relative to *cwd*) or ``-`` for *stdin*
    (§5.4), at most 10 MiB.

    Raises:
        ReceiptInputError: unreadable, missing stdin, or over 10 MiB (exit 1).
    """
    limit = MAX_SINGLE_INPUT_BYTES
    try:
        if source == "-":
            if stdin is None:
                raise ReceiptInputError("no standard input to read", source=source,
                                        reason="unreadable")
            data = stdin.read(limit + 1)
        else:
            # a regular file (a FIFO or a device would block or never end), at most
            # limit + 1 bytes; a symlink the user names is followed
            data = read_regular_file(Path(cwd) / source, max_bytes=limit,
                                     follow_symlinks=True)
    except MalformedInputError as exc:
        if exc.reason == "too_large":
            raise ReceiptInputError(f"{source} is larger than 10 MiB", source=source,
                                    reason="too_large") from None
        raise ReceiptInputError(f"cannot read {exc}", source=source,
                                reason="unreadable") from None
    except OSError as exc:
        raise ReceiptInputError(f"cannot read {source}: {exc.strerror or exc}",
                                source=source, reason="unreadable") from None
    if len(data) > limit:
        raise ReceiptInputError(f"{source} is larger than 10 MiB", source=source,
                                reason="too_large")
    return bytes(data)


def verify_receipt_bytes(
    data: bytes, *, keyring: Keyring, mode: SignatureMode = SignatureMode.PRODUCTION,
    source: str = "-",
) -> Verdict:
    """Verify one receipt given as bytes (§5.4 single mode, §4.6).

    Raises:
        ReceiptInputError: over 10 MiB, not JSON, or not a JSON object (exit 1).
    """
    if len(data) > MAX_SINGLE_INPUT_BYTES:
        raise ReceiptInputError(f"{source} is larger than 10 MiB", source=source,
                                reason="too_large")
    try:
        doc: Any = parse_receipt_json(data)
    except ValueError as exc:
        raise ReceiptInputError(f"{source} is not JSON: {exc}", source=source,
                                reason="not_json") from None
    if not isinstance(doc, dict):
        raise ReceiptInputError(f"{source} is not a JSON object", source=source,
                                reason="not_object")
    verification = Verifier(keyring=keyring, mode=mode).verify(doc)
    lineage = doc.get("lineage")
    children = lineage.get("children") if isinstance(lineage, Mapping) else None
    parent = lineage.get("parent") if isinstance(lineage, Mapping) else None
    if isinstance(parent, Mapping):
        parent = parent.get("uri")
    return Verdict(
        verification=verification,
        children=len(children) if isinstance(children, list) else 0,
        parent=parent if isinstance(parent, str) else None,
    )
