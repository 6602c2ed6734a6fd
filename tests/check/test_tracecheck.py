"""``runx-actors check --log``: stored logs replayed through the reference machine.

A real store (the runtime drives Runs on SQLite: tool calls, an approval, a rejection, an
extra input, a cancel) validates clean; each doctored copy — one fact row or one commit row
edited — is caught, and the violation names the Run, the position and the rule. The
identities are re-derived by ``runx_spec.ids_oracle``, checked here against the spec's
golden vectors.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from log_support import SCOPE, drive_runs, edit_fact
from runx_spec import ids_oracle

from runx_actors.check._tracecheck import EX_NOINPUT, LogUnreadableError, check_log
from runx_actors.cli import main
from runx_actors.protocol import facts as F
from runx_actors.protocol import ids
from runx_actors.store.sqlite import open_sqlite_store


@pytest.fixture(scope="module")
def clean_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import trio

    db = tmp_path_factory.mktemp("trace") / "runs.sqlite3"

    async def build() -> None:
        async with open_sqlite_store(str(db)) as store:
            await drive_runs(store, 2)

    trio.run(build)
    return db


def _copy(clean: Path, tmp_path: Path) -> Path:
    db = tmp_path / "doctored.sqlite3"
    shutil.copy(clean, db)
    return db


def test_clean_store_validates(clean_store: Path) -> None:
    report = check_log(clean_store)
    assert report.violations == ()
    assert report.scopes == (SCOPE,)
    assert report.runs == 5 and report.facts > 50
    result = CliRunner().invoke(main, ["check", "--log", str(clean_store), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["ok"] is True and payload["violations"] == []


def _sql(statement: str) -> Callable[[Path], tuple[str, int]]:
    def doctor(db: Path) -> tuple[str, int]:
        with sqlite3.connect(db) as conn:
            row = conn.execute(statement).fetchone()
        assert row is not None
        return str(row[0]), int(row[1])

    return doctor


def _fact(kind: type[Any], change: Callable[[Any], dict[str, Any]],
          nth: int = 0) -> Callable[[Path], tuple[str, int]]:
    return lambda db: edit_fact(db, kind, change, nth)


OTHER = "e" * 64
DOCTORED: dict[str, tuple[Callable[[Path], tuple[str, int]], str]] = {
    "tool started under a foreign effect": (
        _fact(F.ToolCallStarted, lambda f: {"effect": OTHER}), "INV-6"),
    "tool completed under a foreign effect": (
        _fact(F.ToolCallCompleted, lambda f: {"effect": OTHER}), "INV-5"),
    "model started under the wrong sequence": (
        _fact(F.ModelStepStarted, lambda f: {"effect": ids.derive_effect_id(
            "run-0", f.step_id, "", 1)}), "INV-7"),
    "prepare skips the pending input": (
        _fact(F.ModelStepPrepared, lambda f: {"input_ids": ()}), "INV-12"),
    "prepare under a step id not derived from its commit": (
        _fact(F.ModelStepPrepared, lambda f: {"step_id": OTHER}), "RUN-WIR-3"),
    "tool step of another model step": (
        _fact(F.ToolStepOpened, lambda f: {"step_id": OTHER}), "RUN-WIR-3"),
    "a known failure that claims effect_unknown": (
        _fact(F.ToolCallFailed, lambda f: {"failure": attrs_evolve(
            f.failure, class_="effect_unknown")}), "RUN-WIR-3"),
    "a completion turned into a failure": (
        _fact(F.RunEnded, lambda f: {"end": failed_end()}), "RUN-WIR-3"),
}


def attrs_evolve(value: Any, **changes: Any) -> Any:
    import attrs

    return attrs.evolve(value, **changes)


def failed_end() -> Any:
    from runx_actors.protocol.values import RunFailedEnd, RunFailure, RunReason

    return RunFailedEnd(RunReason.PROVIDER_FAILURE, RunFailure("provider_failure"))


@pytest.mark.parametrize("name", sorted(DOCTORED))
def test_doctored_fact_is_named(name: str, clean_store: Path, tmp_path: Path) -> None:
    doctor, rule = DOCTORED[name]
    db = _copy(clean_store, tmp_path)
    run, position = doctor(db)
    report = check_log(db)
    assert [(v.run, v.position, v.rule) for v in report.violations] == [(run, position, rule)], (
        [v.show() for v in report.violations])
    result = CliRunner().invoke(main, ["check", "--log", str(db)])
    assert result.exit_code == 1
    assert f"{rule}: run {run!r} position {position}" in result.output


def test_doctored_commit_rows(clean_store: Path, tmp_path: Path) -> None:
    db = _copy(clean_store, tmp_path)
    with sqlite3.connect(db) as conn:
        # a later commit under an older epoch: a fenced writer appended (INV-28)
        seq = conn.execute("SELECT max(seq) FROM commits").fetchone()[0]
        conn.execute("UPDATE commits SET epoch = 0 WHERE seq = ?", (seq,))
        # a start commit under a non-derived id (INV-8)
        conn.execute("UPDATE commits SET commit_id = 'chosen' WHERE seq = (SELECT min(seq) "
                     "FROM commits WHERE run_id = 'run-1' AND first_idx = 3)")
        # an undecodable event (RUN-WIR-2)
        conn.execute("UPDATE events SET data = X'00' WHERE stream = 'run/approved' AND idx = 4")
    rules = {(v.rule, v.run) for v in check_log(db).violations}
    assert {("INV-28", "rejected"), ("INV-8", "run-1"), ("RUN-WIR-2", "approved")} <= rules, rules
    # --run narrows the judgement to one Run (scope-wide rules aside)
    only = check_log(db, run="run-0").violations
    assert {v.rule for v in only} <= {"INV-28"}


def test_deleted_fact_breaks_contiguity(clean_store: Path, tmp_path: Path) -> None:
    db = _copy(clean_store, tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM events WHERE stream = 'run/run-0' AND idx = 6")
    violations = check_log(db).violations
    assert [(v.run, v.rule) for v in violations] == [("run-0", "INV-10")], violations


def test_unreadable_and_usage(tmp_path: Path, clean_store: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["check", "--log", str(tmp_path / "nope.sqlite3")])
    assert missing.exit_code == EX_NOINPUT
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"not a database at all" * 100)
    assert runner.invoke(main, ["check", "--log", str(junk)]).exit_code == EX_NOINPUT
    with pytest.raises(LogUnreadableError):
        check_log(junk)
    with pytest.raises(LogUnreadableError) as info:
        check_log(clean_store, scope="no-such-scope")
    assert info.value.attrs["reason"] == "no such scope"
    as_json = runner.invoke(main, ["check", "--log", str(junk), "--json"])
    assert as_json.exit_code == EX_NOINPUT
    assert json.loads(as_json.stdout)["error"] == "LogUnreadableError"
    assert json.loads(as_json.stdout)["exit_code"] == EX_NOINPUT
    assert runner.invoke(main, ["check", "--run", "x"]).exit_code == 64
    assert "Traceback" not in missing.output + junk.name


GOLDEN = [  # spec §2.3: (function, args, first 8, last 4)
    (ids_oracle.prepare_cid, ("run-1", 7), "7e42f750", "763d"),
    (ids_oracle.model_step, ("run-1", "cmd-1"), "883c5ef2", "a8e6"),
    (ids_oracle.call, ("step-1", 0), "cca7fd2e", "ea11"),
    (ids_oracle.tool_step, ("step-1",), "6f62a482", "419d"),
    (ids_oracle.response, ("run-1", "step-1", "call-1", "approval"), "819924b4", "e77e"),
    (ids_oracle.response_cid, ("run-1", "step-1", "call-1", "resp-1"), "aacf7d24", "b32b"),
    (ids_oracle.input_cid, ("run-1", "in-1"), "ce57abe2", "6aad"),
    (ids_oracle.withdraw_cid, ("run-1", "step-1"), "582ffed8", "1a8c"),
    (ids_oracle.effect, ("run-1", "step-1", "", 1), "553f030a", "3394"),
    (ids_oracle.effect, ("run-1", "step-1", "call-1", 0), "20fd10fd", "be78"),
    (ids_oracle.start_cid, ("effect-1",), "5fbd4523", "fd3b"),
    (ids_oracle.settlement_cid, ("effect-1",), "6e05abc3", "a01d"),
    (ids_oracle.recovery_cid, ("effect-1",), "3059f690", "6735"),
    (ids_oracle.decline_cid, ("run-1", "step-1", "call-1"), "c5eab65b", "d49a"),
]


@pytest.mark.parametrize(("fn", "args", "head", "tail"), GOLDEN)
def test_oracle_golden_vectors(fn: Callable[..., str], args: tuple[Any, ...], head: str,
                               tail: str) -> None:
    value = fn(*args)
    assert (value[:8], value[-4:], len(value)) == (head, tail, 64)


def test_oracle_refuses_bad_parts() -> None:
    with pytest.raises((ValueError, TypeError)):
        ids_oracle.namespaced_hash("ns", -1)
    with pytest.raises((ValueError, TypeError)):
        ids_oracle.namespaced_hash("ns", True)
    assert ids_oracle.namespaced_hash("ns", "") != ids_oracle.namespaced_hash("ns")


def _observed(db: Path) -> tuple[list[Any], dict[str, Any]]:
    """The clean store's commits as ``runx_spec.trace`` sees them, and its Run index."""
    from runx_spec.trace import RunHead

    from runx_actors.check._tracecheck import _Counts, _Db, _scope_commits

    conn = _Db(str(db))
    seen = _Counts()
    try:
        commits = list(_scope_commits(conn, SCOPE, None, seen))
        heads = {r: RunHead(int(h), bool(a)) for r, h, a in conn.rows(
            "SELECT run_id, head, active FROM runs WHERE scope = ?", SCOPE)}
    finally:
        conn.close()
    assert seen.bad == [] and seen.broken == set()
    return commits, heads


