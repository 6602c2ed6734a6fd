"""The memory store's log holds one copy of each stream and event-type name (idle memory,
issue 11): the events of a stream share their ``stream`` and ``type`` strings."""

from __future__ import annotations

from sql_store_helpers import SCOPE
from sql_store_helpers import commit as _commit
from sql_store_helpers import create as _create

from runx_actors.store.memory import MemoryStore
from runx_actors.testing import builders as b


async def test_events_share_their_stream_and_type_names() -> None:
    store = MemoryStore()
    w = await store.open(SCOPE)
    created = await _create(w, "r", "in-1")
    await _commit(w, "r", b.prepare(created.snapshot.state, created.snapshot.position))
    again = await _create(w, "q", "in-1")
    await _commit(w, "q", b.prepare(again.snapshot.state, again.snapshot.position))
    log = store._scopes[SCOPE]
    events = [e for stream in log.streams.values() for e in stream]
    assert len(events) == 6
    for stream in log.streams.values():
        assert all(e.stream is stream[0].stream for e in stream)
    by_type: dict[str, str] = {}
    for e in events:
        assert by_type.setdefault(e.type, e.type) is e.type
