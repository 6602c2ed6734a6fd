"""Tree-mode verification of a receipt directory (loop-host §5.3, §5.4).

``runx-actors verify [receipt-id] [-R D]`` calls :func:`verify_directory`:

* every receipt file is loaded; unreadable, unparseable or stem-mismatched files go to
  ``unreadable_files``;
* roots are receipts no *other* receipt lists as a child; each tree is walked depth
  first (depth ≤ 64, ≤ 1024 children per node) and every node is verified (§4.6);
* edges are ``lineage.children[]`` and ``evidence[]`` References of type ``receipt``;
  ``previous``, ``sync`` and ``resume_ref`` are not edges (§5.3);
* receipts in no tree (only possible in or under a cycle) are walked from the smallest
  such id and reported as ``Orphan`` under that tree.

A tree is valid when it has no findings other than ``DecisionIntegrityUnverified``;
the report is valid when every tree is and no file is unreadable (exit 0, else 3).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..._strictread import limit_for, read_regular_file
from ._c14n import parse_receipt_json
from ._errors import ReceiptDirectoryNotFoundError, ReceiptNotFoundError
from ._files import is_ignored_file_name, receipt_id_from_file_name
from ._findings import Finding, FindingCode, is_valid
from ._json import pointer
from ._model import receipt_uri
from ._signing import Keyring
from ._verify import ReceiptVerification, SignatureMode, Verifier

__all__ = [
    "MAX_TREE_DEPTH",
    "MAX_CHILDREN",
    "EXIT_OK",
    "EXIT_ERROR",
    "EXIT_INVALID",
    "EXIT_USAGE",
    "UnreadableFile",
    "TreeReport",
    "VerificationReport",
    "verify_directory",
]

#: Tree limits (§5.4): a child deeper than this many edges from its root is not walked.
MAX_TREE_DEPTH = 64
#: At most this many children per node are walked (§5.4).
MAX_CHILDREN = 1024

#: Exit codes of ``verify`` (§5.4, §9.1).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_INVALID = 3
EXIT_USAGE = 64

_CHILD_URI = re.compile(r"^runx:receipt:(sha256:[0-9a-f]{64})$")


@attrs.frozen
class UnreadableFile:
    """A file that could not be loaded as a receipt (§5.4 ``unreadable_files[]``)."""

    file_name: str
    message: str


@attrs.frozen(kw_only=True)
class TreeReport:
    """One tree (§5.4). ``receipt_ids`` (not part of the JSON) lists the receipts walked,
    root first."""

    root_receipt_id: str
    receipt_count: int
    parent_missing: bool
    findings: tuple[Finding, ...]
    receipt_ids: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        """True iff every finding is informational (§5.4)."""
        return is_valid(self.findings)


@attrs.frozen(kw_only=True)
class VerificationReport:
    """The tree-mode report (§5.4)."""

    receipt_dir: str
    signature_mode: SignatureMode
    trees: tuple[TreeReport, ...]
    unreadable_files: tuple[UnreadableFile, ...]

    @property
    def valid(self) -> bool:
        """True iff every finding is informational (§5.4)."""
        return all(tree.valid for tree in self.trees) and not self.unreadable_files

    @property
    def exit_code(self) -> int:
        """0 when valid, 3 when verification found something invalid (§5.4)."""
        return EXIT_OK if self.valid else EXIT_INVALID

    def findings(self) -> list[Finding]:
        """Every finding of every tree, in report order."""
        return [finding for tree in self.trees for finding in tree.findings]


@attrs.define
class _Node:
    receipt_id: str
    doc: Mapping[str, Any]
    file_names: list[str]
    contents: set[bytes]
    extra_docs: list[Mapping[str, Any]] = attrs.field(factory=list)

    @property
    def ambiguous(self) -> bool:
        return len(self.contents) > 1


def _edges(doc: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(path, entry) of every edge entry of *doc* (§5.3)."""
    edges: list[tuple[str, Any]] = []
    lineage = doc.get("lineage")
    children = lineage.get("children") if isinstance(lineage, Mapping) else None
    if isinstance(children, (list, tuple)):
        edges.extend((pointer("lineage", "children", i), entry)
                     for i, entry in enumerate(children))
    evidence = doc.get("evidence")
    if isinstance(evidence, (list, tuple)):
        edges.extend((pointer("evidence", i), entry) for i, entry in enumerate(evidence)
                     if isinstance(entry, Mapping) and entry.get("type") == "receipt")
    return edges


def _edge_target(entry: Any) -> tuple[str | None, str | None]:
    """(child id if the uri parses, problem message if the edge is malformed)."""
    if not isinstance(entry, Mapping):
        return None, "child entry is not an object"
    uri = entry.get("uri")
    match = _CHILD_URI.match(uri) if isinstance(uri, str) else None
    child_id = None if match is None else match.group(1)
    problems = []
    if entry.get("type") != "receipt":
        problems.append(f"type {entry.get('type')!r} is not receipt")
    if child_id is None:
        problems.append(f"uri {uri!r} is not runx:receipt:sha256:<64 hex>")
    locator = entry.get("locator")
    if not isinstance(locator, str) or not locator:
        problems.append("no locator")
    return child_id, ("; ".join(problems) or None)


