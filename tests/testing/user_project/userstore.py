"""A store written outside runx-actors: SQLite, and a copy that forgets fencing."""

import contextlib
import itertools
import tempfile
from pathlib import Path

from runx_actors.store.sqlite import open_sqlite_store

_ROOT = Path(tempfile.mkdtemp(prefix="userstore-"))
_COUNTER = itertools.count()


def good_store():
    """A fresh SQLite store per call."""
    return open_sqlite_store(str(_ROOT / f"good-{next(_COUNTER)}.sqlite3"))


class _Unfenced:
    """Hands every opener of a scope the first writer: a takeover does not fence."""

    def __init__(self, inner):
        self.inner, self.frozen, self.writers = inner, inner.frozen, {}

    async def open(self, scope):
        if scope not in self.writers:
            self.writers[scope] = await self.inner.open(scope)
        return self.writers[scope]

    async def reader(self, scope):
        return await self.inner.reader(scope)


@contextlib.asynccontextmanager
async def unfenced_store():
    async with good_store() as inner:
        yield _Unfenced(inner)
