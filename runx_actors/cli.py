"""The ``runx-actors`` command line.

``check`` — exit codes (sysexits-style): 0 success (the search was complete); 1 a check
found a counterexample; 3 incomplete (a time, depth or state limit stopped the search
before it had seen every state, and no violation was found); 64 usage error (bad option,
a refused ``--config`` file, unknown model or variant, model not importable yet); 70 the
model's own code raised while being checked. The option handling (profiles, the TOML file,
one flag per configuration field) is ``runx_actors.check._cli``. ``check --log`` (a stored
log replayed through the reference machine, ``runx_actors.check._tracecheck``): 0 clean,
1 a violation, 64 usage, 66 the store cannot be read.

The loop host's commands (``demo``, ``skill``, ``resume``, ``harness``, ``verify``) live in
``runx_actors.host.cli_commands`` and follow loop-host §9.1: 0 sealed/ok, 1 failure or
policy block, 2 needs agent/approval/input, 3 verification failed, 64 usage error.

No command lets a Python traceback reach the user (RUN-CLI-1): ``_Main.main`` is the one
top-level handler. A library error (:class:`~runx_actors.RunxError`) or an ``OSError``
prints ``runx-actors: <message>`` on one line plus a ``hint:`` line and exits with its
documented code (a host error's ``exit_code``, else 1); any other exception is a bug and
exits 70 (EX_SOFTWARE) with one line and "rerun with --debug". ``--debug`` (before the
command) or ``RUNX_ACTORS_DEBUG=1`` prints the traceback as well.
"""

from __future__ import annotations

import json
import math
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, cast

import attrs
import click
from rich.console import Console
from rich.table import Table

from ._entry import EX_INTERRUPTED, INTERRUPTED_LINES
from .check import (
    CheckResult,
    ConfigFileError,
    ModelCodeError,
    ModelNotFoundError,
    Strategy,
    TraceFormat,
    UnknownVariantError,
    check_model,
    render_json,
    render_text,
    render_trace,
    resolve_config,
    result_to_dict,
)
from .check import models as check_models
from .check._checker import MAX_WORKERS
from .check._cli import config_options

__all__ = ["main", "check", "EX_OK", "EX_VIOLATION", "EX_INCOMPLETE", "EX_USAGE",
           "EX_SOFTWARE", "EX_INTERRUPTED", "DEBUG_ENV"]

EX_OK = 0
EX_VIOLATION = 1
EX_INCOMPLETE = 3
EX_USAGE = 64
EX_SOFTWARE = 70
#: Set to 1 to print the traceback of an error (as ``--debug`` does).
DEBUG_ENV = "RUNX_ACTORS_DEBUG"


#: The loop host's commands (loop-host §9), imported on first use so that importing this
#: module (and running ``check``) loads neither trio nor a store.
_HOST_COMMANDS = ("demo", "harness", "resume", "skill", "verify")
#: Inspection and loop commands (issue 10), each in its own module, loaded on first use.
_LAZY_COMMANDS = {"runs": "runx_actors.cli_runs", "loop": "runx_actors.cli_loop",
                  "keys": "runx_actors.cli_loop"}


