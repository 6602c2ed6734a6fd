"""``runx-actors runs …``: look inside a run store, and answer what a Run waits for
(issue 10; APP-INS-1, APP-INS-2).

Reads (``list``, ``show``, ``log``, ``timeline``) need no ownership and write nothing.
The writes (``approve``, ``reject``, ``respond``, ``cancel``) open the Run's scope as its
writer for the duration of the command — like any owner, that bumps the scope's epoch, so
a runtime that owned the scope gets ``OwnershipLostError`` on its next write and must be
reopened (its ``open_runtime`` settles what it left in flight). They commit under the
same derived ids as ``Runtime.approve`` & co., so repeating one is harmless
(``already_applied``); the Run moves on at its next drive.

The store is ``--store S`` (a SQLite file or a directory holding ``runs.sqlite3``, or a
PostgreSQL DSN: ``postgresql://…`` or ``host=… dbname=…``), else ``$RUNX_ACTORS_STORE``,
else ``<workspace>/.runx/store``.
Every command prints a rich table on a terminal, or one JSON document with ``--json``.

Exit codes: 0 done; 1 the store refused, is missing (``StoreMissingError``), cannot be
reached (``StoreUnreachableError``, within libpq's ``connect_timeout``, the DSN's password
shown as ``***``) or has no such Run or scope (``ScopeNotFoundError``) — message and hint
on stderr, and with ``--json`` one JSON error object on stdout (RUN-CLI-2); 3 the store is
damaged (``CorruptStoreError`` / ``CorruptRecordError``, as for ``store check``); 64 usage
error (bad option, a ``--scope`` or RUN_ID that is not a valid name (RUN-WIR-1), a Run id
found in several scopes without ``--scope``).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs
import click
from rich.console import Console
from rich.table import Table

from .protocol.errors import RunNotFoundError, RunxError, ValidationError
from .protocol.values import ResponseKind

__all__ = ["runs", "StoreMissingError", "open_store_for", "to_json", "MAX_PAYLOAD_BYTES"]

T = TypeVar("T")

#: Largest ``runs respond`` payload accepted (bytes of JSON text).
MAX_PAYLOAD_BYTES = 1 << 20
_PG_PREFIXES = ("postgres://", "postgresql://")


class StoreMissingError(RunxError):
    """``--store`` (or its default) names no existing store — no SQLite file there, or a
    PostgreSQL schema without a store's tables; nothing was created (exit 1). Attribute:
    ``path`` (a DSN: ``target``, its password masked)."""

    #: the ``hint:`` line (``host._cli_support.hint_for``)
    hint = ("pass --store (a SQLite file or a directory holding runs.sqlite3, or a "
            "postgresql:// DSN of a database holding a store) or set RUNX_ACTORS_STORE")


def _is_dsn(chosen: str) -> bool:
    return chosen.startswith(_PG_PREFIXES) or "dbname=" in chosen or "host=" in chosen


def _probe_postgres(dsn: str) -> None:
    """Connect once (fast and typed: ``store._check.connect_postgres``) and check that
    the connection's schema holds a store, so that a read never creates one (a pool
    would retry a refused connection until its timeout, 30 s, and then raise an untyped
    PoolTimeout)."""
    from .store._check import connect_postgres, redact_dsn

    with connect_postgres(dsn) as conn:
        row = conn.execute("SELECT current_schema(), EXISTS (SELECT 1 FROM pg_tables WHERE "
                           "schemaname = current_schema() AND tablename = 'runx_meta')"
                           ).fetchone()
    if row is None or not row[1]:
        target = redact_dsn(dsn)
        where = f"schema {row[0]!r}" if row is not None and row[0] else "no schema"
        raise StoreMissingError(f"no run store in {target} ({where} has no runx_meta "
                                "table)", target=target)


class CallNotWaitingError(ValidationError):
    """``runs approve|reject|respond`` named a call the Run does not wait for, or one
    that waits for the other kind of answer (``approve`` of a call waiting for a
    response); nothing was written (exit 1). Attributes: ``run_id``, ``call_id``,
    ``waiting`` (the ids of the calls it waits for), ``kind`` (what the named call waits
    for, when it waits). ``hint`` is the ``hint:`` line for this one error."""

    def __init__(self, message: str, *, hint: str, **attrs: Any) -> None:
        super().__init__(message, **attrs)
        self.hint = hint


def to_json(value: Any) -> Any:
    """*value* as plain JSON data: attrs classes as dicts, enums as their values, tuples
    as lists."""
    if attrs.has(type(value)):
        return {f.name: to_json(getattr(value, f.name)) for f in attrs.fields(type(value))}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if hasattr(value, "value") and type(value).__module__.startswith("runx_actors"):
        return value.value
    return value


@contextlib.asynccontextmanager
async def open_store_for(store: str | None) -> AsyncIterator[Any]:
    """Open the store *store* names (see the module docstring) for this block. A SQLite
    store must exist already. Raises StoreMissingError, SchemaVersionError."""
    import os

    from .host._cli_support import environment, resolve_store

    env = environment()
    chosen = store or env.get("RUNX_ACTORS_STORE", "")
    if _is_dsn(chosen):
        import trio

        from .store._check import CONNECT_TIMEOUT

        await trio.to_thread.run_sync(_probe_postgres, chosen)
        from .store.postgres import open_postgres_store

        # StoreUnreachableError (masked) if the server went away since the probe
        async with open_postgres_store(chosen, timeout=CONNECT_TIMEOUT) as pg:
            yield pg
        return
    path = resolve_store(store, env, Path(os.getcwd()))
    if not path.is_file():
        raise StoreMissingError(f"no run store at {str(path)!r}", path=str(path))
    from .store.sqlite import open_sqlite_store

    async with open_sqlite_store(path) as sqlite:
        yield sqlite


def _run(command: str, fn: Callable[[], Awaitable[T]]) -> T:
    """Run *fn* under trio; a RunxError or OSError is reported (exit 1), never a
    traceback."""
    from .host._cli_support import fail, run_trio

    try:
        result: T = run_trio(fn)
        return result
    except click.ClickException:
        raise
    except (RunxError, OSError) as exc:
        sys.exit(fail(command, exc))


async def require_scope(store: Any, scope: str) -> None:
    """Raise ScopeNotFoundError unless *store* has *scope* (an epoch row or a commit)."""
    from .inspect import scope_exists
    from .store._check import ScopeNotFoundError

    if not await scope_exists(store, scope):
        raise ScopeNotFoundError(f"the store has no scope {scope!r}", scope=scope)


async def _scope_of(store: Any, run_id: str, scope: str | None) -> str:
    if scope is not None:
        await require_scope(store, scope)
        return scope
    from .inspect import find_scopes

    scopes = await find_scopes(store, run_id)
    if not scopes:
        raise RunNotFoundError(f"no run {run_id!r} in any scope", run_id=run_id)
    if len(scopes) > 1:
        raise click.UsageError(f"run {run_id!r} exists in scopes "
                               f"{', '.join(map(repr, scopes))}; "
                               "pass --scope")
    return scopes[0]


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False, width=200 if not sys.stdout.isatty()
                   else None)


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(to_json(value), indent=2, ensure_ascii=False))


_store_option = click.option("--store", "store", default=None, metavar="S",
                             help="SQLite file/directory or postgresql:// DSN.")
def _name(what: str) -> Any:
    from .host._cli_support import name_option_callback

    return name_option_callback(what)


_scope_option = click.option("--scope", "scope", default=None, metavar="X",
                             callback=_name("scope"),
                             help="The Run's scope (found by id when omitted).")
_run_argument = click.argument("run_id", callback=_name("run id"))
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group("runs")
def runs() -> None:
    """Look inside a run store: list, show, log, timeline; approve, reject, respond,
    cancel.

    The reads need no ownership and write nothing. approve/reject/respond/cancel open the
    Run's scope as its writer for the command (bumping its epoch: a runtime that owned
    the scope gets OwnershipLostError on its next write). Exit codes: 0 done, 1 refused
    or not found, 64 usage error.
    """


@runs.command("list")
@_store_option
@click.option("--scope", "scope", default=None, metavar="X", callback=_name("scope"),
              help="Only this scope.")
@click.option("--status", "status", multiple=True,
              type=click.Choice(["active", "completed", "failed", "stopped"]),
              help="Only Runs with this status (repeatable).")
@_json_option
def runs_list(store: str | None, scope: str | None, status: tuple[str, ...],
              as_json: bool) -> None:
    """The Runs of the store: scope, id, status, head position, waiting calls."""
    from .inspect import list_runs

    async def main() -> Any:
        async with open_store_for(store) as opened:
            if scope is not None:
                await require_scope(opened, scope)
            return await list_runs(opened, scope=scope, status=status)

    rows = _run("runs list", main)
    if as_json:
        _echo_json({"runs": rows})
        return
    table = Table("scope", "run", "status", "head", "waiting", title="runs")
    for r in rows:
        table.add_row(r.scope, r.run_id, r.status, str(r.head), str(r.waiting))
    _console().print(table)


@runs.command("show")
@_run_argument
@_store_option
@_scope_option
@_json_option
def runs_show(run_id: str, store: str | None, scope: str | None, as_json: bool) -> None:
    """A Run's state, waiting calls, token usage and answer."""
    from .inspect import run_view

    async def main() -> Any:
        async with open_store_for(store) as opened:
            sc = await _scope_of(opened, run_id, scope)
            return await run_view(await opened.reader(sc), opened.frozen, sc, run_id)

    view = _run("runs show", main)
    if as_json:
        data = to_json(view)
        for call in data["waiting"]:
            call.pop("request", None)
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    table = Table("field", "value", title=f"run {run_id}", show_header=False)
    table.add_row("scope", view.scope)
    table.add_row("status", view.status + (f" ({view.reason})" if view.reason else ""))
    if view.failure:
        table.add_row("failure", json.dumps(view.failure))
    table.add_row("current step", view.current or "-")
    table.add_row("head / epoch", f"{view.head} / {view.epoch}")
    table.add_row("usage (tokens)", f"in {view.usage.input_tokens}, out "
                  f"{view.usage.output_tokens}")
    table.add_row("answer", _answer_text(view.answer))
    console = _console()
    console.print(table)
    if view.waiting:
        waiting = Table("call", "tool", "kind", "arguments", title="waiting for")
        for c in view.waiting:
            waiting.add_row(c.call_id, c.tool, c.kind.value, _clip(json.dumps(c.arguments)))
        console.print(waiting)


