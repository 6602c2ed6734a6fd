"""Value types of the Run state machine (spec §2.1, §3.7).

All values are frozen, slotted attrs classes; sequences are tuples; embedded JSON is held
as canonical JSON text (``JSONText``). Zero values shown as defaults are omitted on the
wire. Field validators check single-field rules only; whole-state rules live in
``evolve``'s guards.
"""

from __future__ import annotations

import enum
import re
from typing import Any, TypeAlias

import attrs

__all__ = [
    "RunID", "StepID", "CallID", "CommandID", "ResponseID", "InputID", "ToolRef",
    "ModelRef", "EffectID", "PromptToken", "Scope", "Digest", "JSONText",
    "RunStatus", "RunReason", "ModelStepStatus", "ToolCallStatus", "ToolFailureOutcome",
    "ResponsePolicy", "ResponseKind", "ToolReplay", "ToolPlacement",
    "ModelRejectDisposition", "FailureClass", "SCHEDULING_MODES",
    "Failure", "AgentInput", "NewRun", "ToolScheduling", "ToolSpec", "ResponseRequest",
    "ToolCallBinding", "ToolResult", "ToolCallResult", "ToolCallFailure",
    "RunFailure", "RunCompletedEnd", "RunStoppedEnd", "RunFailedEnd", "RunEnd",
    "RunResult", "Usage", "ToolDefinition", "ModelRequest", "ModelToolCall", "ModelResult",
    "is_digest",
]

RunID: TypeAlias = str
StepID: TypeAlias = str
CallID: TypeAlias = str
CommandID: TypeAlias = str
ResponseID: TypeAlias = str
InputID: TypeAlias = str
ToolRef: TypeAlias = str
ModelRef: TypeAlias = str
EffectID: TypeAlias = str
PromptToken: TypeAlias = str
Scope: TypeAlias = str
Digest: TypeAlias = str  # "sha256:" + 64 lowercase hex
JSONText: TypeAlias = str  # always canonical JSON text

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def is_digest(value: object) -> bool:
    """True iff *value* is ``"sha256:"`` followed by 64 lowercase hex characters."""
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


class RunStatus(enum.Enum):
    """Where a Run stands (RUN-MCH-1): ``ACTIVE`` until its one ``RunEnded`` fact, then
    ``COMPLETED`` (the model answered without tool calls), ``STOPPED`` (reason
    ``cancelled``) or ``FAILED`` (``provider_failure``, ``malformed_model_result`` or
    ``effect_unknown``). The three ended statuses are absorbing."""

    ACTIVE = "active"
    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"


class RunReason(enum.Enum):
    """Why an ended Run stopped or failed (RUN-MCH-1); ``NONE`` (``""``) for a completed
    or active Run. The values are wire strings of the ``run_ended`` fact."""

    NONE = ""
    CANCELLED = "cancelled"
    PROVIDER_FAILURE = "provider_failure"
    MALFORMED_MODEL_RESULT = "malformed_model_result"
    EFFECT_UNKNOWN = "effect_unknown"


class ModelStepStatus(enum.Enum):
    """A current ModelStep (RUN-MCH-1): ``PREPARED`` (its request is frozen, no effect yet)
    or ``EXECUTING`` (its start fact is durable; exactly one settlement follows)."""

    PREPARED = "prepared"
    EXECUTING = "executing"


class ToolCallStatus(enum.Enum):
    """One call of a ToolStep (RUN-MCH-1, RUN-MCH-4): ``PENDING`` (not started),
    ``EXECUTING`` (start fact durable), ``WAITING`` (for an approval or an outside
    response), then ``COMPLETED`` or ``FAILED``, each settled by exactly one fact."""

    PENDING = "pending"
    EXECUTING = "executing"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"


class ToolFailureOutcome(enum.Enum):
    """Whether a failed call's effect is certain (RUN-EXE-2): ``KNOWN`` — it did not run,
    or ran and failed; ``UNKNOWN`` — it may have run (a lost or uncertain Outcome)."""

    KNOWN = "known"
    UNKNOWN = "unknown"


class ResponsePolicy(enum.Enum):
    """How a tool call starts (RUN-MCH-4): at once (DIRECT_EXECUTION), after an approval
    (APPROVAL_REQUIRED), or never — an outside answer settles it (EXTERNAL_RESPONSE)."""

    DIRECT_EXECUTION = "direct_execution"
    APPROVAL_REQUIRED = "approval_required"
    EXTERNAL_RESPONSE = "external_response"


