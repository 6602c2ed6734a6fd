"""What the executor receives: Assignment, its key and its two body kinds (spec §6.1).

RUN-EXE-1: an Assignment is the frozen description of one effect; its
:class:`AssignmentKey` ``(session, run_id, effect)`` is the *only* link between the Run and
the execution plane. RUN-EXE-7: a model Assignment handed to ``dispatch`` carries the frozen
request inline; digest-only model Assignments exist for ``validate``, ``attach`` and
``abort`` only.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

from ..protocol.errors import ValidationError
from ..protocol.values import (
    CallID,
    Digest,
    EffectID,
    JSONText,
    ModelRef,
    ModelRequest,
    ResponsePolicy,
    RunID,
    Scope,
    StepID,
    ToolPlacement,
    ToolRef,
    ToolReplay,
)
from ._validators import any_str, digest_or_empty, non_empty_str

__all__ = [
    "AssignmentKey",
    "TargetRef",
    "ModelAssignment",
    "ToolAssignment",
    "AssignmentBody",
    "AssignmentKind",
    "Assignment",
]

AssignmentKind: TypeAlias = Literal["model", "tool"]


@attrs.frozen
class AssignmentKey:
    """``(session, run_id, effect)``: the handle the Run and the executor share (RUN-EXE-1).

    Hashable, so it keys dictionaries on both sides. ``session`` may be empty (an owner
    that does not scope its keys); ``effect`` is empty only in the Assignment handed to a
    tool ``validate`` (spec §5.7), never in a dispatched key.
    """

    session: Scope = attrs.field(validator=any_str)
    run_id: RunID = attrs.field(validator=any_str)
    effect: EffectID = attrs.field(validator=any_str)


@attrs.frozen
class TargetRef:
    """Opaque placement of one effect chosen by the application's TargetResolver
    (RUN-LOP-9). It travels in the Assignment only and never enters a fact.

    Raises ``ValidationError`` when ``kind`` or ``id`` is empty.
    """

    kind: str = attrs.field(validator=non_empty_str)
    id: str = attrs.field(validator=non_empty_str)


def _optional_request(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, ModelRequest):
        raise ValidationError(f"{attribute.name} must be a ModelRequest or None",
                              field=attribute.name, value=value)


@attrs.frozen(kw_only=True)
class ModelAssignment:
    """Body of a model effect (RUN-EXE-7).

    ``request`` is the frozen request inline (required by ``dispatch``; its digest MUST be
    ``request_digest``) or ``None`` for the digest-only form used by ``validate``,
    ``attach`` and ``abort``.
    """

    model: ModelRef = attrs.field(validator=any_str)
    request_digest: Digest = attrs.field(validator=digest_or_empty)
    request: ModelRequest | None = attrs.field(default=None, validator=_optional_request)

    def digest_only(self) -> ModelAssignment:
        """This body without the inline request."""
        return self if self.request is None else attrs.evolve(self, request=None)


@attrs.frozen(kw_only=True)
class ToolAssignment:
    """Body of a tool effect: the call's frozen binding data (spec §6.1, RUN-EXE-1).

    ``definition_digest`` is ``""`` for a tool the model called without it being offered.
    ``arguments`` is canonical JSON text. ``replay`` is the tool's declared replay policy
    (RUN-EXE-9); it is omitted on the wire when ``UNKNOWN``.
    """

    tool_ref: ToolRef = attrs.field(validator=non_empty_str)
    definition_digest: Digest = attrs.field(default="", validator=digest_or_empty)
    arguments: JSONText = attrs.field(validator=any_str)
    policy: ResponsePolicy = attrs.field(
        default=ResponsePolicy.DIRECT_EXECUTION,
        validator=attrs.validators.instance_of(ResponsePolicy))
    replay: ToolReplay = attrs.field(
        default=ToolReplay.UNKNOWN, validator=attrs.validators.instance_of(ToolReplay))
    placement: ToolPlacement = attrs.field(
        default=ToolPlacement.NONE, validator=attrs.validators.instance_of(ToolPlacement))


AssignmentBody: TypeAlias = ModelAssignment | ToolAssignment


def _body(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, ModelAssignment | ToolAssignment):
        raise ValidationError("body must be a ModelAssignment or a ToolAssignment",
                              field=attribute.name, value=value)


def _target(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, TargetRef):
        raise ValidationError("target must be a TargetRef or None",
                              field=attribute.name, value=value)


@attrs.frozen(kw_only=True)
class Assignment:
    """The frozen description of one effect that the executor receives (RUN-EXE-1).

    ``call_id`` is ``""`` for a model effect. ``target`` is the opaque TargetRef the
    application resolved for this start (or ``None``). Executors identify the record of an
    Assignment by :attr:`key` alone (spec §6.2).
    """

    session: Scope = attrs.field(validator=any_str)
    run_id: RunID = attrs.field(validator=any_str)
    step_id: StepID = attrs.field(default="", validator=any_str)
    call_id: CallID = attrs.field(default="", validator=any_str)
    effect: EffectID = attrs.field(validator=any_str)
    target: TargetRef | None = attrs.field(default=None, validator=_target)
    body: AssignmentBody = attrs.field(validator=_body)

    @property
    def kind(self) -> AssignmentKind:
        """``"model"`` or ``"tool"``, derived from the body."""
        return "model" if isinstance(self.body, ModelAssignment) else "tool"

    @property
    def key(self) -> AssignmentKey:
        """``AssignmentKey(session, run_id, effect)``."""
        return AssignmentKey(self.session, self.run_id, self.effect)

    def digest_only(self) -> Assignment:
        """The digest-level form (no inline model request), for attach/abort (RUN-EXE-7)."""
        if isinstance(self.body, ModelAssignment) and self.body.request is not None:
            return attrs.evolve(self, body=self.body.digest_only())
        return self

    @classmethod
    def for_key(cls, key: AssignmentKey) -> Assignment:
        """A key-only Assignment for ``attach``/``abort`` when only the key is known.

        Executors identify records by ``a.key`` alone (spec §6.2), so the (empty model)
        body is never read; the Watcher's orphan probe uses this for bare keys.
        """
        return cls(session=key.session, run_id=key.run_id, effect=key.effect,
                   body=ModelAssignment(model="", request_digest=""))