def test_the_reader_streams_one_commit_at_a_time(clean_store: Path) -> None:
    """check --log holds one commit's events, not the scope's: when a commit reaches the
    judge, the event rows pulled from the store's cursor are those of the commits yielded so
    far plus one look-ahead row (a reader that loads the whole scope first has pulled all of
    them at the first)."""
    from runx_actors.check._tracecheck import _Counts, _Db, _scope_commits

    conn = _Db(str(clean_store))
    pulled = [0]
    stream = conn.stream

    def counting(sql: str, *params: Any) -> Any:
        for row in stream(sql, *params):
            if "FROM events" in sql:
                pulled[0] += 1
            yield row

    conn.stream = counting  # type: ignore[method-assign]
    seen = _Counts()
    yielded = 0
    try:
        for n, commit in enumerate(_scope_commits(conn, SCOPE, None, seen)):
            yielded += len(commit.facts)
            assert seen.facts == yielded and pulled[0] <= yielded + 1, (n, pulled, yielded)
    finally:
        conn.close()
    assert yielded > 50 and pulled[0] == yielded


def test_fetch_batch_boundaries_do_not_change_the_verdict(
        clean_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same report, violations and counts with one row per fetch as with the default
    batch, on a clean store and on a doctored one (the merge of the two cursors is exact)."""
    from runx_actors.check import _tracecheck

    db = _copy(clean_store, tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE events SET data = X'00' WHERE stream = 'run/approved' AND idx = 4")
        conn.execute("DELETE FROM events WHERE stream = 'run/run-0' AND idx = 6")
    wide = [check_log(clean_store), check_log(db), check_log(db, run="run-1")]
    monkeypatch.setattr(_tracecheck, "FETCH_ROWS", 1)
    narrow = [check_log(clean_store), check_log(db), check_log(db, run="run-1")]
    assert narrow == wide
    assert {v.rule for v in wide[1].violations} == {"RUN-WIR-2", "INV-10"}


def test_orphan_events_between_commits(clean_store: Path, tmp_path: Path) -> None:
    """Events that name a commit the index does not hold are reported where they sit in the
    merge (before, between and after the commits), and the commits around them still judge."""
    db = _copy(clean_store, tmp_path)
    with sqlite3.connect(db) as conn:
        top = conn.execute("SELECT max(seq) FROM commits").fetchone()[0]
        for seq, stream in ((0, "run/ghost-a"), (top + 5, "run/ghost-b")):
            conn.execute("INSERT INTO events (scope, stream, idx, type, data, commit_seq, "
                         "chain) SELECT scope, ?, idx, type, data, ?, chain FROM events "
                         "WHERE stream = 'run/run-0' AND idx = 0", (stream, seq))
        # a middle commit row lost: its group becomes orphan events between two commits
        middle = conn.execute("SELECT seq, run_id, first_idx FROM commits WHERE run_id = "
                              "'run-1' AND first_idx > 0 ORDER BY seq LIMIT 1").fetchone()
        conn.execute("DELETE FROM commits WHERE seq = ?", (middle[0],))
    found = [(v.rule, v.run, v.seq) for v in check_log(db).violations
             if "belong to no commit" in v.message]
    assert found == [("INV-10", "ghost-a", 0), ("INV-10", "run-1", middle[0]),
                     ("INV-10", "ghost-b", top + 5)], found
    report = check_log(db)
    # the Run that lost a commit row is judged broken from there on, the others stay clean
    assert {v.run for v in report.violations} == {"ghost-a", "ghost-b", "run-1"}


def test_an_unreadable_run_is_not_judged_against_its_index(clean_store: Path,
                                                           tmp_path: Path) -> None:
    """A Run whose stored fact does not decode gets its RUN-WIR-2 and nothing else: its
    partial replay is not compared with the Run index (the unread set reaches the judge
    while it streams), and the count of Runs judged leaves it out."""
    db = _copy(clean_store, tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE events SET data = X'00' WHERE stream = 'run/approved' AND idx = 4")
    report = check_log(db)
    assert [(v.rule, v.run, v.position) for v in report.violations] == [
        ("RUN-WIR-2", "approved", 4)], [v.show() for v in report.violations]
    assert report.runs == check_log(clean_store).runs - 1


def test_scope_rules_of_the_reference_replay(clean_store: Path) -> None:
    """runx_spec.trace.validate_scope on edited commit lists: INV-10 (a group not where the
    stream ends), INV-9 (a commit id used twice), INV-2 (a fact after RunEnded), INV-1 (a
    stream that does not start with RunCreated), INV-39 (the Run index disagrees)."""
    import attrs
    from runx_spec.trace import Observed, RunHead, validate_scope

    commits, heads = _observed(clean_store)
    assert validate_scope(SCOPE, commits, epoch=1, heads=heads) == []

    def rules(edited: list[Any], **kw: Any) -> list[tuple[str, str]]:
        return [(v.rule, v.run) for v in validate_scope(SCOPE, edited, epoch=1, **kw)]

    i = next(n for n, c in enumerate(commits) if c.run == "run-1" and c.first == 4)
    shifted = [*commits[:i], attrs.evolve(commits[i], first=5), *commits[i + 1:]]
    assert rules(shifted) == [("INV-10", "run-1")]
    again = [*commits, attrs.evolve(commits[0], seq=10_000, run=None, facts=())]
    assert rules(again) == [("INV-9", "")]
    last = max((c for c in commits if c.run == "run-0"), key=lambda c: c.first)
    late = attrs.evolve(last, seq=10_001, commit_id="late", first=last.first + len(last.facts),
                        facts=(Observed("InputAccepted", detail="late"),))
    assert rules([*commits, late]) == [("INV-2", "run-0")]
    headless = [attrs.evolve(c, facts=c.facts[1:]) if (c.run, c.first) == ("run-0", 0) else c
                for c in commits]
    assert rules(headless) == [("INV-1", "run-0")]
    moved = {**heads, "run-0": RunHead(heads["run-0"].head + 1, heads["run-0"].active)}
    assert rules(commits, heads=moved) == [("INV-39", "run-0")]
    assert rules(shifted, runs=["run-0"]) == []  # --run judges only that Run
    # a replayed Run the index does not list, an index entry with no stream (INV-39)
    lost = {r: h for r, h in heads.items() if r != "run-0"}
    assert rules(commits, heads=lost) == [("INV-39", "run-0")]
    phantom = {**heads, "phantom": RunHead(3, True)}
    assert rules(commits, heads=phantom) == [("INV-39", "phantom")]
    assert rules(commits, heads=phantom, runs=["run-0"]) == []
    assert rules(commits, heads=phantom, unread={"phantom"}) == []
    # no persisted epoch (None): epochs are only checked never to decrease
    assert validate_scope(SCOPE, commits, epoch=None, heads=heads) == []
    assert [v.rule for v in validate_scope(SCOPE, commits, epoch=0)] == ["INV-28"] * len(
        commits)


def _doctored(clean: Path, tmp_path: Path, *statements: str) -> Path:
    db = _copy(clean, tmp_path)
    with sqlite3.connect(db) as conn:
        for statement in statements:
            conn.execute(statement)
    return db


def _judged(db: Path, *args: str) -> tuple[list[tuple[str, str, int, int]], Any]:
    """(rule, run, position, seq) of every violation, and the CLI's result on *db*."""
    found = [(v.rule, v.run, v.position, v.seq) for v in check_log(db).violations]
    return found, CliRunner().invoke(main, ["check", "--log", str(db), *args])


@pytest.mark.parametrize(("statement", "expected"), [
    ("UPDATE commits SET epoch = 'abc' WHERE seq = 4", {("INV-10", 4)}),
    ("UPDATE commits SET first_idx = 'abc' WHERE seq = 4", {("INV-10", 4)}),
    ("UPDATE commits SET count = 1.5 WHERE seq = 4", {("INV-10", 4)}),
    ("UPDATE runs SET head = 'x'", {("INV-39", -1)}),
    ("UPDATE runs SET active = 'yes' WHERE run_id = 'run-1'", {("INV-39", -1)}),
    ("UPDATE events SET idx = 'abc' WHERE stream = 'run/run-0' AND idx = 3", {("INV-10", 4)}),
    # the row sorts last: its commit misses a fact, then the row itself is named
    ("UPDATE events SET commit_seq = 'abc' WHERE stream = 'run/run-0' AND idx = 3",
     {("INV-10", 4), ("INV-10", -1)}),
    ("UPDATE scopes SET epoch = 'abc'", {("INV-28", -1)}),
])
def test_a_non_integer_cell_is_a_violation_not_a_crash(
        statement: str, expected: set[tuple[str, int]], clean_store: Path,
        tmp_path: Path) -> None:
    """C4: a text or real value in an integer column is named (scope, Run, seq, rule) and
    the command exits 1, never 70; the scopes row's epoch is INV-28 and its commits are
    still judged (against the epochs they carry)."""
    db = _doctored(clean_store, tmp_path, statement)
    found, result = _judged(db)
    assert found and {(rule, seq) for rule, _, _, seq in found} == expected, found
    assert result.exit_code == 1, result.output
    rule = next(iter(expected))[0]
    assert "Traceback" not in result.output and f"[{SCOPE}] {rule}" in result.output
    if statement.startswith("UPDATE runs SET head"):  # every Run's index row is named once
        assert sorted(run for _, run, _, _ in found) == sorted(
            ["approved", "cancelled", "rejected", "run-0", "run-1"])


def test_a_lost_epoch_row_is_a_violation_and_the_scope_still_judged(
        clean_store: Path, tmp_path: Path) -> None:
    """C1: the scopes are those of `scopes` and those of `commits`: a scope with commits and
    no epoch row is INV-28, and its commits are judged (a decreasing epoch still found)."""
    db = _doctored(clean_store, tmp_path, "DELETE FROM scopes")
    found, result = _judged(db)
    assert found == [("INV-28", "", -1, -1)], found
    assert result.exit_code == 1 and "no epoch row" in result.output
    report = check_log(db)
    assert report.scopes == (SCOPE,) and report.runs == 5 and report.facts > 50
    with sqlite3.connect(db) as conn:
        seq = conn.execute("SELECT max(seq) FROM commits").fetchone()[0]
        conn.execute("UPDATE commits SET epoch = 0 WHERE seq = ?", (seq,))
    assert {(v.rule, v.seq) for v in check_log(db).violations} == {
        ("INV-28", -1), ("INV-28", seq)}
    assert check_log(db, scope=SCOPE).scopes == (SCOPE,)


def test_a_gap_inside_one_commit_group_is_inv10(clean_store: Path, tmp_path: Path) -> None:
    """C2: a group's positions are exactly first..first+count-1; the last fact of a group
    moved one position on (same size, same first index) is INV-10 at the group."""
    db = _copy(clean_store, tmp_path)
    with sqlite3.connect(db) as conn:
        run, first, count, seq = conn.execute(
            "SELECT c.run_id, c.first_idx, c.count, c.seq FROM commits c WHERE c.count >= 2 "
            "AND c.first_idx + c.count - 1 = (SELECT max(idx) FROM events e WHERE "
            "e.stream = 'run/' || c.run_id) ORDER BY c.seq LIMIT 1").fetchone()
        conn.execute("UPDATE events SET idx = idx + 1 WHERE stream = ? AND idx = ?",
                     ("run/" + run, first + count - 1))
    found, result = _judged(db)
    assert found == [("INV-10", run, first, seq)], found
    assert result.exit_code == 1


@pytest.mark.parametrize(("statement", "run"), [
    ("DELETE FROM runs WHERE run_id = 'run-1'", "run-1"),
    (f"INSERT INTO runs VALUES ('{SCOPE}', 'phantom', 3, 1)", "phantom"),
])
def test_a_missing_or_extra_run_index_row_is_inv39(statement: str, run: str,
                                                   clean_store: Path, tmp_path: Path) -> None:
    """C3: a replayed Run with no `runs` row, a `runs` row with no stream: INV-39; --run
    judges only its Run's row."""
    db = _doctored(clean_store, tmp_path, statement)
    found, result = _judged(db)
    assert [(rule, r) for rule, r, _, _ in found] == [("INV-39", run)], found
    assert result.exit_code == 1
    assert check_log(db, run="run-0").violations == ()


def test_a_dsn_password_is_never_printed(tmp_path: Path) -> None:
    """C6: the DSN's password is masked in the error, the JSON target and the message."""
    runner = CliRunner()
    for dsn in (f"postgresql://runx:s3cret@/db?host={tmp_path}/nosock&connect_timeout=2",
                f"host={tmp_path}/nosock dbname=db user=runx password=s3cret "
                f"connect_timeout=2"):
        text = runner.invoke(main, ["check", "--log", dsn])
        as_json = runner.invoke(main, ["check", "--log", dsn, "--json"])
        assert text.exit_code == as_json.exit_code == EX_NOINPUT, text.output
        assert "s3cret" not in text.output + as_json.output
        assert "password=***" in text.output
        assert "password=***" in json.loads(as_json.stdout)["target"]
        with pytest.raises(LogUnreadableError) as info:
            check_log(dsn)
        assert "s3cret" not in info.value.message + str(info.value.attrs)


@pytest.mark.parametrize("dsn", ["postgresql://user:hunter2@[::1",
                                 "postgresql://user:hunter2%ZZ@host/db"])
def test_a_dsn_that_does_not_parse_is_never_echoed(dsn: str) -> None:
    """A fresh user's find: libpq's parse error quotes the whole DSN, password and all."""
    runner = CliRunner()
    text = runner.invoke(main, ["check", "--log", dsn])
    as_json = runner.invoke(main, ["check", "--log", dsn, "--json"])
    assert text.exit_code == as_json.exit_code == EX_NOINPUT, text.output
    assert "hunter2" not in text.output + as_json.output
    assert "does not parse" in text.output
    assert json.loads(as_json.stdout)["reason"] == "open"


def test_an_unknown_run_is_unreadable_and_run_counts_its_commits(clean_store: Path) -> None:
    """C7: --run of a Run the store does not have exits 66 like --scope does; with --run
    the commit count is that Run's."""
    runner = CliRunner()
    result = runner.invoke(main, ["check", "--log", str(clean_store), "--run", "nope"])
    assert result.exit_code == EX_NOINPUT, result.output
    assert "the store has no Run 'nope'" in result.output
    with pytest.raises(LogUnreadableError) as info:
        check_log(clean_store, run="nope")
    assert info.value.attrs["reason"] == "no such run"
    with sqlite3.connect(clean_store) as conn:
        own = conn.execute("SELECT count(*) FROM commits WHERE run_id = 'run-0'").fetchone()[0]
    report = check_log(clean_store, run="run-0")
    assert report.ok and report.runs == 1 and report.commits == own
    assert check_log(clean_store).commits > own


@pytest.mark.parametrize("flag", ["--run", "--scope"])
def test_an_undecodable_argument_is_a_usage_error(flag: str, clean_store: Path) -> None:
    """C8: --run/--scope from undecodable argv bytes (a lone surrogate) is exit 64 naming
    the option, not a store read error."""
    result = CliRunner().invoke(main, ["check", "--log", str(clean_store), flag, "\udcff"])
    assert result.exit_code == 64, result.output
    assert flag in result.output and "cannot read" not in result.output
    with pytest.raises(ValueError, match="not valid UTF-8"):
        check_log(clean_store, **{flag[2:]: "\udcff"})


def test_errors_follow_the_cli_convention(tmp_path: Path) -> None:
    """C9: `runx-actors: check: <message>` then a `hint:` line, as every other command."""
    result = CliRunner().invoke(main, ["check", "--log", str(tmp_path / "nope.sqlite3")])
    assert result.exit_code == EX_NOINPUT
    lines = result.output.splitlines()
    assert lines[0].startswith("runx-actors: check: no such store file"), lines
    assert lines[1].startswith("hint: "), lines


@pytest.mark.parametrize(("statements", "rules"), [
    # a huge count is judged without building the range it names (was MemoryError, exit 70)
    (["UPDATE commits SET count = 9223372036854775807 WHERE seq = 4"], {"INV-10"}),
    # a scope cell that is not text (bytes, NULL) is named, never a sort crash (was exit 70)
    (["UPDATE commits SET scope = x'7330' WHERE seq = 4"], {"RUN-WIR-2", "INV-10"}),
    (["INSERT INTO scopes VALUES (NULL, 1)"], {"RUN-WIR-2"}),
    # rows of a scope that has no epoch row and no commit: still judged (was exit 0)
    (["INSERT INTO events SELECT 'zz', stream, idx, type, data, commit_seq, chain FROM "
      "events WHERE stream = 'run/run-0'"], {"INV-28", "INV-10"}),
    (["INSERT INTO runs VALUES ('yy', 'ghost', 3, 0)"], {"INV-28", "INV-39"}),
    # 'RUN/' is not a Run stream: SQLite's LIKE ignores case, the reader must not (was exit 0)
    (["UPDATE events SET stream = 'RUN/run-0' WHERE stream = 'run/run-0' AND idx = 3"],
     {"INV-10"}),
])
def test_damage_a_second_tester_found(statements: list[str], rules: set[str],
                                      clean_store: Path, tmp_path: Path) -> None:
    db = _doctored(clean_store, tmp_path, *statements)
    found, result = _judged(db)
    assert {rule for rule, *_ in found} == rules, found
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    as_json = CliRunner().invoke(main, ["check", "--log", str(db), "--json"])
    assert as_json.exit_code == 1, as_json.output
    assert json.loads(as_json.stdout)["ok"] is False


def test_json_output_with_a_bytes_cell(clean_store: Path, tmp_path: Path) -> None:
    """A commit id stored as bytes is reported in --json too (was a TypeError, exit 70)."""
    db = _doctored(clean_store, tmp_path, "UPDATE commits SET commit_id = x'ff00' WHERE seq = 4")
    result = CliRunner().invoke(main, ["check", "--log", str(db), "--json"])
    assert result.exit_code == 1, result.output
    payload = json.loads(result.output)
    assert any(v["commit_id"] == repr(b"\xff\x00") for v in payload["violations"]), payload


def test_a_non_utf8_argument_is_not_echoed() -> None:
    """The refusal names the argument's place and byte, never its value (a DSN's password)."""
    result = CliRunner().invoke(main, ["check", "--log",
                                       "host=/tmp port=1 password=S3cret\udcff"])
    assert result.exit_code == 64, result.output
    assert "S3cret" not in result.output and "argument 3 (after --log)" in result.output
