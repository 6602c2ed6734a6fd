"""Derived identities of Agent Run Protocol v1 (RUN-WIR-1, RUN-WIR-3, RUN-CMT-8).

Every id is ``namespaced_hash(namespace, *parts)``: the lowercase hex SHA-256 of the
length-prefixed namespace and parts (``f(s) = len(utf8(s)) ":" utf8(s)``), 64 characters,
no ``sha256:`` prefix (spec §3.2). Integers are rendered as unsigned decimal strings.

The namespaces and the part order are frozen protocol constants: they keep the reference
implementation's ``twilight/`` names so ids match it byte for byte.

All functions are pure and cached (their inputs are immutable strings and ints).
"""

from __future__ import annotations

import functools
import hashlib

__all__ = [
    "NS_MODEL_REQUEST",
    "NS_MODEL_STEP",
    "NS_TOOL_CALL",
    "NS_TOOL_STEP",
    "NS_RESPONSE",
    "NS_RESPONSE_COMMAND",
    "NS_INPUT_COMMAND",
    "NS_WITHDRAW_COMMAND",
    "NS_EFFECT",
    "NS_START_COMMAND",
    "NS_SETTLEMENT_COMMAND",
    "NS_RECOVERY_COMMAND",
    "NS_DECLINE_COMMAND",
    "derive",
    "derive_model_request_command_id",
    "derive_prepare_command_id",
    "derive_model_step_id",
    "derive_call_id",
    "derive_tool_step_id",
    "derive_response_id",
    "derive_response_command_id",
    "derive_input_command_id",
    "derive_withdraw_command_id",
    "derive_effect_id",
    "derive_start_command_id",
    "derive_settlement_command_id",
    "derive_recovery_command_id",
    "derive_decline_command_id",
]

NS_MODEL_REQUEST = "twilight/model-request"
NS_MODEL_STEP = "twilight/model-step"
NS_TOOL_CALL = "twilight/tool-call"
NS_TOOL_STEP = "twilight/tool-step"
NS_RESPONSE = "twilight/response"
NS_RESPONSE_COMMAND = "twilight/response-command"
NS_INPUT_COMMAND = "twilight/input-command"
NS_WITHDRAW_COMMAND = "twilight/withdraw-command"
NS_EFFECT = "twilight/effect"
NS_START_COMMAND = "twilight/start-command"
NS_SETTLEMENT_COMMAND = "twilight/settlement-command"
NS_RECOVERY_COMMAND = "twilight/recovery-command"
NS_DECLINE_COMMAND = "twilight/decline-command"


def _part(value: str | int) -> bytes:
    if isinstance(value, bool):
        raise TypeError("identity parts are str or int, not bool")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"identity integer parts are unsigned, got {value}")
        text = str(value)
    else:
        text = value
    data = text.encode("utf-8")  # lone surrogates raise UnicodeEncodeError (RUN-WIR-1)
    return str(len(data)).encode("ascii") + b":" + data


#: The SHA-256 state after ``f(namespace)`` of every frozen namespace (issue 11): a derive
#: in one of them copies it instead of hashing the namespace again. Never updated in place:
#: :func:`derive` updates a ``.copy()``.
_PREFIXES = {
    namespace: hashlib.sha256(_part(namespace))
    for namespace in (
        NS_MODEL_REQUEST, NS_MODEL_STEP, NS_TOOL_CALL, NS_TOOL_STEP, NS_RESPONSE,
        NS_RESPONSE_COMMAND, NS_INPUT_COMMAND, NS_WITHDRAW_COMMAND, NS_EFFECT,
        NS_START_COMMAND, NS_SETTLEMENT_COMMAND, NS_RECOVERY_COMMAND, NS_DECLINE_COMMAND,
    )
}


#: Derived ids kept by :func:`derive`'s cache: enough for the Runs a process advances at
#: once (a hit saves one SHA-256); each entry costs ~350 bytes, so a cache sized for
#: every Run would cost more per waiting Run than the Run itself (issue 11).
DERIVE_CACHE_SIZE = 4096


