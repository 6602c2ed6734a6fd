"""The projection cache's form of a MachineState (spec §4.7; RUN-CMT-2).

The cache is not a protocol format: it is disposable, ``b"c1:"`` + the plain JSON of
``encode_value(state, MachineState)`` (not canonical), and an entry this build cannot
decode is ignored (the Run is folded from its stream instead).

:func:`decode_state` answers exactly as the strict protocol codec does — the same
``MachineState`` or the same refusal (None) — but reads the entry with a decoder written
for the cache's one shape, the MachineState tree, instead of the general codec
(``decode_value``: cattrs-generated structure functions with detailed validation, which
collect every failure with its JSON path). The fast decoder applies every check the
strict codec applies (unknown and missing keys, JSON types, lone surrogates, integral
and safe numbers, enum values, digests, JSON-text values through ``canonical_json_text``)
but builds no error report: on any failure it gives up, and the strict codec decides the
entry. So a refusal is always the strict codec's own, and an entry is accepted by the
fast decoder only when every rule of the strict codec holds for it; equality with the
strict path (same value or same refusal, on valid entries and on damaged, forged and
truncated ones) is a hypothesis property in ``tests/store/test_cache_decode.py``. A field
added to a class of the tree without a matching change here makes the fast decoder give
up on entries carrying it (slower, never different); the same test module checks the
key tables below against ``attrs.fields``.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Callable
from typing import Any, Final, TypeVar

from ..protocol._codec import decode_value, encode_value
from ..protocol.canonical import MAX_SAFE_INTEGER, canonical_json_text
from ..protocol.state import OPEN, MachineState, ModelStep, ToolCallState, ToolStep
from ..protocol.values import (
    AgentInput,
    Failure,
    ModelStepStatus,
    ResponseKind,
    ResponsePolicy,
    ResponseRequest,
    RunFailure,
    RunReason,
    RunResult,
    RunStatus,
    ToolCallFailure,
    ToolCallResult,
    ToolCallStatus,
    ToolFailureOutcome,
    ToolPlacement,
    ToolReplay,
    ToolScheduling,
    ToolSpec,
    Usage,
    is_digest,
)

__all__ = ["CACHE_FORMAT", "encode_state", "decode_state", "decode_state_strict"]

#: Prefix of a cache entry (the version of the cache form).
CACHE_FORMAT = b"c1:"

E = TypeVar("E", bound=enum.Enum)
T = TypeVar("T")


def encode_state(state: MachineState) -> bytes:
    """The cache form of *state*: ``b"c1:"`` + compact JSON of ``encode_value``.

    Raises: ValidationError / CanonicalJSONError (a state that does not encode)."""
    text = json.dumps(encode_value(state, MachineState), ensure_ascii=False,
                      separators=(",", ":"))
    return CACHE_FORMAT + text.encode("utf-8")


def _entry(data: Any) -> bytes | None:
    """*data* as the bytes of a ``c1:`` entry, or None: a cell that is not bytes (a TEXT
    value written into the BLOB column by hand) or of another format is no entry."""
    if not isinstance(data, bytes | bytearray | memoryview):
        return None
    raw = bytes(data)
    return raw if raw.startswith(CACHE_FORMAT) else None


def decode_state(data: Any) -> MachineState | None:
    """Decode a cache entry (bytes-like); None if it is not in a form this build reads.

    Same answer as :func:`decode_state_strict` for every input (RUN-CMT-2); the fast
    decoder of the cache's shape is tried first. Raises nothing."""
    raw = _entry(data)
    if raw is None:
        return None
    try:
        return fast_decode(raw)
    except Exception:  # any failure: the strict codec decides (and refuses, or not)
        return decode_state_strict(raw)


def decode_state_strict(data: Any) -> MachineState | None:
    """The reference decode: ``json.loads`` and the strict protocol codec
    (``decode_value(MachineState, …)``); None on any failure. Raises nothing."""
    raw = _entry(data)
    if raw is None:
        return None
    try:
        return decode_value(MachineState, json.loads(raw[len(CACHE_FORMAT):]))
    except Exception:
        return None


