"""Loop settings (spec §5.2; RUN-LOP-1, Generation A)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs

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

__all__ = ["DispatchPolicy", "Settings", "TargetRequest", "TargetResolver", "BeforePrepare"]


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


def _non_negative(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValidationError(f"{attribute.name} must be >= 0, got {value}")


@attrs.frozen(kw_only=True)
class DispatchPolicy:
    """Offers of one Assignment: ``retries == 0`` means 3 offers in total; otherwise
    ``retries`` offers. After the k-th retryable refusal sleep ``backoff * k`` seconds
    (``backoff == 0`` means 0.05 s)."""

    retries: int = attrs.field(default=0, validator=_non_negative)
    backoff: float = attrs.field(default=0.0, validator=_non_negative)

    @property
    def offers(self) -> int:
        return 3 if self.retries == 0 else self.retries

    def pause(self, refusals: int) -> float:
        """Seconds to wait after the *refusals*-th retryable refusal."""
        return (self.backoff or 0.05) * refusals


def _scheduling(_: Any, __: Any, value: ToolScheduling) -> None:
    if not value.is_valid():
        raise ValidationError(f"invalid scheduling {value!r}", scheduling=value)


def _malformed(_: Any, __: Any, value: int) -> None:
    if not 0 <= value <= 255:
        raise ValidationError(f"malformed_retries must be in 0..255, got {value}")


@attrs.frozen(kw_only=True)
class Settings:
    """Per-Run loop settings. Construction refuses invalid values (ValidationError).

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
    dispatch: DispatchPolicy = DispatchPolicy()
    target_resolver: TargetResolver | None = None
    before_prepare: BeforePrepare | None = None
    watcher: Any = None
    settle_timeout: float = attrs.field(default=30.0, validator=_non_negative)
    drain_timeout: float = attrs.field(default=60.0, validator=_non_negative)
    max_tool_calls: int = attrs.field(default=0, validator=_non_negative)
    max_model_resends: int = attrs.field(default=3, validator=_non_negative)
    max_model_steps: int = attrs.field(default=100, validator=_non_negative)
    max_tool_lookup_failures: int = attrs.field(default=3, validator=_non_negative)
    fused_commits: bool = True
