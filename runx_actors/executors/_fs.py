"""``fs.read`` / ``fs.write``: file tools confined to a workspace root (architecture §5).

Paths are relative, ``/``-separated (``\\`` counts as a separator too). Refused with the
KNOWN class ``invalid_arguments`` — at ``validate`` (so the call is declined and never
starts) and again when the tool runs: an empty path, an absolute path (``/x``, ``\\x``,
``C:x``), any ``..`` component, and any path whose *resolved* location (symlinks
followed) is not strictly inside the root. The final component is opened with
``O_NOFOLLOW``, so a symlink swapped in after the check is refused too. The workspace is
assumed not to be rearranged concurrently by a hostile process (a directory swapped for a
symlink between the check and ``mkdir`` is outside this threat model).

``fs.read {path}`` → ``{"path", "size_bytes", "sha256", "text"}`` (UTF-8 text, at most
1 MiB by default; failures ``not_found``, ``too_large``, ``invalid_input``).
``fs.write {path, text}`` → ``{"path", "size_bytes", "sha256"}`` (atomic replace; parent
directories created inside the root). ``sha256`` is ``"sha256:" + hex``.

Every ``OSError`` is a KNOWN failure (``ToolExecutionFailed``), never UNKNOWN: a read
changes nothing, and a write's one change is its final ``os.replace``, which either
happened (success) or did not (the error) — parent directories it created may remain
(issue 12; see :meth:`Workspace._os_failure` for the classes).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

from ..effect import RetryDisposition, ToolFailure, ToolFailureClass
from ..protocol.values import ResponsePolicy, ToolPlacement, ToolReplay
from ._tools import Tool, ToolError, python_tool

__all__ = [
    "MAX_READ_BYTES",
    "MAX_WRITE_BYTES",
    "Workspace",
    "fs_read_tool",
    "fs_write_tool",
    "workspace_tools",
]

#: Default size limit of ``fs.read`` (1 MiB).
MAX_READ_BYTES = 1 << 20
#: Default size limit of ``fs.write`` (1 MiB of UTF-8).
MAX_WRITE_BYTES = 1 << 20

_SEPARATORS = re.compile(r"[\\/]")
_DRIVE = re.compile(r"^[A-Za-z]:")
TOO_LARGE = "too_large"


def _refuse(message: str) -> ToolError:
    return ToolError(ToolFailureClass.INVALID_ARGUMENTS, message, retry=RetryDisposition.NEVER)


class Workspace:
    """A directory that confines the fs tools. ``root`` is resolved once, at creation.

    Raises ``ValueError`` when *root* is not an existing directory.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        resolved = Path(root).resolve(strict=True)
        if not resolved.is_dir():
            raise ValueError(f"workspace root {resolved} is not a directory")
        self.root = resolved

    def locate(self, path: object) -> tuple[str, Path]:
        """Check *path* and return ``(normalised relative path, resolved location)``.

        Raises ``ToolError(invalid_arguments)`` for anything that is not a relative path
        staying inside the root (see the module docstring), and for a path whose
        resolution fails (a symlink loop, a name too long). Reads the file system
        (symlink resolution) but changes nothing; raises nothing else.
        """
        if not isinstance(path, str) or not path:
            raise _refuse("path must be a non-empty relative path")
        if "\x00" in path:
            raise _refuse("path must not contain NUL")
        if path[0] in "/\\" or _DRIVE.match(path):
            raise _refuse(f"absolute paths are refused: {path!r}")
        parts = [p for p in _SEPARATORS.split(path) if p not in ("", ".")]
        if ".." in parts:
            raise _refuse(f"'..' is refused: {path!r}")
        if not parts:
            raise _refuse(f"path names the workspace root: {path!r}")
        try:
            resolved = self.root.joinpath(*parts).resolve(strict=False)
        except RuntimeError:  # Path.resolve: a symlink loop (a -> a, a -> b -> a)
            raise _refuse(f"path runs into a symbolic link loop: {path!r}") from None
        except OSError as error:  # ENAMETOOLONG, EACCES on a component …
            raise _refuse(f"path cannot be resolved: {path!r}: {error.strerror}") from None
        if resolved == self.root or not resolved.is_relative_to(self.root):
            raise _refuse(f"path escapes the workspace: {path!r}")
        return "/".join(parts), resolved

    def check_path(self, arguments: Any) -> ToolFailure | None:
        """``validate`` hook: the ``path`` argument's failure, or ``None``."""
        try:
            self.locate(arguments.get("path") if isinstance(arguments, dict) else None)
        except ToolError as error:
            return error.to_failure()
        return None

    def read(self, path: str, max_bytes: int = MAX_READ_BYTES) -> dict[str, Any]:
        """Read a UTF-8 text file; see the module docstring for the output and failures."""
        display, target = self.locate(path)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(target, flags)
        except FileNotFoundError:
            raise ToolError(ToolFailureClass.NOT_FOUND, f"{display} does not exist",
                            retry=RetryDisposition.NEVER) from None
        except OSError as error:
            raise self._os_failure(display, error) from None
        try:
            with os.fdopen(fd, "rb") as handle:
                info = os.fstat(handle.fileno())
                if not stat.S_ISREG(info.st_mode):
                    raise ToolError(ToolFailureClass.INVALID_INPUT,
                                    f"{display} is not a file", retry=RetryDisposition.NEVER)
                if info.st_size > max_bytes:
                    raise ToolError(TOO_LARGE, f"{display} is larger than {max_bytes} bytes",
                                    retry=RetryDisposition.NEVER)
                data = handle.read(max_bytes + 1)
        except OSError as error:  # EIO, EISDIR … while reading: reading changes nothing
            raise self._os_failure(display, error) from None
        if len(data) > max_bytes:
            raise ToolError(TOO_LARGE, f"{display} is larger than {max_bytes} bytes",
                            retry=RetryDisposition.NEVER)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(ToolFailureClass.INVALID_INPUT, f"{display} is not UTF-8 text",
                            retry=RetryDisposition.NEVER) from None
        return {"path": display, "size_bytes": len(data),
                "sha256": "sha256:" + hashlib.sha256(data).hexdigest(), "text": text}

    def write(self, path: str, text: str, max_bytes: int = MAX_WRITE_BYTES) -> dict[str, Any]:
        """Atomically replace (or create) a text file; see the module docstring."""
        display, target = self.locate(path)
        data = text.encode("utf-8")
        if len(data) > max_bytes:
            raise ToolError(TOO_LARGE, f"text is larger than {max_bytes} bytes",
                            retry=RetryDisposition.NEVER)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # ENAMETOOLONG, ENOTDIR, EACCES, ENOSPC: no file written
            raise self._os_failure(display, error) from None
        display, target = self.locate(path)  # re-check after creating directories
        try:
            if target.is_dir():
                raise ToolError(ToolFailureClass.INVALID_INPUT, f"{display} is a directory",
                                retry=RetryDisposition.NEVER)
            self._replace(target, data)
        except OSError as error:  # the replace is the only write: it did not happen
            raise self._os_failure(display, error) from None
        return {"path": display, "size_bytes": len(data),
                "sha256": "sha256:" + hashlib.sha256(data).hexdigest()}

    @staticmethod
    def _replace(target: Path, data: bytes) -> None:
        """Write *data* to a temporary file beside *target*, fsync it and rename it over
        *target* (atomic). Raises OSError with *target* untouched and the temporary file
        removed."""
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".runx-write-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, target)  # replaces a final symlink itself, never its target
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    @staticmethod
    def _os_failure(display: str, error: OSError) -> ToolError:
        """The KNOWN failure of an ``OSError`` raised before anything was written (every
        one the fs tools can meet: reads change nothing, and a write's only change is
        its final atomic rename). ELOOP → ``invalid_arguments``; EISDIR, ENOTDIR,
        ENAMETOOLONG → ``invalid_input``; ENOENT → ``not_found``; anything else (EACCES,
        ENOSPC, EROFS, EIO, EMFILE …) → ``unavailable``. Retry NEVER: the condition is
        the workspace's, a repeat would meet it again."""
        reason = error.strerror or type(error).__name__
        if error.errno == errno.ELOOP:
            return _refuse(f"{display} is a symbolic link")
        if error.errno in (errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG):
            return ToolError(ToolFailureClass.INVALID_INPUT, f"{display}: {reason}",
                             retry=RetryDisposition.NEVER)
        if error.errno == errno.ENOENT:
            return ToolError(ToolFailureClass.NOT_FOUND, f"{display}: {reason}",
                             retry=RetryDisposition.NEVER)
        return ToolError(ToolFailureClass.UNAVAILABLE, f"{display}: {reason}",
                         retry=RetryDisposition.NEVER)


