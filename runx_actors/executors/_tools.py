"""Tools for the LocalExecutor: a declaration plus a Python callable (architecture §5).

A :class:`Tool` declares what the Run may know about it — ``ref`` (catalog key), the
model-facing :class:`ToolDefinition` (name, description, JSON-Schema parameters), the
response policy, the replay policy and the placement — and holds the implementation.
``validate`` compares the Run's declaration with all of them (RUN-EXE-5, §8.4 #85).

The callable receives the call's JSON object arguments as keyword arguments (``fn(**args)``,
or ``fn(context, **args)`` when declared with ``context=True``). Sync callables run in a
worker thread (``trio.to_thread.run_sync``), async ones in the executor's task. The return
value is the tool output (any JSON value except ``null`` and ``""``; a :class:`ToolResult`
is taken as is). Raise :class:`ToolError` for a KNOWN failure and
:class:`ToolUnknownError` when the effect may or may not have happened; any other
exception is an UNKNOWN failure (§8.4 #80).
"""

from __future__ import annotations

import inspect
import json
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from ..effect import (
    Assignment,
    AssignmentKey,
    ProgressKind,
    RetryDisposition,
    TargetRef,
    ToolAssignment,
    ToolFailure,
    ToolFailureClass,
)
from ..effect._escape import describe_error, stops_the_process
from ..protocol.arguments import check_seconds, check_type
from ..protocol.canonical import canonical_json_text, parse_json_strict
from ..protocol.commit import validate_name
from ..protocol.digests import digest_tool_definition
from ..protocol.errors import RunxError, ValidationError
from ..protocol.values import (
    Digest,
    JSONText,
    ResponsePolicy,
    ToolDefinition,
    ToolPlacement,
    ToolRef,
    ToolReplay,
    ToolSpec,
)
from ._schema import schema_errors, schema_problem

__all__ = [
    "ToolError",
    "ToolUnknownError",
    "ToolCheck",
    "ToolContext",
    "Tool",
    "python_tool",
    "tool",
    "DEFAULT_PARAMETERS",
    "not_an_object",
]


def not_an_object(value: Any) -> str:
    """The ``invalid_arguments`` message for tool arguments *value* (parsed JSON) that
    are not an object: what they are instead. A model's arguments text that is not
    strict JSON was frozen as a JSON string holding the text (§3.8,
    ``freeze_tool_arguments``), so for a string the message says why the text is not
    JSON (``duplicate key 'x'``, ``NaN is not JSON``, a syntax error …) and quotes its
    start."""
    if isinstance(value, str):
        shown = value if len(value) <= 80 else value[:77] + "..."
        try:
            parse_json_strict(value)
        except ValidationError as error:
            return (f"arguments must be a JSON object; the model's arguments text is not "
                    f"strict JSON ({error.message or error}): {shown!r}")
        return f"arguments must be a JSON object, not a JSON string ({shown!r})"
    kind = ("null" if value is None else "a boolean" if isinstance(value, bool)
            else "a number" if isinstance(value, int | float)
            else "an array" if isinstance(value, list) else type(value).__name__)
    return f"arguments must be a JSON object, not {kind}"


#: Parameters of a tool declared without a schema: any JSON object.
DEFAULT_PARAMETERS: Mapping[str, Any] = {"type": "object"}

#: ``check(arguments) -> ToolFailure | None``: extra side-effect-free argument checks run
#: by ``validate`` after the schema (arguments as parsed JSON). A check that raises (any
#: exception) or returns anything else refuses the call as KNOWN ``invalid_arguments``.
ToolCheck = Callable[[Any], ToolFailure | None]


