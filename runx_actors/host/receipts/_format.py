"""Output of ``runx-actors verify`` (loop-host §5.4, §9.1), independent of the CLI.

``--json`` prints the §5.4 objects (keys in the documented order, indent 2); without it,
a short text report. Each function returns the complete text, trailing newline included.
"""

from __future__ import annotations

import json
from typing import Any

from ._findings import Finding
from ._single import VERDICT_SCHEMA, Verdict
from ._tree import VerificationReport

__all__ = [
    "finding_to_json",
    "report_to_json",
    "verdict_to_json",
    "format_report",
    "format_verdict",
]


def finding_to_json(finding: Finding) -> dict[str, Any]:
    """``{code, path, message}`` (§5.4)."""
    return {"code": finding.code.value, "path": finding.path, "message": finding.message}


def report_to_json(report: VerificationReport) -> dict[str, Any]:
    """The tree-mode JSON object of §5.4."""
    return {
        "receipt_dir": report.receipt_dir,
        "signature_mode": report.signature_mode.value,
        "trees": [
            {
                "root_receipt_id": tree.root_receipt_id,
                "receipt_count": tree.receipt_count,
                "parent_missing": tree.parent_missing,
                "valid": tree.valid,
                "findings": [finding_to_json(f) for f in tree.findings],
            }
            for tree in report.trees
        ],
        "unreadable_files": [
            {"file_name": item.file_name, "message": item.message}
            for item in report.unreadable_files
        ],
        "valid": report.valid,
    }


def verdict_to_json(verdict: Verdict) -> dict[str, Any]:
    """The single-mode ``runx.verify_verdict.v1`` object of §5.4."""
    verification = verdict.verification
    return {
        "schema": VERDICT_SCHEMA,
        "receipt_id": verdict.receipt_id,
        "valid": verdict.valid,
        "digest": {
            "status": "match" if verification.digest_matches else "mismatch",
            "expected": verification.digest_expected,
            "actual": verification.digest_actual,
        },
        "content_address": {
            "status": "match" if verification.content_address_matches else "mismatch",
            "expected": verification.content_address_expected,
            "actual": verification.content_address_actual,
        },
        "signature": {
            "mode": verification.mode.value,
            "status": verification.signature_status.value,
            "kid": verification.kid,
        },
        "lineage": {"status": "unverified", "children": verdict.children,
                    "parent": verdict.parent},
        "findings": [finding_to_json(f) for f in verdict.findings],
    }


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _finding_line(finding: Finding) -> str:
    return f"  {finding.code.value} {finding.path or '/'}: {finding.message}"


def format_report(report: VerificationReport, *, as_json: bool = False) -> str:
    """The stdout of tree mode: the §5.4 JSON with *as_json*, else text::

        verify <dir> (production signatures)
        tree sha256:… receipts=2 valid
        tree sha256:… receipts=1 invalid parent_missing
          DigestMismatch /lineage/children/0/digest: …
        unreadable x.json: …
        invalid: 1 of 2 trees invalid, 1 unreadable file
    """
    if as_json:
        return _dump(report_to_json(report))
    lines = [f"verify {report.receipt_dir} ({report.signature_mode.value} signatures)"]
    for tree in report.trees:
        flags = " parent_missing" if tree.parent_missing else ""
        lines.append(f"tree {tree.root_receipt_id} receipts={tree.receipt_count} "
                     f"{'valid' if tree.valid else 'invalid'}{flags}")
        lines.extend(_finding_line(finding) for finding in tree.findings)
    lines.extend(f"unreadable {item.file_name}: {item.message}"
                 for item in report.unreadable_files)
    invalid = sum(1 for tree in report.trees if not tree.valid)
    unreadable = len(report.unreadable_files)
    trees = f"{len(report.trees)} tree{'s' if len(report.trees) != 1 else ''}"
    if report.valid:
        lines.append(f"valid: {trees}")
    else:
        lines.append(f"invalid: {invalid} of {trees} invalid, {unreadable} unreadable "
                     f"file{'s' if unreadable != 1 else ''}")
    return "\n".join(lines) + "\n"


def format_verdict(verdict: Verdict, *, as_json: bool = False) -> str:
    """The stdout of single mode: ``runx.verify_verdict.v1`` with *as_json*, else text::

        receipt sha256:… valid
        digest: match sha256:…
        content_address: match sha256:…
        signature: verified (production, kid runx-demo-key)
        lineage: unverified (0 children, parent none)
    """
    if as_json:
        return _dump(verdict_to_json(verdict))
    doc = verdict_to_json(verdict)
    lines = [
        f"receipt {verdict.receipt_id or '(no id)'} {'valid' if verdict.valid else 'invalid'}",
        f"digest: {doc['digest']['status']} {doc['digest']['actual']}",
        f"content_address: {doc['content_address']['status']} "
        f"{doc['content_address']['actual']}",
        f"signature: {doc['signature']['status']} ({doc['signature']['mode']}, "
        f"kid {doc['signature']['kid']})",
        f"lineage: unverified ({verdict.children} "
        f"{'child' if verdict.children == 1 else 'children'}, "
        f"parent {verdict.parent or 'none'})",
    ]
    lines.extend(_finding_line(finding) for finding in verdict.findings)
    return "\n".join(lines) + "\n"