def fast_decode(raw: bytes) -> MachineState:
    """The fast decoder: the state of a ``c1:`` entry, or an exception (any type) when
    the entry is not one the strict codec accepts — or one this decoder does not know.

    The JSON is parsed exactly as the strict path parses it (``json.loads`` of the same
    bytes). Raises: anything (callers treat every exception as "ask the strict codec")."""
    if not raw.startswith(CACHE_FORMAT):
        raise _GiveUp("not a c1: entry")
    return _machine_state(json.loads(raw[len(CACHE_FORMAT):]))


class _GiveUp(ValueError):
    """The fast decoder does not accept the entry; the strict codec decides."""


#: What ``dict.get`` returns for a missing key (``None`` is a JSON value: null). A plain
#: object, not an enum member: it is a key of the enum tables and an enum member's
#: ``__hash__`` is Python code.
_ABSENT: Final = object()


# -- scalars: the strict codec's rules (_codec._structure_str/_int/_digest, enums) -----


def _str(value: object) -> str:
    if type(value) is not str:
        raise _GiveUp("not a string")
    if not value.isascii():
        value.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError
    return value


def _int(value: object) -> int:
    if type(value) is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return value
    elif type(value) is float:
        if value.is_integer() and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return int(value)
    raise _GiveUp("not a safe integer")


def _digest(value: object) -> str:
    if type(value) is not str or not is_digest(value):
        raise _GiveUp("not a digest")
    return value


def _members(cls: type[E], default: E | None = None) -> dict[object, E]:
    """Member by wire value; *default* also under ``_ABSENT`` (the field's attrs
    default, for an optional key). A value that is not a key — another string, a
    number, null, an unhashable array or object — raises (KeyError, TypeError)."""
    table: dict[object, E] = {m.value: m for m in cls}
    if default is not None:
        table[_ABSENT] = default
    return table


_RUN_STATUS = _members(RunStatus)
_RUN_REASON = _members(RunReason, RunReason.NONE)
_STEP_STATUS = _members(ModelStepStatus)
_CALL_STATUS = _members(ToolCallStatus)
_POLICY = _members(ResponsePolicy, ResponsePolicy.DIRECT_EXECUTION)
_REPLAY = _members(ToolReplay, ToolReplay.UNKNOWN)
_PLACEMENT = _members(ToolPlacement, ToolPlacement.NONE)
_OUTCOME = _members(ToolFailureOutcome, ToolFailureOutcome.KNOWN)
_KIND = _members(ResponseKind)


def _object(value: object, keys: frozenset[str]) -> dict[str, Any]:
    """*value* as a JSON object holding only *keys* (the strict codec forbids others)."""
    if type(value) is not dict or not value.keys() <= keys:
        raise _GiveUp("not an object of the expected keys")
    return value


def _strs(value: object) -> tuple[str, ...]:
    return _array(value, _str)


def _array(value: object, item: Callable[[object], T]) -> tuple[T, ...]:
    """*value* (a JSON array) with *item* applied to each element; ``()`` when the key
    was absent (``_ABSENT``: the strict codec's default)."""
    if value is _ABSENT:
        return ()
    if type(value) is not list:
        raise _GiveUp("not an array")
    return tuple([item(v) for v in value])


# -- the classes of the MachineState tree (wire keys: lowerCamelCase, RUN-WIR-2) -------

