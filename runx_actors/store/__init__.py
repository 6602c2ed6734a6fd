"""Run stores (architecture §4): the ports (:mod:`runx_actors.store.base`), the in-memory
store, the embedded SQLite store and the PostgreSQL store.

The names below load their module on first use, so importing one store (or only
``runx_actors.store.base``) does not import the others' drivers::

    from runx_actors.store import MemoryStore, open_sqlite_store, open_postgres_store

(``open_postgres_store`` needs the ``postgres`` extra: psycopg 3 and psycopg-pool.)
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "MemoryStore": "runx_actors.store.memory",
    "open_sqlite_store": "runx_actors.store.sqlite",
    "SqliteStore": "runx_actors.store.sqlite",
    "open_postgres_store": "runx_actors.store.postgres",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runx_actors.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
