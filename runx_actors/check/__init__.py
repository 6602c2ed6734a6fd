"""Explicit-state model checking of runx-actors models (architecture §7).

Define a ``Model`` (initial states, labelled actions, invariants, optional symmetry
reduction), then ``check_model(model)`` explores every reachable state (BFS by default, so
a counterexample is a shortest one) and returns a ``CheckResult``. Traces render as text,
JSON-able dicts or Mermaid sequence diagrams. Registered models (``reference``, ``core``)
are built by ``runx_actors.check.models.load_model``.
"""

import types as _types

from ._checker import check_model as check_model
from ._cli import DEFAULT_PROFILE as DEFAULT_PROFILE
from ._cli import PROFILES as PROFILES
from ._cli import resolve_config as resolve_config
from ._config import CheckConfig as CheckConfig
from ._errors import CheckError as CheckError
from ._errors import ConfigFileError as ConfigFileError
from ._errors import ModelCodeError as ModelCodeError
from ._errors import ModelNotFoundError as ModelNotFoundError
from ._errors import TraceReplayError as TraceReplayError
from ._errors import UnknownVariantError as UnknownVariantError
from ._model import Invariant as Invariant
from ._model import Model as Model
from ._model import ModelBase as ModelBase
from ._progress import LineProgress as LineProgress
from ._progress import ProgressCallback as ProgressCallback
from ._progress import RichProgress as RichProgress
from ._render import Describe as Describe
from ._render import TraceFormat as TraceFormat
from ._render import render_json as render_json
from ._render import render_mermaid as render_mermaid
from ._render import render_text as render_text
from ._render import render_trace as render_trace
from ._render import result_to_dict as result_to_dict
from ._render import split_label as split_label
from ._render import stats_to_dict as stats_to_dict
from ._render import violation_to_dict as violation_to_dict
from ._result import DEADLOCK as DEADLOCK
from ._result import CheckResult as CheckResult
from ._result import CheckStats as CheckStats
from ._result import ProgressSnapshot as ProgressSnapshot
from ._result import StopReason as StopReason
from ._result import Strategy as Strategy
from ._result import Violation as Violation
from ._trace import Trace as Trace
from ._trace import TraceStep as TraceStep

__all__ = [
    "check_model",
    "CheckConfig",
    "DEFAULT_PROFILE",
    "PROFILES",
    "resolve_config",
    "CheckError",
    "ConfigFileError",
    "ModelCodeError",
    "ModelNotFoundError",
    "TraceReplayError",
    "UnknownVariantError",
    "Invariant",
    "Model",
    "ModelBase",
    "LineProgress",
    "ProgressCallback",
    "RichProgress",
    "Describe",
    "TraceFormat",
    "render_json",
    "render_mermaid",
    "render_text",
    "render_trace",
    "result_to_dict",
    "split_label",
    "stats_to_dict",
    "violation_to_dict",
    "DEADLOCK",
    "CheckResult",
    "CheckStats",
    "ProgressSnapshot",
    "StopReason",
    "Strategy",
    "Violation",
    "Trace",
    "TraceStep",
]


def _fix_module_paths() -> None:
    # Public objects print as ``runx_actors.check.X`` (tracebacks, reprs), as trio does.
    for name in __all__:
        obj = globals()[name]
        if isinstance(obj, type) or isinstance(obj, _types.FunctionType):
            obj.__module__ = __name__


_fix_module_paths()
del _fix_module_paths
