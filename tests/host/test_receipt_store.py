"""The receipt store and chain/tree verification (loop-host §5, §2.5, §9.1).

Acceptance scenarios of loop-host §10 implemented here under their names:
8 ``store_write_once``, 9 ``store_index_rebuild_and_stale``, 10 ``store_crash_during_write``,
12 ``tree_verification_findings``, 13 ``verify_modes_and_exit_codes``.
"""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from receipt_helpers import DEMO_ENV, reseal, seal_root, seal_step

from runx_actors.host.receipts import (
    EXIT_ERROR,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_USAGE,
    FindingCode,
    Lineage,
    PutOutcome,
    Receipt,
    ReceiptAlreadyExistsError,
    ReceiptAmbiguousError,
    ReceiptCorruptError,
    ReceiptDirectoryNotFoundError,
    ReceiptIndexStaleError,
    ReceiptInvalidError,
    ReceiptNotFoundError,
    ReceiptStore,
    Reference,
    SignatureMode,
    Signer,
    Verifier,
    format_report,
    receipt_canonical_json,
    report_to_json,
    resolve_receipt_dir,
    verify_chain,
    verify_command,
    verify_directory,
)

KEYRING = Signer.demo().keyring()
VERIFIER = Verifier(keyring=KEYRING)


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "receipts"


@pytest.fixture
def store(directory: Path) -> ReceiptStore:
    return ReceiptStore(directory, verifier=VERIFIER, clock_ns=_Clock())


