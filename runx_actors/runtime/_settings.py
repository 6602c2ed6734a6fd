"""Loop settings (spec §5.2; RUN-LOP-1, Generation A)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ..protocol.arguments import check_count, check_seconds, check_type
from ..protocol.canonical import MAX_SAFE_INTEGER
from ..protocol.errors import ValidationError
from ..protocol.values import (
    CallID,
    EffectID,
    ModelRef,
    RunID,
    Scope,
    StepID,
    ToolPlacement,
    ToolRef,
    ToolScheduling,
)

if TYPE_CHECKING:
    from ..effect import TargetRef

__all__ = ["DispatchPolicy", "Settings", "MAX_SETTING", "TargetRequest", "TargetResolver",
           "BeforePrepare"]


@attrs.frozen(kw_only=True)
class TargetRequest:
    """What a TargetResolver is asked for, once per effect start (RUN-LOP-9)."""

    kind: Literal["model", "tool"]
    session: Scope
    run_id: RunID
    step_id: StepID
    call_id: CallID = ""
    effect: EffectID
    model: ModelRef = ""
    tool_ref: ToolRef = ""
    placement: ToolPlacement = ToolPlacement.NONE


TargetResolver = Callable[[TargetRequest], Awaitable["TargetRef | None"]]
#: ``before_prepare(store, hint)`` runs before every Prepare (RUN-LOP-10).
BeforePrepare = Callable[[Any, Any], Awaitable[None]]


#: the largest count a Settings bound takes (2^53-1: every JSON reader keeps it exactly)
MAX_SETTING = MAX_SAFE_INTEGER


def _count(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    check_count(value, attribute.name, maximum=MAX_SETTING)


def _seconds(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    check_seconds(value, attribute.name)


def _timeout(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    check_seconds(value, attribute.name, infinite=True)  # inf: no limit


def _callable_or_none(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not callable(value):
        raise ValidationError(f"{attribute.name} must be callable or None, not "
                              f"{type(value).__name__}", argument=attribute.name)


@attrs.frozen(kw_only=True)
class DispatchPolicy:
    """Offers of one Assignment: ``retries == 0`` means 3 offers in total; otherwise
    ``retries`` offers. After the k-th retryable refusal sleep ``backoff * k`` seconds
    (``backoff == 0`` means 0.05 s)."""

    retries: int = attrs.field(default=0, validator=_count)
    backoff: float = attrs.field(default=0.0, validator=_seconds)

    @property
    def offers(self) -> int:
        """How many times one Assignment is offered in all (an int >= 1): ``retries``, or 3
        when ``retries`` is 0 (the default)."""
        return 3 if self.retries == 0 else self.retries

    def pause(self, refusals: int) -> float:
        """Seconds to wait after the *refusals*-th retryable refusal."""
        return (self.backoff or 0.05) * refusals


def _scheduling(_: Any, __: Any, value: ToolScheduling) -> None:
    check_type(value, "scheduling", ToolScheduling, "a ToolScheduling")
    if not value.is_valid():
        raise ValidationError(f"invalid scheduling {value!r}", scheduling=value)


def _malformed(_: Any, __: Any, value: int) -> None:
    check_count(value, "malformed_retries", maximum=255)


def _dispatch(_: Any, __: Any, value: DispatchPolicy) -> None:
    check_type(value, "dispatch", DispatchPolicy, "a DispatchPolicy")


def _flag(_: Any, attribute: attrs.Attribute[Any], value: bool) -> None:
    check_type(value, attribute.name, bool, "a bool")


@attrs.frozen(kw_only=True)
class Settings:
    """Per-Run loop settings. Construction refuses invalid values (ValidationError with
    ``argument`` naming the field): a count that is not an ``int`` (a bool, ``None``,
    ``"3"``) or is outside ``0..MAX_SETTING`` (2^53−1), a duration that is not a number
    of seconds >= 0 (NaN and negatives are refused; ``inf`` only for ``settle_timeout``
    and ``drain_timeout``, where it means no limit: a shielded section or a cancelled
    caller then waits as long as it takes), a field of the wrong type.

    Durations are seconds on trio's clock. ``settle_timeout`` bounds every shielded
    section [D-2]; ``drain_timeout`` bounds how long a cancelled caller waits [D-1].
    ``max_tool_calls`` (0 = no budget) is the per-Run tool budget: calls past it are
    declined with a fact, never started.

    Bounds on by default (RUN-ACT-7; 0 switches one off). Each ends the Run FAILED with
    a typed stop reason — the failure class of its ``model_step_failed`` and
    ``run_ended`` facts:

    * ``max_model_resends`` (3): consecutive re-sends of a model request whose sends end
      without a result (``deadline_exceeded`` or an unknown outcome), counted from the
      log (so across restarts); the next such outcome ends the Run with
      ``model_resend_limit``.
    * ``max_model_steps`` (100): model steps per Run; a result asking for tool calls at
      the cap ends the Run with ``model_step_limit``.
    * ``max_tool_lookup_failures`` (3): consecutive tool steps with a
      ``tool_lookup_failed`` call; the model naming an unknown tool once more ends the
      Run with ``tool_lookup_limit``.

    ``fused_commits`` (True): a drive commits a settlement together with the starts (or
    the next prepare and model start) it enables, in one transaction (RUN-LOP-11);
    False commits every command on its own (the same facts, more transactions).
    """

    scheduling: ToolScheduling = attrs.field(default=ToolScheduling(), validator=_scheduling)
    malformed_retries: int = attrs.field(default=0, validator=_malformed)
    dispatch: DispatchPolicy = attrs.field(default=DispatchPolicy(), validator=_dispatch)
    target_resolver: TargetResolver | None = attrs.field(default=None,
                                                         validator=_callable_or_none)
    before_prepare: BeforePrepare | None = attrs.field(default=None,
                                                       validator=_callable_or_none)
    watcher: Any = None
    settle_timeout: float = attrs.field(default=30.0, validator=_timeout)
    drain_timeout: float = attrs.field(default=60.0, validator=_timeout)
    max_tool_calls: int = attrs.field(default=0, validator=_count)
    max_model_resends: int = attrs.field(default=3, validator=_count)
    max_model_steps: int = attrs.field(default=100, validator=_count)
    max_tool_lookup_failures: int = attrs.field(default=3, validator=_count)
    fused_commits: bool = attrs.field(default=True, validator=_flag)