class ResponseKind(enum.Enum):
    """What a WAITING call waits for (RUN-MCH-4): an ``APPROVAL`` (approve/reject, then
    the tool runs) or an ``EXTERNAL_RESPONSE`` (the answer is the call's result)."""

    APPROVAL = "approval"
    EXTERNAL_RESPONSE = "external_response"


class ToolReplay(enum.Enum):
    """Whether a tool's effect may run again (RUN-EXE-9): an executor adopting an orphaned
    record restarts it only when ``ALLOWED``; ``NEVER`` and ``UNKNOWN`` (``""``) settle it
    as an unknown outcome instead."""

    UNKNOWN = ""
    NEVER = "never"
    ALLOWED = "allowed"


class ToolPlacement(enum.Enum):
    """Where a tool runs (RUN-LOP-9 target resolution): ``NONE`` (``""``, anywhere) or
    ``WORKSPACE`` (beside the Run's workspace)."""

    NONE = ""
    WORKSPACE = "workspace"


class ModelRejectDisposition(enum.Enum):
    """What a rejected (malformed) model result leads to (RUN-LOP-3): ``RETRY`` the step
    with a new effect, or ``FAIL_RUN`` once the retries are spent."""

    RETRY = "retry"
    FAIL_RUN = "fail_run"


class FailureClass:
    """Failure classes the Run itself uses (§2.1). Tool-defined classes are open strings."""

    PERMISSION_DENIED = "permission_denied"
    RESPONSE_REJECTED = "response_rejected"
    TOOL_LOOKUP_FAILED = "tool_lookup_failed"
    INVALID_ARGUMENTS = "invalid_arguments"
    MALFORMED_MODEL_RESULT = "malformed_model_result"
    TOOL_DEFINITION_MISMATCH = "tool_definition_mismatch"
    EXECUTION_FAILED = "execution_failed"
    EFFECT_UNKNOWN = "effect_unknown"
    CANCELLED = "cancelled"
    PROVIDER_FAILURE = "provider_failure"


#: Legal values of ``ToolScheduling.mode``; ``""`` is kept as given and acts as parallel.
SCHEDULING_MODES = frozenset({"", "parallel", "sequential"})


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@attrs.frozen
class Failure:
    """A failure: its class (wire key ``class``) and an informative message."""

    class_: str
    message: str = ""


@attrs.frozen
class AgentInput:
    """One input for the Run: an id and the digest of its body."""

    id: InputID
    digest: Digest

    @classmethod
    def text(cls, input_id: InputID, text: str) -> AgentInput:
        """An input whose body is the JSON string *text* (digest of ``agent_input``)."""
        from .canonical import content_digest

        return cls(input_id, content_digest("agent_input", {"text": text}))


@attrs.frozen
class NewRun:
    """What creates a Run (RUN-NEW-1): its id (non-empty UTF-8) and an optional
    causation id recorded in ``RunCreated``."""

    run_id: RunID
    causation_id: str = ""


@attrs.frozen
class ToolScheduling:
    """How a ToolStep's calls are started (RUN-LOP-1): mode ``""``/``parallel``/
    ``sequential``; ``max_parallel`` 0 = no cap."""

    mode: str = ""
    max_parallel: int = 0

    def is_valid(self) -> bool:
        """True iff ``mode`` is one of SCHEDULING_MODES and ``max_parallel`` a non-bool
        int ≥ 0 (``Settings`` refuses any other scheduling; RUN-LOP-1)."""
        return (
            self.mode in SCHEDULING_MODES
            and isinstance(self.max_parallel, int)
            and not isinstance(self.max_parallel, bool)
            and self.max_parallel >= 0
        )


@attrs.frozen(kw_only=True)
class ToolSpec:
    """The agent-side description of a tool offered to the model (§1)."""

    ref: ToolRef
    name: str
    definition_digest: Digest
    policy: ResponsePolicy = ResponsePolicy.DIRECT_EXECUTION
    replay: ToolReplay = ToolReplay.UNKNOWN
    placement: ToolPlacement = ToolPlacement.NONE