def _parent_uri(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("uri"), str):
        return str(value["uri"])
    return None


def _lineage_parent(doc: Mapping[str, Any]) -> Any:
    lineage = doc.get("lineage")
    return lineage.get("parent") if isinstance(lineage, Mapping) else None


class _Tree:
    def __init__(self, root: str) -> None:
        self.root = root
        self.visited: list[str] = []
        self.paths: dict[str, str] = {}
        self.findings: list[Finding] = []
        self.parent_missing = False

    def add(self, code: FindingCode, path: str, message: str) -> None:
        self.findings.append(Finding(code, path, message))


class _DirectoryVerifier:
    def __init__(self, nodes: dict[str, _Node], verifier: Verifier, max_depth: int,
                 max_children: int) -> None:
        self.nodes = nodes
        self.verifier = verifier
        self.max_depth = max_depth
        self.max_children = max_children
        self._proofs: dict[str, ReceiptVerification] = {}

    def proof(self, receipt_id: str) -> ReceiptVerification:
        if receipt_id not in self._proofs:
            self._proofs[receipt_id] = self.verifier.verify(self.nodes[receipt_id].doc)
        return self._proofs[receipt_id]

    def child_ids(self, node: _Node) -> set[str]:
        found = set()
        for doc in (node.doc, *node.extra_docs):
            for _, entry in _edges(doc):
                child_id, _problem = _edge_target(entry)
                if child_id is not None:
                    found.add(child_id)
        return found

    def roots(self) -> list[str]:
        listed: set[str] = set()
        for receipt_id, node in self.nodes.items():
            listed.update(child for child in self.child_ids(node) if child != receipt_id)
        return sorted(set(self.nodes) - listed)

    def reachable(self, roots: Sequence[str]) -> set[str]:
        seen, stack = set(roots), list(roots)
        while stack:
            for child in self.child_ids(self.nodes[stack.pop()]):
                if child in self.nodes and child not in seen:
                    seen.add(child)
                    stack.append(child)
        return seen

    def tree(self, root: str) -> _Tree:
        tree = _Tree(root)
        node = self.nodes[root]
        parent_uri = _parent_uri(_lineage_parent(node.doc))
        if parent_uri is not None:
            match = _CHILD_URI.match(parent_uri)
            if match is None or match.group(1) not in self.nodes:
                tree.parent_missing = True
            else:
                tree.add(FindingCode.PARENT_MISMATCH, "/lineage/parent",
                         f"names parent {parent_uri}, which does not list it as a child")
        elif _lineage_parent(node.doc) is not None:
            tree.add(FindingCode.PARENT_MISMATCH, "/lineage/parent",
                     "lineage.parent is not runx:receipt:<parent id>")
        self.walk(root, "", 0, [root], tree)
        return tree

    def walk(self, receipt_id: str, path: str, depth: int, stack: list[str],
             tree: _Tree) -> None:
        tree.visited.append(receipt_id)
        tree.paths.setdefault(receipt_id, path)
        node = self.nodes[receipt_id]
        if node.ambiguous:
            tree.add(FindingCode.CHILD_AMBIGUOUS, path,
                     f"{receipt_id} is held by files with different bytes: "
                     + ", ".join(node.file_names))
            return
        tree.findings.extend(finding.under(path) for finding in self.proof(receipt_id).findings)
        edges = _edges(node.doc)
        if len(edges) > self.max_children:
            tree.add(FindingCode.BREADTH_EXCEEDED, path + "/lineage/children",
                     f"{len(edges)} children exceed the limit of {self.max_children}")
            edges = edges[: self.max_children]
        listed: dict[str, str] = {}
        for edge_path, entry in edges:
            full = path + edge_path
            child_id, problem = _edge_target(entry)
            if problem is not None:
                tree.add(FindingCode.CHILD_MALFORMED, full, problem)
            if child_id is None:
                continue
            if child_id in listed:
                tree.add(FindingCode.CHILD_DUPLICATE, full,
                         f"{child_id} is already linked at {listed[child_id]}")
                continue
            listed[child_id] = full
            if child_id not in self.nodes:
                tree.add(FindingCode.CHILD_MISSING, full, f"child {child_id} is not stored")
                continue
            if child_id in stack:
                tree.add(FindingCode.CYCLE, full, f"child {child_id} is its own ancestor")
                continue
            if child_id in tree.visited:
                tree.add(FindingCode.CHILD_DUPLICATE, full,
                         f"child {child_id} appears twice in this tree")
                continue
            if depth + 1 > self.max_depth:
                tree.add(FindingCode.DEPTH_EXCEEDED, full,
                         f"child {child_id} is deeper than {self.max_depth}")
                continue
            child = self.nodes[child_id]
            if not child.ambiguous:
                self._check_edge(entry, receipt_id, child, full, tree)
            stack.append(child_id)
            self.walk(child_id, full, depth + 1, stack, tree)
            stack.pop()

    @staticmethod
    def _check_edge(entry: Any, parent_id: str, child: _Node, full: str, tree: _Tree) -> None:
        locator = entry.get("locator") if isinstance(entry, Mapping) else None
        if isinstance(locator, str) and locator and locator != child.doc.get("digest"):
            tree.add(FindingCode.CHILD_LOCATOR_MISMATCH, full + "/locator",
                     f"locator {locator} is not the child's digest {child.doc.get('digest')}")
        parent = _lineage_parent(child.doc)
        if parent is not None and _parent_uri(parent) != receipt_uri(parent_id):
            tree.add(FindingCode.PARENT_MISMATCH, full + "/lineage/parent",
                     f"child names parent {_parent_uri(parent)!r}, not "
                     f"{receipt_uri(parent_id)}")


