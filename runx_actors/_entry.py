"""The ``runx-actors`` console script and ``python -m runx_actors`` (RUN-CLI-1).

A Ctrl-C (SIGINT) is the CLI's two lines and exit 130 from the first line of the
program on, also while the command's modules are still being imported (about 0.4 s:
trio, click, rich, the protocol core): this module imports nothing but ``sys``, and the
package root imports nothing eagerly, so the ``try`` below is entered before any heavy
import. After the imports, ``runx_actors.cli`` reports a Ctrl-C the same way.
"""

from __future__ import annotations

import sys
from typing import NoReturn

__all__ = ["main", "interrupted", "EX_INTERRUPTED", "INTERRUPTED_LINES"]

#: The exit code of a command stopped by SIGINT (Ctrl-C): 128 + 2, as shells report it.
EX_INTERRUPTED = 130
#: What a command stopped by SIGINT prints on stderr.
INTERRUPTED_LINES = (
    "runx-actors: interrupted (SIGINT)",
    "hint: the command stopped before it finished and reported nothing; what it had "
    "committed is durable, and running it again continues",
)


def interrupted() -> NoReturn:
    """Print :data:`INTERRUPTED_LINES` on stderr and exit :data:`EX_INTERRUPTED`."""
    sys.stderr.write("".join(line + "\n" for line in INTERRUPTED_LINES))
    sys.stderr.flush()
    sys.exit(EX_INTERRUPTED)


def main() -> None:
    """Run the ``runx-actors`` command line (``runx_actors.cli.main``), importing it
    inside the handler of a Ctrl-C."""
    try:
        from .cli import main as command

        command()
    except KeyboardInterrupt:
        interrupted()
