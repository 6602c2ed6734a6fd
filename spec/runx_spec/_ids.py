"""The identity derivation of spec §3.2–§3.3, written again from the spec's text.

The reference machine, the model checker's oracle and ``model_tests`` derive every id they
*expect* here, never with ``runx_actors.protocol.ids``: an oracle that calls the code under
test can never disagree with it (a ``derive_input_command_id`` that hashed only the first
input went unnoticed that way). The golden vectors of ``tests/protocol`` pin both
implementations to the same bytes.

``namespaced_hash(ns, *parts)``: SHA-256 over ``len(utf8(x)) ":" utf8(x)`` for the namespace
and then each part, integers as unsigned decimal; lowercase hex, 64 characters. The
namespaces below are the frozen constants of §3.3, spelled out here (not imported).
"""

from __future__ import annotations

import functools
import hashlib

__all__ = [
    "namespaced_hash", "derive_prepare_command_id", "derive_model_step_id",
    "derive_call_id", "derive_tool_step_id", "derive_response_id",
    "derive_response_command_id", "derive_input_command_id", "derive_withdraw_command_id",
    "derive_effect_id", "derive_start_command_id", "derive_settlement_command_id",
    "derive_recovery_command_id", "derive_decline_command_id",
]


def _frame(part: str | int) -> bytes:
    if isinstance(part, bool) or not isinstance(part, str | int):
        raise TypeError(f"an identity part is a str or an int, got {part!r}")
    if isinstance(part, int):
        if part < 0:
            raise ValueError(f"identity integers are unsigned, got {part}")
        part = format(part, "d")
    data = part.encode("utf-8")
    return b"%d:%s" % (len(data), data)


@functools.lru_cache(maxsize=1 << 16)
def namespaced_hash(namespace: str, *parts: str | int) -> str:
    """``namespaced_hash`` of §3.2 (see the module doc)."""
    return hashlib.sha256(b"".join(_frame(p) for p in (namespace, *parts))).hexdigest()


def derive_prepare_command_id(run: str, position: int) -> str:
    return namespaced_hash("twilight/model-request", run, position)


def derive_model_step_id(run: str, prepare_command_id: str) -> str:
    return namespaced_hash("twilight/model-step", run, prepare_command_id)


def derive_call_id(model_step_id: str, index: int) -> str:
    return namespaced_hash("twilight/tool-call", model_step_id, index)


def derive_tool_step_id(model_step_id: str) -> str:
    return namespaced_hash("twilight/tool-step", model_step_id)


def derive_response_id(run: str, tool_step_id: str, call: str, kind: str) -> str:
    return namespaced_hash("twilight/response", run, tool_step_id, call, kind)


def derive_response_command_id(run: str, step: str, call: str, response: str) -> str:
    return namespaced_hash("twilight/response-command", run, step, call, response)


def derive_input_command_id(run: str, *input_ids: str) -> str:
    """Every input id of the batch, in order (§3.3)."""
    return namespaced_hash("twilight/input-command", run, *input_ids)


def derive_withdraw_command_id(run: str, step: str) -> str:
    return namespaced_hash("twilight/withdraw-command", run, step)


def derive_effect_id(run: str, step: str, call: str, sequence: int) -> str:
    return namespaced_hash("twilight/effect", run, step, call, sequence)


def derive_start_command_id(effect: str) -> str:
    return namespaced_hash("twilight/start-command", effect)


def derive_settlement_command_id(effect: str) -> str:
    return namespaced_hash("twilight/settlement-command", effect)


def derive_recovery_command_id(effect: str) -> str:
    return namespaced_hash("twilight/recovery-command", effect)


def derive_decline_command_id(run: str, step: str, call: str) -> str:
    return namespaced_hash("twilight/decline-command", run, step, call)
