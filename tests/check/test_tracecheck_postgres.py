"""``check --log`` on a PostgreSQL store: the same replay as on SQLite, then a doctored row.

The server is ``$RUNX_TEST_POSTGRES_DSN`` or a throwaway cluster
(``runx_actors.testing.postgres``); without either the test is skipped, except under
``$CI``, where it fails (as the store tests do).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from log_support import SCOPE, drive_runs

from runx_actors.check._tracecheck import check_log
from runx_actors.cli import main
from runx_actors.protocol import facts as F
from runx_actors.protocol._codec import decode_fact, encode_fact
from runx_actors.testing.postgres import DSN_ENV, find_postgres_bin, postgres_dsn_for_tests


@pytest.fixture(scope="module")
def dsn() -> Iterator[str]:
    try:
        import psycopg  # noqa: F401
    except ImportError:  # pragma: no cover - dev installs psycopg
        reason = "psycopg is not installed"
    else:
        reason = "" if os.environ.get(DSN_ENV) or find_postgres_bin() else "no PostgreSQL"
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set: the PostgreSQL tests may not be skipped)")
        pytest.skip(reason)
    with postgres_dsn_for_tests() as value:
        yield value


async def test_postgres_log_validates_then_a_doctored_row_is_named(dsn: str) -> None:
    import uuid

    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    from runx_actors.store.postgres import open_postgres_store

    schema = f"trace_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    target = make_conninfo(dsn, options=f"-c search_path={schema}")
    try:
        async with open_postgres_store(target) as store:
            await drive_runs(store, 1)
        report = check_log(target)
        assert report.ok, [v.show() for v in report.violations]
        assert report.scopes == (SCOPE,) and report.runs == 4
        assert CliRunner().invoke(main, ["check", "--log", target]).exit_code == 0

        with psycopg.connect(target, autocommit=True) as conn:
            rows = conn.execute("SELECT stream, idx, data FROM events WHERE stream = "
                                "'run/run-0' ORDER BY idx").fetchall()
            stream, idx, data = next(r for r in rows if isinstance(
                decode_fact(bytes(r[2])), F.ToolCallStarted))
            fact = decode_fact(bytes(data))
            doctored = encode_fact(F.ToolCallStarted(step_id=fact.step_id, call_id=fact.call_id,
                                                     effect="e" * 64))
            conn.execute("UPDATE events SET data = %s WHERE stream = %s AND idx = %s",
                         (doctored, stream, idx))
        violations = check_log(target).violations
        assert [(v.run, v.position, v.rule) for v in violations] == [("run-0", idx, "INV-6")]
        result = CliRunner().invoke(main, ["check", "--log", target, "--json"])
        assert result.exit_code == 1
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