@attrs.frozen(kw_only=True)
class ResponseRequest:
    """The outside input a WAITING call needs; ``payload`` equals the call's arguments."""

    run_id: RunID
    step_id: StepID
    call_id: CallID
    id: ResponseID
    kind: ResponseKind
    payload: JSONText


@attrs.frozen(kw_only=True)
class ToolCallBinding:
    """The frozen description of one tool call of a ToolStep (RUN-MCH-2)."""

    call_id: CallID
    provider_call_id: str = ""
    tool_ref: ToolRef
    definition_digest: str = ""
    arguments: JSONText
    policy: ResponsePolicy = ResponsePolicy.DIRECT_EXECUTION
    replay: ToolReplay = ToolReplay.UNKNOWN
    placement: ToolPlacement = ToolPlacement.NONE
    response: ResponseRequest | None = None


@attrs.frozen
class ToolResult:
    """Command side of a tool result: the output as canonical JSON text."""

    output: JSONText


@attrs.frozen
class ToolCallResult:
    """State side of a completed call: the digest of its output."""

    output_digest: Digest


@attrs.frozen
class ToolCallFailure:
    """State side of a failed call: its failure and whether the effect is certain."""

    failure: Failure
    outcome: ToolFailureOutcome = ToolFailureOutcome.KNOWN


@attrs.frozen
class RunFailure:
    """Why a Run failed (``RunFailedEnd.failure``): the failure class (wire key
    ``class``), a message and the call that caused it, if one did."""

    class_: str
    message: str = ""
    call_id: CallID = ""


@attrs.frozen
class RunCompletedEnd:
    """The end of a completed Run (``run_ended`` with status ``completed``)."""


@attrs.frozen
class RunStoppedEnd:
    """The end of a stopped (cancelled) Run: the reason, and the calls / model step the
    cancel left uncertain (their effects may have run)."""

    reason: RunReason
    uncertain_calls: tuple[CallID, ...] = attrs.field(default=(), converter=_tuple)
    uncertain_model: StepID = ""


@attrs.frozen
class RunFailedEnd:
    """The end of a failed Run: the reason and the failure."""

    reason: RunReason
    failure: RunFailure


RunEnd: TypeAlias = RunCompletedEnd | RunStoppedEnd | RunFailedEnd


@attrs.frozen
class Usage:
    """Token usage; ``+`` adds field-wise."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )

    def problem(self) -> str | None:
        """Why this is not a token count a model may report, or None: each field an
        ``int`` (not a bool) in ``0..2^53-1`` (the largest integer every JSON reader keeps
        exactly). An executor settles a result whose usage has a problem as
        ``malformed_result`` (RUN-EXE-2), so a negative or huge count is never summed
        into ``RunResult.usage``."""
        for name in ("input_tokens", "output_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not (
                    0 <= value <= _MAX_TOKENS):
                return f"usage {name} is {value!r:.40}, not a token count (0..2^53-1)"
        return None


_MAX_TOKENS = 2**53 - 1


@attrs.frozen(kw_only=True)
class RunResult:
    """Read-side restatement of a Run's end (the authority is the RunEnded fact)."""

    status: RunStatus
    reason: RunReason = RunReason.NONE
    failure: RunFailure | None = None
    uncertain_calls: tuple[CallID, ...] = attrs.field(default=(), converter=_tuple)
    uncertain_model: StepID = ""
    usage: Usage = Usage()


@attrs.frozen
class ToolDefinition:
    """A tool as offered to the model; ``parameters`` is canonical JSON text (§3.7)."""

    name: str
    description: str = ""
    parameters: JSONText = "{}"


@attrs.frozen
class ModelRequest:
    """A frozen model request (§3.7). ``body`` is a canonical JSON object that MUST NOT
    contain the keys ``model`` or ``tools``."""

    model: ModelRef
    tools: tuple[ToolDefinition, ...] = attrs.field(default=(), converter=_tuple)
    body: JSONText = "{}"


@attrs.frozen
class ModelToolCall:
    """One tool call proposed by the model; ``arguments`` already frozen (§3.8)."""

    id: str
    name: str
    arguments: JSONText


@attrs.frozen
class ModelResult:
    """A frozen model result (§3.7)."""

    content: str = ""
    tool_calls: tuple[ModelToolCall, ...] = attrs.field(default=(), converter=_tuple)
    finish_reason: str = ""
    usage: Usage = Usage()
    body: JSONText = "{}"
