"""Errors raised by the model checker and its model registry.

Like every runx_actors error they carry the data to act on as keyword attributes.
``CheckError`` is a grouping base for ``except`` clauses and refuses instantiation.
"""

from __future__ import annotations

from ..protocol.errors import RunxError

__all__ = [
    "CheckError",
    "ModelNotFoundError",
    "UnknownVariantError",
    "ModelCodeError",
    "TraceReplayError",
    "ConfigFileError",
]


class CheckError(RunxError):
    """Grouping base: the model checker could not do what it was asked."""

    _abstract = True


class ModelNotFoundError(CheckError):
    """No model is registered under ``.model``, or its module ``.module`` is not importable
    (not written yet). ``.available`` lists the registered names."""


class UnknownVariantError(CheckError):
    """``.model`` has no variant ``.variant``; ``.available`` maps the known ones to their
    descriptions."""


class ModelCodeError(CheckError):
    """The model's own code raised while exploring (``__cause__`` is the exception).

    ``.where`` names the call (``"actions"``, ``"invariant INV-6"``, ``"canonical"``,
    ``"initial_states"``), ``.state`` the state it was given (``None`` for
    ``initial_states``) and ``.trace`` a ``Trace`` reaching that state (or ``None``).
    """


class TraceReplayError(CheckError):
    """A counterexample could not be rebuilt by replaying the model: ``actions`` is not
    deterministic, or (compact mode) two states shared a 64-bit hash. ``.step`` is the
    index of the step that could not be reproduced."""


class ConfigFileError(CheckError):
    """A ``check --config`` file was refused: unreadable, too large, not TOML, an unknown
    key or a value of the wrong type or out of range. ``.path`` names the file, ``.key``
    the offending key (``None`` when it is the file as a whole). CLI exit code 64."""
