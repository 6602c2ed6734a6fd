"""``runx-actors check --log``: a stored log validated against the reference machine.

Trace validation (issue 13 item 6): every recorded Run of a SQLite file or a PostgreSQL
database is replayed, fact by fact, through the spec's reference machine
(``runx_spec.trace``, not the production fold), with every identity re-derived by the
spec's independent oracle (``runx_spec.ids_oracle``). The store is only read: a SQLite file
is opened read-only (``mode=ro``), a PostgreSQL session in a read-only transaction.

What is read: ``scopes`` (the persisted epoch), ``commits`` in ``seq`` order, the events of
``run/`` streams grouped by the commit that appended them, and the ``runs`` index. The
commits and the events are streamed by two cursors (:data:`FETCH_ROWS` rows per fetch) and
merged on the commit's ``seq``: memory holds one batch and one replayed state per Run, not
the scope's log. With ``run`` only that Run's events are read. Each
event's bytes are decoded strictly with the production codec (decoding is not under test
here; a row that does not decode, or whose type column names another fact, is itself a
violation, rule RUN-WIR-2).

Exit codes of the command: 0 no violation; 1 at least one (each names scope, Run, stream
position, commit and rule); 64 usage (``--scope`` / ``--run`` not valid UTF-8); 66
(EX_NOINPUT) the store cannot be read, or has no such scope / Run
(:class:`LogUnreadableError`). A DSN is printed with its password masked
(:func:`runx_actors.store._check.redact_dsn`); errors read ``runx-actors: check: <message>``
plus a ``hint:`` line, as the host's commands print them.
"""

from __future__ import annotations

import importlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from ..protocol import facts as F
from ..protocol.facts import EVENT_TYPE_PREFIX
from ..store._check import mask_secrets, redact_dsn
from ._errors import CheckError

__all__ = ["LogUnreadableError", "LogReport", "check_log", "observe_fact", "EX_NOINPUT"]

#: exit code of ``check --log`` when the store cannot be opened or read (sysexits)
EX_NOINPUT = 66

_trace: Any = importlib.import_module("runx_spec.trace")

#: rows fetched per round trip by :func:`check_log`'s streaming reads (memory is one batch)
FETCH_ROWS = 512


class LogUnreadableError(CheckError):
    """The store at ``.target`` cannot be opened or read as a runx_actors store
    (``.reason``; ``__cause__`` the driver's error). Exit code 66 from the CLI."""


@attrs.frozen
class LogReport:
    """The outcome of :func:`check_log`: scopes and Runs judged, commits and facts
    replayed, and every violation (``runx_spec.trace.Violation``)."""

    target: str
    scopes: tuple[str, ...]
    runs: int
    commits: int
    facts: int
    violations: tuple[Any, ...]

    @property
    def ok(self) -> bool:
        """True when no violation was found (exit 0)."""
        return not self.violations

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data: target, ok, scopes, counts of Runs, commits and
        facts, and each violation (Run, position, rule, message) — the ``--json`` shape."""
        return {
            "target": self.target, "ok": self.ok, "scopes": list(self.scopes),
            "runs": self.runs, "commits": self.commits, "facts": self.facts,
            "violations": [attrs.asdict(v) for v in self.violations],
        }


def _int(x: Any) -> int | None:
    """*x* as an integer column value, None when the row holds anything else (SQLite keeps
    a text or real value in an INTEGER column as it was written)."""
    return x if type(x) is int else None


def _value(x: Any) -> Any:
    return getattr(x, "value", x)


def _end(end: Any) -> tuple[Any, ...]:
    if hasattr(end, "failure"):
        return ("failed", _value(end.reason), end.failure.class_)
    if hasattr(end, "uncertain_calls"):
        return ("stopped", _value(end.reason), tuple(end.uncertain_calls), end.uncertain_model)
    return ("completed",)


def observe_fact(fact: Any) -> Any:
    """A production fact as the reference's :class:`runx_spec.trace.Observed`."""
    ob = _trace.Observed
    match fact:
        case F.RunCreated():
            return ob("RunCreated", detail=fact.run_id)
        case F.InputAccepted():
            return ob("InputAccepted", detail=fact.input.id)
        case F.ModelStepPrepared():
            tools = tuple((t.ref, t.name, t.definition_digest, _value(t.policy))
                          for t in fact.tools)
            return ob("ModelStepPrepared", fact.step_id, detail=(tuple(fact.input_ids), tools))
        case F.ModelStepFailed():
            return ob("ModelStepFailed", fact.step_id, "", fact.effect, fact.failure.class_)
        case F.ToolStepOpened():
            bindings = tuple(
                (b.call_id, b.tool_ref, b.definition_digest, _value(b.policy),
                 b.response.id if b.response is not None else "")
                for b in fact.calls)
            return ob("ToolStepOpened", fact.step_id, detail=(fact.source, bindings))
        case F.ToolCallApproved() | F.ToolCallAnswered():
            return ob(type(fact).__name__, fact.step_id, fact.call_id, "", fact.response_id)
        case F.ToolCallFailed():
            return ob("ToolCallFailed", fact.step_id, fact.call_id, fact.effect,
                     (_value(fact.outcome), fact.failure.class_))
        case F.RunEnded():
            return ob("RunEnded", detail=_end(fact.end))
    return ob(type(fact).__name__, getattr(fact, "step_id", ""), getattr(fact, "call_id", ""),
             getattr(fact, "effect", ""))


