"""Fail fast at open (RUN-ACT-8): the offers the runtime makes are checked against the
executor before any Run is driven.

The check goes through the executor's own side-effect-free ``validate`` (RUN-EXE-5), so
it works for any ExecutionPort: each offered tool is validated with its declaration (a
``tool_lookup_failed`` or ``tool_definition_mismatch`` answer is a mismatch), and the
default model ref is validated as a model Assignment (a refusal is an unknown ref). An
executor that cannot tell (``validate`` answers None) passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import effect
from ..protocol.arguments import check_count, check_type
from ..protocol.commit import validate_name
from ..protocol.errors import ModelUnavailableError, ToolOfferError, ValidationError
from ..protocol.values import FailureClass, ModelRef
from ._settings import Settings

__all__ = ["check_offers", "check_open_arguments"]

#: the largest actor mailbox ``open_runtime`` takes
MAX_MAILBOX = 1 << 20


def check_open_arguments(*, scope: object, settings: object, model: object, tools: object,
                         system: object, mailbox_size: object = 16,
                         sink: object = None) -> None:
    """Refuse, before anything is opened or written, an ``open_runtime`` argument of the
    wrong type or value (ValidationError with ``argument`` naming it): *scope* not a valid
    name (RUN-WIR-1), *settings* neither None nor a :class:`Settings`, *model* or
    *system* not a ``str``, *tools* not a sequence of offers (objects with ``spec()``),
    *mailbox_size* not an int in ``1..MAX_MAILBOX``, *sink* neither None nor an
    EventSink (``emit``)."""
    check_type(scope, "scope", str, "a str")
    try:
        validate_name(scope, "scope")  # type: ignore[arg-type]
    except ValidationError as error:
        raise ValidationError(error.message, argument="scope", **error.attrs) from None
    if settings is not None:
        check_type(settings, "settings", Settings, "a Settings or None")
    check_type(model, "model", str, "a str (a model ref; \"\" = no default model)")
    check_type(system, "system", str, "a str")
    if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
        raise ValidationError(f"tools must be a sequence of tool offers, not "
                              f"{type(tools).__name__}", argument="tools")
    for n, offer in enumerate(tools):
        if not callable(getattr(offer, "spec", None)):
            raise ValidationError(f"tools[{n}] is {type(offer).__name__}, not a tool offer "
                                  "(a Tool, or an object with spec())", argument="tools",
                                  index=n)
    check_count(mailbox_size, "mailbox_size", minimum=1, maximum=MAX_MAILBOX)
    if sink is not None and not callable(getattr(sink, "emit", None)):
        raise ValidationError(f"sink must be an EventSink (an object with emit(event)) or "
                              f"None, not {type(sink).__name__}", argument="sink")

#: ``validate`` answers that mean "this executor does not have this tool as offered".
_MISMATCH = frozenset({FailureClass.TOOL_LOOKUP_FAILED, FailureClass.TOOL_DEFINITION_MISMATCH})
_PROBE_RUN = "runx-preflight"


async def check_offers(executor: Any, scope: str, *, model: ModelRef = "",
                       tools: Sequence[Any] = ()) -> None:
    """Refuse, before any Run is driven, offers the executor cannot serve (RUN-ACT-8).

    *tools* are ToolOffers (``.spec()`` gives the ToolSpec the model is offered); *model*
    is the default model ref ("" = none). Checkpoint: once per offer (``validate``).

    Raises:
        ToolOfferError: two offers share a ref or a model-facing name (a model calls a
            tool by name, so the second could never be called; ``failure`` is None,
            ``name`` the shared name), or an offered tool is unknown to the executor or
            declared differently there (attributes ``tool_ref``, ``failure``). Checked
            in that order, the duplicates before the executor is asked.
        ModelUnavailableError: the executor refuses *model* (attributes ``model``,
            ``failure``).
        Any exception ``validate`` raises (a broken executor is found at open, too).
    """
    specs = [offer.spec() for offer in tools]
    refs: set[str] = set()
    names: dict[str, str] = {}
    for spec in specs:
        if spec.ref in refs:
            raise ToolOfferError(f"the tool {spec.ref!r} is offered twice",
                                 tool_ref=spec.ref, failure=None, name=spec.name)
        if spec.name in names:
            raise ToolOfferError(
                f"offered tools {names[spec.name]!r} and {spec.ref!r} have the same "
                f"model-facing name {spec.name!r}; a model could never call the second one",
                tool_ref=spec.ref, failure=None, name=spec.name)
        refs.add(spec.ref)
        names[spec.name] = spec.ref
    for spec in specs:
        failure = await executor.validate(effect.Assignment(
            session=scope, run_id=_PROBE_RUN, step_id="", call_id="", effect="",
            target=None, body=effect.ToolAssignment(
                tool_ref=spec.ref, definition_digest=spec.definition_digest,
                arguments="{}", policy=spec.policy, replay=spec.replay,
                placement=spec.placement)))
        if failure is not None and failure.class_ in _MISMATCH:
            raise ToolOfferError(
                f"offered tool {spec.ref!r} (model name {spec.name!r}) does not match the "
                f"executor: {failure.class_}: {failure.message}",
                tool_ref=spec.ref, failure=failure)
    if model:
        failure = await executor.validate(effect.Assignment(
            session=scope, run_id=_PROBE_RUN, step_id="", call_id="", effect="",
            target=None, body=effect.ModelAssignment(model=model, request_digest="",
                                                     request=None)))
        if failure is not None:
            raise ModelUnavailableError("open_runtime: the executor refuses the default model",
                                        model=model, failure=failure)
