"""Loop results (spec §5.3) and what the application facade adds to them (APP-RES-1).

``LoopResult`` is what a drive/advance ended with. The facade
(:meth:`runx_actors.runtime.Runtime.drive`) fills in two read-side restatements the
lower layer leaves empty: ``answer`` (FINISHED: the last completed model step's text and
structured content) and ``waiting_for`` (WAITING: the calls that need an outside answer).
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from ..protocol.values import ResponseKind, ResponseRequest, RunResult

__all__ = ["LoopDisposition", "LoopResult", "EXECUTION_RECOVERY", "Answer", "WaitingCall",
           "AWAITING_APPROVAL", "AWAITING_RESPONSE", "AWAITING_APPROVAL_OR_RESPONSE"]

EXECUTION_RECOVERY = "execution_recovery"
#: WAITING reasons the facade sets (APP-RES-2): every waiting call needs an approval …
AWAITING_APPROVAL = "awaiting_approval"
#: … every waiting call needs an external response (``rt.respond``) …
AWAITING_RESPONSE = "awaiting_response"
#: … some need an approval, some an external response.
AWAITING_APPROVAL_OR_RESPONSE = "awaiting_approval_or_response"


class LoopDisposition(enum.Enum):
    """How a loop operation ended: WAITING (needs something from outside), FINISHED (the
    Run ended), DISPATCHED (advance started effects), DELIVERED / DROPPED (an Outcome
    was settled / written nothing)."""

    WAITING = "waiting"
    FINISHED = "finished"
    DISPATCHED = "dispatched"
    DELIVERED = "delivered"
    DROPPED = "dropped"


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class Answer:
    """The final answer of a Run: its last *completed* model step (APP-RES-1).

    ``text`` is the model's ``content`` (``""`` when it said nothing); ``structured`` is
    the rest of the frozen ``model_result`` JSON object — the provider's own fields
    (``body``), ``finishReason`` and ``usage`` (``{"inputTokens", "outputTokens"}``, token
    counts) — with integral numbers as ``int``; ``tool_calls`` are the calls that step
    asked for (``[{"id", "name", "arguments"}]``, usually empty for a final answer);
    ``step_id`` names the model step.
    """

    text: str
    step_id: str
    structured: dict[str, Any] = attrs.field(factory=dict)
    tool_calls: tuple[dict[str, Any], ...] = attrs.field(default=(), converter=_tuple)
    finish_reason: str = ""


@attrs.frozen(kw_only=True)
class WaitingCall:
    """A call the Run waits for (APP-RES-2): approve/reject it, or respond to it.

    ``call_id`` is what ``rt.approve/reject/respond`` take; ``tool`` is the call's tool
    reference (``ToolCallBinding.tool_ref``); ``arguments`` the decoded JSON arguments the
    model gave; ``kind`` APPROVAL (``rt.approve`` / ``rt.reject``) or EXTERNAL_RESPONSE
    (``rt.respond`` / ``rt.reject``); ``request`` the protocol's ResponseRequest (for the
    module-level helpers ``approve``/``reject``/``answer``).
    """

    call_id: str
    tool: str
    arguments: Any
    kind: ResponseKind
    step_id: str
    request: ResponseRequest


@attrs.frozen(kw_only=True)
class LoopResult:
    """What a loop operation ended with (§5.3).

    ``result`` (the protocol's RunResult: status, reason, failure, usage) is set when
    FINISHED; ``dispatched`` (AssignmentKeys) when DISPATCHED; ``execution_recovery`` when
    WAITING on an effect nobody will start. Through the facade, ``answer`` is set when
    FINISHED and a model step completed, and ``waiting_for`` lists the waiting calls when
    WAITING, with ``reason`` one of ``awaiting_approval``, ``awaiting_response``,
    ``awaiting_approval_or_response``, ``execution_recovery``, ``cancelled`` (APP-RES-1,
    APP-RES-2).
    """

    disposition: LoopDisposition
    reason: str = ""
    execution_recovery: bool = False
    result: RunResult | None = None
    dispatched: tuple[Any, ...] = attrs.field(default=(), converter=_tuple)
    answer: Answer | None = None
    waiting_for: tuple[WaitingCall, ...] = attrs.field(default=(), converter=_tuple)
