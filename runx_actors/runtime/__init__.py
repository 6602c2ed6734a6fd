"""The trio shell: Run actors, the runtime, takeover and the application surface.

Tier T3/T5 (spec §5, §6.10): ``ActorRuntime`` holds one ``RunActor`` per Run being
operated on; ``RunHandle`` drives, advances and delivers; the ``Reconciler`` performs
takeover; ``open_runtime`` is the entry point applications meet first.
"""

from ._actor import ActorStatistics as ActorStatistics
from ._app import AGENT_INPUT as AGENT_INPUT
from ._app import MAX_INPUT_TEXT_BYTES as MAX_INPUT_TEXT_BYTES
from ._app import MAX_INPUTS_PER_COMMAND as MAX_INPUTS_PER_COMMAND
from ._app import MAX_INPUTS_PER_RUN as MAX_INPUTS_PER_RUN
from ._app import Created as Created
from ._app import PromptBuilder as PromptBuilder
from ._app import Runtime as Runtime
from ._app import RuntimeStore as RuntimeStore
from ._app import ScopeWriter as ScopeWriter
from ._app import ToolOffer as ToolOffer
from ._app import TranscriptBuilder as TranscriptBuilder
from ._app import accept_input as accept_input
from ._app import answer as answer
from ._app import approve as approve
from ._app import cancel_run as cancel_run
from ._app import open_runtime as open_runtime
from ._app import reject as reject
from ._events import Durability as Durability
from ._events import Event as Event
from ._events import EventHub as EventHub
from ._events import EventKind as EventKind
from ._events import EventSink as EventSink
from ._ledger import Dispatched as Dispatched
from ._ledger import DispatchLedger as DispatchLedger
from ._ledger import DispatchPlanned as DispatchPlanned
from ._ledger import GivenUp as GivenUp
from ._ledger import LedgerAppendStatus as LedgerAppendStatus
from ._ledger import LedgerState as LedgerState
from ._ledger import MemoryDispatchLedger as MemoryDispatchLedger
from ._loop import BUDGET_EXCEEDED as BUDGET_EXCEEDED
from ._loop import MODEL_RESEND_LIMIT as MODEL_RESEND_LIMIT
from ._loop import MODEL_STEP_LIMIT as MODEL_STEP_LIMIT
from ._loop import TOOL_LOOKUP_LIMIT as TOOL_LOOKUP_LIMIT
from ._mailbox import MailboxStatistics as MailboxStatistics
from ._reconcile import Decision as Decision
from ._reconcile import MissingPolicy as MissingPolicy
from ._reconcile import Reconciler as Reconciler
from ._reconcile import Verdict as Verdict
from ._reconcile import assignment_from_target as assignment_from_target
from ._reconcile import recover_interrupted as recover_interrupted
from ._results import AWAITING_APPROVAL as AWAITING_APPROVAL
from ._results import AWAITING_APPROVAL_OR_RESPONSE as AWAITING_APPROVAL_OR_RESPONSE
from ._results import AWAITING_RESPONSE as AWAITING_RESPONSE
from ._results import Answer as Answer
from ._results import LoopDisposition as LoopDisposition
from ._results import LoopResult as LoopResult
from ._results import WaitingCall as WaitingCall
from ._runtime import ActorRuntime as ActorRuntime
from ._runtime import DriveTicket as DriveTicket
from ._runtime import RunHandle as RunHandle
from ._settings import DispatchPolicy as DispatchPolicy
from ._settings import Settings as Settings
from ._settings import TargetRequest as TargetRequest

#: The name ``ActorRuntime`` had before issue 10 (still importable, not documented).
RunRuntime = ActorRuntime

__all__ = [
    "ActorStatistics", "AGENT_INPUT", "Runtime", "ToolOffer", "TranscriptBuilder",
    "accept_input", "answer", "approve", "cancel_run", "open_runtime", "reject",
    "Durability", "Event", "EventHub", "EventKind", "EventSink", "DispatchLedger",
    "Dispatched", "DispatchPlanned", "GivenUp", "LedgerAppendStatus", "LedgerState",
    "MemoryDispatchLedger", "BUDGET_EXCEEDED", "MODEL_RESEND_LIMIT",
    "MODEL_STEP_LIMIT", "TOOL_LOOKUP_LIMIT", "MailboxStatistics", "Decision",
    "MissingPolicy", "Reconciler", "Verdict", "assignment_from_target",
    "recover_interrupted", "LoopDisposition", "LoopResult", "RunHandle", "ActorRuntime",
    "DriveTicket",
    "DispatchPolicy", "Settings", "TargetRequest", "Created", "PromptBuilder",
    "RuntimeStore", "ScopeWriter", "Answer", "WaitingCall", "AWAITING_APPROVAL",
    "AWAITING_RESPONSE", "AWAITING_APPROVAL_OR_RESPONSE", "MAX_INPUTS_PER_COMMAND",
    "MAX_INPUTS_PER_RUN", "MAX_INPUT_TEXT_BYTES",
]

for _name in __all__:
    _obj = globals()[_name]
    # only our own classes: re-exported ones (Verdict is effect.Verdict) keep their home
    if isinstance(_obj, type) and _obj.__module__.startswith(__name__ + "."):
        _obj.__module__ = __name__
del _name, _obj