class _Db:
    """The few reads, over sqlite3 or psycopg (the schemas are the same)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.pg = target.startswith(("postgres://", "postgresql://")) or (
            "=" in target and not Path(target).exists())
        #: the target as it may be printed: a DSN with its password masked
        self.shown = redact_dsn(target) if self.pg else target
        self._cursors = 0
        try:
            if self.pg:
                import psycopg

                self.conn: Any = psycopg.connect(target, autocommit=False)
                self.conn.execute("SET TRANSACTION READ ONLY")
            else:
                if not Path(target).is_file():
                    raise LogUnreadableError(f"no such store file: {target}", target=target,
                                             reason="missing")
                self.conn = sqlite3.connect(f"file:{Path(target).absolute()}?mode=ro",
                                            uri=True)
                self.conn.execute("BEGIN")  # one snapshot for every read
        except LogUnreadableError:
            raise
        except Exception as exc:
            if self.pg and not _parses(target):  # libpq quotes the DSN, password and all
                raise LogUnreadableError(
                    f"cannot open {self.shown}: the DSN does not parse as a libpq "
                    f"connection string or URI (its text is not shown: it may hold a "
                    f"password)", target=self.shown, reason="open") from None
            raise LogUnreadableError(f"cannot open {self.shown}: {self._masked(exc)}",
                                     target=self.shown, reason="open") from exc

    def rows(self, sql: str, *params: Any) -> list[Any]:
        """Every row of a small read (the scopes, the Run index)."""
        return list(self.stream(sql, *params))

    def stream(self, sql: str, *params: Any) -> Iterator[Any]:
        """The rows of *sql* one at a time, fetched in batches of :data:`FETCH_ROWS`: the
        reader holds one batch, never the table (a server-side cursor on PostgreSQL)."""
        if self.pg:
            sql = sql.replace("?", "%s")
        try:
            if self.pg:
                self._cursors += 1
                cursor = self.conn.cursor(name=f"runx_check_{self._cursors}")
                cursor.itersize = FETCH_ROWS
            else:
                cursor = self.conn.cursor()
                cursor.arraysize = FETCH_ROWS
            cursor.execute(sql, params)
            while batch := cursor.fetchmany(FETCH_ROWS):
                yield from batch
            cursor.close()
        except Exception as exc:
            raise LogUnreadableError(f"cannot read {self.shown}: {self._masked(exc)}",
                                     target=self.shown, reason="read") from exc

    def _masked(self, exc: BaseException) -> str:
        """The driver's message, with the DSN's secrets (its password, sslpassword, ...)
        masked should it echo one."""
        text = str(exc)
        return mask_secrets(text, self.target) if self.pg else text

    def close(self) -> None:
        self.conn.close()


def _parses(dsn: str) -> bool:
    """True when libpq's parser accepts *dsn* (its errors quote the whole DSN)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        conninfo_to_dict(dsn)
    except Exception:
        return False
    return True


class _Counts:
    """What one scope's streaming read saw: facts read, read violations, unreadable Runs."""

    def __init__(self) -> None:
        self.facts = 0
        self.commits = 0
        self.bad: list[Any] = []
        self.broken: set[str] = set()