#: Characters of a waiting call's arguments a table shows (``--json`` has them all).
TABLE_ARGUMENTS = 160


def _clip(text: str, limit: int = TABLE_ARGUMENTS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _answer_text(answer: Any) -> str:
    if answer is None:
        return "-"
    if answer.text:
        return str(answer.text)
    if answer.tool_calls:
        return f"(no text yet: the last model step asked for {len(answer.tool_calls)} tool call(s))"
    return "(empty)"


def _summary(payload: Any) -> str:
    if not isinstance(payload, dict):
        return json.dumps(payload)
    parts = []
    for key in ("stepId", "callId", "effect"):
        if key in payload:
            parts.append(f"{key}={str(payload[key])[:12]}")
    for key in ("model", "finishReason", "failure", "end", "outcome"):
        if key in payload:
            parts.append(f"{key}={json.dumps(payload[key])}")
    if "calls" in payload:
        parts.append("calls=" + ",".join(str(c.get("toolRef", "")) for c in payload["calls"]))
    if "input" in payload:
        parts.append(f"input={payload['input'].get('id', '')}")
    return " ".join(parts)


@runs.command("log")
@_run_argument
@_store_option
@_scope_option
@_json_option
def runs_log(run_id: str, store: str | None, scope: str | None, as_json: bool) -> None:
    """A Run's facts in log order, with positions, epochs and commit ids."""
    from .inspect import log_entries

    async def main() -> Any:
        async with open_store_for(store) as opened:
            sc = await _scope_of(opened, run_id, scope)
            return sc, await log_entries(await opened.reader(sc), run_id)

    sc, entries = _run("runs log", main)
    if as_json:
        _echo_json({"scope": sc, "run_id": run_id, "facts": entries})
        return
    table = Table("pos", "fact", "epoch", "commit", "details", title=f"run {run_id} log")
    for e in entries:
        table.add_row(str(e.position), e.fact, str(e.epoch), e.commit_id[:24],
                      _summary(e.payload))
    _console().print(table)


def _output_path(ctx: click.Context, param: click.Parameter, value: str | None
                 ) -> Path | None:
    """``-o``: ``None`` (stdout) for no value or ``-``; an empty value is a usage error
    (64, before any store opens), as a directory is."""
    if value is None or value == "-":
        return None
    if not value:
        raise click.BadParameter("an empty path: give a file name, or - for stdout",
                                 ctx=ctx, param=param)
    return Path(value)


@runs.command("timeline")
@_run_argument
@_store_option
@_scope_option
@click.option("--format", "fmt", type=click.Choice(["mermaid", "html", "json"]),
              default="mermaid", show_default=True)
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, allow_dash=True),
              default=None, callback=lambda ctx, param, value: _output_path(ctx, param, value),
              help="Write to this file instead of stdout (`-`: stdout).")
