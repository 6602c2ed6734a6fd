"""A SQL RunStore holds the model request it just committed until the model start reads
it back (``SqlRunStore``, shared by SQLite and PostgreSQL): no reader-thread round trip
on the hot path, and never a body whose Prepare was not accepted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sql_store_helpers import SCOPE
from sql_store_helpers import commit as _commit
from sql_store_helpers import create as _create

from runx_actors.protocol.commit import CommitStatus
from runx_actors.protocol.errors import CommandConflictError, FrozenValueMissingError
from runx_actors.store import _facade
from runx_actors.store.sqlite import open_sqlite_store
from runx_actors.testing import builders as b


def _no_reads(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every read of a frozen body from the database fail; return the call log."""
    calls: list[str] = []

    def frozen_get(*args: Any) -> bytes:
        calls.append("frozen_get")
        raise FrozenValueMissingError("read refused by the test", digest=str(args[-1]))

    monkeypatch.setattr(store._log, "frozen_get", frozen_get)
    return calls


async def test_the_committed_request_is_read_back_once_without_a_store_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_sqlite_store(tmp_path / "s.sqlite3") as store:
        w = await store.open(SCOPE)
        created = await _create(w, "r", "in-1")
        built = b.prepare(created.snapshot.state, created.snapshot.position, body='{"a":1}')
        result = await _commit(w, "r", built)
        assert result.status is CommitStatus.ACCEPTED
        command = built[1]
        calls = _no_reads(store, monkeypatch)
        rs = w.run_store()
        assert await rs.frozen_request(command.request_digest) == command.request
        assert calls == []
        # read once: the next read is the store's (here refused by the test)
        with pytest.raises(FrozenValueMissingError):
            await rs.frozen_request(command.request_digest)
        assert calls == ["frozen_get"]


async def test_a_refused_prepare_holds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_sqlite_store(tmp_path / "s.sqlite3") as store:
        w = await store.open(SCOPE)
        created = await _create(w, "r", "in-1")
        built = b.prepare(created.snapshot.state, created.snapshot.position, body='{"b":2}')
        with pytest.raises(CommandConflictError):  # a base it was not derived from
            await _commit(w, "r", built, base=created.snapshot.position + 5)
        calls = _no_reads(store, monkeypatch)
        with pytest.raises(FrozenValueMissingError):
            await w.run_store().frozen_request(built[1].request_digest)
        assert calls == ["frozen_get"]


async def test_at_most_held_requests_are_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_facade, "HELD_REQUESTS", 2)
    async with open_sqlite_store(tmp_path / "s.sqlite3") as store:
        w = await store.open(SCOPE)
        digests = []
        for i in range(3):
            created = await _create(w, f"r{i}", "in-1")
            built = b.prepare(created.snapshot.state, created.snapshot.position,
                              body=f'{{"n":{i}}}')
            await _commit(w, f"r{i}", built)
            digests.append(built[1].request_digest)
        rs = w.run_store()
        assert list(rs._held) == digests[1:]  # the oldest was dropped
        # and it is still read from the store, where it is durable
        assert (await rs.frozen_request(digests[0])).body == '{"n":0}'