def _index(directory: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((directory / "index.json").read_bytes())
    return result


def _steps(n: int, prefix: str = "run_turn_") -> list[Receipt]:
    return [seal_step(run_id=f"{prefix}{i:016x}") for i in range(n)]


def _file(directory: Path, receipt: Receipt) -> Path:
    return directory / receipt.file_name


# --------------------------------------------------------------------------- §5.1/§5.2


def test_store_write_once(store: ReceiptStore, directory: Path) -> None:
    """§10 scenario 8."""
    first, second = _steps(2)
    assert store.put(second) is PutOutcome.WRITTEN
    assert store.put(first) is PutOutcome.WRITTEN
    path = _file(directory, first)
    assert path.name == "sha256-" + first.id[7:] + ".json"
    assert path.read_bytes() == receipt_canonical_json(first.body) == first.canonical_bytes
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    index = _index(directory)
    assert index["schema"] == "runx.receipt_store_index.v1"
    ids = [entry["receipt_id"] for entry in index["entries"]]
    assert ids == sorted({first.id, second.id})
    assert index["entries"][0] == {"receipt_id": ids[0], "file_name": "sha256-"
                                   + ids[0][7:] + ".json", "created_at": first.created_at}
    assert index["generated_at"].isdigit()

    assert store.put(first) is PutOutcome.UNCHANGED
    again = _index(directory)
    assert again["generated_at"] != index["generated_at"]
    assert {**again, "generated_at": ""} == {**index, "generated_at": ""}
    assert path.read_bytes() == first.canonical_bytes

    # same id (lineage is outside the content address), different bytes
    relinked = seal_step(run_id="run_turn_0000000000000000",
                         lineage=Lineage(previous=second.reference))
    assert relinked.id == first.id and relinked.canonical_bytes != first.canonical_bytes
    with pytest.raises(ReceiptAlreadyExistsError) as info:
        store.put(relinked)
    assert info.value.receipt_id == first.id  # type: ignore[attr-defined]
    assert path.read_bytes() == first.canonical_bytes
    assert store.get(first.id) == first
    assert store.read(second.id) == second  # the brief's alias


def test_put_refuses_an_unverifiable_receipt(store: ReceiptStore, directory: Path) -> None:
    body = seal_step().to_json()
    body["seal"]["summary"] = "edited after sealing"
    with pytest.raises(ReceiptInvalidError) as info:
        store.put(Receipt(body))
    codes = {f.code for f in info.value.findings}  # type: ignore[attr-defined]
    assert FindingCode.DIGEST_MISMATCH in codes
    assert not directory.exists() or not list(directory.glob("sha256-*"))


def test_put_under_a_local_development_policy(directory: Path) -> None:
    local = ReceiptStore(directory, verifier=Verifier(mode=SignatureMode.LOCAL_DEVELOPMENT))
    receipt = seal_step(Signer.local_development())
    assert local.put(receipt) is PutOutcome.WRITTEN
    with pytest.raises(ReceiptCorruptError):  # production refuses to read it
        ReceiptStore(directory, verifier=VERIFIER).get(receipt.id)


def test_store_index_rebuild_and_stale(store: ReceiptStore, directory: Path) -> None:
    """§10 scenario 9."""
    a, b, c = _steps(3)
    store.put(a)
    store.put(b)
    (directory / "index.json").unlink()
    assert [entry.receipt_id for entry in store.list()] == sorted([a.id, b.id])
    assert (directory / "index.json").exists()

    _file(directory, c).write_bytes(c.canonical_bytes)  # copied in by hand
    with pytest.raises(ReceiptIndexStaleError) as info:
        store.list()
    assert str(info.value) == f"receipt store index is stale: {directory}"
    assert info.value.hint == f"delete {directory / 'index.json'} to rebuild it"  # type: ignore[attr-defined]
    d = seal_step(run_id="run_turn_00000000000000ff")
    store.put(d)  # file count != entries + 1: the index is rebuilt from a scan
    assert {entry.receipt_id for entry in store.list()} == {a.id, b.id, c.id, d.id}

    renamed = directory / ("sha256-" + "e" * 64 + ".json")
    _file(directory, a).rename(renamed)
    with pytest.raises(ReceiptIndexStaleError):
        store.list()
    with pytest.raises(ReceiptCorruptError) as corrupt:
        store.get("sha256:" + "e" * 64)
    assert corrupt.value.reason == "stem_mismatch"  # type: ignore[attr-defined]
    with pytest.raises(ReceiptNotFoundError):
        store.get(a.id)


def test_missing_index_is_regenerated_on_any_access(store: ReceiptStore,
                                                    directory: Path) -> None:
    (receipt,) = _steps(1)
    store.put(receipt)
    (directory / "index.json").unlink()
    store.get(receipt.id)
    assert _index(directory)["entries"][0]["receipt_id"] == receipt.id
    (directory / "index.json").unlink()
    assert store.index().receipt_ids == (receipt.id,)


def test_reordered_or_malformed_index_is_stale(store: ReceiptStore, directory: Path) -> None:
    a, b = _steps(2)
    store.put(a)
    store.put(b)
    index = _index(directory)
    index["entries"].reverse()
    (directory / "index.json").write_text(json.dumps(index))
    with pytest.raises(ReceiptIndexStaleError):
        store.list()
    (directory / "index.json").write_text("{not json")
    with pytest.raises(ReceiptIndexStaleError):
        store.list()
    c = seal_step(run_id="run_turn_00000000000000aa")
    store.put(c)  # put repairs a malformed index by rebuilding it
    assert len(store.list()) == 3
    store.rebuild_index()
    assert store.index().receipt_ids == tuple(sorted([a.id, b.id, c.id]))


def test_store_crash_during_write(store: ReceiptStore, directory: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """§10 scenario 10: a leftover temp file is neither indexed nor verified; a put
    killed before ``rename`` leaves no partial ``sha256-*.json``."""
    a, b = _steps(2)
    store.put(a)
    leftover = directory / f".{b.file_name}.tmp-999-abcdef"
    leftover.write_bytes(b.canonical_bytes[:100])
    store.rebuild_index()
    assert [entry.receipt_id for entry in store.list()] == [a.id]
    report = verify_directory(directory, keyring=KEYRING)
    assert report.valid and [t.root_receipt_id for t in report.trees] == [a.id]

    def killed(src: Any, dst: Any) -> None:
        raise KeyboardInterrupt  # the process dies between fsync and rename

    monkeypatch.setattr(os, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        store.put(b)
    monkeypatch.undo()
    assert not _file(directory, b).exists()
    assert [entry.receipt_id for entry in store.list()] == [a.id]
    assert store.put(b) is PutOutcome.WRITTEN  # the retry writes it


def test_get_verifies_content(store: ReceiptStore, directory: Path) -> None:
    (receipt,) = _steps(1)
    store.put(receipt)
    path = _file(directory, receipt)
    path.write_bytes(path.read_bytes().replace(b"after 12 facts", b"after 99 facts"))
    with pytest.raises(ReceiptCorruptError) as info:
        store.get(receipt.id)
    assert info.value.reason == "verification"  # type: ignore[attr-defined]
    assert FindingCode.DIGEST_MISMATCH in {
        f.code for f in info.value.findings}  # type: ignore[attr-defined]
    path.write_bytes(b"{oops")
    with pytest.raises(ReceiptCorruptError) as info:
        store.get(receipt.id)
    assert info.value.reason == "unparseable"  # type: ignore[attr-defined]
    with pytest.raises(ReceiptNotFoundError):
        store.get("sha256:" + "0" * 64)
    with pytest.raises(ReceiptNotFoundError):
        store.get("not-an-id")


def test_legacy_files_are_read_not_written(store: ReceiptStore, directory: Path) -> None:
    a, b = _steps(2)
    directory.mkdir()
    legacy = directory / (a.id + ".json")
    legacy.write_bytes(a.canonical_bytes)
    assert store.get(a.id) == a
    assert store.put(a) is PutOutcome.UNCHANGED
    assert not _file(directory, a).exists()
    store.put(b)
    assert {e.file_name for e in store.list()} == {legacy.name, b.file_name}
    _file(directory, a).write_bytes(seal_step(
        run_id="run_turn_0000000000000000",
        lineage=Lineage(previous=b.reference)).canonical_bytes)
    with pytest.raises(ReceiptAmbiguousError):
        store.get(a.id)


def test_find_by_intent_key_and_uri(store: ReceiptStore) -> None:
    a = seal_step(run_id="run_turn_000000000000000a", intent="k1")
    b = seal_step(run_id="run_turn_000000000000000b", intent="k1")
    store.put(a)
    store.put(b)
    key = a.idempotency.intent_key
    assert store.find(key, a.subject.ref.uri) == (a,)
    assert store.find(key, "hrn_nothing") == ()
    assert ReceiptStore(store.directory / "absent", verifier=VERIFIER).find(key, "x") == ()


def test_reads_of_a_missing_directory_create_nothing(directory: Path) -> None:
    store = ReceiptStore(directory, verifier=VERIFIER)
    assert store.list() == ()
    with pytest.raises(ReceiptNotFoundError):
        store.get("sha256:" + "0" * 64)
    assert not directory.exists()


def test_resolve_receipt_dir(tmp_path: Path) -> None:
    cwd = tmp_path
    assert resolve_receipt_dir("D", {"RUNX_RECEIPT_DIR": "/x"}, cwd) == cwd / "D"
    assert resolve_receipt_dir(None, {"RUNX_RECEIPT_DIR": "/x", "RUNX_PROJECT_DIR": "/p"},
                               cwd) == Path("/x")
    assert resolve_receipt_dir(None, {"RUNX_PROJECT_DIR": "/p", "RUNX_CWD": "/w"},
                               cwd) == Path("/p/receipts")
    assert resolve_receipt_dir(None, {"RUNX_CWD": "/w", "INIT_CWD": "/i"},
                               cwd) == Path("/w/.runx/receipts")
    assert resolve_receipt_dir(None, {"INIT_CWD": "/i"}, cwd) == Path("/i/.runx/receipts")
    assert resolve_receipt_dir(None, {"RUNX_RECEIPT_DIR": ""}, cwd) == cwd / ".runx/receipts"


# --------------------------------------------------------------------------- §5.3/§5.4 tree


@pytest.fixture
def graph(store: ReceiptStore) -> tuple[Receipt, Receipt]:
    child = seal_step(run_id="run_context_gate_0000000000000001", node="review")
    root = seal_root([child], run_id="run_context_gate_0000000000000001")
    store.put(child)  # children before their root (§4.4 step 6)
    store.put(root)
    return child, root


def _codes(report: Any) -> set[FindingCode]:
    return {finding.code for finding in report.findings()}


def test_tree_verification_findings(store: ReceiptStore, directory: Path,
                                    graph: tuple[Receipt, Receipt]) -> None:
    """§10 scenario 12."""
    child, root = graph
    report = verify_directory(directory, keyring=KEYRING)
    assert report.valid and report.exit_code == EXIT_OK
    assert [(t.root_receipt_id, t.receipt_count, t.valid) for t in report.trees] == [
        (root.id, 2, True)]
    assert root.body["lineage"]["children"][0] == {
        "type": "receipt", "uri": f"runx:receipt:{child.id}", "locator": child.digest}

    unrelated = seal_step(run_id="run_turn_0000000000000077")
    store.put(unrelated)
    report = verify_directory(directory, keyring=KEYRING)
    assert sorted(t.root_receipt_id for t in report.trees) == sorted([root.id, unrelated.id])

    _file(directory, child).unlink()
    report = verify_directory(directory, keyring=KEYRING)
    assert not report.valid and report.exit_code == EXIT_INVALID
    (tree,) = [t for t in report.trees if t.root_receipt_id == root.id]
    assert [(f.code, f.path) for f in tree.findings] == [
        (FindingCode.CHILD_MISSING, "/lineage/children/0")]

    store.put(child)
    wrong = seal_root([child], run_id="run_context_gate_0000000000000002",
                      locators=["sha256:" + "9" * 64])
    store.put(wrong)  # the root is re-sealed with a wrong locator: its proof is valid
    report = verify_directory(directory, keyring=KEYRING)
    (tree,) = [t for t in report.trees if t.root_receipt_id == wrong.id]
    assert [(f.code, f.path) for f in tree.findings] == [
        (FindingCode.CHILD_LOCATOR_MISMATCH, "/lineage/children/0/locator")]


def _cycle_pair() -> tuple[Receipt, Receipt]:
    probe_b = seal_step(run_id="run_cycle_000000000000000b")
    a = seal_step(run_id="run_cycle_000000000000000a",
                  lineage=Lineage(children=(probe_b.reference,)))
    b = seal_step(run_id="run_cycle_000000000000000b",
                  lineage=Lineage(children=(a.reference,)))
    assert b.id == probe_b.id
    return a, b


def test_tree_cycle_and_orphans(store: ReceiptStore, directory: Path) -> None:
    a, b = _cycle_pair()
    store.put(a)
    store.put(b)
    report = verify_directory(directory, keyring=KEYRING)
    (tree,) = report.trees
    assert tree.root_receipt_id == min(a.id, b.id)
    codes = [f.code for f in tree.findings]
    assert FindingCode.CYCLE in codes
    assert codes.count(FindingCode.ORPHAN) == 2
    assert not report.valid


def test_tree_child_malformed_duplicate_and_parent_checks(store: ReceiptStore,
                                                          directory: Path) -> None:
    child = seal_step(run_id="run_x_0000000000000001", node="review")
    bad_parent_child = seal_step(run_id="run_x_0000000000000002", node="review",
                                 lineage=Lineage(parent=Reference(
                                     type="receipt", uri="runx:receipt:sha256:" + "f" * 64)))
    root = seal_root([child, bad_parent_child], run_id="run_x_0000000000000003",
                     extra_children=[child.reference, Reference(
                         type="receipt", uri="runx:receipt:nope", locator="sha256:1")])
    for receipt in (child, bad_parent_child, root):
        store.put(receipt)
    (tree,) = verify_directory(directory, keyring=KEYRING).trees
    assert [(f.code, f.path) for f in tree.findings] == [
        (FindingCode.PARENT_MISMATCH, "/lineage/children/1/lineage/parent"),
        (FindingCode.CHILD_DUPLICATE, "/lineage/children/2"),
        (FindingCode.CHILD_MALFORMED, "/lineage/children/3"),
    ]


def test_tree_parent_missing_is_informational(store: ReceiptStore, directory: Path) -> None:
    orphaned_child = seal_step(lineage=Lineage(parent=Reference(
        type="receipt", uri="runx:receipt:sha256:" + "c" * 64)))
    store.put(orphaned_child)
    (tree,) = verify_directory(directory, keyring=KEYRING).trees
    assert tree.parent_missing and tree.valid and tree.findings == ()


def test_tree_child_ambiguous(store: ReceiptStore, directory: Path,
                              graph: tuple[Receipt, Receipt]) -> None:
    child, root = graph
    other = seal_step(run_id="run_context_gate_0000000000000001", node="review",
                      lineage=Lineage(previous=root.reference))
    assert other.id == child.id
    (directory / (child.id + ".json")).write_bytes(other.canonical_bytes)  # legacy twin
    (tree,) = verify_directory(directory, keyring=KEYRING).trees
    assert [(f.code, f.path) for f in tree.findings] == [
        (FindingCode.CHILD_AMBIGUOUS, "/lineage/children/0")]
    with pytest.raises(ReceiptAmbiguousError):
        store.get(child.id)


def test_tree_depth_and_breadth_limits(store: ReceiptStore, directory: Path) -> None:
    leaf = seal_step(run_id="run_leaf_0000000000000001")
    mid = seal_root([leaf], run_id="run_mid_0000000000000001")
    top = seal_root([mid], run_id="run_top_0000000000000001")
    for receipt in (leaf, mid, top):
        store.put(receipt)
    (tree,) = verify_directory(directory, keyring=KEYRING, max_depth=1).trees
    assert [(f.code, f.path) for f in tree.findings] == [
        (FindingCode.DEPTH_EXCEEDED, "/lineage/children/0/lineage/children/0")]
    wide = seal_root(_steps(2, "run_wide_"), run_id="run_wide_root_00000001")
    for receipt in (*_steps(2, "run_wide_"), wide):
        store.put(receipt)
    report = verify_directory(directory, keyring=KEYRING, max_children=1,
                              receipt_id=wide.id)
    (tree,) = report.trees
    assert (FindingCode.BREADTH_EXCEEDED, "/lineage/children") in [
        (f.code, f.path) for f in tree.findings]


def test_tree_proof_findings_have_tree_paths(store: ReceiptStore, directory: Path,
                                             graph: tuple[Receipt, Receipt]) -> None:
    child, _root = graph
    path = _file(directory, child)
    path.write_bytes(path.read_bytes().replace(b"after 12 facts", b"after 21 facts"))
    (tree,) = verify_directory(directory, keyring=KEYRING).trees
    assert (FindingCode.DIGEST_MISMATCH, "/lineage/children/0/digest") in [
        (f.code, f.path) for f in tree.findings]
    assert (FindingCode.CHILD_LOCATOR_MISMATCH, "/lineage/children/0/locator") not in [
        (f.code, f.path) for f in tree.findings]  # the claimed digest did not change


def test_tree_evidence_edges(store: ReceiptStore, directory: Path) -> None:
    child = seal_step(run_id="run_ev_0000000000000001")
    body = seal_step(run_id="run_ev_0000000000000002").to_json()
    body["evidence"] = [{"type": "receipt", "uri": f"runx:receipt:{child.id}",
                         "locator": child.digest}]
    parent = Receipt(reseal(body))
    store.put(child)
    store.put(parent)
    (tree,) = verify_directory(directory, keyring=KEYRING).trees
    assert tree.root_receipt_id == parent.id and tree.receipt_count == 2 and tree.valid
    body["lineage"]["children"] = [dict(body["evidence"][0])]  # the same pair, twice
    both = Receipt(reseal(body))
    _file(directory, parent).unlink()
    store.rebuild_index()
    store.put(both)
    (tree,) = verify_directory(directory, keyring=KEYRING).trees
    assert [(f.code, f.path) for f in tree.findings] == [
        (FindingCode.CHILD_DUPLICATE, "/evidence/0")]


def test_tree_unreadable_files_and_restriction(store: ReceiptStore, directory: Path,
                                               graph: tuple[Receipt, Receipt]) -> None:
    child, root = graph
    (directory / "notes.json").write_text("{}")
    (directory / ("sha256-" + "d" * 64 + ".json")).write_text("[")
    (directory / "README").write_text("not a receipt")
    report = verify_directory(directory, keyring=KEYRING)
    assert [u.file_name for u in report.unreadable_files] == [
        "notes.json", "sha256-" + "d" * 64 + ".json"]
    assert all(t.valid for t in report.trees) and not report.valid
    only = verify_directory(directory, keyring=KEYRING, receipt_id=child.id)
    assert [t.root_receipt_id for t in only.trees] == [root.id]
    with pytest.raises(ReceiptNotFoundError):
        verify_directory(directory, keyring=KEYRING, receipt_id="sha256:" + "0" * 64)
    with pytest.raises(ReceiptDirectoryNotFoundError):
        verify_directory(directory / "missing", keyring=KEYRING)


def test_report_json_shape(directory: Path, graph: tuple[Receipt, Receipt]) -> None:
    _child, root = graph
    report = verify_directory(directory, keyring=KEYRING)
    assert report_to_json(report) == {
        "receipt_dir": str(directory), "signature_mode": "production",
        "trees": [{"root_receipt_id": root.id, "receipt_count": 2, "parent_missing": False,
                   "valid": True, "findings": []}],
        "unreadable_files": [], "valid": True,
    }
    assert list(report_to_json(report)) == [
        "receipt_dir", "signature_mode", "trees", "unreadable_files", "valid"]
    text = format_report(report)
    assert f"tree {root.id} receipts=2 valid" in text and text.endswith("valid: 1 tree\n")


# --------------------------------------------------------------------------- chain (§2.5)


@pytest.fixture
def chain(store: ReceiptStore) -> list[Receipt]:
    turns: list[Receipt] = []
    for n in range(3):
        lineage = Lineage(previous=turns[-1].reference) if turns else Lineage()
        receipt = seal_step(run_id=f"run_turn_{n:016x}", lineage=lineage)
        store.put(receipt)
        turns.append(receipt)
    return turns


def test_chain_valid(store: ReceiptStore, chain: list[Receipt], directory: Path) -> None:
    report = verify_chain(store, [r.id for r in chain])
    assert report.valid and report.findings == ()
    # previous is not a tree edge: each turn is its own tree (§5.3)
    assert len(verify_directory(directory, keyring=KEYRING).trees) == 3


def test_chain_broken_previous(store: ReceiptStore, chain: list[Receipt]) -> None:
    broken = seal_step(run_id=f"run_turn_{2:016x}", lineage=Lineage(previous=Reference(
        type="receipt", uri=chain[0].uri, locator=chain[0].digest)))
    assert broken.id == chain[2].id
    store_dir = store.directory
    _file(store_dir, chain[2]).unlink()
    store.put(broken)
    report = verify_chain(store, [r.id for r in chain])
    assert [(f.code, f.path) for f in report.findings] == [
        (FindingCode.PREVIOUS_MISMATCH, "/2/lineage/previous")]
    no_link = seal_step(run_id=f"run_turn_{2:016x}")
    _file(store_dir, chain[2]).unlink()
    store.put(no_link)
    report = verify_chain(store, [r.id for r in chain])
    assert [f.code for f in report.findings] == [FindingCode.PREVIOUS_MISSING]


def test_chain_missing_receipt(store: ReceiptStore, chain: list[Receipt]) -> None:
    _file(store.directory, chain[1]).unlink()
    report = verify_chain(store, [r.id for r in chain])
    assert [(f.code, f.path) for f in report.findings] == [
        (FindingCode.RECEIPT_MISSING, "/1")]
    assert not report.valid


def test_chain_reordered(store: ReceiptStore, chain: list[Receipt]) -> None:
    report = verify_chain(store, [chain[1].id, chain[0].id, chain[2].id])
    assert [(f.code, f.path) for f in report.findings] == [
        (FindingCode.PREVIOUS_UNEXPECTED, "/0/lineage/previous"),
        (FindingCode.PREVIOUS_MISSING, "/1/lineage/previous"),
        (FindingCode.PREVIOUS_MISMATCH, "/2/lineage/previous"),
    ]


def test_chain_tampered_receipt(store: ReceiptStore, chain: list[Receipt]) -> None:
    path = _file(store.directory, chain[0])
    path.write_bytes(path.read_bytes().replace(b"after 12 facts", b"after 11 facts"))
    report = verify_chain(store, [r.id for r in chain])
    assert {f.code for f in report.findings} >= {FindingCode.DIGEST_MISMATCH}
    assert all(f.path.startswith("/0") for f in report.findings)


# --------------------------------------------------------------------------- verify command


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    return tmp_path


def test_verify_modes_and_exit_codes(store: ReceiptStore, directory: Path, cwd: Path,
                                     graph: tuple[Receipt, Receipt]) -> None:
    """§10 scenario 13."""
    child, root = graph
    ok = verify_command(receipt_dir=str(directory), as_json=True, env=DEMO_ENV, cwd=cwd)
    assert ok.exit_code == EXIT_OK and ok.stderr == ""
    assert json.loads(ok.stdout)["valid"] is True

    env = dict(DEMO_ENV, RUNX_RECEIPT_DIR=str(directory))
    assert verify_command(env=env, cwd=cwd).exit_code == EXIT_OK  # §5.1 resolution

    bad = seal_step(run_id="run_bad_0000000000000001").to_json()
    bad["seal"]["reason_code"] = "step_failed"
    (directory / ("sha256-" + bad["id"][7:] + ".json")).write_bytes(
        receipt_canonical_json(bad))
    invalid = verify_command(receipt_dir=str(directory), as_json=True, env=DEMO_ENV, cwd=cwd)
    assert invalid.exit_code == EXIT_INVALID
    assert json.loads(invalid.stdout)["valid"] is False

    missing = verify_command(receipt_dir=str(directory / "nope"), env=DEMO_ENV, cwd=cwd)
    assert missing.exit_code == EXIT_ERROR and missing.stdout == ""
    assert missing.stderr.startswith("runx-actors: verify: ")

    good_file = _file(directory, child)
    single = verify_command(receipt=str(good_file), as_json=True, env=DEMO_ENV, cwd=cwd)
    assert single.exit_code == EXIT_OK
    verdict = json.loads(single.stdout)
    assert verdict["schema"] == "runx.verify_verdict.v1"
    assert verdict["lineage"] == {"status": "unverified", "children": 0, "parent": None}
    assert verdict["receipt_id"] == child.id
    root_verdict = json.loads(verify_command(
        receipt=str(_file(directory, root)), as_json=True, env=DEMO_ENV, cwd=cwd).stdout)
    assert root_verdict["lineage"]["children"] == 1


def test_tampered_receipt_byte_exits_3(store: ReceiptStore, directory: Path, cwd: Path,
                                       graph: tuple[Receipt, Receipt]) -> None:
    """A flipped byte that keeps the JSON valid makes ``verify`` exit 3 (§5.4) with the
    documented findings (DigestMismatch and SignatureInvalid, §4.6)."""
    child, _root = graph
    path = _file(directory, child)
    data = path.read_bytes()
    at = data.index(b'"reason_code":"step_closed"') + len(b'"reason_code":"step_c')
    path.write_bytes(data[:at] + b"L" + data[at + 1:])  # closed -> cLosed
    result = verify_command(receipt_dir=str(directory), as_json=True, env=DEMO_ENV, cwd=cwd)
    assert result.exit_code == EXIT_INVALID == 3
    findings = json.loads(result.stdout)["trees"][0]["findings"]
    assert {f["code"] for f in findings} == {
        "DigestMismatch", "ContentAddressMismatch", "SignatureInvalid"}
    assert {f["path"] for f in findings} == {"/lineage/children/0/digest",
                                             "/lineage/children/0/id",
                                             "/lineage/children/0/signature/value"}
    single = verify_command(receipt=str(path), env=DEMO_ENV, cwd=cwd)
    assert single.exit_code == 3 and "invalid" in single.stdout.splitlines()[0]


def test_verify_command_errors_and_usage(directory: Path, cwd: Path,
                                         graph: tuple[Receipt, Receipt]) -> None:
    child, _root = graph
    both = verify_command(receipt_id=child.id, receipt="x.json", env=DEMO_ENV, cwd=cwd)
    assert both.exit_code == EXIT_USAGE
    assert verify_command(receipt="x.json", receipt_dir="D", env=DEMO_ENV,
                          cwd=cwd).exit_code == EXIT_USAGE
    unknown = verify_command("sha256:" + "0" * 64, receipt_dir=str(directory), env=DEMO_ENV,
                             cwd=cwd)
    assert unknown.exit_code == EXIT_ERROR
    assert verify_command(receipt="absent.json", env=DEMO_ENV, cwd=cwd).exit_code == EXIT_ERROR
    (cwd / "junk.json").write_text("nope")
    assert verify_command(receipt="junk.json", env=DEMO_ENV, cwd=cwd).exit_code == EXIT_ERROR
    (cwd / "big.json").write_bytes(b" " * (10 * 1024 * 1024 + 1))
    assert verify_command(receipt="big.json", env=DEMO_ENV, cwd=cwd).exit_code == EXIT_ERROR
    partial = {"RUNX_RECEIPT_VERIFY_KID": "k"}
    assert verify_command(receipt_dir=str(directory), env=partial,
                          cwd=cwd).exit_code == EXIT_ERROR
    restricted = verify_command(child.id, receipt_dir=str(directory), env=DEMO_ENV, cwd=cwd)
    assert restricted.exit_code == EXIT_OK


def test_verify_command_reads_stdin_and_keyring_from_env(directory: Path, cwd: Path,
                                                         graph: tuple[Receipt, Receipt]
                                                         ) -> None:
    child, _root = graph
    stdin = io.BytesIO(child.canonical_bytes)
    result = verify_command(receipt="-", env=DEMO_ENV, cwd=cwd, stdin=stdin)
    assert result.exit_code == EXIT_OK
    assert result.stdout.splitlines()[0] == f"receipt {child.id} valid"
    untrusted = verify_command(receipt="-", env={}, cwd=cwd,
                               stdin=io.BytesIO(child.canonical_bytes))
    assert untrusted.exit_code == EXIT_INVALID  # empty keyring: KeyUnknown
    assert "KeyUnknown" in untrusted.stdout


def test_verify_command_local_development_flag(tmp_path: Path, cwd: Path) -> None:
    directory = tmp_path / "local"
    local = ReceiptStore(directory, verifier=Verifier(mode=SignatureMode.LOCAL_DEVELOPMENT))
    local.put(seal_step(Signer.local_development()))
    strict = verify_command(receipt_dir=str(directory), as_json=True, env={}, cwd=cwd)
    assert strict.exit_code == EXIT_INVALID
    codes = {f["code"] for f in json.loads(strict.stdout)["trees"][0]["findings"]}
    assert {"IssuerNotTrusted", "SignatureMalformed"} <= codes
    relaxed = verify_command(receipt_dir=str(directory), as_json=True, env={}, cwd=cwd,
                             allow_local_development_signatures=True)
    assert relaxed.exit_code == EXIT_OK
    assert json.loads(relaxed.stdout)["signature_mode"] == "local-development"


def test_store_files_are_not_world_readable(store: ReceiptStore, directory: Path) -> None:
    (receipt,) = _steps(1)
    store.put(receipt)
    assert not os.stat(_file(directory, receipt)).st_mode & 0o077


def test_concurrent_puts_keep_the_index_consistent(store: ReceiptStore) -> None:
    """``put`` holds ``.receipt-store.lock`` (§5.1): racing writers lose no index entry."""
    import threading

    receipts = _steps(12, "run_race_")
    errors: list[BaseException] = []

    def put_all(chunk: list[Receipt]) -> None:
        try:
            for receipt in chunk:
                store.put(receipt)
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=put_all, args=(receipts[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert [entry.receipt_id for entry in store.list()] == sorted(r.id for r in receipts)


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_receipt_replaced_by_a_non_file_is_a_finding(store: ReceiptStore, directory: Path,
                                                       kind: str) -> None:
    """A receipt file swapped for a FIFO or a directory of the same name does not vanish:
    ``verify_directory`` reports the directory invalid (it used to skip the entry and
    report ``valid`` with zero trees), and it does not block on the FIFO."""
    a, b = _steps(2)
    store.put(a)
    store.put(b)
    path = _file(directory, b)
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    report = verify_directory(directory, keyring=KEYRING)
    assert not report.valid
