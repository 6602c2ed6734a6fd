"""``runx-actors store …``: commands on a run store (RUN-STO-5).

``runx-actors store check PATH_OR_DSN [--scope S] [--json]`` reads the whole store (a
SQLite file or store directory, or a PostgreSQL DSN) without writing to it and reports the
damage it finds (see ``runx_actors.store._check``).

Exit codes: 0 the store is clean; 3 damage found (every problem is printed); 64 a usage
error (bad option, no file at PATH: nothing is created); 1 the store could not be reached
(e.g. the PostgreSQL server refused the connection).
"""

from __future__ import annotations

import json

import click

from ._check import CheckReport, StoreMissingError, check_store

__all__ = ["store", "EX_CLEAN", "EX_DAMAGED", "EX_UNREACHABLE"]

EX_CLEAN = 0
EX_DAMAGED = 3
EX_UNREACHABLE = 1


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


@store.command()
@click.argument("target", metavar="PATH_OR_DSN")
@click.option("--scope", default=None, help="Check only this scope (frozen bodies: only "
              "those its Runs name).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(*, target: str, scope: str | None, as_json: bool) -> int:
    """Check the store PATH_OR_DSN for damage, writing nothing (an fsck).

    PATH_OR_DSN is a SQLite file, a store directory (holding runs.sqlite3) or a PostgreSQL
    DSN (postgresql://… or key=value). Checks the file and schema, every scope's epoch,
    every stream's positions and chain digests, every Run's fold and head, the commit-id
    index against the facts, and every frozen body. Exits 0 clean, 3 damaged, 64 usage
    error, 1 the store could not be reached.
    """
    try:
        report = check_store(target, scope=scope)
    except StoreMissingError as exc:
        raise click.UsageError(str(exc)) from None
    except ModuleNotFoundError as exc:  # a DSN, but the PostgreSQL extra is not installed
        if not (exc.name or "").startswith("psycopg"):
            raise
        click.echo(f"runx-actors: store check: a PostgreSQL DSN needs {exc.name}, which is "
                   "not installed", err=True)
        click.echo("hint: pip install 'runx-actors[postgres]'", err=True)
        return EX_UNREACHABLE
    except Exception as exc:  # the server could not be reached: say so, no traceback
        if type(exc).__module__.startswith("psycopg"):
            click.echo(f"runx-actors: store check: cannot reach the store: {exc}", err=True)
            return EX_UNREACHABLE
        raise
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        click.echo(_text(report), nl=False)
    return EX_CLEAN if report.ok else EX_DAMAGED
