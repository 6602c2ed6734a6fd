"""The example's turn policy and the built-in scripted models (loop-host §3, §7.1).

* :func:`turn_payload` is the pure decision function of §3.3 and the payload of §3.4.
* :class:`LoopTurnModel` (script ``loop-turn``) answers each model step of a ``turn`` Run
  from the frozen request alone (§3.5): the runner declaration, the canonical inputs and
  the earlier tool results. No clock, no randomness, no absolute paths.
* :class:`GraphDriverModel` (``graph-driver``) drives a graph Run: it calls the agent-task
  tool of the step whose envelope the host froze into the request, copying the envelope
  verbatim as the call arguments, and answers ``{"outputs": {<step>: <declared
  outputs>}}`` once every step is settled (§7.1).
* :class:`ApprovalProbeModel` (``approval-probe``) reads ``NOTES.md`` through a tool that
  needs a host-attested approval and reports ``{"approved", "read_sha256"}`` (§7.4).

Request bodies are built by the host's prompt builder (``runx_actors.host._prompt``):
``{"schema": "runx_actors.model_request.v1", "package", "runner", "declaration",
"inputs", "messages", "envelope"?, "step"?}``. A final answer is a text reply whose
content is the canonical JSON of the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._strictread import loads_json
from ..effect import FailureCode
from ..executors import ModelError, call_tools, reply, tool_call
from ..protocol.values import ModelRequest, ModelResult
from ._hashing import canonical

__all__ = [
    "ALLOWED_TOOLS",
    "RUNX_DEFAULTS",
    "TOOL_NOT_ALLOWED",
    "NOTES_PATH",
    "REQUEST_SCHEMA",
    "TurnInputError",
    "positive_int",
    "turn_payload",
    "turn_rule",
    "final_reply",
    "LoopTurnModel",
    "GraphDriverModel",
    "ApprovalProbeModel",
    "BUILTIN_SCRIPTS",
    "GRAPH_DRIVER",
    "builtin_models",
]

#: ``allowed_tools`` of the example's turn (§3.3, §3.4).
ALLOWED_TOOLS: tuple[str, ...] = ("fs.read",)
#: The full runx default set applied by :func:`turn_payload` (§3.2).
RUNX_DEFAULTS: Mapping[str, Any] = {
    "loop_id": "loop-demo", "turn_index": 1, "max_turns": 3, "requested_tool": "fs.read",
    "scenario": "success", "previous_summary": "No prior turn.", "objective": "",
}
#: The host-defined failure class of a call the policy gate refused (§3.5).
TOOL_NOT_ALLOWED = "tool_not_allowed"
#: The file a turn reads (§3.5).
NOTES_PATH = "NOTES.md"
#: ``schema`` of the request bodies the host's prompt builder freezes.
REQUEST_SCHEMA = "runx_actors.model_request.v1"
#: Model ref of the graph driver (graph runners name no script).
GRAPH_DRIVER = "graph-driver"

_RECEIPT_NOTES = {"loop_state_owner": "outer-loop-host", "runx_turn_owner": "runx",
                  "context_boundary": "advisory-untrusted"}


class TurnInputError(ValueError):
    """``turn_index`` or ``max_turns`` is not a positive integer (§3.2 runtime
    validation). ``str(error)`` is the §3.2 message."""


def positive_int(value: Any, name: str) -> int:
    """*value* as an int ≥ 1: an integral float is normalised, a bool is rejected.

    Raises:
        TurnInputError: ``loop turn failed: <name> must be a positive integer``.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TurnInputError(f"loop turn failed: {name} must be a positive integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise TurnInputError(f"loop turn failed: {name} must be a positive integer")
        value = int(value)
    number = int(value)
    if number < 1:
        raise TurnInputError(f"loop turn failed: {name} must be a positive integer")
    return number


def turn_rule(inputs: Mapping[str, Any],
              allowed_tools: Sequence[str] = ALLOWED_TOOLS) -> int:
    """The number (1-5) of the §3.3 rule that decides *inputs* (defaults applied).

    Raises:
        TurnInputError: as :func:`positive_int`.
    """
    values = {**RUNX_DEFAULTS, **inputs}
    n = positive_int(values["turn_index"], "turn_index")
    m = positive_int(values["max_turns"], "max_turns")
    if n > m:
        return 1
    if values["requested_tool"] not in allowed_tools:
        return 2
    if values["scenario"] == "pause":
        return 3
    if n >= min(m, 2):
        return 4
    return 5


def turn_payload(inputs: Mapping[str, Any],
                 allowed_tools: Sequence[str] = ALLOWED_TOOLS) -> dict[str, Any]:
    """The ``runx.loop_turn.v1`` payload for *inputs* (§3.3, §3.4). Pure.

    Missing inputs take the full runx default set (:data:`RUNX_DEFAULTS`).

    Raises:
        TurnInputError: ``turn_index`` or ``max_turns`` is not a positive integer.
    """
    values = {**RUNX_DEFAULTS, **inputs}
    rule = turn_rule(values, allowed_tools)
    n = positive_int(values["turn_index"], "turn_index")
    m = positive_int(values["max_turns"], "max_turns")
    tool = values["requested_tool"]
    decision, reason_code, allowed, reason = {
        1: ("refused", "turn_budget_exhausted", False, "max_turns has already been exhausted"),
        2: ("refused", "tool_not_allowed", False, f"{tool} is not in allowed_tools"),
        3: ("needs_human", "side_effect_review_required", False,
            "human review is required before the next turn"),
        4: ("done", "fixture_objective_complete", False,
            "review accepted the bounded fixture result"),
        5: ("continue", "bounded_next_turn_available", True,
            "one more governed turn is allowed by policy"),
    }[rule]
    if decision == "continue":
        summary = f"Turn {n} read context and proposed a bounded follow-up."
    else:
        summary = f"Turn {n} ended with {decision}: {reason_code}."
    loop_id = values["loop_id"]
    return {
        "schema": "runx.loop_turn.v1",
        "loop_id": loop_id,
        "turn_id": f"{loop_id}:turn-{n}",
        "turn_index": n,
        "max_turns": m,
        "objective": values["objective"],
        "previous_summary": values["previous_summary"],
        "requested_tool": tool,
        "allowed_tools": list(allowed_tools),
        "decision": decision,
        "reason_code": reason_code,
        "next_turn_allowed": allowed,
        "next_turn_reason": reason,
        "projection_update": {
            "latest_summary": summary,
            "consumed_authority": {"tools": [tool], "mutations": 0, "spend_minor": 0},
        },
        "handoff": ({"target": "loop-host", "next_turn_index": n + 1, "reason": reason}
                    if allowed else None),
        "receipt_notes": dict(_RECEIPT_NOTES),
    }


def final_reply(result: Any) -> ModelResult:
    """A final model answer: a text reply holding ``C(result)``."""
    return reply(canonical(result).decode("utf-8"))


def _body(request: ModelRequest) -> dict[str, Any]:
    body = loads_json(request.body, source="request body")
    if not isinstance(body, dict):
        raise ModelError(FailureCode.MALFORMED_FROZEN_REQUEST, "the request body is not an object")
    return body


def _tool_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body.get("messages", ()) if isinstance(m, dict)
            and m.get("role") == "tool"]


