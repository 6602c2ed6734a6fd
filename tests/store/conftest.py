"""Fixtures of the store tests: one PostgreSQL server per test session.

``postgres_dsn`` (session) is ``$RUNX_TEST_POSTGRES_DSN`` when set, else the DSN of a
throwaway cluster (``runx_actors.testing.postgres``) started once for the session. Without
psycopg or server binaries the PostgreSQL tests are skipped with the reason, except when
``$CI`` is set: then they fail, so that CI never passes by silently skipping them.

``postgres_schema`` (per test) makes fresh, empty PostgreSQL schemas: each call returns a
DSN whose ``search_path`` is a new schema; they are dropped after the test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from runx_actors.testing.postgres import DSN_ENV, find_postgres_bin, postgres_dsn_for_tests


def _unavailable() -> str | None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        return f"psycopg / psycopg-pool are not installed ({exc}): pip install -e '.[dev]'"
    if not os.environ.get(DSN_ENV) and find_postgres_bin() is None:
        return (f"no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under "
                f"/usr/lib/postgresql/*/bin, and ${DSN_ENV} is not set")
    return None


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    reason = _unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set: the PostgreSQL tests may not be skipped)")
        pytest.skip(reason)
    with postgres_dsn_for_tests() as dsn:
        yield dsn


@pytest.fixture
def postgres_schema(postgres_dsn: str) -> Iterator[Callable[[], str]]:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    created: list[str] = []

    def new() -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        created.append(name)
        return make_conninfo(postgres_dsn, options=f"-c search_path={name}")

    yield new
    if created:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            for name in created:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
