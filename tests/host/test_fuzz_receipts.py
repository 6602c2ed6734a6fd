"""Fuzz: a mutated receipt never verifies and never crashes (issue 12 deliverable 6).

Sealed receipts (the §4.7 vector, a step, a graph root) are mutated at the value level
(a value replaced by any JSON value, a key deleted or added, a signature re-encoded) and at
the byte level (bytes flipped, inserted, deleted). For every mutant whose JSON value
differs from the original, :meth:`Verifier.verify` returns an invalid verification and
never raises, and none of its findings is the verifier's own "could not check" safety net
(that would be a crash caught, i.e. a bug). ``metadata`` is never mutated: loop-host §4.2
keeps it outside the signature on purpose. Bounded by the hypothesis ``ci`` profile.
"""

from __future__ import annotations

import base64
import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from receipt_helpers import seal_root, seal_step, vector_receipt

from runx_actors.host.receipts import (
    Receipt,
    ReceiptInputError,
    SignatureMode,
    Signer,
    Verifier,
    parse_receipt_json,
    verify_directory,
    verify_receipt_bytes,
)
from runx_actors.host.receipts._verify import VERIFIER_ERROR_PREFIX

KEYRING = Signer.demo().keyring()
VERIFIERS = (Verifier(keyring=KEYRING),
             Verifier(keyring=KEYRING, mode=SignatureMode.LOCAL_DEVELOPMENT))


def _originals() -> list[Receipt]:
    step = seal_step()
    return [vector_receipt(), step, seal_root([step])]


ORIGINALS = _originals()

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**60, 2**60)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10)
    | st.sampled_from(["closed", "sha256:" + "0" * 64, "base64:", "Ed25519", "hosted", "sig:"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8,
)


#: Paths a verifier reads closely; drawn half of the time so that 60 examples reach them.
HOT_PATHS = [("seal", "disposition"), ("class",), ("acts",), ("decisions",), ("signals",),
             ("signature",), ("signature", "value"), ("signature", "alg"), ("issuer",),
             ("issuer", "kid"), ("issuer", "type"), ("subject", "commitments"),
             ("seal", "criteria"), ("lineage",), ("lineage", "children"), ("id",),
             ("digest",), ("authority", "attenuation"), ("evidence",), ("idempotency",)]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, sub in value.items():
            if prefix == () and key == "metadata":
                continue
            out.extend(_paths(sub, (*prefix, key)))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            out.extend(_paths(sub, (*prefix, index)))
    return out


def _has_parent(doc: Any, path: tuple[Any, ...]) -> bool:
    for part in path[:-1]:
        if not isinstance(doc, dict) or part not in doc:
            return False
        doc = doc[part]
    return isinstance(doc, dict)


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def mutated(draw: st.DrawFn) -> tuple[dict[str, Any], Any]:
    original = draw(st.sampled_from(ORIGINALS)).to_json()
    doc = copy.deepcopy(original)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        hot = [p for p in HOT_PATHS if _has_parent(doc, p)]
        path = draw(st.sampled_from(hot) if hot and draw(st.booleans())
                    else st.sampled_from(paths))
        parent = _parent(doc, path)
        if isinstance(parent, dict) and path[-1] not in parent:
            parent[path[-1]] = None  # a hot path the receipt lacks: add it
        action = draw(st.sampled_from(["replace", "delete", "add", "signature"]))
        if action == "replace":
            parent[path[-1]] = draw(JSON_VALUES)
        elif action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            top = len(path) == 1  # metadata at the top level is unsigned by design
            key = draw(st.text(max_size=8).filter(
                lambda k, top=top: not (top and k == "metadata")))
            parent[key] = draw(JSON_VALUES)
        elif action == "add" and isinstance(parent, list):
            parent.insert(draw(st.integers(0, len(parent))), draw(JSON_VALUES))
        elif isinstance(doc.get("signature"), dict) and isinstance(
                doc["signature"].get("value"), str) and doc["signature"]["value"].startswith(
                    "base64:"):
            text = doc["signature"]["value"][7:]
            try:
                raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            except ValueError:  # already replaced by a non-base64 value
                continue
            doc["signature"]["value"] = "base64:" + draw(st.sampled_from([
                base64.b64encode(raw).decode(), text + "==", text + "=",
                base64.urlsafe_b64encode(raw).decode(), " " + text]))
    return original, doc


def _assert_invalid_no_crash(doc: Any) -> None:
    for verifier in VERIFIERS:
        verification = verifier.verify(doc)
        assert not verification.valid, verification.findings
        assert all(not f.message.startswith(VERIFIER_ERROR_PREFIX)
                   for f in verification.findings), verification.findings


@given(case=mutated())
def test_a_value_mutated_receipt_never_verifies(case: tuple[dict[str, Any], Any]) -> None:
    original, doc = case
    if doc == original:
        return
    _assert_invalid_no_crash(doc)


@given(original=st.sampled_from(ORIGINALS), data=st.data())
def test_a_byte_mutated_receipt_never_verifies(original: Receipt, data: st.DataObject) -> None:
    blob = bytearray(original.canonical_bytes)
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(blob) - 1))
        op = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        if op == "flip":
            blob[index] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "insert":
            blob[index:index] = data.draw(st.binary(min_size=1, max_size=4))
        else:
            del blob[index]
    try:
        doc = parse_receipt_json(bytes(blob))
    except ValueError:
        doc = None
    if doc is not None and doc != original.to_json():
        _assert_invalid_no_crash(doc)
    # the single-receipt verb: a typed input error or a verdict, never anything else
    try:
        verdict = verify_receipt_bytes(bytes(blob), keyring=KEYRING)
    except ReceiptInputError:
        return
    if doc != original.to_json():
        assert not verdict.valid


@given(case=mutated())
def test_a_mutated_file_in_a_directory_never_verifies(case: tuple[dict[str, Any], Any]) -> None:
    original, doc = case
    if doc == original:
        return
    with tempfile.TemporaryDirectory() as name:
        receipt_id = original["id"]
        path = Path(name) / f"sha256-{receipt_id[7:]}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        report = verify_directory(name, keyring=KEYRING)
        assert not report.valid


@pytest.mark.parametrize("path", HOT_PATHS, ids="/".join)
@given(original=st.sampled_from(ORIGINALS), value=JSON_VALUES)
def test_any_json_value_at_a_checked_path_is_a_finding(path: tuple[str, ...],
                                                       original: Receipt, value: Any) -> None:
    """Each field the verifier reads, replaced by any JSON value of any type."""
    doc = original.to_json()
    parent = _parent(doc, path)
    parent[path[-1]] = value
    if doc == original.to_json():
        return
    _assert_invalid_no_crash(doc)
