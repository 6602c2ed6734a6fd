"""The store conformance suite (spec §8.6) run against every shipped store.

The scenarios live in :mod:`runx_actors.testing.conformance`; importing them here makes
pytest collect them, each parametrized by the ``store_factory`` fixture below.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from runx_actors.store.sqlite import open_sqlite_store
from runx_actors.testing.conformance import (
    SCENARIOS,
    StoreFactory,
    memory_store_factory,
    test_store_admission,
    test_store_batch_fenced,
    test_store_batch_prefix,
    test_store_batch_replay,
    test_store_batch_validation,
    test_store_creation,
    test_store_decline_tool_call,
    test_store_frozen_values,
    test_store_group_composition,
    test_store_input_queue,
    test_store_isolation,
    test_store_names,
    test_store_ownership_lost,
    test_store_prepare_cas,
    test_store_projection,
    test_store_reattach,
    test_store_replay_and_base,
    test_store_settlement_replay,
    test_store_settlement_snapshot,
    test_store_start_and_effect,
    test_store_takeover,
)

__all__ = [
    "test_store_admission", "test_store_creation", "test_store_decline_tool_call",
    "test_store_frozen_values", "test_store_group_composition", "test_store_input_queue",
    "test_store_isolation", "test_store_ownership_lost", "test_store_prepare_cas",
    "test_store_projection", "test_store_reattach", "test_store_replay_and_base",
    "test_store_settlement_replay", "test_store_settlement_snapshot",
    "test_store_start_and_effect", "test_store_takeover",
    "test_store_batch_prefix", "test_store_batch_replay", "test_store_batch_fenced",
    "test_store_batch_validation", "test_store_names",
]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    if request.param == "memory":
        yield memory_store_factory
        return
    if request.param == "postgres":
        # a fresh, empty PostgreSQL schema per store (see tests/store/conftest.py); the
        # fixture skips (or, with CI set, fails) when PostgreSQL is unavailable
        new_schema = request.getfixturevalue("postgres_schema")
        from runx_actors.store.postgres import open_postgres_store

        yield lambda: open_postgres_store(new_schema())
        return
    counter = itertools.count()
    yield lambda: open_sqlite_store(tmp_path / f"store-{next(counter)}.db")


def test_every_scenario_is_collected() -> None:
    """Scenarios 98-113 and the batch scenarios (RUN-CMT-9) are all here, under their
    spec names."""
    assert len(SCENARIOS) == 21
    assert set(SCENARIOS) == set(__all__)
    assert all(globals()[name] is fn for name, fn in SCENARIOS.items())
