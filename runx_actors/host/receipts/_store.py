"""The write-once receipt store (loop-host §5.1, §5.2).

Layout: one file per receipt, ``sha256-<hex>.json``, holding exactly ``C(receipt)``;
``index.json`` (a rebuildable cache); ``.receipt-store.lock`` (``fcntl.flock``, held by
``put`` and by index rebuilds). Every read and write verifies the receipt (§4.6).

The store is synchronous and blocking (fsync, rename, scans). Under trio, call it through
``trio.to_thread.run_sync`` (loop-host §1).
"""

from __future__ import annotations

import builtins
import contextlib
import enum
import fcntl
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from ..._strictread import MalformedInputError, limit_for, read_regular_file
from ._c14n import parse_receipt_json, receipt_canonical_json
from ._errors import (
    ReceiptAlreadyExistsError,
    ReceiptAmbiguousError,
    ReceiptCorruptError,
    ReceiptIndexStaleError,
    ReceiptInvalidError,
    ReceiptNotFoundError,
)
from ._files import (
    INDEX_FILE,
    LOCK_FILE,
    is_ignored_file_name,
    legacy_file_name,
    receipt_id_from_file_name,
)
from ._model import Receipt, is_receipt_id, receipt_file_name
from ._verify import Verifier

__all__ = ["INDEX_SCHEMA", "PutOutcome", "IndexEntry", "ReceiptIndex", "ReceiptStore"]

#: ``index.json``'s ``schema`` (§5.1).
INDEX_SCHEMA = "runx.receipt_store_index.v1"


class PutOutcome(enum.Enum):
    """What ``put`` did (§5.2)."""

    WRITTEN = "written"
    UNCHANGED = "unchanged"  # same id, identical bytes: a no-op (index refreshed)


@attrs.frozen
class IndexEntry:
    """One ``index.json`` entry (§5.1)."""

    receipt_id: str
    file_name: str
    created_at: str


def _entries(entries: Iterable[IndexEntry]) -> tuple[IndexEntry, ...]:
    return tuple(entries)


@attrs.frozen
class ReceiptIndex:
    """The parsed ``index.json`` (§5.1); ``generated_at`` is unix nanoseconds as a
    decimal string, ``entries`` are sorted by ``receipt_id`` and unique."""

    generated_at: str
    entries: tuple[IndexEntry, ...] = attrs.field(converter=_entries)

    @property
    def receipt_ids(self) -> tuple[str, ...]:
        """The entries' receipt ids, in index order."""
        return tuple(entry.receipt_id for entry in self.entries)


class _IndexInvalid(Exception):
    """Internal: index.json exists but is not a well-formed index."""


def _parse_index(data: bytes) -> ReceiptIndex:
    try:
        doc = parse_receipt_json(data)
    except ValueError as exc:
        raise _IndexInvalid(str(exc)) from None
    if not isinstance(doc, dict) or doc.get("schema") != INDEX_SCHEMA:
        raise _IndexInvalid("not a runx.receipt_store_index.v1 object")
    generated_at, raw_entries = doc.get("generated_at"), doc.get("entries")
    if not isinstance(generated_at, str) or not isinstance(raw_entries, list):
        raise _IndexInvalid("generated_at or entries has the wrong type")
    entries: list[IndexEntry] = []
    for raw in raw_entries:
        if not isinstance(raw, dict) or set(raw) != {"receipt_id", "file_name", "created_at"}:
            raise _IndexInvalid("an entry is not {receipt_id, file_name, created_at}")
        if not all(isinstance(raw[key], str) for key in raw):
            raise _IndexInvalid("an entry holds a non-string value")
        if receipt_id_from_file_name(raw["file_name"]) != raw["receipt_id"]:
            raise _IndexInvalid(f"entry {raw['receipt_id']!r} names another file")
        entries.append(IndexEntry(raw["receipt_id"], raw["file_name"], raw["created_at"]))
    ids = [entry.receipt_id for entry in entries]
    if ids != sorted(set(ids)):
        raise _IndexInvalid("entries are not sorted by receipt_id and unique")
    return ReceiptIndex(generated_at, entries)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _temp_name(file_name: str) -> str:
    return f".{file_name}.tmp-{os.getpid()}-{secrets.token_hex(6)}"


