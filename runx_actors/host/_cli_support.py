"""Plumbing shared by the host's CLI commands (loop-host §9): where the run store is,
running trio from a click command, and printing an error with a hint saying what to do.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
import trio

from .._clierror import name_option_callback
from .._strictread import MalformedInputError
from ..protocol.errors import (
    CorruptStoreError,
    OwnershipLostError,
    RunxError,
    SchemaVersionError,
    ValidationError,
)
from .errors import (
    AnswersError,
    ApprovalNotAttestedError,
    ContextSkillChanged,
    HostError,
    InputContractError,
    LoopConfigMismatch,
    LoopIntegrityError,
    PackageChangedError,
    PackageError,
    UnknownRunError,
)
from .receipts import KeyringConfigError, ReceiptIndexStaleError, SigningConfigError

__all__ = [
    "STORE_ENV",
    "STORE_FILE",
    "EXPECTED_ERRORS",
    "environment",
    "workspace_dir",
    "resolve_store",
    "unwrap",
    "run_trio",
    "hint_for",
    "exit_code_for",
    "fail",
    "error_document",
    "echo_error_json",
    "wants_json",
    "name_option_callback",
]

#: The run-store override **[ours]** (§9.1, §9.4).
STORE_ENV = "RUNX_ACTORS_STORE"
#: The SQLite file inside a store directory.
STORE_FILE = "runs.sqlite3"
#: Errors a command reports (message, hint, exit code) instead of crashing.
EXPECTED_ERRORS: tuple[type[Exception], ...] = (RunxError, OSError)

_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
_SIGNING_HINT = ("set RUNX_RECEIPT_SIGN_KID, RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64 (a "
                 "base64 32-byte Ed25519 seed) and RUNX_RECEIPT_SIGN_ISSUER_TYPE (hosted or "
                 "ci), all three or none")
_HINTS: tuple[tuple[type[BaseException], str], ...] = (
    (SigningConfigError, _SIGNING_HINT),
    (InputContractError, "check the inputs against the runner's declared inputs in X.yaml "
                         "(-i key=value parses the value as JSON when it can)"),
    (UnknownRunError, "check the run id and the run store (--store, $RUNX_ACTORS_STORE, "
                      "--scope)"),
    (ContextSkillChanged, "restore the context skill as it was prepared, or cancel the run"),
    (PackageChangedError, "restore the package as it was when the run was opened"),
    (ApprovalNotAttestedError, "approvals belong in the \"approvals\" section, attested by "
                               "the local operator; agents cannot approve"),
    (AnswersError, "the answers file is {\"answers\": {<request id>: {<outputs>}}, "
                   "\"approvals\": {<request id>: true|false}}"),
    (CorruptStoreError, "the run store is damaged and was left as it is; "
                        "`runx-actors store check <store>` lists every damaged row"),
    (SchemaVersionError, "the file is not a runx-actors run store (or is one of another "
                         "schema version): pass --store a store's own file, or a path where "
                         "nothing exists to create one"),
    (LoopIntegrityError, "the run store or the receipts changed after recording; nothing "
                         "was repaired"),
    (LoopConfigMismatch, "use a new run id (RUNX_RUN_ID) or the original inputs"),
    (PackageError, "fix the package's X.yaml / SKILL.md"),
    (KeyringConfigError, "set RUNX_RECEIPT_VERIFY_KID and "
                         "RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64 together"),
    (OwnershipLostError, "another process took over this run store; run one command at a "
                         "time per store"),
    (ValidationError, "check the value named above (a --scope is a non-empty name)"),
    (MalformedInputError, "the input named above was refused by a strict reader: no "
                          "duplicate keys, NaN/Infinity, nesting past 64 levels or files "
                          "over their size cap (README: Hostile input)"),
)


#: A loop's record differs from the spec (a governed run's mismatch keeps the run-id hint).
_LOOP_MISMATCH_HINT = ("use a new --loop-id, or the loop's original package, runner, "
                       "inputs and --max-turns")


def environment() -> dict[str, str]:
    """A copy of the process environment."""
    return dict(os.environ)


def workspace_dir(env: Mapping[str, str], cwd: Path) -> Path:
    """The workspace (§5.1): ``$RUNX_CWD``, else ``$INIT_CWD``, else *cwd*."""
    chosen = env.get("RUNX_CWD") or env.get("INIT_CWD")
    return cwd / chosen if chosen else cwd


def resolve_store(explicit: str | None, env: Mapping[str, str], cwd: Path) -> Path:
    """The SQLite file of the run store (§9.1 **[ours]**): ``--store S``, else
    ``$RUNX_ACTORS_STORE``, else ``<P>/store`` (``P`` = ``$RUNX_PROJECT_DIR`` or
    ``<workspace>/.runx``). ``S`` is a directory holding :data:`STORE_FILE`, or the SQLite
    file itself (an existing file, or a name ending ``.db``/``.sqlite``/``.sqlite3``).
    Creates nothing."""
    chosen = explicit or env.get(STORE_ENV)
    if chosen:
        path = cwd / chosen
    else:
        project = env.get("RUNX_PROJECT_DIR")
        base = cwd / project if project else workspace_dir(env, cwd) / ".runx"
        path = base / "store"
    if path.is_file() or path.suffix in _SQLITE_SUFFIXES:
        return path
    return path / STORE_FILE


def unwrap(exc: BaseException) -> BaseException:
    """*exc* without the exception groups (of one member) nurseries wrapped it in."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def run_trio(fn: Callable[[], Any]) -> Any:
    """``trio.run(fn)``, re-raising a lone error out of its exception group."""
    try:
        return trio.run(fn)
    except BaseExceptionGroup as group:
        inner = unwrap(group)
        if inner is group:
            raise
        raise inner from group