def runs_timeline(run_id: str, store: str | None, scope: str | None, fmt: str,
                  output: Path | None) -> None:
    """Draw a Run: model steps, tool calls in parallel lanes, approvals, crashes,
    recoveries and takeovers (epoch changes) on its log-position axis — as Mermaid, as a
    self-contained HTML page (inline SVG), or as JSON."""
    from .inspect import build_timeline, to_html, to_mermaid

    async def main() -> Any:
        async with open_store_for(store) as opened:
            sc = await _scope_of(opened, run_id, scope)
            reader = await opened.reader(sc)
            facts = await reader.run_facts(run_id)
            records = await reader.read_stream(f"run/{run_id}")
            return build_timeline(sc, run_id, facts, records)

    tl = _run("runs timeline", main)
    text = (to_mermaid(tl) if fmt == "mermaid" else to_html(tl) if fmt == "html"
            else json.dumps(to_json(tl), indent=2, ensure_ascii=False) + "\n")
    if output is None:
        click.echo(text, nl=False)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:  # a missing directory, no permission, a full disk …
            click.echo(f"runx-actors: runs timeline: cannot write {str(output)!r}: "
                       f"{exc.strerror}", err=True)
            click.echo("hint: -o names a file in an existing, writable directory", err=True)
            sys.exit(1)
        click.echo(f"wrote {output}", err=True)


