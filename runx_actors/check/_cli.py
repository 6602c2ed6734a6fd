"""The configuration side of ``runx-actors check``: profiles, the TOML file, the flags.

Every :class:`CheckConfig` field is a flag (``--runs N``, ``--approvals/--no-approvals``,
…) and a key of the ``--config`` TOML file. What a check runs is resolved in layers, each
overriding the one before:

1. the profile: ``--profile``, else the file's ``profile`` key, else ``default``;
2. the file's keys;
3. the flags given on the command line.

:data:`PROFILES` are the named configurations: ``quick`` (seconds: a smoke test),
``default`` (what ``check`` runs without options: inputs, approvals, cancel, failures, a
takeover and the adversary; under a minute on two cores) and ``deep`` (adds a crash, a
duplicated Outcome and malformed answers: several minutes).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import attrs
import click

from ._config import MAX_COUNT, CheckConfig
from ._errors import ConfigFileError

__all__ = ["PROFILES", "DEFAULT_PROFILE", "MAX_CONFIG_BYTES", "config_options",
           "load_config_file", "resolve_config"]

F = TypeVar("F", bound=Callable[..., Any])

PROFILES: Mapping[str, CheckConfig] = MappingProxyType({
    "quick": CheckConfig(runs=1, calls=1, crashes=0, takeovers=1, duplicates=0, inputs=1,
                         cancel=True, failures=True, adversarial=True),
    "default": CheckConfig(runs=1, calls=2, crashes=0, takeovers=1, duplicates=0, inputs=1,
                           approvals=True, cancel=True, failures=True, adversarial=True),
    "deep": CheckConfig(runs=1, calls=2, crashes=1, takeovers=1, duplicates=1, inputs=1,
                        approvals=True, malformed=True, cancel=True, failures=True,
                        adversarial=True),
})
"""The named configurations of ``--profile``."""

DEFAULT_PROFILE = "default"
"""The profile ``check`` runs when neither ``--profile`` nor the file names one."""

MAX_CONFIG_BYTES = 64 * 1024
"""A ``--config`` file larger than this is refused (it holds a dozen keys)."""

_FIELDS: dict[str, attrs.Attribute[Any]] = {a.name: a for a in attrs.fields(CheckConfig)}
_HELP = {
    "runs": "Runs created.",
    "calls": "Tool calls the model step of a Run requests.",
    "crashes": "Runtime and worker crashes the environment may inject.",
    "takeovers": "Session takeovers the environment may inject.",
    "duplicates": "Duplicated or late outcomes (and user resubmissions).",
    "inputs": "Inputs the user adds to each Run while it is active.",
    "max_prepares": "Model steps prepared per Run.",
    "approvals": "Call 1 of a tool step needs an approval.",
    "malformed": "A model step's first attempt may answer a malformed result.",
    "failures": "Provider failures; KNOWN and UNKNOWN tool failures.",
    "cancel": "The user may cancel a Run.",
    "stale_reads": "The loop may commit from an old snapshot.",
    "adversarial": "Forged commands and foreign-log facts (each must be refused).",
    "fused": "A settling deliver commits the prepare/starts it enables in the same move.",
}


def config_options(func: F) -> F:
    """Add ``--profile``, ``--config`` and one flag per ``CheckConfig`` field to a click
    command. Each field flag defaults to ``None`` (not given); the command passes them all
    to :func:`resolve_config` as ``overrides``."""
    for name in reversed(list(_FIELDS)):
        attribute = _FIELDS[name]
        flag = name.replace("_", "-")
        if attribute.type in (bool, "bool"):
            func = click.option(f"--{flag}/--no-{flag}", name, default=None,
                                help=_HELP[name])(func)
        else:
            minimum = 1 if name in ("runs", "max_prepares") else 0
            func = click.option(f"--{flag}", name,
                                type=click.IntRange(min=minimum, max=MAX_COUNT),
                                default=None, metavar="N", help=_HELP[name])(func)
    func = click.option(
        "--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
        default=None, metavar="FILE",
        help="A TOML file of configuration keys (the flags' names with underscores, and "
             "optionally `profile`); flags override it.")(func)
    func = click.option(
        "--profile", type=click.Choice(sorted(PROFILES)), default=None,
        help=f"A named configuration (default: {DEFAULT_PROFILE}); the file and the flags "
             "override its fields.")(func)
    return func


def load_config_file(path: Path) -> dict[str, Any]:
    """The keys of a ``--config`` TOML file: ``CheckConfig`` field names and optionally
    ``profile`` (a name of :data:`PROFILES`).

    Raises:
        ConfigFileError: unreadable, larger than ``MAX_CONFIG_BYTES``, not TOML (duplicate
            keys included), an unknown key, a value of the wrong type, an unknown profile.
    """
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigFileError(f"cannot read {path}: {exc.strerror or exc}", path=str(path),
                              key=None) from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigFileError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes",
                              path=str(path), key=None)
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigFileError(f"{path} is not valid TOML: {exc}", path=str(path),
                              key=None) from exc
    known = {"profile", *_FIELDS}
    for key, value in table.items():
        if key not in known:
            raise ConfigFileError(
                f"{path}: unknown key {key!r} (known: {', '.join(sorted(known))})",
                path=str(path), key=key)
        if key == "profile":
            if not isinstance(value, str) or value not in PROFILES:
                raise ConfigFileError(
                    f"{path}: profile must be one of {', '.join(sorted(PROFILES))}, "
                    f"got {value!r}", path=str(path), key=key)
            continue
        want = bool if _FIELDS[key].type in (bool, "bool") else int
        if type(value) is not want:
            kind = "a boolean" if want is bool else "an integer"
            raise ConfigFileError(f"{path}: {key} must be {kind}, got {value!r}",
                                  path=str(path), key=key)
    return table


def resolve_config(profile: str | None, config_file: Path | None,
                   overrides: Mapping[str, Any]) -> tuple[str, CheckConfig]:
    """The profile name and the ``CheckConfig`` of a check: *profile* (else the file's
    ``profile``, else ``default``), then the file's keys, then the *overrides* that are not
    ``None`` (the flags given).

    Raises:
        ConfigFileError: the file is refused (see :func:`load_config_file`), or the
            resulting values are out of range.
    """
    table = load_config_file(config_file) if config_file is not None else {}
    name = profile or table.get("profile") or DEFAULT_PROFILE
    values = attrs.asdict(PROFILES[name])
    values.update({k: v for k, v in table.items() if k != "profile"})
    values.update({k: v for k, v in overrides.items() if v is not None and k in _FIELDS})
    try:
        return name, CheckConfig(**values)
    except ValueError as exc:
        raise ConfigFileError(f"{config_file}: {exc}", path=str(config_file),
                              key=None) from exc