#: PackageError hints by ``reason`` (the user's argument is wrong, not the package).
_PACKAGE_HINTS = {
    "duplicate_key": "remove the repeated key: each key may appear once in a mapping",
    "too_large": "the file is over its size cap; set RUNX_ACTORS_MAX_<KIND>_BYTES to allow "
                 "more (README: Hostile input)",
    "symlink": "replace the symlink with a regular file inside the package",
    "not_regular": "a package holds directories and regular files only",
    "not_mapping": "X.yaml must be a YAML mapping (name:, runners:, …)",
    "not_a_package": "give the path of a package directory (one holding X.yaml), relative "
                     "to the current directory",
    "unknown_runner": "use --runner with a runner declared under `runners:` in the "
                      "package's X.yaml",
    "unknown_script": "set the runner's `script:` in X.yaml to one of the scripts named "
                      "above",
    "unknown_tool": "list only tools this host provides (fs.read, fs.write) in the "
                    "runner's `tools:` in X.yaml",
}


def hint_for(exc: BaseException) -> str:
    """A line saying what to do about *exc*, or ``""``: its own ``hint`` (a string
    attribute) when it has one, else by type."""
    if isinstance(exc, ReceiptIndexStaleError):
        return str(getattr(exc, "hint", ""))
    if isinstance(exc, LoopConfigMismatch) and getattr(exc, "loop_id", None):
        return _LOOP_MISMATCH_HINT
    own = getattr(exc, "hint", None)  # the error's own (StoreMissingError, …)
    if isinstance(own, str) and own:
        return own
    if getattr(exc, "reason", "") == "bad_limit":  # an environment override, not a file
        return ("set the RUNX_ACTORS_MAX_<KIND>_BYTES variable named above to a positive "
                "number of bytes, or unset it (README: Hostile input)")
    if isinstance(exc, PackageError) and getattr(exc, "reason", "") in _PACKAGE_HINTS:
        return _PACKAGE_HINTS[str(getattr(exc, "reason", ""))]
    for kind, hint in _HINTS:
        if isinstance(exc, kind):
            return hint
    return ""


def exit_code_for(exc: BaseException) -> int:
    """§9.1: a host error carries its code (3 for ``LoopIntegrityError``); a damaged store
    (``CorruptStoreError``, ``CorruptRecordError``: verification of the store failed, RUN-STO)
    is 3, like ``store check``; anything else is 1."""
    if isinstance(exc, click.UsageError):
        return 64
    if isinstance(exc, HostError):
        return int(type(exc).exit_code)
    if isinstance(exc, CorruptStoreError):
        return 3
    return 1


def error_document(command: str, exc: BaseException, code: int) -> dict[str, Any]:
    """The JSON object a ``--json`` command prints on stdout for an error (RUN-CLI-2;
    ``runx_actors._clierror.error_document`` with :func:`hint_for`'s hint)."""
    from .._clierror import error_document as document

    return document(command, exc, code, hint_for(exc))


def wants_json() -> bool:
    """Whether the running click command was given ``--json`` (its ``as_json``)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.params.get("as_json"))


def echo_error_json(command: str, exc: BaseException, code: int) -> None:
    """Print :func:`error_document` as one line on stdout."""
    import json

    click.echo(json.dumps(error_document(command, exc, code), ensure_ascii=False))


def fail(command: str, exc: BaseException, *, as_json: bool | None = None) -> int:
    """Print *exc* as ``runx-actors: <command>: <message>`` (one line) plus a ``hint:``
    line on stderr, and return its exit code. With ``--json`` (*as_json*, default: the
    running command's ``--json``) the error is also one JSON object on stdout
    (:func:`error_document`, RUN-CLI-2)."""
    from .._clierror import report

    exc = unwrap(exc)
    return report(command, exc, exit_code_for(exc), hint=hint_for(exc),
                  as_json=wants_json() if as_json is None else as_json)
