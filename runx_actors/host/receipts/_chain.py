"""Chain verification through ``lineage.previous`` (loop-host §2.5, §4.3) **[ours]**.

A loop's turn receipts form a chain: turn n > 1 carries ``lineage.previous = {type:
receipt, uri: runx:receipt:<prev id>, locator: <prev digest>}``. ``previous`` is not a tree
edge (§5.3), so tree mode does not follow it; :func:`verify_chain` checks it for an ordered
list of receipt ids (the loop record's turns, in order). The loop host turns an invalid
chain into ``LoopIntegrityError`` (exit 3); it never repairs anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ._errors import ReceiptAmbiguousError, ReceiptCorruptError, ReceiptNotFoundError
from ._findings import Finding, FindingCode, is_valid
from ._json import pointer
from ._model import Receipt, receipt_uri
from ._ports import ReceiptRepository

__all__ = ["ChainReport", "verify_chain"]


@attrs.frozen(kw_only=True)
class ChainReport:
    """The result of :func:`verify_chain`. Finding paths are ``/<position>/…``, the
    position being 0-based (turn index - 1)."""

    receipt_ids: tuple[str, ...]
    findings: tuple[Finding, ...]

    @property
    def valid(self) -> bool:
        """True iff every finding is informational (§4.6 step 7)."""
        return is_valid(self.findings)


def _load(store: ReceiptRepository, position: int, receipt_id: str,
          findings: list[Finding]) -> Receipt | None:
    here = pointer(position)
    try:
        return store.get(receipt_id)
    except ReceiptNotFoundError:
        findings.append(Finding(FindingCode.RECEIPT_MISSING, here,
                                f"receipt {receipt_id} is not in the store"))
    except ReceiptCorruptError as exc:
        proof: tuple[Finding, ...] = getattr(exc, "findings", ())
        if proof:
            findings.extend(finding.under(here) for finding in proof)
        else:
            findings.append(Finding(FindingCode.RECEIPT_UNREADABLE, here, str(exc)))
    except ReceiptAmbiguousError as exc:
        findings.append(Finding(FindingCode.RECEIPT_UNREADABLE, here, str(exc)))
    return None


def _check_previous(position: int, receipt: Receipt, previous_id: str | None,
                    previous: Receipt | None, findings: list[Finding]) -> None:
    path = pointer(position, "lineage", "previous")
    lineage = receipt.body.get("lineage")
    link: Any = lineage.get("previous") if isinstance(lineage, Mapping) else None
    if previous_id is None:
        if link is not None:
            findings.append(Finding(FindingCode.PREVIOUS_UNEXPECTED, path,
                                    "the first receipt of a chain has no previous link"))
        return
    if link is None:
        findings.append(Finding(FindingCode.PREVIOUS_MISSING, path,
                                f"lineage.previous should name {receipt_uri(previous_id)}"))
        return
    problems = []
    if not isinstance(link, Mapping):
        problems.append("it is not a Reference")
    else:
        if link.get("type") != "receipt":
            problems.append(f"type {link.get('type')!r} is not receipt")
        if link.get("uri") != receipt_uri(previous_id):
            problems.append(f"uri {link.get('uri')!r} is not {receipt_uri(previous_id)}")
        if previous is not None and link.get("locator") != previous.digest:
            problems.append(f"locator {link.get('locator')!r} is not the previous digest "
                            f"{previous.digest}")
    if problems:
        findings.append(Finding(FindingCode.PREVIOUS_MISMATCH, path, "; ".join(problems)))


def verify_chain(store: ReceiptRepository, receipt_ids: Sequence[str]) -> ChainReport:
    """Verify the ordered chain *receipt_ids* (turn 1 first) (loop-host §2.5 [ours]).

    Every receipt must be readable and verify on ``get`` (its proof findings are
    reported under ``/<position>``); the first must carry no ``lineage.previous``
    (``PreviousUnexpected``), and each later one must link to its predecessor with type
    ``receipt``, uri ``runx:receipt:<prev id>`` and locator ``<prev digest>``
    (``PreviousMissing`` / ``PreviousMismatch``). A receipt that is not stored gives
    ``ReceiptMissing``; one that cannot be read at all, ``ReceiptUnreadable``. Every
    problem is reported. Raises nothing for a bad chain.
    """
    findings: list[Finding] = []
    loaded = [_load(store, position, receipt_id, findings)
              for position, receipt_id in enumerate(receipt_ids)]
    for position, receipt in enumerate(loaded):
        if receipt is None:
            continue
        previous_id = receipt_ids[position - 1] if position else None
        previous = loaded[position - 1] if position else None
        _check_previous(position, receipt, previous_id, previous, findings)
    findings.sort(key=lambda finding: _position(finding.path))
    return ChainReport(receipt_ids=tuple(receipt_ids), findings=tuple(findings))


def _position(path: str) -> int:
    head = path.split("/")[1] if path.count("/") >= 1 else "0"
    return int(head) if head.isdigit() else 0