def _scope_commits(db: _Db, scope: str, run: str | None,
                   seen: _Counts) -> Iterator[Any]:
    """The scope's commits in ``seq`` order, each with the facts it appended, streamed.

    The commits and the ``run/`` events (ordered by the commit that appended them) are read
    by two cursors and merged on the commit's ``seq``, so memory holds one commit's group,
    not the scope. With *run* only that Run's events are read; the other Runs' commits are
    yielded without facts (the scope rules still see every commit). Read violations go to
    ``seen.bad`` and their Runs to ``seen.broken`` as they are found.
    """
    V = _trace.Violation
    if run is None:
        # substr, not LIKE: SQLite's LIKE ignores case, and 'RUN/x' is not a Run stream
        rows = db.stream("SELECT stream, idx, type, data, commit_seq FROM events "
                         "WHERE scope = ? AND substr(stream, 1, 4) = ? "
                         "ORDER BY commit_seq, idx", scope, "run/")
    else:
        rows = db.stream("SELECT stream, idx, type, data, commit_seq FROM events "
                         "WHERE scope = ? AND stream = ? ORDER BY commit_seq, idx",
                         scope, "run/" + run)

    def readable(rows: Iterator[Any]) -> Iterator[tuple[str, int, Any, Any, int]]:
        """The event rows whose position and commit are integers; the others are
        reported (INV-10: they cannot be placed in their stream) and their Run broken."""
        for stream, idx, type_, data, cseq in rows:
            i, c = _int(idx), _int(cseq)
            if i is None or c is None:
                bad_run = stream[len("run/"):]
                seen.bad.append(V(scope, bad_run, i if i is not None else -1, "",
                                  c if c is not None else -1, "INV-10",
                                  f"the event row holds a non-integer "
                                  f"{'idx' if i is None else 'commit_seq'} "
                                  f"{idx if i is None else cseq!r}"))
                seen.broken.add(bad_run)
                continue
            yield stream, i, type_, data, c

    events = readable(rows)
    pending = next(events, None)

    def take(seq: int) -> list[Any]:
        """The next events, all appended under commit *seq* (none if the next differ)."""
        nonlocal pending
        group = []
        while pending is not None and pending[4] == seq:
            group.append(pending)
            pending = next(events, None)
        seen.facts += len(group)
        return group

    def orphans_before(seq: int | None) -> None:
        """Report the events of commits below *seq* (None: all left): no commit has them."""
        while pending is not None and (seq is None or pending[4] < seq):
            orphans = take(pending[4])
            seen.bad.append(V(scope, orphans[0][0][len("run/"):], orphans[0][1], "",
                              orphans[0][4], "INV-10",
                              f"{len(orphans)} events belong to no commit"))

    for raw in db.stream(
            "SELECT seq, commit_id, epoch, run_id, first_idx, count FROM commits "
            "WHERE scope = ? ORDER BY seq", scope):
        seq, cid, epoch, run_id, first, count = (
            raw[0], raw[1], _int(raw[2]), raw[3], _int(raw[4]), _int(raw[5]))
        if type(seq) is not int:  # an INTEGER PRIMARY KEY in both schemas: never
            raise LogUnreadableError(f"commit row {seq!r} of scope {scope!r} has no integer "
                                     f"seq", target=db.shown, reason="read")
        orphans_before(seq)
        group = take(seq)
        if run is not None and run_id != run:
            # another Run's commit: its events were not read, only the scope rules apply
            if epoch is not None and first is not None:
                yield _trace.ObservedCommit(seq, cid, epoch, run_id, first, ())
            continue
        seen.commits += 1
        if epoch is None or first is None or count is None:
            name = ("epoch" if epoch is None else "first_idx" if first is None else "count")
            seen.bad.append(V(scope, run_id or "", first if first is not None else -1, cid,
                              seq, "INV-10", f"the commit row holds a non-integer {name} "
                              f"{raw[2 if epoch is None else 4 if first is None else 5]!r}"))
            if run_id:
                seen.broken.add(run_id)
            continue
        observed = []
        current = run_id if group or run_id else None
        failed = False
        for stream, idx, type_, data, _ in group:
            stream_run = stream[len("run/"):]
            try:
                if stream_run != run_id:
                    raise ValueError(f"the event is in stream {stream!r}, the commit names "
                                     f"run {run_id!r}")
                fact = _decode(bytes(data))
                if type_ != EVENT_TYPE_PREFIX + fact.WIRE_NAME:
                    raise ValueError(f"type column {type_!r} but the bytes hold "
                                     f"{fact.WIRE_NAME!r}")
            except Exception as exc:
                seen.bad.append(V(scope, stream_run, idx, cid, seq, "RUN-WIR-2",
                                  f"the stored event is not a readable fact of this commit: "
                                  f"{exc}"))
                seen.broken.add(stream_run)
                failed = True
                break
            observed.append(observe_fact(fact))
        if failed or (current is not None and current in seen.broken):
            continue
        positions = [g[1] for g in group]
        if len(positions) != count or any(at != first + i for i, at in enumerate(positions)):
            seen.bad.append(V(scope, current or "", first, cid, seq, "INV-10",
                              f"the commit index says {count} facts from {first}; the events "
                              f"hold {len(group)}" + (f" at {_span(positions)}" if group
                                                      else "")))
            if current is not None:
                seen.broken.add(current)
            continue
        yield _trace.ObservedCommit(seq, cid, epoch, current, first, tuple(observed))
    orphans_before(None)


