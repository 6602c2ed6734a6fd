"""Receipt directory layout (loop-host §5.1): file names, what is ignored, the location.

* A receipt file is ``sha256-<hex>.json``; legacy ``sha256:<hex>.json`` files are read
  but never written.
* ``index.json`` is the rebuildable index; ``.receipt-store.lock`` is the lock file.
* Dotfiles and ``*.tmp-*`` files are not receipts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from ._model import is_receipt_id, receipt_file_name

__all__ = [
    "INDEX_FILE",
    "LOCK_FILE",
    "receipt_file_name",
    "legacy_file_name",
    "receipt_id_from_file_name",
    "is_ignored_file_name",
    "resolve_receipt_dir",
]

INDEX_FILE = "index.json"
LOCK_FILE = ".receipt-store.lock"

_RECEIPT_FILE = re.compile(r"^sha256[-:]([0-9a-f]{64})\.json$")


def legacy_file_name(receipt_id: str) -> str:
    """``sha256:<hex>.json``, the legacy name (§5.1; read, never written).

    Raises:
        ValueError: *receipt_id* is not ``sha256:<64 hex>``.
    """
    if not is_receipt_id(receipt_id):
        raise ValueError(f"{receipt_id!r} is not a receipt id")
    return receipt_id + ".json"


def receipt_id_from_file_name(name: str) -> str | None:
    """The receipt id a file name claims (``sha256-<hex>.json`` or the legacy
    ``sha256:<hex>.json``), or None if *name* is not a receipt file name."""
    match = _RECEIPT_FILE.match(name)
    return None if match is None else "sha256:" + match.group(1)


def is_ignored_file_name(name: str) -> bool:
    """True for names that are never receipts (§5.1): dotfiles, ``*.tmp-*`` files and
    ``index.json``."""
    return name.startswith(".") or ".tmp-" in name or name == INDEX_FILE


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value else None


def resolve_receipt_dir(
    explicit: str | os.PathLike[str] | None, env: Mapping[str, str],
    cwd: str | os.PathLike[str],
) -> Path:
    """The receipt directory (§5.1), first match wins: *explicit* (``-R D`` /
    ``--receipt-dir D``); ``$RUNX_RECEIPT_DIR``; ``<P>/receipts`` where ``P`` is
    ``$RUNX_PROJECT_DIR`` or else ``<workspace>/.runx``, the workspace being ``$RUNX_CWD``,
    else ``$INIT_CWD``, else *cwd*. Relative paths are taken relative to *cwd*. Empty
    variables count as unset. (runx's config key ``runtime.receipts.dir`` is a reserved
    slot between the first two; v1 has no config layer.)"""
    base = Path(cwd)
    if explicit is not None and str(explicit):
        return base / Path(explicit)
    receipt_dir = _env(env, "RUNX_RECEIPT_DIR")
    if receipt_dir is not None:
        return base / receipt_dir
    project = _env(env, "RUNX_PROJECT_DIR")
    if project is not None:
        return base / project / "receipts"
    workspace = _env(env, "RUNX_CWD") or _env(env, "INIT_CWD")
    root = base / workspace if workspace is not None else base
    return root / ".runx" / "receipts"