#: Wire keys of each class the fast decoder reads; checked against ``attrs.fields`` by
#: the tests (a drift makes the fast decoder give up, never differ).
KEYS: dict[type[Any], frozenset[str]] = {
    MachineState: frozenset({"runId", "status", "current", "pendingInputs", "modelSteps",
                             "lastToolStep", "usage", "result"}),
    ModelStep: frozenset({"id", "model", "requestDigest", "tools", "status", "effect",
                          "rejects"}),
    ToolStep: frozenset({"id", "source", "calls", "scheduling"}),
    ToolCallState: frozenset({"callId", "providerCallId", "toolRef", "definitionDigest",
                              "arguments", "policy", "replay", "placement", "status",
                              "effect", "result", "failure", "waiting"}),
    ToolSpec: frozenset({"ref", "name", "definitionDigest", "policy", "replay",
                         "placement"}),
    ToolScheduling: frozenset({"mode", "maxParallel"}),
    ToolCallResult: frozenset({"outputDigest"}),
    ToolCallFailure: frozenset({"failure", "outcome"}),
    Failure: frozenset({"class", "message"}),
    ResponseRequest: frozenset({"runId", "stepId", "callId", "id", "kind", "payload"}),
    AgentInput: frozenset({"id", "digest"}),
    Usage: frozenset({"inputTokens", "outputTokens"}),
    RunResult: frozenset({"status", "reason", "failure", "uncertainCalls",
                          "uncertainModel", "usage"}),
    RunFailure: frozenset({"class", "message", "callId"}),
}
_K_STATE, _K_MODEL, _K_TOOL_STEP, _K_CALL = (
    KEYS[MachineState], KEYS[ModelStep], KEYS[ToolStep], KEYS[ToolCallState])
_K_SPEC, _K_SCHED, _K_RESULT, _K_FAILURE = (
    KEYS[ToolSpec], KEYS[ToolScheduling], KEYS[ToolCallResult], KEYS[ToolCallFailure])
_K_FAIL, _K_WAIT, _K_INPUT, _K_USAGE = (
    KEYS[Failure], KEYS[ResponseRequest], KEYS[AgentInput], KEYS[Usage])
_K_RUN_RESULT, _K_RUN_FAILURE = KEYS[RunResult], KEYS[RunFailure]
_NO_KEYS: frozenset[str] = frozenset()
_DEFAULT_USAGE = Usage()
_DEFAULT_SCHEDULING = ToolScheduling()


def _usage(value: object) -> Usage:
    o = _object(value, _K_USAGE)
    if not o:
        return _DEFAULT_USAGE  # equal to the strict codec's Usage(); one object for all
    return _usage_of(_int(o.get("inputTokens", 0)), _int(o.get("outputTokens", 0)))


@functools.lru_cache(maxsize=1024)
def _usage_of(input_tokens: int, output_tokens: int) -> Usage:
    """One (immutable) Usage per value: the Runs a restart decodes mostly share a few
    (the bench's 10,000 Runs all hold ``Usage(1, 1)``); a bounded memo, ints only."""
    return Usage(input_tokens, output_tokens)


def _scheduling(value: object) -> ToolScheduling:
    o = _object(value, _K_SCHED)
    if not o:
        return _DEFAULT_SCHEDULING
    return ToolScheduling(_str(o.get("mode", "")), _int(o.get("maxParallel", 0)))


def _failure(value: object) -> Failure:
    o = _object(value, _K_FAIL)
    return Failure(_str(o["class"]), _str(o.get("message", "")))


def _call(value: object) -> ToolCallState:
    o = _object(value, _K_CALL)
    get = o.get
    result = get("result")
    failure = get("failure")
    waiting = get("waiting")
    if result is not None:
        r = _object(result, _K_RESULT)
        result = ToolCallResult(_digest(r["outputDigest"]))
    if failure is not None:
        f = _object(failure, _K_FAILURE)
        failure = ToolCallFailure(_failure(f["failure"]), _OUTCOME[f.get("outcome", _ABSENT)])
    if waiting is not None:
        w = _object(waiting, _K_WAIT)
        waiting = ResponseRequest(
            run_id=_str(w["runId"]), step_id=_str(w["stepId"]), call_id=_str(w["callId"]),
            id=_str(w["id"]), kind=_KIND[w["kind"]], payload=canonical_json_text(w["payload"]))
    return ToolCallState(
        call_id=_str(o["callId"]),
        provider_call_id=_str(get("providerCallId", "")),
        tool_ref=_str(o["toolRef"]),
        definition_digest=_str(get("definitionDigest", "")),
        arguments=canonical_json_text(o["arguments"]),
        policy=_POLICY[get("policy", _ABSENT)],
        replay=_REPLAY[get("replay", _ABSENT)],
        placement=_PLACEMENT[get("placement", _ABSENT)],
        status=_CALL_STATUS[o["status"]],
        effect=_str(get("effect", "")),
        result=result,
        failure=failure,
        waiting=waiting,
    )


