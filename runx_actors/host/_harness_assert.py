"""Assertions of a harness case (loop-host §8.3).

Pure functions over what a case produced (:class:`CaseEvidence`) and what it expects
(:class:`~._harness_cases.Expect`). Each failed assertion is one message::

    <case>: expect.receipt.disposition: expected failed, got closed
    <case>: expect.status: expected sealed, got failure

Lists are compared in order and shown joined by commas; JSON values are shown as compact
JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from ._harness_cases import MISSING, Expect, ExpectReceipt, OutputExpect
from .receipts import Receipt, receipt_hash

__all__ = [
    "CaseEvidence",
    "status_of_disposition",
    "receipt_fields",
    "assert_case",
    "subset_mismatches",
]

_DISPOSITION_STATUS = {"closed": "sealed", "deferred": "needs_agent", "blocked": "policy_denied"}


def status_of_disposition(disposition: str) -> str:
    """§8.3 status mapping: ``closed → sealed``, ``deferred → needs_agent``, ``blocked →
    policy_denied``, any other disposition → ``failure``."""
    return _DISPOSITION_STATUS.get(disposition, "failure")


@attrs.frozen(kw_only=True)
class CaseEvidence:
    """What one case produced.

    * ``status`` — the case status (§8.3), ``failure`` for an execution error, a failed
      verification or a failed input contract;
    * ``receipt`` — the top receipt, verified (None when none was produced, or it failed
      verification);
    * ``detail`` — why the case ended ``failure`` without a receipt verdict (shown with
      the status message);
    * ``steps`` — the package step ids (``[<runner>]`` or the graph's step ids);
    * ``payload`` — the result (the payload or graph outputs), None when there is none;
    * ``step_outputs`` — graph runners: each step's recorded response;
    * ``graph`` — the case uses a graph runner.
    """

    status: str
    receipt: Receipt | None = None
    detail: str | None = None
    steps: tuple[str, ...] = ()
    payload: Any = None
    step_outputs: Mapping[str, Any] = attrs.field(factory=dict)
    graph: bool = False


def _refs(items: Any, key: str) -> list[str]:
    if not isinstance(items, list):
        return []
    return [str(item.get(key)) for item in items if isinstance(item, Mapping)]


def _verification_refs(acts: Any) -> list[str]:
    out: list[str] = []
    for act in acts if isinstance(acts, list) else ():
        verification = act.get("verification") if isinstance(act, Mapping) else None
        refs = verification.get("refs") if isinstance(verification, Mapping) else None
        out += _refs(refs, "uri")
    return out


def receipt_fields(receipt: Receipt) -> dict[str, Any]:
    """The values ``expect.receipt`` keys are compared with (§8.2)."""
    body = receipt.to_json()
    seal = body.get("seal") or {}
    subject = body.get("subject") or {}
    lineage = body.get("lineage") or {}
    children = lineage.get("children") if isinstance(lineage, Mapping) else None
    disposition = str(seal.get("disposition"))
    return {
        "schema": body.get("schema"),
        "body_digest": receipt.digest,
        "receipt_digest": receipt_hash(body),
        "receipt_id": receipt.id,
        "harness_id": (subject.get("ref") or {}).get("uri"),
        "state": "deferred" if disposition == "deferred" else "sealed",
        "disposition": disposition,
        "reason_code": seal.get("reason_code"),
        "act_ids": _refs(body.get("acts"), "id"),
        "decision_ids": _refs(body.get("decisions"), "id"),
        "child_receipt_refs": _refs(children, "uri"),
        "child_receipt_count": len(children) if isinstance(children, list) else 0,
        "verification_refs": _verification_refs(body.get("acts")),
    }


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _mismatch(case: str, where: str, expected: Any, got: Any) -> str:
    return f"{case}: {where}: expected {_show(expected)}, got {_show(got)}"


def _json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: ints and integral floats are equal, bools are not
    numbers, lists and tuples compare alike."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and bool(a == b)


_ABSENT = object()


def subset_mismatches(expected: Any, got: Any, where: str) -> list[tuple[str, Any, Any]]:
    """``(path, expected, got)`` for every place *got* is not a subset of *expected*
    (§8.3): every expected key present with a subset-equal value; lists equal. A missing
    key reports ``got`` as ``missing``."""
    if isinstance(expected, Mapping):
        if not isinstance(got, Mapping):
            return [(where, expected, got)]
        out: list[tuple[str, Any, Any]] = []
        for key, value in expected.items():
            if key not in got:
                out.append((f"{where}.{key}", value, "missing"))
            else:
                out += subset_mismatches(value, got[key], f"{where}.{key}")
        return out
    return [] if _json_equal(expected, got) else [(where, expected, got)]


def _assert_output(case: str, where: str, expect: OutputExpect, got: Any) -> list[str]:
    if expect.exact is not MISSING:
        if _json_equal(expect.exact, got):
            return []
        return [_mismatch(case, f"{where}.exact", expect.exact, got)]
    return [_mismatch(case, path, exp, value)
            for path, exp, value in subset_mismatches(expect.subset or {}, got,
                                                      f"{where}.subset")]


def _assert_receipt(case: str, expect: ExpectReceipt, receipt: Receipt | None) -> list[str]:
    if receipt is None:
        return [f"{case}: expect.receipt: expected a receipt, got none"]
    fields = receipt_fields(receipt)
    errors: list[str] = []
    for field in attrs.fields(ExpectReceipt):
        wanted = getattr(expect, field.name)
        if wanted is None:
            continue
        got = fields[field.name]
        if isinstance(wanted, tuple):
            wanted = list(wanted)
        if not _json_equal(wanted, got):
            errors.append(_mismatch(case, f"expect.receipt.{field.name}", wanted, got))
    return errors


def assert_case(case: str, expect: Expect, evidence: CaseEvidence) -> list[str]:
    """Every failed assertion of case *case* (§8.3), in the order status, receipt, steps,
    output, step outputs.

    The status is always checked: an execution error or a verification failure passes
    only when ``failure`` is expected, so a case without ``expect.status`` expects
    ``sealed`` unless it produced a healthy status. When the case did not produce a
    verified receipt, the receipt and output fields are not compared: the status message
    says why.
    """
    errors: list[str] = []
    expected_status = expect.status
    got = evidence.status
    if expected_status is None and got == "failure":
        expected_status = "sealed"
    if expected_status is not None and expected_status != got:
        detail = f" ({evidence.detail})" if evidence.detail else ""
        errors.append(f"{case}: expect.status: expected {expected_status}, got {got}{detail}")
    if got == "failure" and evidence.receipt is None:
        return errors
    if expect.receipt is not None:
        errors += _assert_receipt(case, expect.receipt, evidence.receipt)
    if expect.steps is not None and list(expect.steps) != list(evidence.steps):
        errors.append(_mismatch(case, "expect.steps", list(expect.steps),
                                list(evidence.steps)))
    if expect.output is not None:
        errors += _assert_output(case, "expect.output", expect.output, evidence.payload)
    if expect.step_outputs is not None:
        if not evidence.graph:
            errors.append(f"{case}: expect.step_outputs: applies to graph runners only")
        else:
            for step, output in expect.step_outputs.items():
                if step not in evidence.step_outputs:
                    errors.append(f"{case}: expect.step_outputs.{step}: expected a recorded "
                                  f"response, got none")
                    continue
                errors += _assert_output(case, f"expect.step_outputs.{step}", output,
                                         evidence.step_outputs[step])
    return errors

