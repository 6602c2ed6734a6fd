"""Errors of the loop host (loop-host §2-§3, §6, §7).

Every class derives from :class:`runx_actors.RunxError` through the grouping base
:class:`HostError`, and carries ``exit_code`` (the CLI exit code of §9.1) and ``reason``
(a stable reason code) as attributes. The design's names (``LoopConfigMismatch``,
``LoopIntegrityError``, ``ContextSkillChanged``) are kept as spelled there. Tests check
attributes, never the message text; the messages the design quotes are reproduced exactly
because the CLI prints them.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..protocol.errors import RunxError

__all__ = [
    "HostError",
    "PackageError",
    "InputContractError",
    "ContextRefError",
    "ContextSkillChanged",
    "ContextChangedDuringPreparation",
    "LoopConfigMismatch",
    "LoopIntegrityError",
    "AnswersError",
    "ApprovalNotAttestedError",
    "UnknownRunError",
    "PackageChangedError",
]


class HostError(RunxError):
    """Grouping base of the host errors (for ``except`` clauses only)."""

    _abstract = True
    #: Exit code of the CLI for this error (loop-host §9.1).
    exit_code: ClassVar[int] = 1
    #: Stable reason code; instances may override it with the ``reason`` keyword.
    default_reason: ClassVar[str] = "host_error"

    def __init__(self, message: str = "", **attrs: Any) -> None:
        attrs.setdefault("reason", self.default_reason)
        super().__init__(message, **attrs)

    reason: str


class PackageError(HostError):
    """The package cannot be loaded: unreadable or invalid ``X.yaml`` / ``SKILL.md``, an
    unknown key, an unknown runner, a symlink inside the package (§2.2). Attributes:
    ``path``, ``reason``."""

    default_reason = "package_invalid"


class InputContractError(HostError):
    """The inputs violate the runner's input contract (§3.2); no Run, no receipt and no
    loop fact exist. ``reason`` is always ``input_contract_invalid``; ``field`` names the
    offending input (``""`` when the problem is not one field)."""

    default_reason = "input_contract_invalid"


class ContextRefError(PackageError):
    """A context-skill ref breaks a §6.1 rule (path, eligibility or limit). Checked when
    the package loads or at preparation, before any Run exists. Attributes: ``ref``,
    ``reason``."""

    default_reason = "context_ref_invalid"


class ContextSkillChanged(HostError):
    """A prepared context entry no longer matches the disk (§6.3 points 2 and 3):
    ``context skill <ref> changed after preparation: expected <hash>, found <hash>``.
    Attributes: ``ref``, ``expected``, ``found``."""

    default_reason = "context_skill_changed"


class ContextChangedDuringPreparation(HostError):
    """The read-twice check of §6.3 point 1 failed: the context changed between the two
    reads while the envelope was built. Nothing was frozen; the host seals the Run
    ``blocked``. Attributes: ``ref``, ``expected``, ``found``."""

    default_reason = "context_changed_during_preparation"


class LoopConfigMismatch(HostError):
    """The stored loop (``loop_opened``, or a replayed ``turn_submitted``) differs from the
    spec the host was started with (§2.3 steps 1 and 5). Nothing was written. Attributes:
    ``loop_id``, ``field``."""

    default_reason = "loop_config_mismatch"


class LoopIntegrityError(HostError):
    """The loop record, a receipt or the run store fails the restart verification of §2.5
    (or a fold guard of §2.1). The host repairs nothing. Exit 3. Attributes: ``loop_id``,
    ``turn_index``, ``check``."""

    exit_code = 3
    default_reason = "loop_integrity"


class AnswersError(HostError):
    """An answers file (§7.2) is invalid: unknown top-level keys, a key naming no request
    of the Run, a missing or extra output, a bad closure. Nothing was committed.
    Attributes: ``key``, ``reason``."""

    default_reason = "answers_invalid"


class ApprovalNotAttestedError(AnswersError):
    """An approval is not host-attested (§7.4): ``"actor": "agent"``, an agent answer aimed
    at an approval gate, or an approval aimed at an agent request. Nothing was committed."""

    default_reason = "approval_not_attested"


class UnknownRunError(HostError):
    """No governed Run with this id exists in the store's scope (§7.3 step 1)."""

    default_reason = "unknown_run"


class PackageChangedError(HostError):
    """``package digest changed since the run was opened`` (§7.3 step 4), or the runner
    the Run was opened with is gone or changed kind. Nothing was committed."""

    default_reason = "package_changed"