def _tool_step(value: object) -> ToolStep:
    o = _object(value, _K_TOOL_STEP)
    calls = _array(o["calls"], _call)
    scheduling = o.get("scheduling", _ABSENT)
    return ToolStep(id=_str(o["id"]), source=_str(o["source"]),
                    calls=calls,
                    scheduling=(_DEFAULT_SCHEDULING if scheduling is _ABSENT
                                else _scheduling(scheduling)))


def _tool_spec(value: object) -> ToolSpec:
    o = _object(value, _K_SPEC)
    get = o.get
    return ToolSpec(ref=_str(o["ref"]), name=_str(o["name"]),
                    definition_digest=_digest(o["definitionDigest"]),
                    policy=_POLICY[get("policy", _ABSENT)],
                    replay=_REPLAY[get("replay", _ABSENT)],
                    placement=_PLACEMENT[get("placement", _ABSENT)])


def _model_step(value: object) -> ModelStep:
    o = _object(value, _K_MODEL)
    get = o.get
    specs = _array(get("tools", _ABSENT), _tool_spec)
    return ModelStep(id=_str(o["id"]), model=_str(o["model"]),
                     request_digest=_digest(o["requestDigest"]), tools=specs,
                     status=_STEP_STATUS[o["status"]], effect=_str(get("effect", "")),
                     rejects=_int(get("rejects", 0)))


def _current(value: object) -> Any:
    """The tagged step (``{"open":{}}``, ``{"modelStep":…}``, ``{"toolStep":…}``) or
    null."""
    if value is None:
        return None
    if type(value) is not dict or len(value) != 1:
        raise _GiveUp("a step has exactly one key")
    ((tag, inner),) = value.items()
    if tag == "toolStep":
        return _tool_step(inner)
    if tag == "open":
        _object(inner, _NO_KEYS)
        return OPEN  # equal to the strict codec's Open(); one object for all
    if tag == "modelStep":
        return _model_step(inner)
    raise _GiveUp("unknown step variant")


def _run_result(value: object) -> RunResult:
    o = _object(value, _K_RUN_RESULT)
    get = o.get
    failure = get("failure")
    if failure is not None:
        f = _object(failure, _K_RUN_FAILURE)
        failure = RunFailure(_str(f["class"]), _str(f.get("message", "")),
                             _str(f.get("callId", "")))
    usage = get("usage", _ABSENT)
    return RunResult(status=_RUN_STATUS[o["status"]], reason=_RUN_REASON[get("reason", _ABSENT)],
                     failure=failure, uncertain_calls=_strs(get("uncertainCalls", [])),
                     uncertain_model=_str(get("uncertainModel", "")),
                     usage=_DEFAULT_USAGE if usage is _ABSENT else _usage(usage))


def _machine_state(value: object) -> MachineState:
    o = _object(value, _K_STATE)
    get = o.get
    pending = _array(get("pendingInputs", _ABSENT), _agent_input)
    last = get("lastToolStep")
    result = get("result")
    usage = get("usage", _ABSENT)
    return MachineState(
        run_id=_str(o["runId"]),
        status=_RUN_STATUS[o["status"]],
        current=_current(o["current"]),
        pending_inputs=pending,
        model_steps=_int(get("modelSteps", 0)),
        last_tool_step=None if last is None else _tool_step(last),
        usage=_DEFAULT_USAGE if usage is _ABSENT else _usage(usage),
        result=None if result is None else _run_result(result),
    )


def _agent_input(value: object) -> AgentInput:
    o = _object(value, _K_INPUT)
    return AgentInput(_str(o["id"]), _digest(o["digest"]))