# -- writes -------------------------------------------------------------------------------


def _payload(text: str) -> Any:
    """The JSON value of ``runs respond``: inline text, ``@file``, or ``-`` (stdin);
    strict JSON (no duplicate keys, no NaN) of at most MAX_PAYLOAD_BYTES, nested at most
    64 levels (``_strictread.MAX_DEPTH``, as every reader of outside input)."""
    from .protocol.canonical import parse_json_strict
    from .runtime._app import _ints, check_payload_depth

    if text == "-":
        data = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
    elif text.startswith("@"):
        try:
            with open(text[1:], "rb") as fh:
                data = fh.read(MAX_PAYLOAD_BYTES + 1)
        except OSError as exc:
            raise click.UsageError(f"cannot read {text[1:]}: {exc.strerror}") from None
    else:
        data = text.encode("utf-8")
    if len(data) > MAX_PAYLOAD_BYTES:
        raise click.UsageError(f"the payload is larger than {MAX_PAYLOAD_BYTES} bytes")
    try:
        value = _ints(parse_json_strict(data))
        check_payload_depth(value)
    except (ValidationError, RecursionError) as exc:
        raise click.UsageError(f"the payload is not strict JSON: {exc}") from None
    return value


#: What each write answers (None: either kind).
_ANSWERS: dict[str, ResponseKind | None] = {
    "runs approve": ResponseKind.APPROVAL, "runs respond": ResponseKind.EXTERNAL_RESPONSE,
    "runs reject": None,
}
_OTHER_COMMAND = {ResponseKind.APPROVAL: "`runx-actors runs approve|reject RUN CALL`",
                  ResponseKind.EXTERNAL_RESPONSE:
                      "`runx-actors runs respond RUN CALL PAYLOAD` (or `runs reject`)"}
_WHAT = {ResponseKind.APPROVAL: "an approval", ResponseKind.EXTERNAL_RESPONSE: "a response"}


def _pick_call(command: str, run_id: str, call_id: str, calls: Any) -> Any:
    """The waiting call *command* answers (the first one it can answer when *call_id* is
    empty). Raises CallNotWaitingError with a hint naming what to do instead."""
    wants = _ANSWERS[command]
    ids = tuple(c.call_id for c in calls)
    if not calls:
        raise CallNotWaitingError(
            f"run {run_id!r} has no waiting call {call_id!r} (it waits for no call)"
            if call_id else f"run {run_id!r} waits for no call", run_id=run_id,
            call_id=call_id, waiting=ids,
            hint="only a Run that waits for an approval or a response takes one; "
                 "`runx-actors runs show RUN` says what it waits for")
    named = [c for c in calls if c.call_id == call_id] if call_id else \
        [c for c in calls if wants is None or c.kind is wants] or list(calls[:1])
    if not named:
        listed = ", ".join(f"{c.call_id} ({_WHAT[c.kind]})" for c in calls)
        raise CallNotWaitingError(
            f"run {run_id!r} has no waiting call {call_id!r} (it waits for: {listed})",
            run_id=run_id, call_id=call_id, waiting=ids,
            hint="name one of the waiting calls listed above (`runx-actors runs show RUN` "
                 "lists them)")
    call = named[0]
    if wants is not None and call.kind is not wants:
        raise CallNotWaitingError(
            f"call {call.call_id!r} of run {run_id!r} waits for {_WHAT[call.kind]}, not "
            f"{_WHAT[wants]}", run_id=run_id, call_id=call.call_id, waiting=ids,
            kind=call.kind.value, hint=f"answer it with {_OTHER_COMMAND[call.kind]}")
    return call


