"""``runx-actors store …``: commands on a run store (RUN-STO-5).

``runx-actors store check PATH_OR_DSN [--scope S] [--json]`` reads the whole store (a
SQLite file or store directory, or a PostgreSQL DSN) without writing to it and reports the
damage it finds (see ``runx_actors.store._check``).

Exit codes: 0 the store is clean; 3 damage found (every problem is printed); 64 a usage
error (bad option; ``StoreMissingError``: no file at PATH, or a PostgreSQL schema with
none of a store's tables; nothing is created); 1 the store could not be reached
(``StoreUnreachableError``: the PostgreSQL server refused the connection, the database
does not exist, the DSN does not parse; its password is shown as ``***``). With
``--json`` every outcome is one JSON object on stdout: the report, or an error object
(``runx_actors._clierror.error_document``; RUN-CLI-2).
"""

from __future__ import annotations

import json
from typing import Any

import click

from ._check import (
    CheckReport,
    ScopeNotFoundError,
    StoreMissingError,
    StoreUnreachableError,
    check_store,
)

__all__ = ["store", "EX_CLEAN", "EX_DAMAGED", "EX_UNREACHABLE"]

EX_CLEAN = 0
EX_DAMAGED = 3
EX_UNREACHABLE = 1
EX_USAGE = 64


_MISSING_HINT = ("give an existing store: a SQLite file, a directory holding runs.sqlite3, or "
                 "a PostgreSQL DSN whose schema holds a store (`store check` creates none)")


@click.group()
def store() -> None:
    """Commands on a run store (SQLite file or PostgreSQL DSN)."""


def _text(report: CheckReport) -> str:
    counts = (f"{report.scopes} scopes, {report.runs} runs, {report.streams} streams, "
              f"{report.events} events, {report.commits} commits, {report.frozen} frozen "
              "bodies")
    if report.ok:
        return f"ok: {report.target}: {counts}\n"
    lines = [f"damaged: {report.target}: {len(report.problems)} problem(s) ({counts})"]
    for p in report.problems:
        where = " ".join(f"{k}={v}" for k, v in (
            ("table", p.table), ("row", p.row), ("scope", p.scope), ("run", p.run_id),
            ("position", p.position)) if v is not None)
        lines.append(f"  {where}: {p.message}")
    return "\n".join(lines) + "\n"


def _scope_name(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    from .._clierror import name_option_callback

    return name_option_callback("scope")(ctx, param, value)


@store.command()
@click.argument("target", metavar="PATH_OR_DSN")
@click.option("--scope", default=None, callback=_scope_name,
              help="Check only this scope (frozen bodies: only those its Runs name).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(*, target: str, scope: str | None, as_json: bool) -> int:
    """Check the store PATH_OR_DSN for damage, writing nothing (an fsck).

    PATH_OR_DSN is a SQLite file, a store directory (holding runs.sqlite3) or a PostgreSQL
    DSN (postgresql://… or key=value). Checks the file and schema, every scope's epoch,
    every stream's positions and chain digests, every Run's fold and head, the commit-id
    index against the facts, and every frozen body. Exits 0 clean, 3 damaged, 64 usage
    error, 1 the store could not be reached.
    """
    from .._clierror import report as fail

    try:
        report = check_store(target, scope=scope)
    except StoreMissingError as exc:  # the target names no store: usage (64), nothing made
        return fail("store check", exc, EX_USAGE, hint=_MISSING_HINT, as_json=as_json)
    except StoreUnreachableError as exc:  # fast, typed, the password masked (RUN-CLI-2)
        return fail("store check", exc, EX_UNREACHABLE, hint=str(getattr(exc, "hint", "")),
                    as_json=as_json)
    if scope is not None and not report.scopes and report.ok:
        missing = ScopeNotFoundError(f"the store has no scope {scope!r}", scope=scope)
        return fail("store check", missing, EX_UNREACHABLE, hint=ScopeNotFoundError.hint,
                    as_json=as_json)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        click.echo(_text(report), nl=False)
    return EX_CLEAN if report.ok else EX_DAMAGED
