"""The ``runx-actors verify`` command as a plain function (loop-host §5.4, §9.1, §9.4).

The CLI only wires arguments to :func:`verify_command` and prints its result::

    result = verify_command(receipt_id, receipt_dir=receipt_dir, receipt=receipt,
                            as_json=as_json,
                            allow_local_development_signatures=allow_local,
                            env=os.environ, cwd=os.getcwd(), stdin=sys.stdin.buffer)
    sys.stdout.write(result.stdout); sys.stderr.write(result.stderr)
    sys.exit(result.exit_code)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import BinaryIO

import attrs
import click

from ..._clierror import error_json
from ._errors import (
    KeyringConfigError,
    ReceiptDirectoryNotFoundError,
    ReceiptInputError,
    ReceiptNotFoundError,
    SigningConfigError,
)
from ._files import resolve_receipt_dir
from ._findings import Finding, FindingCode
from ._format import format_report, format_verdict
from ._signing import keyring_from_env
from ._single import read_receipt_input, verify_receipt_bytes
from ._tree import EXIT_ERROR, EXIT_USAGE, verify_directory
from ._verify import SignatureMode

__all__ = ["CommandResult", "verify_command"]

_PREFIX = "runx-actors: verify: "

#: Printed on stderr when a signature's key id is not in the keyring (§4.6, §9.4).
KEY_UNKNOWN_HINT = (
    "hint: the keyring is read from RUNX_RECEIPT_VERIFY_KID + "
    "RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64 and from a fully set RUNX_RECEIPT_SIGN_* "
    "identity; export the identity that signed these receipts (for the demo's receipts, "
    "the demo identity shown in the README) and run verify again\n"
)


def _hint(findings: Sequence[Finding]) -> str:
    return KEY_UNKNOWN_HINT if any(
        f.code is FindingCode.KEY_UNKNOWN for f in findings) else ""


@attrs.frozen
class CommandResult:
    """What the command prints and how it exits."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""


def _error(exc: BaseException, as_json: bool, code: int = EXIT_ERROR) -> CommandResult:
    """*exc* on stderr (``runx-actors: verify: <message>`` and its ``hint:`` line), and
    with *as_json* also the CLI's one JSON error object on stdout (RUN-CLI-2)."""
    hint = _hint_for(exc)
    return CommandResult(exit_code=code,
                         stdout=error_json("verify", exc, code, hint) if as_json else "",
                         stderr=_PREFIX + " ".join(str(exc).split()) + "\n"
                         + (f"hint: {hint}\n" if hint else ""))


#: The ``hint:`` line of each refusal (every CLI error is one line plus a hint).
_ERROR_HINTS: tuple[tuple[type[BaseException], str], ...] = (
    (ReceiptInputError, "a receipt file must be one strict JSON object of at most 10 MiB "
                        "(README: Hostile input); nothing was verified"),
    (ReceiptNotFoundError, "`runx-actors verify -R D` lists the receipt trees of D"),
    (ReceiptDirectoryNotFoundError, "pass -R D (or set RUNX_RECEIPT_DIR) naming an "
                                    "existing receipt directory"),
    (KeyringConfigError, "set RUNX_RECEIPT_VERIFY_KID and "
                         "RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64 together (the key "
                         "is the 32-byte raw Ed25519 public key in base64), or neither"),
    (SigningConfigError, "fix or unset the RUNX_RECEIPT_* variables named above; "
                         "`runx-actors verify --help`"),
    (OSError, "check that the path exists and is readable"),
    (click.UsageError, "see `runx-actors verify --help`"),
)


def _hint_for(exc: BaseException) -> str:
    return next((hint for kind, hint in _ERROR_HINTS if isinstance(exc, kind)), "")


def verify_command(
    receipt_id: str | None = None,
    *,
    receipt_dir: str | None = None,
    receipt: str | None = None,
    as_json: bool = False,
    allow_local_development_signatures: bool = False,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    stdin: BinaryIO | None = None,
) -> CommandResult:
    """Run ``verify`` (§5.4) and return its output and exit code.

    * Tree mode: ``verify [receipt-id] [-R D] [--json]
      [--allow-local-development-signatures]``; the directory is resolved by §5.1
      (*receipt_dir*, ``$RUNX_RECEIPT_DIR``, ``<P>/receipts`` …).
    * Single mode: ``verify --receipt <path|-> [--json]`` (*receipt*; ``-`` reads
      *stdin*).

    The keyring comes from *env* (§4.6: ``RUNX_RECEIPT_VERIFY_*`` plus a fully set signing
    identity). Exit codes: 0 valid; 3 verification found something invalid; 1 an I/O,
    parse or configuration error (missing directory, unknown receipt id, unreadable,
    non-JSON or oversized single input); 64 a usage error (``--receipt`` combined with a
    receipt id or ``-R``). Errors go to stderr prefixed ``runx-actors: verify:`` (with
    *as_json* also one JSON error object on stdout, ``runx_actors._clierror``'s shape); a
    ``KeyUnknown`` finding adds :data:`KEY_UNKNOWN_HINT` on stderr (the verdict and exit
    code are unchanged). Raises nothing.
    """
    if receipt is not None and (receipt_id is not None or receipt_dir is not None):
        return _error(click.UsageError("--receipt cannot be combined with a receipt-id or "
                                       "-R/--receipt-dir"), as_json, EXIT_USAGE)
    mode = (SignatureMode.LOCAL_DEVELOPMENT if allow_local_development_signatures
            else SignatureMode.PRODUCTION)
    try:
        keyring = keyring_from_env(env)
        if receipt is not None:
            data = read_receipt_input(receipt, stdin=stdin, cwd=cwd)
            verdict = verify_receipt_bytes(data, keyring=keyring, mode=mode, source=receipt)
            return CommandResult(exit_code=verdict.exit_code,
                                 stdout=format_verdict(verdict, as_json=as_json),
                                 stderr=_hint(verdict.findings))
        directory = resolve_receipt_dir(receipt_dir, env, cwd)
        report = verify_directory(directory, keyring=keyring, mode=mode,
                                  receipt_id=receipt_id)
        return CommandResult(exit_code=report.exit_code,
                             stdout=format_report(report, as_json=as_json),
                             stderr=_hint([f for t in report.trees for f in t.findings]))
    except (KeyringConfigError, SigningConfigError, ReceiptDirectoryNotFoundError,
            ReceiptNotFoundError, ReceiptInputError, OSError) as exc:
        return _error(exc, as_json)
