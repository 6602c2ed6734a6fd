"""A store that knows it is damaged (issue 12 deliverable 3; RUN-STO-1 … RUN-STO-4).

A parked governed Run is made once through the CLI in a SQLite file; each test copies it,
damages the copy the way the issue lists (truncated, garbage, zero-byte or foreign file, a
dropped table, a frozen body stored as TEXT, deleted frozen rows, a deleted ``commits`` row,
``scopes.epoch = -5``, the Run's last fact deleted, an edited fact), then asserts:

* the store raises a typed ``CorruptStoreError`` (``CorruptRecordError`` for one row) naming
  the table, row, Run and position;
* ``runx-actors resume`` fails with an exit code and a one-line message, no traceback, and the
  store FILE (database and ``-wal``) is byte-identical afterwards;
* ``runx-actors store check`` exits 3 on the damage and 0 on the clean copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from click.testing import CliRunner, Result

from runx_actors.cli import main
from runx_actors.protocol.errors import (
    CorruptRecordError,
    CorruptStoreError,
    FrozenValueMissingError,
    RunxError,
    SchemaVersionError,
)
from runx_actors.store._verify import verify_run
from runx_actors.store.sqlite import open_sqlite_store

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "loop-orchestration"
OBJECTIVE = "Review whether the next turn may continue."
GATE_REQUEST = "agent_task.review-loop-plan.output"
GATE_ANSWER = {"decision": "continue", "requested_tool": "fs.read",
               "stop_condition": "after one turn", "summary": "ok"}
SIGNING_ENV = {
    "RUNX_RECEIPT_SIGN_KID": "runx-demo-key",
    "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64": "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=",
    "RUNX_RECEIPT_SIGN_ISSUER_TYPE": "hosted",
}
CLEAN_ENV: dict[str, str | None] = {
    name: None for name in (
        "RUNX_RECEIPT_VERIFY_KID", "RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64",
        "RUNX_RECEIPT_DIR", "RUNX_LOOP_RECEIPT_DIR", "RUNX_PROJECT_DIR", "RUNX_CWD",
        "INIT_CWD", "RUNX_RUN_ID", "RUNX_ACTORS_STORE")
}
STORE = "store.sqlite3"


def invoke(args: list[str], cwd: Path, stdin: str | None = None) -> Result:
    """``runx-actors <args>`` from *cwd* (workspace ``cwd/ws``)."""
    env: dict[str, str | None] = {**CLEAN_ENV, **SIGNING_ENV, "RUNX_CWD": str(cwd / "ws")}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        patch.setattr(tempfile, "tempdir", str(cwd))
        return CliRunner().invoke(main, args, env=env, input=stdin, catch_exceptions=False)


@pytest.fixture(scope="module")
def parked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A directory holding ``ws/``, ``store.sqlite3`` with a Run parked at the context gate,
    and ``answers.json`` answering it; plus the run id."""
    base = tmp_path_factory.mktemp("parked")
    (base / "ws").mkdir()
    shutil.copy(EXAMPLE / "workspace" / "NOTES.md", base / "ws" / "NOTES.md")
    result = invoke(["skill", str(EXAMPLE), "--runner", "context-gate", "-i",
                     f"objective={OBJECTIVE}", "--store", STORE, "-R", "D", "--json"], base)
    assert result.exit_code == 2, result.output
    (base / "answers.json").write_text(json.dumps({"answers": {GATE_REQUEST: GATE_ANSWER}}))
    return base, json.loads(result.stdout)["run_id"]