def _write(command: str, run_id: str, store: str | None, scope: str | None, call_id: str,
           act: Callable[[Any, Any], Awaitable[Any]], as_json: bool) -> None:
    from .runtime._app import waiting_for

    async def main() -> Any:
        from .store._verify import verify_run

        async with open_store_for(store) as opened:
            sc = await _scope_of(opened, run_id, scope)
            # validate before the writer opens (opening bumps the scope's epoch, a write):
            # the Run, its bodies and the call asked for (RUN-STO-4)
            reader = await opened.reader(sc)
            await verify_run(reader, opened.frozen, run_id)
            call = None
            if call_id != "*":
                state = (await reader.record(run_id)).state
                call = _pick_call(command, run_id, call_id, waiting_for(state))
            writer = await opened.open(sc)
            try:
                run_store = writer.run_store()
                result = await act(run_store, call)
                return sc, call, result
            finally:
                await writer.aclose()

    sc, call, result = _run(command, main)
    status = result.status.value
    doc = {"scope": sc, "run_id": run_id, "call_id": call.call_id if call else "",
           "status": status, "position": result.snapshot.position}
    if as_json:
        _echo_json(doc)
        return
    what = f" call {call.call_id} ({call.tool})" if call else ""
    click.echo(f"{command.split()[-1]} run={run_id}{what}: {status}; drive the Run to "
               "continue" if command != "runs cancel" else
               f"cancel run={run_id}: {status}")


_call_argument = click.argument("call_id", required=False, default="")


@runs.command("approve")
@_run_argument
@_call_argument
@_store_option
@_scope_option
@_json_option
def runs_approve(run_id: str, call_id: str, store: str | None, scope: str | None,
                 as_json: bool) -> None:
    """Approve the waiting call CALL_ID (the first waiting call when omitted). Takes over
    the scope for the command (see ``runx-actors runs --help``)."""
    from .runtime import approve

    _write("runs approve", run_id, store, scope, call_id,
           lambda rs, call: approve(rs, call.request), as_json)


@runs.command("reject")
@_run_argument
@_call_argument
@click.option("--reason", default="", help="Why (the model sees it).")
@_store_option
@_scope_option
@_json_option
def runs_reject(run_id: str, call_id: str, reason: str, store: str | None,
                scope: str | None, as_json: bool) -> None:
    """Reject the waiting call CALL_ID: it fails (permission_denied / response_rejected)
    and the model sees the failure."""
    from .runtime import reject

    _write("runs reject", run_id, store, scope, call_id,
           lambda rs, call: reject(rs, call.request, reason), as_json)


@runs.command("respond")
@_run_argument
@click.argument("call_id")
@click.argument("payload")
@_store_option
@_scope_option
@_json_option
def runs_respond(run_id: str, call_id: str, payload: str, store: str | None,
                 scope: str | None, as_json: bool) -> None:
    """Answer the waiting external-response call CALL_ID with the JSON PAYLOAD (inline,
    @file, or - for stdin; at most 1 MiB, strict JSON)."""
    from .runtime import answer

    value = _payload(payload)
    _write("runs respond", run_id, store, scope, call_id,
           lambda rs, call: answer(rs, call.request, value), as_json)


@runs.command("cancel")
@_run_argument
@click.option("--request-id", default="", help="Idempotency key (default: the run id).")
@_store_option
@_scope_option
@_json_option
def runs_cancel(run_id: str, request_id: str, store: str | None, scope: str | None,
                as_json: bool) -> None:
    """End the Run as stopped/cancelled (CancelRun under ``cancel:<request-id>``)."""
    from .runtime import cancel_run

    _write("runs cancel", run_id, store, scope, "*",
           lambda rs, call: cancel_run(rs, run_id, f"cancel:{request_id or run_id}"),
           as_json)


if __name__ == "__main__":  # python -m runx_actors.cli_runs …
    runs()
