"""``subprocess_tool``: a tool that runs one fixed program — an argv, never a shell
(architecture §5).

The declaration fixes the program and the leading arguments (``argv``); a call only adds
arguments built from its validated JSON arguments (by default the ``args`` array) and may
give the program's standard input (the ``stdin`` string). Nothing is ever interpreted by a
shell: no globbing, no variables, no pipes, no quoting rules.

**Validation** (``validate``, RUN-EXE-5; run again before the program starts). Refused
with ``invalid_arguments``: arguments that fail the JSON schema, a ``build_args`` that
raises or does not return a list of strings, an argv element with a NUL byte, a
``stdin`` that is not a string. Refused with ``not_found``: a program that cannot be found
(no ``/`` in ``argv[0]``: looked up on the child's ``PATH``; otherwise a path, relative
to ``cwd``) or is not executable, and a ``cwd`` that is not a directory. A refused call is
declined: nothing runs and no ``tool_call_started`` is written.

**Output** (a successful call): ``{"argv": [str, ...], "exit_code": int, "stdout": str,
"stderr": str}`` — the argv that ran, the exit status (in ``ok_exit_codes``, ``0`` by
default), and both streams decoded as UTF-8 with ``errors="replace"`` (undecodable bytes
become U+FFFD; the output is always valid JSON text).

**Failures** (RUN-EXE-11; the model sees ``{"class", "message"}``):

* ``exit_nonzero`` (KNOWN, retry UNKNOWN): the program ran to its end and its exit status
  is not in ``ok_exit_codes`` (negative: killed by that signal). The message holds the
  exit status and the last characters of stderr and stdout. An agent loop wants this as a
  failure — the model is told plainly that the command failed, with the evidence — and a
  program whose non-zero status is an ordinary answer (``grep`` → 1, a test runner) is
  declared with ``ok_exit_codes`` so its output arrives as a result.
* ``too_large`` (KNOWN, retry UNKNOWN): stdout and stderr together exceeded
  ``max_output_bytes``. Output past the limit is read and discarded (memory stays bounded)
  and the program is *not* stopped: it runs to its end (or to the timeout), so the
  failure is KNOWN — the same class ``fs.read`` uses. We fail rather than truncate: a
  silently cut output would look complete to the model.
* ``timeout`` (UNKNOWN: ``ToolExecutionUnknown``, class ``effect_unknown`` in the Run): the
  program did not finish within ``timeout`` seconds and was stopped; it may have done
  part of its work. The message holds the output tails read so far.
* ``not_found`` / ``unavailable`` (KNOWN, retry NEVER): the program could not be started
  (``FileNotFoundError`` → ``not_found``, any other ``OSError`` → ``unavailable``);
  nothing ran.

**Stopping** (timeout, ``cancel``, executor shutdown): the child runs through
``trio.run_process``, so a cancelled call never returns before the child has exited and
been reaped. On POSIX the child leads a new session (``start_new_session=True``) and the
whole process group gets ``SIGTERM``, then ``SIGKILL`` after ``terminate_grace`` seconds if
the program is still running — so the helpers it spawned are signalled too. Elsewhere
trio's default applies (``TerminateProcess``).

**Environment**: by default the child gets :func:`minimal_env` — only ``PATH``, ``HOME``,
locale, time-zone and temp-directory variables of this process (plus the few Windows needs)
— never the whole parent environment, so API keys and tokens do not leak into tools. Pass
``env`` to give exactly that mapping instead (``{**minimal_env(), "X": "1"}`` to extend it).
Standard input is ``/dev/null`` unless the call gives ``stdin``.

A call finishes when the program has exited *and* its stdout and stderr are closed: a
background descendant that keeps them open keeps the call running (up to the timeout).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from ..effect import RetryDisposition, ToolFailure, ToolFailureClass
from ..protocol.values import ResponsePolicy, ToolPlacement, ToolRef, ToolReplay
from ._fs import TOO_LARGE
from ._tools import Tool, ToolCheck, ToolError, ToolUnknownError, not_an_object, python_tool

__all__ = [
    "DEFAULT_SUBPROCESS_TIMEOUT",
    "EXIT_NONZERO",
    "MAX_OUTPUT_BYTES",
    "MINIMAL_ENV_KEYS",
    "SUBPROCESS_PARAMETERS",
    "TERMINATE_GRACE",
    "minimal_env",
    "subprocess_tool",
]

#: Default time limit of one call, in seconds.
DEFAULT_SUBPROCESS_TIMEOUT = 60.0
#: Default limit of stdout + stderr together, in bytes (1 MiB).
MAX_OUTPUT_BYTES = 1 << 20
#: Seconds between ``SIGTERM`` and ``SIGKILL`` when a call is stopped (POSIX).
TERMINATE_GRACE = 5.0
#: Failure class of a program whose exit status is not in ``ok_exit_codes``.
EXIT_NONZERO = "exit_nonzero"
#: Variables :func:`minimal_env` copies from this process when they are set.
MINIMAL_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
                    "SYSTEMROOT", "SYSTEMDRIVE", "PATHEXT", "COMSPEC", "TEMP", "TMP")
#: Parameters of a subprocess tool declared without a schema: optional ``args`` (strings
#: appended to argv) and optional ``stdin`` (text given to the program), nothing else.
SUBPROCESS_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "args": {"type": "array", "items": {"type": "string"},
                 "description": "arguments appended to the command line"},
        "stdin": {"type": "string", "description": "text given to the program's stdin"},
    },
    "additionalProperties": False,
}

#: ``build_args(arguments) -> extra argv``: pure, side-effect free (it also runs at
#: ``validate``); arguments are the call's parsed, schema-checked JSON object.
BuildArgs = Callable[[Mapping[str, Any]], Sequence[str]]

_TAIL_CHARS = 2000
_READ_CHUNK = 65536


def minimal_env() -> dict[str, str]:
    """The default child environment: the variables of :data:`MINIMAL_ENV_KEYS` that
    this process has set, with ``PATH`` defaulting to ``os.defpath``. Read when called."""
    env = {key: os.environ[key] for key in MINIMAL_ENV_KEYS if key in os.environ}
    env.setdefault("PATH", os.defpath)
    return env


def _default_args(arguments: Mapping[str, Any]) -> Sequence[str]:
    return arguments.get("args", [])  # type: ignore[no-any-return]  # checked by prepare


def _invalid(message: str) -> ToolError:
    return ToolError(ToolFailureClass.INVALID_ARGUMENTS, message, retry=RetryDisposition.NEVER)


def _not_found(message: str) -> ToolError:
    return ToolError(ToolFailureClass.NOT_FOUND, message, retry=RetryDisposition.NEVER)


def _tail(data: bytes | bytearray) -> str:
    text = bytes(data).decode("utf-8", errors="replace")
    return text if len(text) <= _TAIL_CHARS else "…" + text[-_TAIL_CHARS:]


class _Capture:
    """stdout and stderr of one call, keeping at most *limit* bytes of both together.

    ``tails()`` (for failure messages) gives the last 2000 characters of each stream
    kept, a cut one starting with ``…``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = {"stdout": bytearray(), "stderr": bytearray()}
        self.sizes = {"stdout": 0, "stderr": 0}

    @property
    def overflow(self) -> bool:
        return sum(self.sizes.values()) > self.limit

    def text(self, which: str) -> str:
        return bytes(self.kept[which]).decode("utf-8", errors="replace")

    def tails(self) -> str:
        parts = [f"\n--- {which} ---\n{_tail(self.kept[which])}"
                 for which in ("stderr", "stdout") if self.kept[which]]
        return "".join(parts)

    async def drain(self, stream: trio.abc.ReceiveStream, which: str) -> None:
        async with stream:
            while chunk := await stream.receive_some(_READ_CHUNK):
                self.sizes[which] += len(chunk)
                room = self.limit - len(self.kept["stdout"]) - len(self.kept["stderr"])
                if room > 0:
                    self.kept[which] += chunk[:room]


