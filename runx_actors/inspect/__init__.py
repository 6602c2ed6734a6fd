"""Look inside a store (issue 10; APP-INS-1, APP-INS-2): list Runs, show one, list its
facts, draw its timeline. Reads only; used by ``runx-actors runs``."""

from ._model import EpochBand as EpochBand
from ._model import LogEntry as LogEntry
from ._model import Mark as Mark
from ._model import RunRow as RunRow
from ._model import RunView as RunView
from ._model import Span as Span
from ._model import Timeline as Timeline
from ._model import build_timeline as build_timeline
from ._model import find_scopes as find_scopes
from ._model import list_runs as list_runs
from ._model import log_entries as log_entries
from ._model import run_view as run_view
from ._model import scope_exists as scope_exists
from ._render import to_html as to_html
from ._render import to_mermaid as to_mermaid

__all__ = [
    "EpochBand", "LogEntry", "Mark", "RunRow", "RunView", "Span", "Timeline",
    "build_timeline", "find_scopes", "list_runs", "log_entries", "run_view", "scope_exists",
    "to_html", "to_mermaid",
]
