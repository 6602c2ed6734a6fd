"""An identity oracle independent of ``runx_actors.protocol.ids`` (spec §2.1, §2.2).

Written from the spec's text alone, for checkers that must be able to disagree with the
production derivation: trace validation (``runx_spec.trace``) re-derives every id of a
stored log with it. Nothing here imports ``runx_actors``.

``namespaced_hash(ns, p1, …, pn) = hex(SHA-256(f(ns) ‖ f(p1) ‖ … ‖ f(pn)))`` with
``f(s) = decimal(len(utf8(s))) ":" utf8(s)``; integers are unsigned decimal strings.
"""

from __future__ import annotations

import hashlib

__all__ = [
    "namespaced_hash", "prepare_cid", "model_step", "call", "tool_step", "response",
    "response_cid", "input_cid", "withdraw_cid", "effect", "start_cid", "settlement_cid",
    "recovery_cid", "decline_cid",
]


def _field(part: str | int) -> bytes:
    if isinstance(part, bool) or (isinstance(part, int) and part < 0):
        raise ValueError(f"an identity part is a string or an unsigned integer: {part!r}")
    raw = (part if isinstance(part, str) else str(int(part))).encode("utf-8")
    return b"%d:%s" % (len(raw), raw)


def namespaced_hash(namespace: str, *parts: str | int) -> str:
    """§2.1: 64 lowercase hex digits. ValueError for a negative or bool part."""
    return hashlib.sha256(b"".join(_field(p) for p in (namespace, *parts))).hexdigest()


def prepare_cid(run: str, position: int) -> str:
    return namespaced_hash("twilight/model-request", run, position)


def model_step(run: str, prepare_command_id: str) -> str:
    return namespaced_hash("twilight/model-step", run, prepare_command_id)


def call(model_step_id: str, index: int) -> str:
    return namespaced_hash("twilight/tool-call", model_step_id, index)


def tool_step(model_step_id: str) -> str:
    return namespaced_hash("twilight/tool-step", model_step_id)


def response(run: str, tool_step_id: str, call_id: str, kind: str) -> str:
    """``kind``: ``"approval"`` or ``"external_response"``."""
    return namespaced_hash("twilight/response", run, tool_step_id, call_id, kind)


def response_cid(run: str, step_id: str, call_id: str, response_id: str) -> str:
    return namespaced_hash("twilight/response-command", run, step_id, call_id, response_id)


def input_cid(run: str, *input_ids: str) -> str:
    return namespaced_hash("twilight/input-command", run, *input_ids)


def withdraw_cid(run: str, step_id: str) -> str:
    return namespaced_hash("twilight/withdraw-command", run, step_id)


def effect(run: str, step_id: str, call_id: str, sequence: int) -> str:
    return namespaced_hash("twilight/effect", run, step_id, call_id, sequence)


def start_cid(effect_id: str) -> str:
    return namespaced_hash("twilight/start-command", effect_id)


def settlement_cid(effect_id: str) -> str:
    return namespaced_hash("twilight/settlement-command", effect_id)


def recovery_cid(effect_id: str) -> str:
    return namespaced_hash("twilight/recovery-command", effect_id)


def decline_cid(run: str, step_id: str, call_id: str) -> str:
    return namespaced_hash("twilight/decline-command", run, step_id, call_id)