def _span(positions: list[int]) -> str:
    """*positions* shortly: ``4..7`` when contiguous, else the list."""
    if positions == list(range(positions[0], positions[0] + len(positions))):
        return f"{positions[0]}..{positions[-1]}"
    return ", ".join(map(str, positions))


def _printable(text: str) -> bool:
    """True when *text* encodes as UTF-8 (a lone surrogate from undecodable argv does not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _decode(data: bytes) -> Any:
    from ..protocol._codec import decode_fact

    return decode_fact(data)


def check_log(target: str | Path, *, scope: str | None = None,
              run: str | None = None) -> LogReport:
    """Replay every recorded Run of the store at *target* through the reference machine.

    *target*: a SQLite store file, or a libpq DSN / ``postgresql://`` URL. *scope* /
    *run* restrict what is judged (a Run of another scope is not looked for).

    The scopes judged are those of the ``scopes`` table and those that have commits; a
    scope with commits but no epoch row, or a non-integer one, is an INV-28 violation and
    its commits are judged without the upper bound. A row holding a non-integer where an
    integer belongs is a violation (INV-10 for a commits or events row, INV-39 for a runs
    row), never a crash.

    Returns a :class:`LogReport` (``ok`` iff no violation; its ``target`` a DSN's password
    masked). Raises :class:`LogUnreadableError` when the store cannot be opened or read,
    *scope* names no scope of it (reason ``no such scope``) or *run* no Run of it (``no
    such run``); :class:`ValueError` when *scope* or *run* is not valid UTF-8 (a lone
    surrogate, from an undecodable command-line argument).
    """
    for option, value in (("scope", scope), ("run", run)):
        if value is not None and not _printable(value):
            raise ValueError(f"{option} {value!r} is not valid UTF-8")
    db = _Db(str(target))
    shown = db.shown
    V = _trace.Violation
    try:
        # the scopes: those with an epoch row and those with commits (C1: a scope whose
        # epoch row is lost is still judged, and the loss is a violation)
        epochs = dict(db.rows("SELECT scope, epoch FROM scopes"))
        present = set(epochs)
        for table in ("commits", "events", "runs"):  # rows of a scope with no epoch row
            present |= {s for (s,) in db.rows(f"SELECT DISTINCT scope FROM {table}")}
        odd = sorted(repr(s) for s in present if not isinstance(s, str))
        names = sorted(s for s in present if isinstance(s, str))
        if scope is not None:
            names = [s for s in names if s == scope]
            if not names:
                raise LogUnreadableError(f"the store has no scope {scope!r}", target=shown,
                                         reason="no such scope", scope=scope)
        if run is not None and not any(
                db.rows(f"SELECT 1 FROM {table} WHERE scope = ? AND {column} = ? LIMIT 1",
                        name, value)
                for name in names for table, column, value in (
                    ("runs", "run_id", run), ("commits", "run_id", run),
                    ("events", "stream", "run/" + run))):
            raise LogUnreadableError(f"the store has no Run {run!r}"
                                     + (f" in scope {scope!r}" if scope is not None else ""),
                                     target=shown, reason="no such run", run=run)
        violations: list[Any] = [
            V(o, "", -1, "", -1, "RUN-WIR-2", "a scope column holds a value that is not "
              "text: its rows cannot be read as a scope") for o in odd]
        runs = commits_n = facts_n = 0
        for name in names:
            seen = _Counts()
            epoch = _int(epochs.get(name))
            if name not in epochs:
                seen.bad.append(V(name, "", -1, "", -1, "INV-28",
                                  "the scope has rows (commits, events or Runs) but no epoch row"))
            elif epoch is None:
                seen.bad.append(V(name, "", -1, "", -1, "INV-28",
                                  f"the scope's epoch row holds a non-integer epoch "
                                  f"{epochs[name]!r}"))
            heads: dict[str, Any] = {}
            bad_index: set[str] = set()
            for r, h, a in db.rows("SELECT run_id, head, active FROM runs WHERE scope = ?",
                                   name):
                if run is not None and r != run:
                    continue
                if _int(h) is None or not (type(a) is bool or _int(a) in (0, 1)):
                    seen.bad.append(V(name, r, -1, "", -1, "INV-39",
                                      f"the Run index row holds head {h!r} active {a!r}, "
                                      f"not an integer and a flag"))
                    bad_index.add(r)
                    continue
                heads[r] = _trace.RunHead(h, bool(a))
            found = _trace.validate_scope(
                name, _scope_commits(db, name, run, seen), epoch=epoch, heads=heads,
                runs=None if run is None else [run], unread=seen.broken)
            violations += [v for v in seen.bad if run is None or v.run in (run, "")]
            # a Run whose index row is unreadable was reported above, not as a missing row
            violations += [v for v in found if not (v.rule == "INV-39" and v.run in bad_index)]
            runs += sum(1 for r in {*heads, *bad_index} if r not in seen.broken)
            commits_n += seen.commits
            facts_n += seen.facts
        return LogReport(shown, tuple(names), runs, commits_n, facts_n, tuple(violations))
    finally:
        db.close()


def render_report(report: LogReport) -> str:
    """The text form: one line per violation, then a summary line."""
    lines = [f"[{v.scope}] {v.show()}" for v in report.violations]
    verdict = "OK" if report.ok else f"{len(report.violations)} VIOLATION(S)"
    lines.append(f"{verdict}: {report.runs} runs, {report.commits} commits, {report.facts} "
                 f"facts in {len(report.scopes)} scope(s) of {report.target} replayed through "
                 f"the reference machine")
    return "\n".join(lines) + "\n"


def exit_code(report: LogReport) -> int:
    """``check --log``'s exit code for *report*: 0 clean, 1 a violation (64 and 66 are
    raised before a report exists)."""
    return 0 if report.ok else 1



def run_log_command(target: str, *, scope: str | None, run: str | None, as_json: bool,
                    echo: Any) -> int:
    """The body of ``runx-actors check --log``: print the report (text, or one JSON
    object with ``--json``) through *echo* and return the exit code (0, 1 or 66). An
    unreadable store is two lines on stderr and, with ``--json``, the CLI's JSON error
    object on stdout (``runx_actors._clierror.error_document``, ``target`` masked)."""
    import json

    try:
        report = check_log(target, scope=scope, run=run)
    except LogUnreadableError as exc:
        from .._clierror import error_document

        hint = _HINTS.get(str(exc.attrs.get("reason", "")), _HINTS["open"])
        echo(f"runx-actors: check: {' '.join(exc.message.split())}", err=True)
        echo(f"hint: {hint}", err=True)
        if as_json:  # the one error object of every command (RUN-CLI-2)
            echo(json.dumps(error_document("check", exc, EX_NOINPUT, hint),
                            ensure_ascii=False))
        return EX_NOINPUT
    # default=repr: a damaged cell may hold bytes where text belongs (it is reported as is)
    echo(json.dumps(report.to_dict(), indent=2, default=repr) if as_json
         else render_report(report),
         nl=as_json)
    return exit_code(report)


#: ``check --log``'s hint line for each reason of a :class:`LogUnreadableError`
_HINTS = {
    "missing": "pass --log a runx-actors SQLite store file or a PostgreSQL DSN",
    "open": "pass --log a runx-actors SQLite store file or a PostgreSQL DSN the server "
            "accepts",
    "read": "the store is not a runx-actors store, or is damaged: `runx-actors store check "
            "<store>` lists every damaged row",
    "no such scope": "drop --scope to judge every scope of the store",
    "no such run": "check the Run id, or drop --run to judge every Run",
}
