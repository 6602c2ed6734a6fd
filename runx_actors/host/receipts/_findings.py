"""Verification findings (loop-host §4.6, §5.4): typed codes, JSON-pointer paths.

A verifier never stops at the first problem: it returns every finding. A finding is
``{code, path, message}``; ``path`` is an RFC 6901 pointer into the receipt (proof
findings), into the tree walked from the root (tree findings, e.g.
``/lineage/children/0/digest``) or into the chain being checked (chain findings, e.g.
``/1/lineage/previous``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

__all__ = [
    "FindingCode",
    "Finding",
    "INFORMATIONAL_CODES",
    "SIGNATURE_CODES",
    "is_valid",
]


class FindingCode(enum.Enum):
    """Every finding code. Values are the design's spellings."""

    # §4.6 proof findings
    ENVELOPE_INVALID = "EnvelopeInvalid"  # [ours] §4.6 step 1 names no code
    DIGEST_MISMATCH = "DigestMismatch"
    CONTENT_ADDRESS_MISMATCH = "ContentAddressMismatch"
    ISSUER_NOT_TRUSTED = "IssuerNotTrusted"
    SIGNATURE_MALFORMED = "SignatureMalformed"
    KEY_UNKNOWN = "KeyUnknown"
    KEY_HASH_MISMATCH = "KeyHashMismatch"
    SIGNATURE_INVALID = "SignatureInvalid"
    STRUCTURE_INVALID = "StructureInvalid"
    DECISION_INTEGRITY_UNVERIFIED = "DecisionIntegrityUnverified"
    # §5.4 tree findings
    CHILD_MISSING = "ChildMissing"
    CHILD_AMBIGUOUS = "ChildAmbiguous"
    CHILD_DUPLICATE = "ChildDuplicate"
    CHILD_MALFORMED = "ChildMalformed"
    CHILD_LOCATOR_MISMATCH = "ChildLocatorMismatch"
    PARENT_MISMATCH = "ParentMismatch"
    CYCLE = "Cycle"
    DEPTH_EXCEEDED = "DepthExceeded"
    BREADTH_EXCEEDED = "BreadthExceeded"
    ORPHAN = "Orphan"
    # [ours] chain findings (§2.5 "lineage.previous names the previous turn's receipt")
    RECEIPT_MISSING = "ReceiptMissing"
    RECEIPT_UNREADABLE = "ReceiptUnreadable"
    PREVIOUS_MISSING = "PreviousMissing"
    PREVIOUS_MISMATCH = "PreviousMismatch"
    PREVIOUS_UNEXPECTED = "PreviousUnexpected"


#: Findings that do not make a receipt, tree or chain invalid (§4.6 step 7, §5.4).
INFORMATIONAL_CODES = frozenset({FindingCode.DECISION_INTEGRITY_UNVERIFIED})

#: The §4.6 step 4 signature findings.
SIGNATURE_CODES = frozenset({
    FindingCode.ISSUER_NOT_TRUSTED,
    FindingCode.SIGNATURE_MALFORMED,
    FindingCode.KEY_UNKNOWN,
    FindingCode.KEY_HASH_MISMATCH,
    FindingCode.SIGNATURE_INVALID,
})


@attrs.frozen
class Finding:
    """One verification finding (§5.4): ``code``, ``path`` (JSON pointer), ``message``."""

    code: FindingCode
    path: str
    message: str

    def under(self, prefix: str) -> Finding:
        """This finding with *prefix* (a JSON pointer) prepended to its path."""
        return attrs.evolve(self, path=prefix + self.path)


def is_valid(findings: Iterable[Finding]) -> bool:
    """True iff no finding is outside :data:`INFORMATIONAL_CODES` (§4.6 step 7, §5.4)."""
    return all(finding.code in INFORMATIONAL_CODES for finding in findings)