class ToolError(RunxError):
    """Raised by a tool for a KNOWN failure: ``ToolExecutionFailed(class_, message)``.

    ``class_`` says what went wrong (``not_found``, ``invalid_input`` …, §6.6); ``retry``
    is ``ALLOWED`` only when the failure shows that no side effect happened.
    """

    def __init__(self, class_: str, message: str = "", *,
                 retry: RetryDisposition = RetryDisposition.UNKNOWN) -> None:
        if not class_ or class_ == "effect_unknown":
            raise ValueError("a ToolError needs a class other than '' and 'effect_unknown'")
        super().__init__(message or class_, class_=class_, retry=retry)
        self.class_ = class_
        self.retry = retry
        self.message = message

    def to_failure(self) -> ToolFailure:
        """The :class:`ToolFailure` this error reports."""
        return ToolFailure(self.class_, self.message)

    def __reduce__(self) -> Any:
        return (_tool_error, (type(self), self.class_, self.message, self.retry))


def _tool_error(cls: type[ToolError], class_: str, message: str,
                retry: RetryDisposition) -> ToolError:
    return cls(class_, message, retry=retry)


class ToolUnknownError(RunxError):
    """Raised by a tool that cannot tell whether its effect happened (a payment that
    timed out): ``ToolExecutionUnknown(class_, message)``."""

    def __init__(self, class_: str = ToolFailureClass.EXECUTION_FAILED,
                 message: str = "") -> None:
        super().__init__(message or class_, class_=class_)
        self.class_ = class_ or ToolFailureClass.EXECUTION_FAILED
        self.message = message

    def to_failure(self) -> ToolFailure:
        """The :class:`ToolFailure` this error reports."""
        return ToolFailure(self.class_, self.message)

    def __reduce__(self) -> Any:
        return (type(self), (self.class_, self.message))


class ToolContext:
    """What a tool declared with ``context=True`` receives first.

    ``progress(payload)`` publishes a ``tool_progress`` frame (provisional; may be
    dropped); it is safe to call from the worker thread of a sync tool.
    """

    __slots__ = ("_emit", "_thread", "_token", "assignment")

    def __init__(self, assignment: Assignment, emit: Callable[[ProgressKind, Any], None]
                 ) -> None:
        self.assignment = assignment
        self._emit = emit
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.get_ident()

    @property
    def key(self) -> AssignmentKey:
        """The executing key."""
        return self.assignment.key

    @property
    def target(self) -> TargetRef | None:
        """The opaque TargetRef the application resolved for this start (RUN-LOP-9)."""
        return self.assignment.target

    def progress(self, payload: Any) -> None:
        """Publish one ``tool_progress`` frame with JSON *payload*. Never blocks the tool
        for long; frames published after the execution ended are dropped."""
        if threading.get_ident() == self._thread:
            self._emit(ProgressKind.TOOL_PROGRESS, payload)
            return
        try:
            trio.from_thread.run_sync(self._emit, ProgressKind.TOOL_PROGRESS, payload,
                                      trio_token=self._token)
        except trio.RunFinishedError:
            pass


#: A tool's model-facing name: 1 to 64 of ``A-Z a-z 0-9 _ - .`` — the chat-completions
#: and Anthropic tool-name set ``^[a-zA-Z0-9_-]{1,64}$`` plus ``.`` (``fs.read``), which
#: OpenAIChatModel sends as ``_`` and maps back (RUN-EXE-5).
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _tool_ref(_: Any, __: Any, value: Any) -> None:
    """A ref is a name (RUN-WIR-1: non-empty str, at most 512 UTF-8 bytes, no control,
    line-separator or bidirectional formatting character): it keys the executor's catalog
    and is frozen into every ToolSpec and fact."""
    if not isinstance(value, str) or not value:
        raise ValidationError(f"the tool ref must be a non-empty str, not "
                              f"{type(value).__name__} {repr(value)[:64]}", argument="ref",
                              value=repr(value)[:64])
    try:
        validate_name(value, "the tool ref")
    except ValidationError as error:
        raise ValidationError(error.message, argument="ref", tool_ref=value[:64],
                              **error.attrs) from None


def _callable(_: Any, __: Any, value: Any) -> None:
    if not callable(value):
        raise ValidationError(f"the tool's fn must be callable, not {type(value).__name__} "
                              f"{repr(value)[:64]}", argument="fn")