def _failed(message: str) -> ModelError:
    return ModelError(FailureCode.BAD_REQUEST, message)


class LoopTurnModel:
    """The scripted ``loop-turn`` model (§3.5): a pure function of the frozen request."""

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Answer one model step of a ``turn`` Run.

        Step 1: a runtime-validation failure raises ``ModelError`` (the Run fails); rule 1
        answers the payload at once; otherwise one call of ``requested_tool`` on
        ``NOTES.md``. Step 2: a failed call (other than ``tool_not_allowed``) raises
        ``loop turn failed: <tool> failed: <class>``; otherwise the payload.
        Checkpoint: none (answers at once; the executor's worker checkpoints).
        """
        return self.answer(_body(request))

    @staticmethod
    def answer(body: Mapping[str, Any]) -> ModelResult:
        inputs = body.get("inputs") or {}
        allowed = tuple(body.get("declaration", {}).get("allowed_tools", ALLOWED_TOOLS))
        try:
            rule = turn_rule(inputs, allowed)
            payload = turn_payload(inputs, allowed)
        except TurnInputError as exc:
            raise _failed(str(exc)) from None
        results = _tool_messages(body)
        if not results:
            if rule == 1:
                return final_reply(payload)
            tool = {**RUNX_DEFAULTS, **inputs}["requested_tool"]
            return call_tools(tool_call(str(tool), {"path": NOTES_PATH}))
        error = results[-1].get("error")
        if isinstance(error, dict) and error.get("class") != TOOL_NOT_ALLOWED:
            raise _failed(f"loop turn failed: {payload['requested_tool']} failed: "
                          f"{error.get('class')}")
        return final_reply(payload)


class GraphDriverModel:
    """The scripted ``graph-driver`` model (§7.1): one agent-task call per step, then
    ``{"outputs": {<step id>: <declared outputs of its answer>}}``."""

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Call the frozen envelope's step, or answer the graph outputs.

        Checkpoint: none (answers at once).
        """
        return self.answer(_body(request))

    @staticmethod
    def answer(body: Mapping[str, Any]) -> ModelResult:
        envelope, step = body.get("envelope"), body.get("step")
        if isinstance(envelope, dict) and isinstance(step, dict):
            return call_tools(tool_call(str(step["tool"]), envelope))
        steps = body.get("declaration", {}).get("steps", [])
        outputs: dict[str, Any] = {}
        for declared, message in zip(steps, _tool_messages(body)):
            content = message.get("content")
            if not isinstance(content, dict):
                break
            outputs[declared["id"]] = {k: content[k] for k in declared["outputs"]
                                       if k in content}
        return final_reply({"outputs": outputs})


class ApprovalProbeModel:
    """The ``approval-probe`` model (tests/fixtures/approval-probe, §7.4): one read of
    ``NOTES.md`` that waits for an approval, then ``{"approved", "read_sha256"}``."""

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Checkpoint: none (answers at once)."""
        body = _body(request)
        results = _tool_messages(body)
        if not results:
            return call_tools(tool_call("fs.read", {"path": NOTES_PATH}))
        last = results[-1]
        error = last.get("error")
        content = last.get("content")
        return final_reply({
            "approved": not (isinstance(error, dict)
                             and error.get("class") == "permission_denied"),
            "read_sha256": content.get("sha256") if isinstance(content, dict) else None,
        })


#: The built-in scripts by name (the ``script`` of a ``scripted-run`` runner, and the
#: graph driver). Each value builds a fresh model.
BUILTIN_SCRIPTS: Mapping[str, Callable[[], Any]] = {
    "loop-turn": LoopTurnModel,
    GRAPH_DRIVER: GraphDriverModel,
    "approval-probe": ApprovalProbeModel,
}


def builtin_models() -> dict[str, Any]:
    """A fresh model per built-in script, keyed by script name (the ModelRef)."""
    return {name: factory() for name, factory in BUILTIN_SCRIPTS.items()}