def _load(directory: Path) -> tuple[dict[str, _Node], list[UnreadableFile]]:
    nodes: dict[str, _Node] = {}
    unreadable: list[UnreadableFile] = []
    for name in sorted(os.listdir(directory)):
        if is_ignored_file_name(name) or not name.endswith(".json"):
            continue
        path = directory / name
        if not path.is_file():
            # a receipt-named FIFO, device or directory is not skipped: a receipt replaced
            # by one would otherwise vanish from the report (which then says valid)
            if receipt_id_from_file_name(name) is not None:
                unreadable.append(UnreadableFile(name, "is not a regular file"))
            continue
        try:
            data = read_regular_file(path, max_bytes=limit_for("receipt"))
            doc = parse_receipt_json(data, source=name)
        except OSError as exc:
            unreadable.append(UnreadableFile(name, f"cannot read: {exc.strerror or exc}"))
            continue
        except ValueError as exc:
            unreadable.append(UnreadableFile(name, f"does not parse: {exc}"))
            continue
        claimed = receipt_id_from_file_name(name)
        if not isinstance(doc, dict):
            unreadable.append(UnreadableFile(name, "is not a JSON object"))
        elif claimed is None:
            unreadable.append(UnreadableFile(name, "file name is not sha256-<hex>.json"))
        elif doc.get("id") != claimed:
            unreadable.append(UnreadableFile(
                name, f"file name names {claimed}, but the receipt id is {doc.get('id')!r}"))
        elif claimed in nodes:
            node = nodes[claimed]
            node.file_names.append(name)
            if data not in node.contents:
                node.contents.add(data)
                node.extra_docs.append(doc)
        else:
            nodes[claimed] = _Node(claimed, doc, [name], {data})
    return nodes, unreadable


def verify_directory(
    path: str | os.PathLike[str],
    *,
    keyring: Keyring,
    mode: SignatureMode = SignatureMode.PRODUCTION,
    receipt_id: str | None = None,
    max_depth: int = MAX_TREE_DEPTH,
    max_children: int = MAX_CHILDREN,
) -> VerificationReport:
    """Verify every receipt tree in the directory *path* (loop-host §5.4 tree mode).

    *keyring* and *mode* are the §4.6 policy (``verify`` builds the keyring with
    ``keyring_from_env``; ``--allow-local-development-signatures`` selects
    ``LOCAL_DEVELOPMENT``). *receipt_id* restricts the report to the tree(s) holding that
    receipt. The report's ``exit_code`` is 0 (valid) or 3 (invalid). Read-only.

    Raises:
        ReceiptDirectoryNotFoundError: *path* is missing or not a directory (exit 1).
        ReceiptNotFoundError: *receipt_id* is not a loadable receipt of *path* (exit 1).
        OSError: the directory cannot be listed (exit 1).
    """
    directory = Path(path)
    if not directory.is_dir():
        raise ReceiptDirectoryNotFoundError(
            f"receipt directory {directory} does not exist", directory=directory)
    nodes, unreadable = _load(directory)
    if receipt_id is not None and receipt_id not in nodes:
        raise ReceiptNotFoundError(f"receipt {receipt_id!r} is not in {str(directory)!r}",
                                   receipt_id=receipt_id, directory=directory)
    checker = _DirectoryVerifier(nodes, Verifier(keyring=keyring, mode=mode),
                                 max_depth, max_children)
    roots = checker.roots()
    trees = [checker.tree(root) for root in roots]
    unreached = set(nodes) - checker.reachable(roots)
    while unreached:
        start = min(unreached)
        tree = checker.tree(start)
        for orphan in [rid for rid in tree.visited if rid in unreached]:
            tree.add(FindingCode.ORPHAN, tree.paths[orphan],
                     f"{orphan} is in no tree (it is in or under a cycle)")
        unreached -= set(tree.visited)
        trees.append(tree)
    reports = [
        TreeReport(root_receipt_id=tree.root, receipt_count=len(tree.visited),
                   parent_missing=tree.parent_missing, findings=tuple(tree.findings),
                   receipt_ids=tuple(tree.visited))
        for tree in sorted(trees, key=lambda t: t.root)
        if receipt_id is None or receipt_id in tree.visited
    ]
    return VerificationReport(receipt_dir=str(directory), signature_mode=mode,
                              trees=tuple(reports), unreadable_files=tuple(unreadable))