def _callable_or_none(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not callable(value):
        raise ValidationError(f"{attribute.name} must be callable or None, not "
                              f"{type(value).__name__}", argument=attribute.name)


def _positive_or_none(_: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None:
        check_seconds(value, attribute.name, positive=True)


def _flag(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_type(value, attribute.name, bool, "a bool")


def _definition(tool: Any, __: Any, value: Any) -> None:
    check_type(value, "definition", ToolDefinition, "a ToolDefinition")
    assert isinstance(value, ToolDefinition)
    name = value.name
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise ValidationError(
            f"tool {tool.ref!r}: the model-facing name {repr(name)[:70]} is not 1 to 64 of "
            f"A-Z a-z 0-9 _ - . (pass name=... when the ref has other characters)",
            argument="name", tool_ref=tool.ref, value=repr(name)[:64])
    if not isinstance(value.description, str):
        raise ValidationError(f"tool {tool.ref!r}: the description must be a str, not "
                              f"{type(value.description).__name__}", argument="description",
                              tool_ref=tool.ref)
    if not isinstance(value.parameters, str):
        raise ValidationError(f"tool {tool.ref!r}: the parameters must be JSON text, not "
                              f"{type(value.parameters).__name__}", argument="parameters",
                              tool_ref=tool.ref)


#: Parameter schemas (canonical text) that every JSON object satisfies: for these the
#: JSON-Schema validation is skipped — ``_checked`` has already required an object, which
#: is all they ask (RUN-EXE-5; ``test_tool_check_shortcuts`` holds them to jsonschema).
_ANY_OBJECT_SCHEMAS = frozenset({'{}', '{"type":"object"}',
                                 '{"properties":{},"type":"object"}'})


def _read_signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # no introspectable signature: let the call decide
        return None


def _is_async(fn: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - callable objects
    return call is not None and inspect.iscoroutinefunction(call)


@attrs.frozen(kw_only=True, eq=False)
class Tool:
    """A tool the LocalExecutor runs: declaration plus implementation (RUN-EXE-5).

    ``definition_digest`` is computed from ``definition`` (``digest_tool_definition``);
    like ``schema`` and ``is_async``, ``signature`` (``inspect.signature(fn)``, None when
    it has none) and ``any_object`` (the parameters are one of
    ``_ANY_OBJECT_SCHEMAS``) are computed once, when the Tool is made.
    ``timeout`` (seconds, optional) bounds one execution; when it fires the outcome is
    UNKNOWN with class ``timeout`` (the tool may have had its effect).

    Making a Tool raises ``ValidationError`` for an invalid parameters schema, whichever
    way it is declared (see :func:`python_tool`; RUN-EXE-5).
    """

    ref: ToolRef = attrs.field(validator=_tool_ref)
    definition: ToolDefinition = attrs.field(validator=_definition)
    fn: Callable[..., Any] = attrs.field(validator=_callable)
    policy: ResponsePolicy = attrs.field(
        default=ResponsePolicy.DIRECT_EXECUTION,
        validator=attrs.validators.instance_of(ResponsePolicy))
    replay: ToolReplay = attrs.field(
        default=ToolReplay.UNKNOWN, validator=attrs.validators.instance_of(ToolReplay))
    placement: ToolPlacement = attrs.field(
        default=ToolPlacement.NONE, validator=attrs.validators.instance_of(ToolPlacement))
    check: ToolCheck | None = attrs.field(default=None, validator=_callable_or_none)
    timeout: float | None = attrs.field(default=None, validator=_positive_or_none)
    context: bool = attrs.field(default=False, validator=_flag)
    definition_digest: Digest = attrs.field(init=False)
    schema: Any = attrs.field(init=False, repr=False)
    is_async: bool = attrs.field(init=False, repr=False)
    signature: inspect.Signature | None = attrs.field(init=False, repr=False)
    any_object: bool = attrs.field(init=False, repr=False)

    @definition_digest.default
    def _digest(self) -> Digest:
        return digest_tool_definition(self.definition)

    @schema.default
    def _schema(self) -> Any:
        # refused here, not at each call: an invalid schema would fail every call with
        # invalid_arguments and blame the model for the declaration (RUN-EXE-5)
        try:
            schema = parse_json_strict(self.definition.parameters)
        except ValidationError as error:
            raise ValidationError(f"tool {self.ref!r}: the parameters are not strict JSON: "
                                  f"{error.message or error}", tool_ref=self.ref) from None
        problem = schema_problem(schema)
        if problem is not None:
            raise ValidationError(f"tool {self.ref!r}: {problem}", tool_ref=self.ref)
        return json.loads(self.definition.parameters)

    @is_async.default
    def _async(self) -> bool:
        return _is_async(self.fn)

    @signature.default
    def _signature(self) -> inspect.Signature | None:
        return _read_signature(self.fn)

    @any_object.default
    def _any_object(self) -> bool:
        return self.definition.parameters in _ANY_OBJECT_SCHEMAS

    @property
    def name(self) -> str:
        """The model-facing name (``definition.name``)."""
        return self.definition.name

    def spec(self) -> ToolSpec:
        """The agent-side :class:`ToolSpec` that offers this tool to a model."""
        return ToolSpec(ref=self.ref, name=self.definition.name,
                        definition_digest=self.definition_digest, policy=self.policy,
                        replay=self.replay, placement=self.placement)

    def declaration_failure(self, body: ToolAssignment) -> ToolFailure | None:
        """``tool_definition_mismatch`` when the Run's declaration (definition digest,
        response policy, replay, placement) differs from this tool's; else ``None``."""
        mismatched = [
            name for name, declared, actual in (
                ("definition_digest", body.definition_digest, self.definition_digest),
                ("policy", body.policy, self.policy),
                ("replay", body.replay, self.replay),
                ("placement", body.placement, self.placement),
            ) if declared != actual
        ]
        if not mismatched:
            return None
        return ToolFailure(ToolFailureClass.TOOL_DEFINITION_MISMATCH,
                           f"{self.ref}: declared {', '.join(mismatched)} differ from the tool")

    def arguments_failure(self, arguments: JSONText) -> ToolFailure | None:
        """``invalid_arguments`` when *arguments* is not strict JSON, not a JSON object,
        does not satisfy the parameters schema, does not fit the callable's signature, or
        fails ``check``; else ``None``. Side-effect free.

        Raises nothing: an exception from any of these steps (``check`` raising, a
        self-referential symlink's ``RuntimeError``, a schema walk hitting the recursion
        limit …) and a ``check`` that returns something other than a ToolFailure or
        ``None`` are refusals too: KNOWN ``invalid_arguments`` naming the exception type
        (issue 12; RUN-EXE-5).
        """
        try:
            parse_json_strict(arguments)
        except ValidationError as error:
            return ToolFailure(ToolFailureClass.INVALID_ARGUMENTS,
                               f"arguments are not valid JSON: {error.message or error}")
        try:
            return self._checked(json.loads(arguments))
        except BaseException as error:  # a check that raises refuses the call (never
            if stops_the_process(error):  # escapes; SystemExit included, RUN-ACT-1)
                raise
            return ToolFailure(ToolFailureClass.INVALID_ARGUMENTS, (
                f"the argument check raised {describe_error(error)}")[:500])

    def _checked(self, value: Any) -> ToolFailure | None:
        if not isinstance(value, dict):
            return ToolFailure(ToolFailureClass.INVALID_ARGUMENTS, not_an_object(value))
        errors = [] if self.any_object else schema_errors(value, self.schema)
        if errors:
            return ToolFailure(ToolFailureClass.INVALID_ARGUMENTS, "; ".join(errors[:5]))
        unbound = self._binding_error(value)
        if unbound is not None:
            return ToolFailure(ToolFailureClass.INVALID_ARGUMENTS, unbound)
        if self.check is None:
            return None
        verdict = self.check(value)
        if verdict is not None and not isinstance(verdict, ToolFailure):
            return ToolFailure(ToolFailureClass.INVALID_ARGUMENTS, (
                f"the argument check returned {type(verdict).__name__}, not a ToolFailure"))
        return verdict

    def _binding_error(self, arguments: dict[str, Any]) -> str | None:
        signature = self.signature
        if signature is None:  # no introspectable signature: let the call decide
            return None
        try:
            signature.bind(*([None] if self.context else []), **arguments)
        except TypeError as error:
            return f"arguments do not fit the tool: {error}"
        return None


def _parameters_text(parameters: Mapping[str, Any] | str | None) -> JSONText:
    if parameters is None:
        parameters = DEFAULT_PARAMETERS
    if isinstance(parameters, str):
        return canonical_json_text(parse_json_strict(parameters))
    return canonical_json_text(parameters)


def python_tool(fn: Callable[..., Any], *, ref: ToolRef, name: str | None = None,
                description: str = "", parameters: Mapping[str, Any] | str | None = None,
                policy: ResponsePolicy = ResponsePolicy.DIRECT_EXECUTION,
                replay: ToolReplay = ToolReplay.UNKNOWN,
                placement: ToolPlacement = ToolPlacement.NONE,
                check: ToolCheck | None = None, timeout: float | None = None,
                context: bool = False) -> Tool:
    """Declare *fn* as a tool. ``name`` (model-facing) defaults to ``ref``;
    ``parameters`` is a JSON-Schema object (mapping or JSON text; default any object).

    What *fn* returns is the call's output: a JSON value other than ``None`` or ``""``
    (RUN-WIR-4; a side-effect tool returns e.g. ``{"ok": True}``). ``None``, ``""``, a
    value that is not JSON, or an integer too large for a double (``10**400``) fails the
    call with class ``internal``; an integer past ±(2^53−1) is kept as the nearest double
    (D-11). An exception *fn* raises — ``SystemExit`` and other BaseExceptions included,
    but not ``KeyboardInterrupt`` nor ``GeneratorExit``, which stop the process — fails
    only that call (UNKNOWN: ``effect_unknown``;
    RUN-ACT-1).

    *ref* is a name (RUN-WIR-1: at most 512 UTF-8 bytes, no control, line-separator or
    bidirectional formatting character); the model-facing *name* is 1 to 64 of
    ``A-Z a-z 0-9 _ - .`` (:data:`TOOL_NAME`: the providers' tool-name set plus ``.``).
    ``parameters=None`` is the default, any JSON object.

    Raises:
        ValidationError: *fn* not callable; a ref that is not a valid name (``""``,
            ``"a\nb"``, past 512 bytes); a name outside :data:`TOOL_NAME` (``""``, ``"a
            b"``, 65+ characters; attribute ``argument="name"``); parameters that are not
            a mapping, JSON text or None, not strict JSON, or a parameters schema that is
            not a JSON object, names in ``$schema`` a draft jsonschema does not know
            (``"http://bogus"``: it would be validated as Draft 2020-12 unnoticed), is
            not a valid JSON Schema for the draft the executor validates with (its
            ``$schema``, else Draft 2020-12), or has a top-level ``type`` without
            ``"object"`` (a tool's arguments are a JSON object); ``timeout`` not > 0 and
            finite; ``check`` not callable. Attribute ``tool_ref``. Checked here, so a
            badly declared tool never reaches a model (RUN-EXE-5).
    """
    _tool_ref(None, None, ref)
    if name is not None and not isinstance(name, str):
        raise ValidationError(f"tool {ref!r}: name must be a str or None, not "
                              f"{type(name).__name__}", argument="name", tool_ref=ref)
    definition = ToolDefinition(name=ref if name is None else name, description=description,
                                parameters=_parameters_text(parameters))
    return Tool(ref=ref, definition=definition, fn=fn, policy=policy, replay=replay,
                placement=placement, check=check, timeout=timeout, context=context)


def tool(ref: ToolRef, **declaration: Any) -> Callable[[Callable[..., Any]], Tool]:
    """Decorator form of :func:`python_tool`: ``@tool("math.add", parameters={...})``."""

    def wrap(fn: Callable[..., Any]) -> Tool:
        return python_tool(fn, ref=ref, **declaration)

    return wrap