@functools.lru_cache(maxsize=DERIVE_CACHE_SIZE)
def derive(namespace: str, *parts: str | int) -> str:
    """Return ``namespaced_hash(namespace, *parts)`` as 64 lowercase hex characters (§3.2).

    ``parts`` are strings or non-negative ints (rendered in decimal). An empty part is
    legal and contributes ``0:``. Raises ``UnicodeEncodeError`` for text that is not valid
    UTF-8 (lone surrogates) and ``ValueError`` for negative integers.
    """
    prefix = _PREFIXES.get(namespace)
    h = prefix.copy() if prefix is not None else hashlib.sha256(_part(namespace))
    for p in parts:
        h.update(_part(p))
    return h.hexdigest()


def derive_model_request_command_id(run_id: str, position: int) -> str:
    """Prepare CommandID: ``H("twilight/model-request", run_id, position)`` (RUN-WIR-3).

    ``position`` is the RunPosition the caller loaded (the commit's ``base``).
    """
    return derive(NS_MODEL_REQUEST, run_id, position)


#: The spec's name (§3.3) for :func:`derive_model_request_command_id`.
derive_prepare_command_id = derive_model_request_command_id


def derive_model_step_id(run_id: str, command_id: str) -> str:
    """ModelStep StepID: ``H("twilight/model-step", run_id, prepare_command_id)``."""
    return derive(NS_MODEL_STEP, run_id, command_id)


def derive_call_id(step_id: str, index: int) -> str:
    """CallID: ``H("twilight/tool-call", model_step_id, index)``, index 0-based."""
    return derive(NS_TOOL_CALL, step_id, index)


def derive_tool_step_id(step_id: str) -> str:
    """ToolStep StepID: ``H("twilight/tool-step", source_model_step_id)`` (INV-17)."""
    return derive(NS_TOOL_STEP, step_id)


def derive_response_id(run_id: str, step_id: str, call_id: str, kind: str) -> str:
    """ResponseID: ``H("twilight/response", run_id, tool_step_id, call_id, kind)``.

    ``kind`` is the wire value ``"approval"`` or ``"external_response"`` (an enum member
    with a ``.value`` is accepted too).
    """
    return derive(NS_RESPONSE, run_id, step_id, call_id, getattr(kind, "value", kind))


def derive_response_command_id(run_id: str, step_id: str, call_id: str, response_id: str) -> str:
    """CommandID of ApproveToolCall / RejectToolCall / SubmitToolResponse."""
    return derive(NS_RESPONSE_COMMAND, run_id, step_id, call_id, response_id)


def derive_input_command_id(run_id: str, *input_ids: str) -> str:
    """AcceptInput CommandID: ``H("twilight/input-command", run_id, id1, …, idN)``."""
    return derive(NS_INPUT_COMMAND, run_id, *input_ids)


def derive_withdraw_command_id(run_id: str, step_id: str) -> str:
    """WithdrawPreparedStep CommandID."""
    return derive(NS_WITHDRAW_COMMAND, run_id, step_id)


def derive_effect_id(run_id: str, step_id: str, call_id: str, sequence: int) -> str:
    """EffectID: ``H("twilight/effect", run_id, step_id, call_id, sequence)`` (RUN-WIR-1).

    Model effects use ``call_id=""`` and ``sequence = step.rejects`` at start (INV-7);
    tool effects use sequence 0 (INV-6).
    """
    return derive(NS_EFFECT, run_id, step_id, call_id, sequence)


def derive_start_command_id(effect_id: str) -> str:
    """Start CommandID (StartModelExecution, StartToolCall): from the EffectID alone."""
    return derive(NS_START_COMMAND, effect_id)


def derive_settlement_command_id(effect_id: str) -> str:
    """Settlement CommandID (Submit*/RejectModelResult): from the EffectID alone."""
    return derive(NS_SETTLEMENT_COMMAND, effect_id)


def derive_recovery_command_id(effect_id: str) -> str:
    """Recovery CommandID (RecoverModelExecution, takeover's UNKNOWN SubmitToolFailure)."""
    return derive(NS_RECOVERY_COMMAND, effect_id)


def derive_decline_command_id(run_id: str, step_id: str, call_id: str) -> str:
    """DeclineToolCall CommandID: from the call's coordinates."""
    return derive(NS_DECLINE_COMMAND, run_id, step_id, call_id)