def _signal_group(proc: trio.Process, sig: int) -> None:
    if proc.returncode is not None:  # reaped: its pid (= the group id) may be reused
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _group_killer(grace: float) -> Callable[[trio.Process], Any]:
    async def deliver_cancel(proc: trio.Process) -> None:
        _signal_group(proc, signal.SIGTERM)
        await trio.sleep(grace)
        _signal_group(proc, signal.SIGKILL)

    return deliver_cancel


class _Program:
    """The fixed part of a subprocess tool and its ``check`` / run functions."""

    def __init__(self, argv: Sequence[str], build_args: BuildArgs, cwd: Path | None,
                 env: Mapping[str, str], timeout: float | None, max_output_bytes: int,
                 ok_exit_codes: frozenset[int], terminate_grace: float,
                 check: ToolCheck | None) -> None:
        self.argv = tuple(argv)
        self.build_args = build_args
        self.cwd = cwd
        self.env = dict(env)
        self.timeout = timeout
        self.max_output_bytes = max_output_bytes
        self.ok_exit_codes = ok_exit_codes
        self.terminate_grace = terminate_grace
        self.extra_check = check

    def prepare(self, arguments: Mapping[str, Any]) -> tuple[list[str], bytes | None]:
        """``(argv, stdin bytes or None)`` of a call. Reads the file system (program
        lookup), changes nothing. Raises ToolError (invalid_arguments, not_found)."""
        try:
            extra = self.build_args(arguments)
        except Exception as error:
            raise _invalid(f"cannot build the command line: {type(error).__name__}: "
                           f"{error}") from None
        if isinstance(extra, (str, bytes)) or not isinstance(extra, Sequence):
            raise _invalid("the arguments must give a list of strings")
        argv = [*self.argv, *extra]
        for item in argv:
            if not isinstance(item, str):
                raise _invalid(f"every argv element must be a string, not {item!r}")
            if "\x00" in item:
                raise _invalid("argv elements must not contain NUL")
            try:
                os.fsencode(item)
            except UnicodeEncodeError:
                raise _invalid(f"argv element {item!r} cannot be encoded") from None
        stdin = arguments.get("stdin")
        if stdin is not None and not isinstance(stdin, str):
            raise _invalid("stdin must be a string")
        try:
            data = None if stdin is None else stdin.encode("utf-8")
        except UnicodeEncodeError:
            raise _invalid("stdin cannot be encoded as UTF-8") from None
        self._locate()
        return argv, data

    def _locate(self) -> None:
        cwd = self.cwd
        if cwd is not None and not cwd.is_dir():
            raise _not_found(f"working directory {str(cwd)!r} is not a directory")
        program = self.argv[0]
        if os.sep in program or (os.altsep is not None and os.altsep in program):
            path = Path(program) if cwd is None else cwd / program
            found = path.is_file() and os.access(path, os.X_OK)
        else:
            found = shutil.which(program, path=self.env.get("PATH", os.defpath)) is not None
        if not found:
            raise _not_found(f"program {program!r} is not found or not executable")

    def check(self, arguments: Any) -> ToolFailure | None:
        """``validate`` hook (RUN-EXE-5): the call's failure, or ``None``."""
        if not isinstance(arguments, dict):
            return ToolFailure(ToolFailureClass.INVALID_ARGUMENTS, not_an_object(arguments))
        try:
            self.prepare(arguments)
        except ToolError as error:
            return error.to_failure()
        return self.extra_check(arguments) if self.extra_check is not None else None

    async def run(self, **arguments: Any) -> dict[str, Any]:
        """Run the program once; see the module docstring for output and failures."""
        argv, stdin = self.prepare(arguments)
        capture = _Capture(self.max_output_bytes)
        options: dict[str, Any] = {
            "stdin": subprocess.DEVNULL if stdin is None else stdin,
            "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "check": False,
            "cwd": self.cwd, "env": self.env}
        if os.name == "posix":
            options["start_new_session"] = True
            options["deliver_cancel"] = _group_killer(self.terminate_grace)
        spawn_error: OSError | None = None
        proc: trio.Process | None = None
        with trio.move_on_after(self.timeout if self.timeout is not None else float("inf")
                                ) as limit:
            async with trio.open_nursery() as nursery:
                try:
                    proc = await nursery.start(functools.partial(trio.run_process, argv,
                                                                 **options))
                except OSError as error:
                    spawn_error = error
                else:
                    assert proc.stdout is not None and proc.stderr is not None
                    nursery.start_soon(capture.drain, proc.stdout, "stdout")
                    nursery.start_soon(capture.drain, proc.stderr, "stderr")
        if spawn_error is not None:
            class_ = (ToolFailureClass.NOT_FOUND if isinstance(spawn_error, FileNotFoundError)
                      else ToolFailureClass.UNAVAILABLE)
            raise ToolError(class_, f"cannot start {argv[0]!r}: {spawn_error}",
                            retry=RetryDisposition.NEVER)
        if limit.cancelled_caught:
            raise ToolUnknownError(ToolFailureClass.TIMEOUT,
                                   f"{argv[0]!r} did not finish within {self.timeout} s and "
                                   f"was stopped{capture.tails()}")
        assert proc is not None and proc.returncode is not None
        code = proc.returncode
        if capture.overflow:
            raise ToolError(TOO_LARGE, (
                f"{argv[0]!r} wrote {capture.sizes['stdout']} bytes to stdout and "
                f"{capture.sizes['stderr']} to stderr, more than the {self.max_output_bytes}"
                f" bytes allowed; it exited with status {code}{capture.tails()}"))
        if code not in self.ok_exit_codes:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            raise ToolError(EXIT_NONZERO, f"{argv[0]!r} {how}{capture.tails()}")
        return {"argv": argv, "exit_code": code, "stdout": capture.text("stdout"),
                "stderr": capture.text("stderr")}


