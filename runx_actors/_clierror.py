"""How a CLI command reports an error (RUN-CLI-1, RUN-CLI-2), shared by every layer's
commands: ``runx-actors: <command>: <message>`` and a ``hint:`` line on stderr, and with
``--json`` also one JSON object on stdout (:func:`error_document`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

__all__ = ["error_document", "error_json", "report", "name_option_callback"]

_PREFIX = "runx-actors: "


def error_document(command: str, exc: BaseException, code: int, hint: str,
                   **extra: Any) -> dict[str, Any]:
    """The JSON object every ``--json`` command prints on stdout for an error (RUN-CLI-2,
    one shape for every command: README "Hostile input"):
    ``{"ok": false, "command", "error" (the exception's type name), "message" (one
    line, without a leading ``runx-actors: ``), "hint", "exit_code"}``, plus ``target``
    / ``reason`` when *exc* carries them as text (a store's ``target`` is already masked),
    plus *extra* (a command's own details, e.g. ``check``'s model and trace)."""
    message = " ".join(str(exc).split()).removeprefix(_PREFIX)
    doc: dict[str, Any] = {"ok": False, "command": command, "error": type(exc).__name__,
                           "message": message, "hint": hint, "exit_code": code}
    for key in ("target", "reason"):
        value = getattr(exc, key, None)
        if isinstance(value, str):
            doc[key] = value
    doc.update(extra)
    return doc


def error_json(command: str, exc: BaseException, code: int, hint: str) -> str:
    """:func:`error_document` as one line of JSON, newline-terminated: the stdout of a
    command function (``harness_command``, ``verify_command``) that fails under ``--json``."""
    return json.dumps(error_document(command, exc, code, hint), ensure_ascii=False) + "\n"


def report(command: str, exc: BaseException, code: int, *, hint: str,
           as_json: bool) -> int:
    """Print *exc* (one line), *hint* (when not empty) on stderr, and with *as_json* the
    :func:`error_document` as one line on stdout; return *code*."""
    click.echo(f"runx-actors: {command}: {' '.join(str(exc).split())}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    if as_json:
        click.echo(json.dumps(error_document(command, exc, code, hint), ensure_ascii=False))
    return code


def name_option_callback(what: str, limit: int | None = None
                         ) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback refusing (usage error, exit 64) a ``--scope`` / Run id that is
    not a valid name (RUN-WIR-1, ``protocol.commit.validate_name``: a control character,
    over 512 UTF-8 bytes, or over *limit* …) before any store is opened; the value is
    shown with ``repr``."""
    from .protocol.commit import validate_name
    from .protocol.errors import ValidationError

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return value
        try:
            if limit is None:
                validate_name(value, what)
            else:
                validate_name(value, what, limit)
        except ValidationError as exc:
            shown = value if len(value) <= 64 else value[:64] + "..."
            raise click.BadParameter(f"{shown!r} is not a valid {what}: {exc.message} "
                                     "(RUN-WIR-1)", ctx=ctx, param=param) from None
        return value

    return check
