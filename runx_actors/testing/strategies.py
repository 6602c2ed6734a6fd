"""Hypothesis strategies for protocol values, facts and commands.

The values are *well typed* and round-trip through the wire codec (JSON-text fields hold
canonical text, RunEnds carry a reason, ints are safe), but they are not semantically valid
Run histories: ids are not derived, steps do not match any state. Use them for codec,
canonical-JSON and digest properties; build valid Runs with ``runx_actors.testing.builders``.

Every strategy is a function returning a ``SearchStrategy`` so callers can compose them;
none raises. They serve the codec and digest properties of RUN-WIR-2, RUN-WIR-4 and
RUN-CMP-1 (and the conformance suites, RUN-CMP-2).
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import strategies as st

from ..protocol import commands as C
from ..protocol import facts as F
from ..protocol import state as S
from ..protocol._codec import MODEL_REQUEST_KEYS, MODEL_RESULT_KEYS
from ..protocol.canonical import MAX_SAFE_INTEGER, JSONValue, canonical_json_text
from ..protocol.values import (
    SCHEDULING_MODES,
    AgentInput,
    Failure,
    ModelRejectDisposition,
    ModelRequest,
    ModelResult,
    ModelStepStatus,
    ModelToolCall,
    ResponseKind,
    ResponsePolicy,
    ResponseRequest,
    RunCompletedEnd,
    RunEnd,
    RunFailedEnd,
    RunFailure,
    RunReason,
    RunResult,
    RunStatus,
    RunStoppedEnd,
    ToolCallBinding,
    ToolCallFailure,
    ToolCallResult,
    ToolCallStatus,
    ToolDefinition,
    ToolFailureOutcome,
    ToolPlacement,
    ToolReplay,
    ToolResult,
    ToolScheduling,
    ToolSpec,
    Usage,
)

__all__ = [
    "texts",
    "ids",
    "digests",
    "safe_ints",
    "json_values",
    "json_objects",
    "json_texts",
    "failures",
    "agent_inputs",
    "usages",
    "tool_schedulings",
    "tool_specs",
    "response_requests",
    "tool_call_bindings",
    "tool_results",
    "tool_definitions",
    "model_requests",
    "model_tool_calls",
    "model_results",
    "run_failures",
    "run_ends",
    "fact_strategies",
    "facts",
    "command_strategies",
    "commands",
    "tool_call_states",
    "machine_states",
]

S_ = st.SearchStrategy


def texts(*, min_size: int = 0, max_size: int = 12) -> S_[str]:
    """Any UTF-8-encodable text (no surrogates), including control and non-ASCII."""
    return st.text(st.characters(codec="utf-8"), min_size=min_size, max_size=max_size)


def ids() -> S_[str]:
    """Non-empty identity strings (RUN-WIR-1): mostly readable, sometimes any Unicode."""
    readable = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_:", min_size=1, max_size=10)
    return readable | texts(min_size=1)


def digests() -> S_[str]:
    """``sha256:`` + 64 lowercase hex characters."""
    return st.binary(min_size=32, max_size=32).map(lambda b: "sha256:" + b.hex())


def safe_ints(min_value: int = 0) -> S_[int]:
    """Integers in ``[min_value, 2^53 - 1]``: exact on the wire (§3.5)."""
    return st.integers(min_value=min_value, max_value=MAX_SAFE_INTEGER)


def json_values(*, max_leaves: int = 12) -> S_[JSONValue]:
    """Any JSON value: null, booleans, finite doubles, ints (also beyond 2^53), text,
    arrays and objects."""
    scalars: S_[JSONValue] = (
        st.none()
        | st.booleans()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.integers(min_value=-(2**60), max_value=2**60)
        | texts()
    )
    return st.recursive(
        scalars,
        lambda children: st.lists(children, max_size=4)
        | st.dictionaries(texts(max_size=6), children, max_size=4),
        max_leaves=max_leaves,
    )


def json_objects(*, exclude: frozenset[str] = frozenset()) -> S_[dict[str, JSONValue]]:
    """JSON objects whose keys avoid *exclude*."""
    return st.dictionaries(
        texts(max_size=6).filter(lambda k: k not in exclude), json_values(max_leaves=6),
        max_size=4,
    )


def json_texts() -> S_[str]:
    """Canonical JSON text (what every ``JSONText`` field holds, §0.4)."""
    return json_values().map(canonical_json_text)


def failures() -> S_[Failure]:
    """``Failure`` values; the class may be empty (an UNKNOWN tool failure's may be)."""
    return st.builds(Failure, texts(), texts())


def agent_inputs() -> S_[AgentInput]:
    """``AgentInput(id, digest)`` with a non-empty id and a well-formed digest."""
    return st.builds(AgentInput, ids(), digests())


def usages() -> S_[Usage]:
    """Token usages with safe (exact on the wire) non-negative counts."""
    small = st.integers(min_value=0, max_value=10_000)
    return st.builds(Usage, small | safe_ints(), small)


def tool_schedulings() -> S_[ToolScheduling]:
    """Valid schedulings (§2.1): mode in ``SCHEDULING_MODES``, ``max_parallel >= 0``."""
    return st.builds(
        ToolScheduling, st.sampled_from(sorted(SCHEDULING_MODES)), st.integers(0, 64)
    )


def tool_specs() -> S_[ToolSpec]:
    """ToolSpecs over every policy, replay and placement member."""
    return st.builds(
        ToolSpec,
        ref=ids(),
        name=ids(),
        definition_digest=digests(),
        policy=st.sampled_from(ResponsePolicy),
        replay=st.sampled_from(ToolReplay),
        placement=st.sampled_from(ToolPlacement),
    )


def response_requests() -> S_[ResponseRequest]:
    """Response requests of either kind with a canonical JSON payload."""
    return st.builds(
        ResponseRequest,
        run_id=ids(),
        step_id=ids(),
        call_id=ids(),
        id=ids(),
        kind=st.sampled_from(ResponseKind),
        payload=json_texts(),
    )


def tool_call_bindings() -> S_[ToolCallBinding]:
    """Bindings with canonical arguments, with or without a response request."""
    return st.builds(
        ToolCallBinding,
        call_id=ids(),
        provider_call_id=st.just("") | ids(),
        tool_ref=ids(),
        definition_digest=st.just("") | digests(),
        arguments=json_texts(),
        policy=st.sampled_from(ResponsePolicy),
        replay=st.sampled_from(ToolReplay),
        placement=st.sampled_from(ToolPlacement),
        response=st.none() | response_requests(),
    )


def tool_results() -> S_[ToolResult]:
    """Command-side tool results (any canonical JSON output, even null)."""
    return st.builds(ToolResult, json_texts())


def tool_definitions() -> S_[ToolDefinition]:
    """Tool definitions with canonical JSON ``parameters``."""
    return st.builds(ToolDefinition, ids(), texts(), json_texts())


def model_requests() -> S_[ModelRequest]:
    """Requests whose body is an object without the keys ``model``/``tools`` (§3.7)."""
    return st.builds(
        ModelRequest,
        ids(),
        st.lists(tool_definitions(), max_size=3).map(tuple),
        json_objects(exclude=MODEL_REQUEST_KEYS).map(canonical_json_text),
    )


def model_tool_calls() -> S_[ModelToolCall]:
    """Tool calls; provider ids may be empty or repeat (C6)."""
    return st.builds(ModelToolCall, st.just("") | ids(), ids(), json_texts())


def model_results() -> S_[ModelResult]:
    """Results whose body avoids the typed keys (§3.7)."""
    return st.builds(
        ModelResult,
        content=texts(),
        tool_calls=st.lists(model_tool_calls(), max_size=3).map(tuple),
        finish_reason=st.sampled_from(["", "stop", "tool_calls", "length"]),
        usage=usages(),
        body=json_objects(exclude=MODEL_RESULT_KEYS).map(canonical_json_text),
    )


def run_failures() -> S_[RunFailure]:
    """Failures of a failed end: the class is non-empty (§2.1)."""
    return st.builds(RunFailure, ids(), texts(), st.just("") | ids())


_END_REASONS = [r for r in RunReason if r is not RunReason.NONE]


def run_ends() -> S_[RunEnd]:
    """Valid RunEnds: stopped and failed ends carry a reason, failed ends a class."""
    return st.one_of(
        st.just(RunCompletedEnd()),
        st.builds(
            RunStoppedEnd,
            st.sampled_from(_END_REASONS),
            st.lists(ids(), max_size=3).map(tuple),
            st.just("") | ids(),
        ),
        st.builds(RunFailedEnd, st.sampled_from(_END_REASONS), run_failures()),
    )


# --------------------------------------------------------------------------- facts, commands

#: Strategy per field name, shared by every fact and command (overridden per class below).
_BY_NAME: dict[str, Any] = {
    "run_id": ids,
    "causation_id": lambda: st.just("") | ids(),
    "step_id": ids,
    "call_id": ids,
    "effect": ids,
    "model": ids,
    "source": ids,
    "response_id": ids,
    "request_digest": digests,
    "result_digest": digests,
    "output_digest": digests,
    "response_digest": digests,
    "input_ids": lambda: st.lists(ids(), max_size=3).map(tuple),
    "tools": lambda: st.lists(tool_specs(), max_size=3).map(tuple),
    "calls": lambda: st.lists(tool_call_bindings(), min_size=1, max_size=3).map(tuple),
    "scheduling": tool_schedulings,
    "usage": usages,
    "failure": failures,
    "outcome": lambda: st.sampled_from(ToolFailureOutcome),
    "finish_reason": lambda: st.sampled_from(["", "stop", "tool_calls"]),
    "input": agent_inputs,
    "end": run_ends,
    "inputs": lambda: st.lists(agent_inputs(), min_size=1, max_size=3).map(tuple),
    "request": model_requests,
    "prompt_token": lambda: st.just("") | ids(),
    "disposition": lambda: st.sampled_from(ModelRejectDisposition),
    "reason": lambda: st.sampled_from(["", "cancelled"]) | texts(),
    "payload": json_texts,
}

_BY_CLASS: dict[tuple[type[Any], str], Any] = {
    (C.SubmitModelResult, "result"): model_results,
    (C.SubmitToolResult, "result"): tool_results,
}


def _record(cls: type[Any]) -> S_[Any]:
    kwargs: dict[str, S_[Any]] = {}
    for a in attrs.fields(cls):
        factory = _BY_CLASS.get((cls, a.name)) or _BY_NAME[a.name]
        kwargs[a.name] = factory()
    return st.builds(cls, **kwargs)


def fact_strategies() -> dict[type[Any], S_[Any]]:
    """One strategy per fact type (all sixteen)."""
    return {cls: _record(cls) for cls in F.FACT_TYPES}


def facts() -> S_[F.Fact]:
    """Any of the sixteen facts (well typed, wire round-trippable)."""
    return st.one_of(*fact_strategies().values())


def command_strategies() -> dict[type[Any], S_[Any]]:
    """One strategy per command type (all sixteen)."""
    return {cls: _record(cls) for cls in C.COMMAND_TYPES}


def commands() -> S_[C.Command]:
    """Any of the sixteen commands (well typed, wire round-trippable)."""
    return st.one_of(*command_strategies().values())


# --------------------------------------------------------------------------- state


def tool_call_states() -> S_[S.ToolCallState]:
    """Well-typed call states (any status/field mix), for codec round trips."""
    return st.builds(
        S.ToolCallState,
        call_id=ids(),
        provider_call_id=st.just("") | ids(),
        tool_ref=ids(),
        definition_digest=st.just("") | digests(),
        arguments=json_texts(),
        policy=st.sampled_from(ResponsePolicy),
        replay=st.sampled_from(ToolReplay),
        placement=st.sampled_from(ToolPlacement),
        status=st.sampled_from(ToolCallStatus),
        effect=st.just("") | ids(),
        result=st.none() | st.builds(ToolCallResult, digests()),
        failure=st.none()
        | st.builds(ToolCallFailure, failures(), st.sampled_from(ToolFailureOutcome)),
        waiting=st.none() | response_requests(),
    )


def _tool_steps() -> S_[S.ToolStep]:
    return st.builds(
        S.ToolStep,
        id=ids(),
        source=ids(),
        calls=st.lists(tool_call_states(), min_size=1, max_size=3).map(tuple),
        scheduling=tool_schedulings(),
    )


def machine_states() -> S_[S.MachineState]:
    """Well-typed (not necessarily consistent) states, for codec round trips."""
    model_steps = st.builds(
        S.ModelStep,
        id=ids(),
        model=ids(),
        request_digest=digests(),
        tools=st.lists(tool_specs(), max_size=2).map(tuple),
        status=st.sampled_from(ModelStepStatus),
        effect=st.just("") | ids(),
        rejects=st.integers(0, 5),
    )
    results = st.builds(
        RunResult,
        status=st.sampled_from(RunStatus),
        reason=st.sampled_from(RunReason),
        failure=st.none() | run_failures(),
        uncertain_calls=st.lists(ids(), max_size=2).map(tuple),
        uncertain_model=st.just("") | ids(),
        usage=usages(),
    )
    return st.builds(
        S.MachineState,
        run_id=ids(),
        status=st.sampled_from(RunStatus),
        current=st.none() | st.just(S.OPEN) | model_steps | _tool_steps(),
        pending_inputs=st.lists(agent_inputs(), max_size=3).map(tuple),
        model_steps=st.integers(0, 100),
        last_tool_step=st.none() | _tool_steps(),
        usage=usages(),
        result=st.none() | results,
    )
