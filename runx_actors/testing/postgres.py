"""A throwaway PostgreSQL cluster for tests of the PostgreSQL store (architecture §4).

``with open_throwaway_cluster() as dsn:`` runs ``initdb`` into a new temporary directory,
starts the server with ``pg_ctl`` on a free TCP port of 127.0.0.1 (its unix socket in the
same directory, ``fsync=off``: tests need no crash safety from the disk), yields a libpq
DSN (user ``runx``, trust authentication, database ``postgres``), and on exit stops the
server (``-m immediate``) and deletes the directory.

``initdb`` refuses to run as root. When the effective uid is 0, every PostgreSQL binary is
run as an unprivileged user through ``runuser -u <user> --`` (the ``postgres`` user if it
exists, else ``nobody``), and the temporary directory is handed to that user.

:func:`postgres_dsn_for_tests` is what a test session uses: the DSN in
``$RUNX_TEST_POSTGRES_DSN`` when set (no cluster is started), else a throwaway cluster.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "DSN_ENV", "PostgresUnavailableError", "find_postgres_bin", "open_throwaway_cluster",
    "postgres_dsn_for_tests",
]

#: The environment variable naming an existing server to test against instead.
DSN_ENV = "RUNX_TEST_POSTGRES_DSN"

#: Seconds ``pg_ctl`` waits for the server to start or stop.
_PG_CTL_TIMEOUT = 60


class PostgresUnavailableError(RuntimeError):
    """No DSN was given and no PostgreSQL server binaries (``initdb``) were found."""


def find_postgres_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: ``$PATH`` first, then the newest
    ``/usr/lib/postgresql/<version>/bin``; None if neither has them."""
    found = shutil.which("initdb")
    if found is not None and shutil.which("pg_ctl") is not None:
        return Path(os.path.realpath(found)).parent
    candidates = []
    for path in glob.glob("/usr/lib/postgresql/*/bin"):
        try:
            version = int(Path(path).parent.name.split(".")[0])
        except ValueError:
            continue
        if (Path(path) / "initdb").exists() and (Path(path) / "pg_ctl").exists():
            candidates.append((version, Path(path)))
    return max(candidates)[1] if candidates else None


def _unprivileged_user() -> str | None:
    """The user to run the server as when we are root (None when we are not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise PostgresUnavailableError(
        "running as root and neither a 'postgres' nor a 'nobody' user exists to run "
        "initdb as"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(argv: list[str], user: str | None) -> None:
    if user is not None:
        argv = ["runuser", "-u", user, "--", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )


@contextlib.contextmanager
def open_throwaway_cluster(*, bin_dir: Path | None = None) -> Iterator[str]:
    """Start a fresh PostgreSQL cluster for the block and yield its DSN (see module doc).

    Raises:
        PostgresUnavailableError: no server binaries were found.
        RuntimeError: ``initdb`` or ``pg_ctl`` failed (their output is in the message).
    """
    bin_dir = bin_dir or find_postgres_bin()
    if bin_dir is None:
        raise PostgresUnavailableError(
            "PostgreSQL server binaries (initdb, pg_ctl) are not on PATH nor under "
            "/usr/lib/postgresql/*/bin"
        )
    user = _unprivileged_user()
    root = Path(tempfile.mkdtemp(prefix="runx-pg-"))
    data, log = root / "data", root / "server.log"
    started = False
    try:
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        _run([str(bin_dir / "initdb"), "-D", str(data), "-U", "runx", "-A", "trust",
              "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"], user)
        for attempt in range(5):
            port = _free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off "
                       "-c full_page_writes=off -c max_connections=200")
            try:
                _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w",
                      "-t", str(_PG_CTL_TIMEOUT), "-o", options, "start"], user)
            except RuntimeError:
                if attempt == 4:
                    raise
                continue  # the port was taken in between: try another one
            started = True
            break
        yield f"host=127.0.0.1 port={port} user=runx dbname=postgres"
    finally:
        try:
            if started:
                _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                      "-t", str(_PG_CTL_TIMEOUT), "stop"], user)
        finally:
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def postgres_dsn_for_tests() -> Iterator[str]:
    """``$RUNX_TEST_POSTGRES_DSN`` if set, else a throwaway cluster's DSN, for the block.

    Raises: PostgresUnavailableError (no DSN and no binaries), RuntimeError.
    """
    dsn = os.environ.get(DSN_ENV)
    if dsn:
        yield dsn
        return
    with open_throwaway_cluster() as cluster:
        yield cluster