def _check_strings(what: str, values: Sequence[str]) -> None:
    for value in values:
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError(f"{what} must be strings without NUL, not {value!r}")


def subprocess_tool(ref: ToolRef, argv: Sequence[str | os.PathLike[str]], *,
                    name: str | None = None, description: str | None = None,
                    parameters: Mapping[str, Any] | str | None = None,
                    build_args: BuildArgs | None = None,
                    cwd: str | os.PathLike[str] | None = None,
                    env: Mapping[str, str] | None = None,
                    timeout: float | None = DEFAULT_SUBPROCESS_TIMEOUT,
                    max_output_bytes: int = MAX_OUTPUT_BYTES,
                    ok_exit_codes: Collection[int] = (0,),
                    terminate_grace: float = TERMINATE_GRACE,
                    policy: ResponsePolicy = ResponsePolicy.DIRECT_EXECUTION,
                    replay: ToolReplay = ToolReplay.NEVER,
                    placement: ToolPlacement = ToolPlacement.NONE,
                    check: ToolCheck | None = None) -> Tool:
    """Declare a tool that runs the program ``argv[0]`` with ``argv[1:]`` and the call's
    arguments — never through a shell (see the module docstring for the whole contract).

    * ``argv``: the fixed command line (non-empty; strings or paths, no NUL).
    * ``parameters``: the JSON schema of the call's arguments (mapping or JSON text;
      default :data:`SUBPROCESS_PARAMETERS`: optional ``args`` array of strings, optional
      ``stdin`` string, nothing else). ``build_args(arguments)`` turns validated
      arguments into the argv elements appended to ``argv`` (default: ``args``); it must
      be pure — it runs at ``validate`` too. ``stdin`` is always read from the
      ``stdin`` argument when present.
    * ``cwd``: the child's working directory (``None``: this process's); ``env``: the
      child's whole environment (``None``: :func:`minimal_env`, read now).
    * ``timeout``: seconds per call (``None``: no limit; default 60) → UNKNOWN ``timeout``;
      stopping may add up to ``terminate_grace`` seconds. The executor-level
      ``Tool.timeout`` stays ``None``: the tool enforces its own.
    * ``max_output_bytes``: stdout + stderr limit (default 1 MiB) → ``too_large``;
      ``ok_exit_codes``: statuses that give a result (default ``(0,)``), any other →
      ``exit_nonzero``.
    * ``name``, ``policy``, ``placement``, ``check`` as for :func:`python_tool`;
      ``replay`` defaults to NEVER: running a program is an external act, so an orphaned
      call is settled ``adopted_without_replay`` instead of being run twice (RUN-EXE-9).
      ``description`` defaults to one naming the program (its base name only, so the
      definition digest does not depend on where the program is installed).

    Raises ``ValueError`` for an empty argv, non-string or NUL-holding argv or env
    entries, a ``timeout``/``terminate_grace`` out of range or a negative
    ``max_output_bytes``; ``ValidationError`` for an empty ref or invalid ``parameters``.
    """
    fixed = [os.fspath(item) if isinstance(item, os.PathLike) else item for item in argv]
    if not fixed or not fixed[0]:
        raise ValueError("argv needs a program: a non-empty first element")
    _check_strings("argv elements", fixed)
    environment = minimal_env() if env is None else dict(env)
    _check_strings("env names and values", [*environment, *environment.values()])
    if any(not key or "=" in key for key in environment):
        raise ValueError("env names must be non-empty and must not contain '='")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be > 0 or None, not {timeout!r}")
    if not terminate_grace >= 0:
        raise ValueError(f"terminate_grace must be >= 0, not {terminate_grace!r}")
    if max_output_bytes < 0:
        raise ValueError(f"max_output_bytes must be >= 0, not {max_output_bytes!r}")
    program = _Program(fixed, build_args or _default_args,
                       None if cwd is None else Path(cwd), environment, timeout,
                       max_output_bytes, frozenset(ok_exit_codes), terminate_grace, check)
    if description is None:
        base = os.path.basename(fixed[0]) or fixed[0]
        description = (f"Run the program {base} (no shell); `args` are appended to its "
                       "command line, `stdin` is its standard input. Returns exit_code, "
                       "stdout and stderr." if parameters is None
                       else f"Run the program {base} (no shell).")
    return python_tool(program.run, ref=ref, name=name, description=description,
                       parameters=SUBPROCESS_PARAMETERS if parameters is None else parameters,
                       policy=policy, replay=replay, placement=placement,
                       check=program.check)