class ReceiptStore:
    """A write-once directory of receipts (loop-host §5).

    ``put``/``write`` verifies and stores a sealed receipt; ``get``/``read`` reads one
    back and verifies it; ``list`` returns the index entries after checking the index
    against the directory; ``index`` returns the index as stored; ``find`` scans for
    verifying receipts by intent key and subject uri.

    *verifier* is the §4.6 policy applied on every read and write. *clock_ns* gives
    ``generated_at`` (default :func:`time.time_ns`).
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, verifier: Verifier,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._directory = Path(directory)
        self._verifier = verifier
        self._clock_ns = clock_ns

    def __repr__(self) -> str:
        return f"ReceiptStore({str(self._directory)!r})"

    @property
    def directory(self) -> Path:
        """The receipt directory (§5.1)."""
        return self._directory

    @property
    def verifier(self) -> Verifier:
        """The §4.6 policy applied on every read and write."""
        return self._verifier

    # ------------------------------------------------------------------ write

    def put(self, receipt: Receipt) -> PutOutcome:
        """Store *receipt* write-once (§5.2).

        Verifies it (§4.6), then, holding the lock: writes
        ``.sha256-<hex>.json.tmp-<pid>-<rand>`` (``O_CREAT|O_EXCL``, mode 0600), fsyncs
        it, renames it into place, fsyncs the directory, and updates ``index.json``
        (temp file + rename, no fsync): the entry is appended when the directory holds
        exactly one more receipt than the index, else the index is rebuilt from a scan.
        The directory is created if missing. Only after this returns is the receipt
        durable (§2.6).

        The same id with identical bytes is a no-op (``UNCHANGED``): the receipt is
        re-verified and the index refreshed.

        Raises:
            ReceiptInvalidError: the receipt does not verify; nothing was written.
            ReceiptAlreadyExistsError: the id is stored with different bytes; nothing was
                written.
            OSError: the file system failed; the receipt is not visible (a leftover temp
                file is ignored by every reader).
        """
        verification = self._verifier.verify(receipt)
        if not verification.valid:
            raise ReceiptInvalidError(
                f"receipt {verification.receipt_id} does not verify",
                receipt_id=verification.receipt_id, findings=verification.findings,
            )
        receipt_id, data = receipt.id, receipt.canonical_bytes
        self._directory.mkdir(parents=True, exist_ok=True)
        with self._locked():
            existing = self._existing_files(receipt_id)
            for name in existing:
                if self._read_bytes(name) != data:
                    raise ReceiptAlreadyExistsError(
                        f"receipt {receipt_id} is already stored with different bytes",
                        receipt_id=receipt_id, file_name=name,
                    )
            if existing:
                self._refresh_index_locked()
                return PutOutcome.UNCHANGED
            self._write_receipt_file(receipt.file_name, data)
            self._add_to_index_locked(
                IndexEntry(receipt_id, receipt.file_name, receipt.created_at)
            )
            return PutOutcome.WRITTEN

    write = put

    def rebuild_index(self) -> ReceiptIndex:
        """Rebuild ``index.json`` from a scan of the directory (under the lock).

        Raises:
            OSError: the directory is missing or unwritable.
        """
        with self._locked():
            return self._rebuild_index_locked()

    # ------------------------------------------------------------------ read

    def get(self, receipt_id: str) -> Receipt:
        """Read and verify one receipt (§5.2): the file's stem must match its ``id``, and
        the content address and the proof must verify (§4.6).

        Raises:
            ReceiptNotFoundError: no file holds *receipt_id* (or it is not a receipt id).
            ReceiptAmbiguousError: the current and legacy files differ.
            ReceiptCorruptError: unreadable, not a JSON object, stem mismatch, or a
                verification failure (``findings``).
        """
        if not is_receipt_id(receipt_id):
            raise ReceiptNotFoundError(f"{receipt_id!r} is not a receipt id",
                                       receipt_id=receipt_id, directory=self._directory)
        self._ensure_index()
        names = self._existing_files(receipt_id)
        if not names:
            raise ReceiptNotFoundError(f"receipt {receipt_id!r} is not in {str(self._directory)!r}",
                                       receipt_id=receipt_id, directory=self._directory)
        contents = {name: self._read_for_get(receipt_id, name) for name in names}
        if len(set(contents.values())) > 1:
            raise ReceiptAmbiguousError(
                f"receipt {receipt_id} is held by files with different bytes",
                receipt_id=receipt_id, file_names=tuple(names),
            )
        name = names[0]
        return self._verified(receipt_id, name, contents[name])

    read = get

    def list(self) -> tuple[IndexEntry, ...]:
        """The index entries, sorted by receipt id (§5.1), after comparing ``index.json``
        with the directory. A missing index is regenerated first; a missing directory
        lists nothing.

        Raises:
            ReceiptIndexStaleError: the index and the directory differ (or the index is
                malformed); ``hint`` says to delete ``index.json``.
        """
        if not self._directory.is_dir():
            return ()
        self._ensure_index()
        index = self._load_index_or_stale()
        if not self._index_matches(index, self._scan()):
            raise self._stale()
        return index.entries

    def index(self) -> ReceiptIndex:
        """``index.json`` as stored (regenerated first if missing), without comparing it
        with the directory.

        Raises:
            ReceiptIndexStaleError: the index file is malformed.
        """
        if not self._directory.is_dir():
            return ReceiptIndex(str(self._clock_ns()), ())
        self._ensure_index()
        return self._load_index_or_stale()

    def find(self, intent_key: str, uri: str) -> tuple[Receipt, ...]:
        """Receipts that verify and whose ``idempotency.intent_key`` and
        ``subject.ref.uri`` match (§5.2; used by §2.3 step 8.2), sorted by
        ``(created_at, id)``. Receipts that fail to read or verify are skipped."""
        if not self._directory.is_dir():
            return ()
        self._ensure_index()
        found: builtins.list[Receipt] = []
        for receipt_id in sorted(self._scan()):
            try:
                receipt = self.get(receipt_id)
            except (ReceiptNotFoundError, ReceiptAmbiguousError, ReceiptCorruptError):
                continue
            idempotency = receipt.body.get("idempotency")
            subject = receipt.body.get("subject")
            ref = subject.get("ref") if isinstance(subject, Mapping) else None
            if (isinstance(idempotency, Mapping) and idempotency.get("intent_key") == intent_key
                    and isinstance(ref, Mapping) and ref.get("uri") == uri):
                found.append(receipt)
        return tuple(sorted(found, key=lambda r: (r.created_at, r.id)))

    # ------------------------------------------------------------------ internals

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self._directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _scan(self) -> dict[str, builtins.list[str]]:
        """receipt id → its file names in the directory (current name first)."""
        found: dict[str, builtins.list[str]] = {}
        with os.scandir(self._directory) as entries:
            for entry in entries:
                if is_ignored_file_name(entry.name) or not entry.is_file():
                    continue
                receipt_id = receipt_id_from_file_name(entry.name)
                if receipt_id is not None:
                    found.setdefault(receipt_id, []).append(entry.name)
        for names in found.values():
            names.sort(key=lambda name: (not name.startswith("sha256-"), name))
        return found

    def _existing_files(self, receipt_id: str) -> builtins.list[str]:
        names = [receipt_file_name(receipt_id), legacy_file_name(receipt_id)]
        return [name for name in names if (self._directory / name).is_file()]

    def _read_bytes(self, name: str) -> bytes:
        """A receipt file's bytes: a regular file (no symlink, device or FIFO) of at most
        ``limit_for("receipt")`` bytes. Raises OSError or MalformedInputError."""
        return read_regular_file(self._directory / name, max_bytes=limit_for("receipt"))

    def _read_for_get(self, receipt_id: str, name: str) -> bytes:
        try:
            return self._read_bytes(name)
        except (OSError, MalformedInputError) as exc:
            raise ReceiptCorruptError(
                f"{name}: cannot read: {exc}", receipt_id=receipt_id, file_name=name,
                reason="unreadable", findings=(),
            ) from exc

    def _verified(self, receipt_id: str, name: str, data: bytes) -> Receipt:
        try:
            doc: Any = parse_receipt_json(data)
        except ValueError as exc:
            raise ReceiptCorruptError(f"{name}: {exc}", receipt_id=receipt_id,
                                      file_name=name, reason="unparseable",
                                      findings=()) from None
        if not isinstance(doc, dict) or doc.get("id") != receipt_id:
            raise ReceiptCorruptError(
                f"{name}: the file's id does not match its name", receipt_id=receipt_id,
                file_name=name, reason="stem_mismatch", findings=(),
            )
        receipt = Receipt(doc)
        verification = self._verifier.verify(receipt)
        if not verification.valid:
            raise ReceiptCorruptError(
                f"{name}: receipt does not verify: "
                + ", ".join(sorted({f.code.value for f in verification.findings})),
                receipt_id=receipt_id, file_name=name, reason="verification",
                findings=verification.findings,
            )
        return receipt

    def _write_receipt_file(self, file_name: str, data: bytes) -> None:
        temp = self._directory / _temp_name(file_name)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, self._directory / file_name)
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        self._fsync_directory()

    def _fsync_directory(self) -> None:
        fd = os.open(self._directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # ---- index

    def _stale(self) -> ReceiptIndexStaleError:
        return ReceiptIndexStaleError(
            f"receipt store index is stale: {self._directory}",
            directory=self._directory,
            hint=f"delete {self._directory / INDEX_FILE} to rebuild it",
        )

    def _read_index(self) -> ReceiptIndex | None:
        """The index, or None when the file is missing. Raises _IndexInvalid."""
        try:
            data = read_regular_file(self._directory / INDEX_FILE,
                                     max_bytes=limit_for("receipt_index"))
        except FileNotFoundError:
            return None
        except (OSError, MalformedInputError) as exc:
            raise _IndexInvalid(str(exc)) from None
        return _parse_index(data)

    def _load_index_or_stale(self) -> ReceiptIndex:
        try:
            index = self._read_index()
        except _IndexInvalid:
            raise self._stale() from None
        if index is None:  # deleted between _ensure_index and now
            raise self._stale()
        return index

    def _ensure_index(self) -> None:
        """Regenerate a missing index (§5.1: "the next access regenerates it")."""
        if not self._directory.is_dir() or (self._directory / INDEX_FILE).exists():
            return
        with self._locked():
            if not (self._directory / INDEX_FILE).exists():
                self._rebuild_index_locked()

    @staticmethod
    def _index_matches(index: ReceiptIndex, scan: dict[str, builtins.list[str]]) -> bool:
        if set(index.receipt_ids) != set(scan):
            return False
        return all(entry.file_name in scan[entry.receipt_id] for entry in index.entries)

    def _write_index(self, entries: Iterable[IndexEntry]) -> ReceiptIndex:
        index = ReceiptIndex(str(self._clock_ns()),
                             sorted(entries, key=lambda entry: entry.receipt_id))
        data = receipt_canonical_json({
            "schema": INDEX_SCHEMA,
            "generated_at": index.generated_at,
            "entries": [{"receipt_id": e.receipt_id, "file_name": e.file_name,
                         "created_at": e.created_at} for e in index.entries],
        })
        temp = self._directory / _temp_name(INDEX_FILE)
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
            os.replace(temp, self._directory / INDEX_FILE)
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        return index

    def _rebuild_index_locked(self) -> ReceiptIndex:
        entries: builtins.list[IndexEntry] = []
        for receipt_id, names in self._scan().items():
            name = names[0]
            created_at = ""
            with contextlib.suppress(OSError, ValueError):
                doc = parse_receipt_json(self._read_bytes(name))
                if isinstance(doc, dict) and isinstance(doc.get("created_at"), str):
                    created_at = doc["created_at"]
            entries.append(IndexEntry(receipt_id, name, created_at))
        return self._write_index(entries)

    def _refresh_index_locked(self) -> None:
        try:
            index = self._read_index()
        except _IndexInvalid:
            index = None
        if index is not None and self._index_matches(index, self._scan()):
            self._write_index(list(index.entries))
        else:
            self._rebuild_index_locked()

    def _add_to_index_locked(self, entry: IndexEntry) -> None:
        try:
            index = self._read_index()
        except _IndexInvalid:
            index = None
        file_count = len(self._scan())
        if (index is not None and len(index.entries) + 1 == file_count
                and entry.receipt_id not in index.receipt_ids):
            self._write_index([*index.entries, entry])
        else:
            self._rebuild_index_locked()
