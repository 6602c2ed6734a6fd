"""The effect protocol (tier T2): what executors receive and answer (spec §6).

Vocabulary (pure): :class:`Assignment`, :class:`AssignmentKey`, :class:`TargetRef`, the
Outcome kinds, :class:`ExecutionStatus`, :class:`AttachmentState` (with its
:class:`Verdict`), :class:`FailureCode`, :class:`RetryDisposition`, progress frames.
Ports (async): :class:`ExecutionPort` and its optional runtime-checkable capabilities.
The :class:`Watcher` (trio) waits for many keys' Outcomes.

Import the module, not the outcome names::

    from runx_actors import effect
    match outcome.result:
        case effect.Cancelled(): ...

so that ``effect.Cancelled`` never meets ``trio.Cancelled``.
"""

from ._assignment import Assignment as Assignment
from ._assignment import AssignmentBody as AssignmentBody
from ._assignment import AssignmentKey as AssignmentKey
from ._assignment import AssignmentKind as AssignmentKind
from ._assignment import ModelAssignment as ModelAssignment
from ._assignment import TargetRef as TargetRef
from ._assignment import ToolAssignment as ToolAssignment
from ._failure import FailureCode as FailureCode
from ._failure import RetryDisposition as RetryDisposition
from ._failure import ToolFailure as ToolFailure
from ._failure import ToolFailureClass as ToolFailureClass
from ._failure import classify_http_status as classify_http_status
from ._failure import classify_provider_error as classify_provider_error
from ._outcome import OUTCOME_RESULT_TYPES as OUTCOME_RESULT_TYPES
from ._outcome import Cancelled as Cancelled
from ._outcome import ModelFailed as ModelFailed
from ._outcome import ModelSucceeded as ModelSucceeded
from ._outcome import Outcome as Outcome
from ._outcome import OutcomeResult as OutcomeResult
from ._outcome import ToolExecutionFailed as ToolExecutionFailed
from ._outcome import ToolExecutionSucceeded as ToolExecutionSucceeded
from ._outcome import ToolExecutionUnknown as ToolExecutionUnknown
from ._outcome import Unknown as Unknown
from ._port import DEFAULT_RETAINED_OUTCOMES as DEFAULT_RETAINED_OUTCOMES
from ._port import DEFAULT_SETTLEMENT_WINDOW as DEFAULT_SETTLEMENT_WINDOW
from ._port import Acknowledger as Acknowledger
from ._port import Attachment as Attachment
from ._port import Disposer as Disposer
from ._port import ExecutionPort as ExecutionPort
from ._port import ExecutionRef as ExecutionRef
from ._port import ProgressPort as ProgressPort
from ._port import Recoverer as Recoverer
from ._port import Redispatcher as Redispatcher
from ._port import Settlement as Settlement
from ._port import SettlementPort as SettlementPort
from ._progress import DEFAULT_PROGRESS_RING as DEFAULT_PROGRESS_RING
from ._progress import ProgressFrame as ProgressFrame
from ._progress import ProgressKind as ProgressKind
from ._status import TERMINAL_STATUSES as TERMINAL_STATUSES
from ._status import AttachmentState as AttachmentState
from ._status import ExecutionStatus as ExecutionStatus
from ._status import Verdict as Verdict
from ._watcher import DeliverCallback as DeliverCallback
from ._watcher import FailCallback as FailCallback
from ._watcher import Receiver as Receiver
from ._watcher import Registration as Registration
from ._watcher import Watcher as Watcher
from ._watcher import WatcherStatistics as WatcherStatistics
from ._watcher import open_watcher as open_watcher
from ._wire import from_wire as from_wire
from ._wire import to_wire as to_wire

__all__ = [
    "Assignment", "AssignmentBody", "AssignmentKey", "AssignmentKind", "ModelAssignment",
    "TargetRef", "ToolAssignment",
    "FailureCode", "RetryDisposition", "ToolFailure", "ToolFailureClass",
    "classify_http_status", "classify_provider_error",
    "OUTCOME_RESULT_TYPES", "Cancelled", "ModelFailed", "ModelSucceeded", "Outcome",
    "OutcomeResult", "ToolExecutionFailed", "ToolExecutionSucceeded",
    "ToolExecutionUnknown", "Unknown",
    "DEFAULT_RETAINED_OUTCOMES", "DEFAULT_SETTLEMENT_WINDOW", "Acknowledger", "Attachment",
    "Disposer", "ExecutionPort", "ExecutionRef", "ProgressPort", "Recoverer",
    "Redispatcher", "Settlement", "SettlementPort",
    "DEFAULT_PROGRESS_RING", "ProgressFrame", "ProgressKind",
    "TERMINAL_STATUSES", "AttachmentState", "ExecutionStatus", "Verdict",
    "DeliverCallback", "FailCallback", "Registration", "Watcher", "WatcherStatistics",
    "open_watcher",
    "from_wire", "to_wire",
]

for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) and _obj.__module__.startswith(__name__ + "."):
        _obj.__module__ = __name__
del _name, _obj