@pytest.fixture()
def copy(parked: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    base, run_id = parked
    shutil.copytree(base, tmp_path / "c")
    return tmp_path / "c", run_id


def fingerprint(path: Path) -> dict[str, str | None]:
    """sha256 of the database file and of its ``-wal`` (None when absent)."""
    out: dict[str, str | None] = {}
    for name in (path, Path(str(path) + "-wal")):
        out[name.name] = hashlib.sha256(name.read_bytes()).hexdigest() if name.exists() \
            else None
    return out


def sql(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()


def truncate(path: Path, run_id: str) -> None:
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 3)


def garbage(path: Path, run_id: str) -> None:
    path.write_bytes(os.urandom(8192))


def zero_bytes(path: Path, run_id: str) -> None:
    path.write_bytes(b"")


def foreign(path: Path, run_id: str) -> None:
    path.unlink()
    sql(path, "CREATE TABLE notes (x TEXT)", "INSERT INTO notes VALUES ('mine')")


def foreign_empty(path: Path, run_id: str) -> None:
    path.unlink()
    sql(path, "PRAGMA user_version = 0", "VACUUM")


def drop_table(path: Path, run_id: str) -> None:
    sql(path, "DROP TABLE frozen")


def frozen_text(path: Path, run_id: str) -> None:
    sql(path, "UPDATE frozen SET data = CAST(data AS TEXT)")


def frozen_deleted(path: Path, run_id: str) -> None:
    sql(path, "DELETE FROM frozen")


def commit_deleted(path: Path, run_id: str) -> None:
    sql(path, "DELETE FROM commits WHERE seq = (SELECT MAX(seq) FROM commits)")


def epoch_negative(path: Path, run_id: str) -> None:
    sql(path, "UPDATE scopes SET epoch = -5")


def epoch_max(path: Path, run_id: str) -> None:
    # valid to a lax reader, but the next open's ``epoch + 1`` overflows 64 bits
    sql(path, "UPDATE scopes SET epoch = 9223372036854775807")


def all_facts_deleted(path: Path, run_id: str) -> None:
    # the ``runs`` row stays: the Run existed, so "not found" would be a misleading answer
    sql(path, f"DELETE FROM events WHERE stream = 'run/{run_id}'")


def parked_marked_ended(path: Path, run_id: str) -> None:
    # the Run's stream ends parked, but its ``runs`` row says it has ended: resume used to
    # open the scope (bumping the epoch) and then refuse the Run as "has ended" (exit 1)
    sql(path, f"UPDATE runs SET active = 0 WHERE run_id = '{run_id}'")


def last_fact_deleted(path: Path, run_id: str) -> None:
    sql(path, f"DELETE FROM events WHERE stream = 'run/{run_id}' AND idx = "
              f"(SELECT MAX(idx) FROM events WHERE stream = 'run/{run_id}')")


def middle_fact_deleted(path: Path, run_id: str) -> None:
    sql(path, f"DELETE FROM events WHERE stream = 'run/{run_id}' AND idx = 2",
        f"UPDATE events SET idx = idx - 1 WHERE stream = 'run/{run_id}' AND idx > 2")


def fact_edited(path: Path, run_id: str) -> None:
    # a still-decodable edit: the input's id changes
    sql(path, f"UPDATE events SET data = CAST(replace(CAST(data AS TEXT), '/input-0', '/input-9') "
              f"AS BLOB) WHERE stream = 'run/{run_id}' AND idx = 1")


DAMAGE: dict[str, Callable[[Path, str], None]] = {
    "truncated": truncate, "garbage": garbage, "zero_bytes": zero_bytes, "foreign": foreign,
    "foreign_empty": foreign_empty, "dropped_table": drop_table, "frozen_text": frozen_text,
    "frozen_deleted": frozen_deleted, "commit_deleted": commit_deleted,
    "epoch_negative": epoch_negative, "last_fact_deleted": last_fact_deleted,
    "middle_fact_deleted": middle_fact_deleted, "fact_edited": fact_edited,
    "epoch_max": epoch_max, "all_facts_deleted": all_facts_deleted,
    "parked_marked_ended": parked_marked_ended,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_resume_refuses_damage_and_writes_nothing(copy: tuple[Path, str], damage: str) -> None:
    base, run_id = copy
    store = base / STORE
    DAMAGE[damage](store, run_id)
    before = fingerprint(store)
    result = invoke(["resume", run_id, "answers.json", "--store", STORE, "-R", "D"], base)
    # damage is a failed verification (3); a file that is not our store at all is a
    # refused input (1, SchemaVersionError)
    assert result.exit_code == (1 if damage.startswith("foreign") else 3), result.output
    assert "Traceback" not in result.output
    assert "runx-actors: resume:" in result.stderr
    assert result.stderr.splitlines()[1].startswith("hint: "), result.stderr
    assert fingerprint(store) == before
    assert not (base / "D").exists() or not list((base / "D").glob("sha256-*.json"))


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_store_check_finds_damage(copy: tuple[Path, str], damage: str) -> None:
    base, run_id = copy
    store = base / STORE
    DAMAGE[damage](store, run_id)
    before = fingerprint(store)
    result = invoke(["store", "check", STORE, "--json"], base)
    assert result.exit_code == 3, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["problems"]
    assert fingerprint(store) == before


def test_store_check_clean(copy: tuple[Path, str]) -> None:
    base, _ = copy
    before = fingerprint(base / STORE)
    result = invoke(["store", "check", STORE, "--json"], base)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["runs"] == 1 and report["events"] >= 7
    assert fingerprint(base / STORE) == before
    text = invoke(["store", "check", STORE], base)
    assert text.exit_code == 0 and "ok" in text.stdout


def test_store_check_usage(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    assert invoke(["store", "check"], tmp_path).exit_code == 64
    missing = invoke(["store", "check", "nope.sqlite3"], tmp_path)
    assert missing.exit_code == 64 and not (tmp_path / "nope.sqlite3").exists()


def test_a_fifo_store_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO at the store path is refused by its type, never opened (``open`` on a FIFO
    with no writer blocks for ever). The test holds the FIFO open read-write with 100
    bytes queued, so a reader that does open it does not hang the test: it reads the
    bytes and calls them garbage, which is the wrong answer."""
    (tmp_path / "ws").mkdir()
    fifo = tmp_path / "fifo.sqlite3"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(fd, b"x" * 100)
        result = invoke(["store", "check", str(fifo), "--json"], tmp_path)
        assert result.exit_code == 3, result.output
        report = json.loads(result.stdout)
        assert [p["reason"] for p in report["problems"]] == ["not_regular"]
        assert os.read(fd, 200) == b"x" * 100  # nothing of it was read
    finally:
        os.close(fd)


def test_store_check_dsn_without_psycopg(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A DSN on an install without the ``postgres`` extra: exit 1 and a hint naming the
    extra, not an internal error (70)."""
    import sys
    (tmp_path / "ws").mkdir()
    monkeypatch.setitem(sys.modules, "psycopg", None)  # ``import psycopg`` now fails
    result = invoke(["store", "check", "postgresql://u@127.0.0.1:1/db"], tmp_path)
    assert result.exit_code == 1, result.output
    assert "runx-actors[postgres]" in result.stderr and "Traceback" not in result.output


def test_resume_on_clean_copy_still_seals(copy: tuple[Path, str]) -> None:
    base, run_id = copy
    result = invoke(["resume", run_id, "answers.json", "--store", STORE, "-R", "D"], base)
    assert result.exit_code == 0, result.output


# -- the library raises typed errors naming what is damaged -----------------------------


async def _record(path: Path, run_id: str) -> Any:
    async with open_sqlite_store(path) as store:
        reader = await store.reader("default")
        return await reader.record(run_id)


@pytest.mark.parametrize("damage, table", [
    ("truncated", None), ("garbage", None), ("zero_bytes", None), ("foreign", None),
    ("foreign_empty", None), ("dropped_table", "frozen"), ("epoch_negative", "scopes"),
])
async def test_open_names_the_damage(copy: tuple[Path, str], damage: str,
                                     table: str | None) -> None:
    base, run_id = copy
    store = base / STORE
    DAMAGE[damage](store, run_id)
    before = fingerprint(store)
    # a SQLite database that is not a store keeps its SchemaVersionError (foreign)
    expected = SchemaVersionError if damage.startswith("foreign") else CorruptStoreError
    with pytest.raises(expected) as info:
        await _record(store, run_id)
    assert getattr(info.value, "path", None) == str(store)
    if table is not None:
        assert info.value.table == table
    reasons = {"zero_bytes": "zero_bytes", "garbage": "not_sqlite",
               "epoch_negative": "bad_epoch", "dropped_table": "missing_table"}
    if damage in reasons:
        assert info.value.reason == reasons[damage]
    assert fingerprint(store) == before


@pytest.mark.parametrize("damage, table, position", [
    ("commit_deleted", "commits", 4), ("last_fact_deleted", "events", 5),
    ("middle_fact_deleted", "events", 2), ("fact_edited", "events", 1),
])
async def test_record_names_the_row(copy: tuple[Path, str], damage: str, table: str,
                                    position: int) -> None:
    base, run_id = copy
    store = base / STORE
    DAMAGE[damage](store, run_id)
    with pytest.raises(CorruptRecordError) as info:
        await _record(store, run_id)
    err = info.value
    assert (err.table, err.run_id, err.position) == (table, run_id, position)
    assert isinstance(err, CorruptStoreError) and isinstance(err, RunxError)


@pytest.mark.parametrize("damage", ["frozen_text", "frozen_deleted"])
async def test_frozen_damage_is_typed(copy: tuple[Path, str], damage: str) -> None:
    base, run_id = copy
    store = base / STORE
    DAMAGE[damage](store, run_id)
    async with open_sqlite_store(store) as opened:
        reader = await opened.reader("default")
        facts = await reader.run_facts(run_id)
        digest = facts[1].input.digest  # type: ignore[attr-defined]
        if damage == "frozen_text":
            with pytest.raises(CorruptRecordError) as got:
                await opened.frozen.get(digest)
            assert (got.value.table, got.value.row) == ("frozen", digest)
        else:  # an absent body keeps the FrozenStore contract ...
            with pytest.raises(FrozenValueMissingError):
                await opened.frozen.get(digest)
        # ... and the Run check names the fact that needs it
        with pytest.raises(CorruptRecordError) as info:
            await verify_run(reader, opened.frozen, run_id)
        err = info.value
        assert (err.table, err.row, err.run_id, err.position) == ("frozen", digest, run_id, 1)


def test_new_store_is_created_only_where_nothing_exists(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite3"

    async def open_and_epoch() -> int:
        async with open_sqlite_store(path) as store:
            w = await store.open("s")
            return int(w.epoch)

    assert trio.run(open_and_epoch) == 1
    assert trio.run(open_and_epoch) == 2
    assert not list(tmp_path.glob("*.tmp*"))


FILE_DAMAGE = ["truncated", "garbage", "zero_bytes", "foreign", "foreign_empty",
               "dropped_table", "epoch_negative"]


@pytest.mark.parametrize("damage", FILE_DAMAGE)
def test_skill_refuses_a_damaged_store_and_writes_nothing(copy: tuple[Path, str],
                                                          damage: str) -> None:
    """``skill`` opens the store before creating its Run: a damaged file is refused
    before anything is written (RUN-STO-1, RUN-STO-4)."""
    base, run_id = copy
    store = base / STORE
    DAMAGE[damage](store, run_id)
    before = fingerprint(store)
    result = invoke(["skill", str(EXAMPLE), "--runner", "context-gate", "-i",
                     f"objective={OBJECTIVE}", "--store", STORE, "-R", "D", "--json"], base)
    assert result.exit_code == (1 if damage.startswith("foreign") else 3), result.output
    assert "runx-actors: skill:" in result.stderr and "Traceback" not in result.output
    assert result.stderr.splitlines()[1].startswith("hint: "), result.stderr
    assert fingerprint(store) == before


@pytest.mark.parametrize("body_type", ["agent_input", "model_result"])
async def test_transcript_raises_for_a_missing_body(copy: tuple[Path, str],
                                                    body_type: str) -> None:
    """The transcript builder substitutes no placeholder for a missing body: a model
    result always raises, an input body raises when the builder requires inputs (the
    host's does)."""
    from runx_actors.protocol.values import ModelRef
    from runx_actors.runtime._app import TranscriptBuilder

    base, run_id = copy
    store = base / STORE
    async with open_sqlite_store(store) as opened:
        facts = await (await opened.reader("default")).run_facts(run_id)
    wanted = {"agent_input": "input_accepted", "model_result": "model_step_completed"}
    fact = next(f for f in facts if f.WIRE_NAME == wanted[body_type])
    digest = fact.input.digest if body_type == "agent_input" else fact.result_digest  # type: ignore[attr-defined]
    sql(store, f"DELETE FROM frozen WHERE digest = '{digest}'")
    async with open_sqlite_store(store) as opened:
        reader = await opened.reader("default")
        strict = TranscriptBuilder(reader, opened.frozen, ModelRef("m"), require_inputs=True)
        with pytest.raises(CorruptRecordError) as info:
            await strict.messages(run_id)
        assert (info.value.table, info.value.row) == ("frozen", digest)  # type: ignore[attr-defined]
        lenient = TranscriptBuilder(reader, opened.frozen, ModelRef("m"))
        if body_type == "agent_input":
            messages = await lenient.messages(run_id)
            assert messages[0]["content"].startswith("[input ")
        else:
            with pytest.raises(CorruptRecordError):
                await lenient.messages(run_id)


@pytest.mark.parametrize("epoch, last, reason", [
    (-5, 0, "bad_epoch"), (0, 0, "bad_epoch"), (True, 0, "bad_epoch"), ("3", 0, "bad_epoch"),
    (2, 3, "epoch_behind"), (None, 1, "epoch_missing"), (2**63 - 1, 0, "bad_epoch"),
])
def test_epoch_rules(epoch: Any, last: int, reason: str) -> None:
    from runx_actors.store._rows import check_epoch_row

    with pytest.raises(CorruptStoreError) as info:
        check_epoch_row("s", epoch, last)
    assert (info.value.table, info.value.row, info.value.reason) == ("scopes", "s", reason)
    check_epoch_row("s", 3, 3)
    check_epoch_row("s", None, 0)


def test_chain_cache_keeps_only_accepted_jobs() -> None:
    """The PostgreSQL group's chain cache: a refused job's chains are dropped with its
    savepoint, an accepted job's stay; an entry answers only for its own position."""
    pytest.importorskip("psycopg")
    from runx_actors.store._pg_log import ChainCache

    cache = ChainCache({"run/a": (4, b"h4")})
    assert cache.get("run/a", 4) == b"h4" and cache.get("run/a", 3) is None
    cache.pending["run/a"] = (5, b"bogus")
    cache.discard()
    assert cache.get("run/a", 5) is None and cache.accepted == {}
    cache.pending["run/a"] = (5, b"h5")
    cache.keep()
    assert cache.get("run/a", 5) == b"h5" and cache.accepted == {"run/a": (5, b"h5")}


def frozen_rehashed(path: Path, run_id: str) -> None:
    # every body replaced by bytes that do not hash to its digest
    sql(path, "UPDATE frozen SET data = X'7b7d'")


@pytest.mark.parametrize("damage", [frozen_text, frozen_rehashed], ids=["text", "rehashed"])
def test_skill_refuses_a_damaged_body_it_needs_and_writes_nothing(
        copy: tuple[Path, str], damage: Callable[[Path, str], None]) -> None:
    """A second ``skill`` with the same inputs needs the same frozen input body. When the
    store holds that body damaged, ``skill`` is refused before the scope is opened (no
    epoch bump) and before any Run is created: exit 3, the file byte-identical
    (RUN-STO-4; found by the issue-12 attacker: it used to bump the epoch and commit
    ``run_created`` first)."""
    base, run_id = copy
    store = base / STORE
    damage(store, run_id)
    before = fingerprint(store)
    result = invoke(["skill", str(EXAMPLE), "--runner", "context-gate", "-i",
                     f"objective={OBJECTIVE}", "--store", STORE, "-R", "D", "--json"], base)
    assert result.exit_code == 3, result.output
    assert "runx-actors: skill:" in result.stderr and "Traceback" not in result.output
    assert "hint:" in result.stderr
    assert fingerprint(store) == before
