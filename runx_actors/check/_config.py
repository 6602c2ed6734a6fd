"""``CheckConfig``: the bounds of a model-checking configuration (how big the world is)."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["CheckConfig", "MAX_COUNT"]

#: The largest count a configuration takes. Far past what a search can exhaust (three
#: calls already make over a million states); a larger value could only make the model
#: build an absurd initial state (an OverflowError for one past a machine index).
MAX_COUNT = 1000


def _at_least(minimum: int) -> Any:
    def validate(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
        if (isinstance(value, bool) or not isinstance(value, int)
                or not minimum <= value <= MAX_COUNT):
            raise ValueError(f"{attribute.name} must be an integer from {minimum} to "
                             f"{MAX_COUNT}, got {value!r}")

    return validate


def _flag(instance: Any, attribute: attrs.Attribute[bool], value: bool) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{attribute.name} must be true or false, got {value!r}")


@attrs.frozen(kw_only=True)
class CheckConfig:
    """How many of each thing a model may create, and which behaviours it includes; the
    model's state space grows with each.

    Counts are integers (``runs`` and ``max_prepares`` at least 1, the others at least 0;
    all at most :data:`MAX_COUNT`); switches are booleans. These defaults are the bare
    environment; the CLI's profiles (``runx_actors.check.PROFILES``) switch more on.
    Raises ``ValueError`` on a count out of range or a switch that is not a bool.
    """

    runs: int = attrs.field(default=1, validator=_at_least(1))
    """Runs created (each a separate fact log)."""
    calls: int = attrs.field(default=2, validator=_at_least(0))
    """Tool calls the model step of a Run may request."""
    crashes: int = attrs.field(default=1, validator=_at_least(0))
    """Runtime crashes (and restarts) the environment may inject."""
    takeovers: int = attrs.field(default=1, validator=_at_least(0))
    """Session takeovers by a second runtime (epoch bumps)."""
    duplicates: int = attrs.field(default=1, validator=_at_least(0))
    """Duplicated or late outcome deliveries the environment may inject."""
    inputs: int = attrs.field(default=0, validator=_at_least(0))
    """Inputs the user adds to each Run while it is active."""
    max_prepares: int = attrs.field(default=1, validator=_at_least(1))
    """Model steps prepared per Run (withdrawn and recovered ones included)."""
    approvals: bool = attrs.field(default=False, validator=_flag)
    """Call 1 of a tool step needs an approval (the user approves or rejects)."""
    malformed: bool = attrs.field(default=False, validator=_flag)
    """The first attempt of a model step may answer a malformed result."""
    failures: bool = attrs.field(default=False, validator=_flag)
    """Provider failures of the model, KNOWN and UNKNOWN failures of tools."""
    cancel: bool = attrs.field(default=False, validator=_flag)
    """The user may cancel a Run at any time."""
    stale_reads: bool = attrs.field(default=False, validator=_flag)
    """The loop may commit from a snapshot older than the store."""
    adversarial: bool = attrs.field(default=False, validator=_flag)
    """An adversary sends forged commands (stale and future bases, wrong and foreign ids,
    mismatched ToolSpecs, hand-built envelopes, commands to ended Runs) and feeds the fold
    facts no decide produced; each must be refused."""
    fused: bool = attrs.field(default=True, validator=_flag)
    """Fused commits, as the runtime commits (RUN-LOP-11): a deliver that settles an
    Outcome, leaving nothing else of its Run executing, continues in the same move and
    atomically with what the new state plans up to its start barrier (the starts of the
    PENDING calls, or a Prepare and the model start), so a crash or takeover lands only
    before or after the batch. Off: one commit per move."""