class _Main(click.Group):
    """A group whose usage errors exit 64 (EX_USAGE) instead of click's 2, and whose loop
    host commands are loaded lazily from ``runx_actors.host.cli_commands``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_HOST_COMMANDS, "store", "simulate",
                       *_LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name == "store":  # ``store check`` (RUN-STO-5): exits 0 / 3 / 64 / 1
            from .store._cli import store

            return store
        if cmd_name == "simulate":  # issue 9: runx_actors.testing.simulation, lazily
            from .testing.simulation._cli import simulate

            return simulate
        if cmd_name in _HOST_COMMANDS:
            from .host import cli_commands

            command: click.Command = getattr(cli_commands, cmd_name)
            return command
        if cmd_name in _LAZY_COMMANDS:
            import importlib

            lazy: click.Command = getattr(importlib.import_module(_LAZY_COMMANDS[cmd_name]),
                                          cmd_name)
            return lazy
        return super().get_command(ctx, cmd_name)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        self.debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
        argv = sys.argv[1:] if args is None else list(args)
        as_json = _json_requested(argv)
        try:
            _check_utf8(argv)
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:  # the project's two lines, not click's usage block
            sys.exit(_report_click_error(exc, EX_USAGE, exc.ctx, as_json))
        except click.ClickException as exc:
            sys.exit(_report_click_error(exc, exc.exit_code, None, as_json))
        except click.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):  # click's wrap of Ctrl-C
                _interrupted()
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            _interrupted()
        except BaseExceptionGroup as group:  # trio.run wraps a Ctrl-C met inside a nursery
            if group.subgroup(KeyboardInterrupt) is not None:
                _interrupted()
            if not isinstance(group, Exception):
                raise
            where = _failing_context(group)
            code = _report_error(group, debug=self.debug, ctx=where)
            if as_json:
                _echo_json_error(group, code, where)
            sys.exit(code)
        except Exception as exc:  # the one top-level handler: no raw traceback (RUN-CLI-1)
            where = _failing_context(exc)
            code = _report_error(exc, debug=self.debug, ctx=where)
            if as_json:
                _echo_json_error(exc, code, where)
            sys.exit(code)
        sys.exit(code if isinstance(code, int) else EX_OK)

    #: Set by ``--debug`` or ``RUNX_ACTORS_DEBUG``: print tracebacks of errors.
    debug: bool = False


def _interrupted() -> NoReturn:
    """Report a SIGINT (Ctrl-C) in the CLI's two lines and exit 130: never the code of a
    finding (1: a counterexample, a failed seed) nor a traceback (``runx_actors._entry``
    does the same for a Ctrl-C that lands while this module is being imported)."""
    for line in INTERRUPTED_LINES:
        click.echo(line, err=True)
    sys.exit(EX_INTERRUPTED)


def _json_requested(args: Sequence[str]) -> bool:
    """Whether ``--json`` is among *args* (before a ``--``): then an error that reaches
    the top-level handler is also one JSON object on stdout (RUN-CLI-2)."""
    for arg in args:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


def _report_click_error(exc: click.ClickException, code: int, ctx: click.Context | None,
                        as_json: bool) -> int:
    """A click error in the CLI's format (RUN-CLI-1): ``runx-actors: <command>:
    <message>`` and, for a usage error, ``hint: usage: <usage>; `<command> --help` lists
    the options``; with ``--json`` also the one JSON error object. Returns *code*."""
    from ._clierror import error_document

    command = _command_name(ctx)
    message = _one_line(exc.format_message())
    hint = ""
    if ctx is not None:
        usage = " ".join(ctx.get_usage().split()).removeprefix("Usage: ")
        hint = f"usage: {usage}; `{ctx.command_path} --help` lists the options"
    elif isinstance(exc, click.UsageError):  # refused before click parsed a command
        hint = "`runx-actors --help` lists the commands; `runx-actors COMMAND --help` " \
               "the options of one"
    click.echo(f"runx-actors: {command + ': ' if command else ''}{message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    if as_json:
        click.echo(json.dumps(error_document(command, exc, code, hint, message=message),
                              ensure_ascii=False))
    return code


def _echo_json_error(exc: BaseException, code: int, ctx: click.Context | None) -> None:
    from .host._cli_support import echo_error_json, unwrap

    command = _command_name(ctx)
    echo_error_json(command, unwrap(exc), code)


def _command_name(ctx: click.Context | None) -> str:
    """The command's name below the group (``runs list``), whatever the program's name."""
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(names))


def _check_utf8(args: Sequence[str]) -> None:
    """Refuse (usage, exit 64) an argument that is not UTF-8: the shell passed bytes
    Python could only keep as lone surrogates, which no name (RUN-WIR-1), path of a
    store or JSON document can hold."""
    for n, arg in enumerate(args, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as exc:
            after = args[n - 2] if n > 1 and args[n - 2].startswith("-") else ""
            raise click.UsageError(  # the value is not echoed: it may be a DSN's password
                f"argument {n}{' (after ' + after + ')' if after else ''} is not valid UTF-8 "
                f"(byte "
                f"{ord(arg[exc.start]) - 0xDC00:#04x} at index {exc.start}); names, paths "
                f"and documents must be UTF-8") from None


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _failing_context(exc: BaseException) -> click.Context | None:
    """The innermost click context *exc* propagated through (its command's), found in its
    traceback, or None when it was raised before a command was parsed: so that an error
    that escapes a command still names it (``"command"`` of the JSON error object)."""
    found: click.Context | None = None
    tb = exc.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals
        for name in ("ctx", "self"):
            if isinstance(local.get(name), click.Context):
                found = local[name]
                break
        tb = tb.tb_next
    return found


def _report_error(exc: BaseException, *, debug: bool, ctx: click.Context | None = None
                  ) -> int:
    """Print *exc* as one line (``runx-actors: <command>: …``, the command from *ctx*)
    plus a hint and return its documented exit code: a host error's ``exit_code``, 1 for
    any other library error or an ``OSError``, 70 for anything else (a bug)."""
    from .effect._escape import describe_error
    from .protocol.errors import RunxError

    inner = exc
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    command = _command_name(ctx)
    prefix = f"runx-actors: {command}: " if command else "runx-actors: "
    if isinstance(inner, (RunxError, OSError)):
        from .host._cli_support import exit_code_for, hint_for

        click.echo(f"{prefix}{_one_line(str(inner))}", err=True)
        hint = hint_for(inner)
        if hint:
            click.echo(f"hint: {hint}", err=True)
        return exit_code_for(inner)
    click.echo(f"{prefix}internal error: {_one_line(describe_error(inner), 200)}", err=True)
    if not debug:
        click.echo(f"hint: this is a bug; rerun with --debug (or {DEBUG_ENV}=1) for the "
                   "traceback", err=True)
    return EX_SOFTWARE


def _set_debug(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    if value and isinstance(ctx.command, _Main):
        ctx.command.debug = True


def _name_of(what: str) -> Any:
    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        from .host._cli_support import name_option_callback

        return name_option_callback(what)(ctx, param, value)

    return check


@click.group(cls=_Main)
@click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
              help=f"Print the traceback of an error (also {DEBUG_ENV}=1).")
@click.version_option(package_name="runx-actors", prog_name="runx-actors")
def main() -> None:
    """Durable, governed AI-agent runs as trio actors."""


@main.command()
@click.option(
    "--model",
    "model_name",
    type=click.Choice(check_models.model_names()),
    default="reference",
    show_default=True,
    help="Which model: the spec's reference machine or the real protocol core.",
)
@config_options
@click.option("--strategy", type=click.Choice([s.value for s in Strategy]), default="bfs",
              show_default=True, help="bfs finds a shortest counterexample.")
@click.option("--max-states", type=click.IntRange(min=1), default=None,
              help="Stop after N distinct states (incomplete: exit 3).")
@click.option("--max-depth", type=click.IntRange(min=0), default=None,
              help="Do not follow actions from states N steps deep (incomplete if any).")
@click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=None,
              callback=lambda ctx, param, value: _a_number(param, value),
              help="Stop after this many seconds (incomplete).")
@click.option("--check-deadlock", is_flag=True,
              help="Report reachable states that cannot move on and are not final (an "
                   "ended Run, or one waiting for an answer from outside, is final).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--trace-format", type=click.Choice(["text", "json", "mermaid"]), default="text",
              show_default=True, help="How to print a counterexample (without --json).")
@click.option("--variant", default=None, metavar="NAME",
              help="Check a deliberately broken variant of the model (a demonstration).")
@click.option("--no-progress", is_flag=True, help="No progress display on stderr.")
@click.option("--exact/--compact", default=False, show_default=True,
              help="Deduplicate on the states themselves, or (--compact, the default) on "
                   "64-bit fingerprints of them: faster and smaller; a collision would "
                   "merge two states, about n**2 / 2**65 likely for n states.")
@click.option("--log", "log_target", default=None, metavar="PATH_OR_DSN",
              help="Instead of a model: replay a SQLite or PostgreSQL store's log through the "
                   "reference machine (exit 0 clean, 1 violation, 66 unreadable store).")
@click.option("--scope", "log_scope", default=None, callback=_name_of("scope"),
              help="With --log: only this scope.")
@click.option("--run", "log_run", default=None, callback=_name_of("run id"),
              help="With --log: only this Run.")
@click.option("--workers", type=click.IntRange(min=1, max=MAX_WORKERS), default=1,
              show_default=True,
              help="Explore with N worker processes (bfs); the same result as 1.")
def check(
    *,
    model_name: str,
    profile: str | None,
    config_file: Path | None,
    strategy: str,
    max_states: int | None,
    max_depth: int | None,
    time_limit: float | None,
    check_deadlock: bool,
    as_json: bool,
    trace_format: str,
    variant: str | None,
    no_progress: bool,
    log_target: str | None,
    log_scope: str | None,
    log_run: str | None,
    exact: bool,
    workers: int,
    **knobs: Any,
) -> int:
    """Model-check a model in a bounded configuration.

    Without options it runs the ``default`` profile (inputs, approvals, cancel, failures,
    forged commands and one takeover; crashes are in ``--profile deep``). Prints
    statistics, or the counterexample when an invariant fails. Exits 0 when every
    invariant holds in every reachable state, 1 with the shortest counterexample when one
    fails, 3 when a bound (time, depth, states) cut the search short without a violation,
    64 on usage errors, 70 when the model's own code raised.
    """
    if log_target is not None:
        from .check._tracecheck import run_log_command

        return run_log_command(log_target, scope=log_scope, run=log_run, as_json=as_json,
                               echo=click.echo)
    if log_scope is not None or log_run is not None:
        raise click.UsageError("--scope and --run go with --log")
    if workers > 1 and strategy != Strategy.BFS.value:
        raise click.UsageError("--workers above 1 needs --strategy bfs")
    try:
        profile_name, config = resolve_config(profile, config_file, knobs)
        model = check_models.load_model(model_name, config, variant)
    except (ConfigFileError, ModelNotFoundError, UnknownVariantError) as exc:
        raise click.UsageError(exc.message) from exc
    describe = getattr(model, "describe", None)
    header = {
        "model": model_name,
        "variant": variant,
        "profile": profile_name,
        "config": attrs.asdict(config),
    }
    try:
        result = check_model(
            model,
            strategy=strategy,
            max_states=max_states,
            max_depth=max_depth,
            time_limit=time_limit,
            check_deadlock=check_deadlock,
            compact=not exact,
            progress=False if no_progress else None,
            workers=workers,
        )
    except ModelCodeError as exc:
        _report_model_error(exc, header, as_json, describe)
        return EX_SOFTWARE
    if as_json:
        payload = {**result_to_dict(result, describe), **header}
        click.echo(json.dumps(payload, indent=2))
    else:
        fmt = cast(TraceFormat, trace_format)
        if result.violation is not None:
            violation = result.violation
            click.echo(render_trace(violation.trace, fmt, describe, violation=violation), nl=False)
        # a JSON or Mermaid trace owns stdout (so it can be piped); the table goes to stderr
        to_stderr = result.violation is not None and fmt != "text"
        _print_stats(result, header, invariants=len(model.invariants()), stderr=to_stderr)
    if not result.ok:
        return EX_VIOLATION
    return EX_OK if result.stats.complete else EX_INCOMPLETE


def _a_number(param: click.Parameter, value: float | None) -> float | None:
    """*value* unless it is NaN (click's FloatRange lets NaN through every bound): a usage
    error, exit 64."""
    if value is not None and math.isnan(value):
        raise click.BadParameter("nan is not a number of seconds", param=param)
    return value


def _print_stats(
    result: CheckResult, header: dict[str, Any], *, invariants: int, stderr: bool
) -> None:
    console = Console(highlight=False, stderr=stderr)
    stats = result.stats
    config = ", ".join(f"{k}={v}" for k, v in header["config"].items())
    title = f"{result.model}" + (f" (variant {header['variant']})" if header["variant"] else "")
    title += f", profile {header['profile']}"
    table = Table(title=f"model check: {title}", show_header=False)
    table.add_column("statistic", style="bold")
    table.add_column("value", justify="right")
    table.add_row("configuration", config)
    table.add_row("strategy", result.strategy.value)
    table.add_row("invariants", str(invariants))
    table.add_row("distinct states", f"{stats.distinct_states:,}")
    table.add_row("transitions", f"{stats.transitions:,}")
    table.add_row("max depth", str(stats.max_depth))
    table.add_row("duration", f"{stats.duration_s:.3f} s")
    table.add_row("states/s", f"{stats.states_per_s:,.0f}")
    reason = stats.stop_reason.value if stats.stop_reason is not None else "?"
    table.add_row("complete", "yes" if stats.complete else f"no ({reason})")
    console.print(table)
    if result.violation is not None:
        console.print(f"[bold red]FAILED[/]: {result.violation.invariant} is violated")
    elif stats.complete:
        held = f"{invariants} invariant{' holds' if invariants == 1 else 's hold'}"
        console.print(f"[bold green]OK[/]: {held} in all {stats.distinct_states:,} states")
    else:
        console.print(
            f"[bold yellow]INCOMPLETE[/]: no violation among the "
            f"{stats.distinct_states:,} explored states, but the search stopped at {reason} "
            f"before seeing every state (exit {EX_INCOMPLETE})"
        )


def _report_model_error(
    exc: ModelCodeError, header: dict[str, Any], as_json: bool, describe: Any
) -> None:
    """The model's own code raised (exit 70): with ``--json`` the one error object of
    every command (``runx_actors._clierror.error_document``) with the check's header and
    ``exception`` / ``where`` / ``trace`` (the trace reaching the state, or null); else
    ``runx-actors: check: <message>``, the trace and the model's traceback on stderr."""
    from ._clierror import error_document

    trace = getattr(exc, "trace", None)
    hint = ("the model's own code raised (not the checker): fix the model; without --json "
            "its traceback is printed")
    if as_json:
        payload = error_document(
            "check", exc, EX_SOFTWARE, hint, **header,
            exception=type(exc.__cause__).__name__, where=getattr(exc, "where", None),
            trace=None if trace is None else render_json(trace, describe))
        click.echo(json.dumps(payload, indent=2))
        return
    click.echo(f"runx-actors: check: {_one_line(exc.message)}", err=True)
    click.echo(f"hint: {hint}", err=True)
    if trace is not None:
        click.echo(render_text(trace, describe), err=True, nl=False)
    if exc.__cause__ is not None:
        click.echo("".join(traceback.format_exception(exc.__cause__)), err=True, nl=False)


if __name__ == "__main__":  # python -m runx_actors.cli …
    main()