_READ_PARAMETERS = {
    "type": "object",
    "properties": {"path": {"type": "string", "minLength": 1}},
    "required": ["path"],
    "additionalProperties": False,
}
_WRITE_PARAMETERS = {
    "type": "object",
    "properties": {"path": {"type": "string", "minLength": 1}, "text": {"type": "string"}},
    "required": ["path", "text"],
    "additionalProperties": False,
}


def _workspace(root: Workspace | str | os.PathLike[str]) -> Workspace:
    return root if isinstance(root, Workspace) else Workspace(root)


def fs_read_tool(root: Workspace | str | os.PathLike[str], *, ref: str = "fs.read",
                 name: str | None = None,
                 description: str = "Read a UTF-8 text file of the workspace.",
                 max_bytes: int = MAX_READ_BYTES,
                 policy: ResponsePolicy = ResponsePolicy.DIRECT_EXECUTION) -> Tool:
    """The ``fs.read`` tool bound to *root* (placement WORKSPACE, replay ALLOWED: reading
    has no side effect)."""
    workspace = _workspace(root)

    def read(path: str) -> dict[str, Any]:
        return workspace.read(path, max_bytes)

    return python_tool(read, ref=ref, name=name, description=description,
                       parameters=_READ_PARAMETERS, policy=policy, replay=ToolReplay.ALLOWED,
                       placement=ToolPlacement.WORKSPACE, check=workspace.check_path)


def fs_write_tool(root: Workspace | str | os.PathLike[str], *, ref: str = "fs.write",
                  name: str | None = None,
                  description: str = "Write a UTF-8 text file of the workspace.",
                  max_bytes: int = MAX_WRITE_BYTES,
                  policy: ResponsePolicy = ResponsePolicy.DIRECT_EXECUTION) -> Tool:
    """The ``fs.write`` tool bound to *root* (placement WORKSPACE, replay NEVER: a replay
    could overwrite a later write)."""
    workspace = _workspace(root)

    def write(path: str, text: str) -> dict[str, Any]:
        return workspace.write(path, text, max_bytes)

    return python_tool(write, ref=ref, name=name, description=description,
                       parameters=_WRITE_PARAMETERS, policy=policy, replay=ToolReplay.NEVER,
                       placement=ToolPlacement.WORKSPACE, check=workspace.check_path)


def workspace_tools(root: Workspace | str | os.PathLike[str], *,
                    policy: ResponsePolicy = ResponsePolicy.DIRECT_EXECUTION
                    ) -> tuple[Tool, Tool]:
    """``(fs.read, fs.write)`` sharing one :class:`Workspace`."""
    workspace = _workspace(root)
    return (fs_read_tool(workspace, policy=policy), fs_write_tool(workspace, policy=policy))
