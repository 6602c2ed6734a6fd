"""The registry of checkable models: a name → the module that builds it.

A model module exposes ``build_model(config: CheckConfig, variant: str | None = None) ->
Model`` and, optionally, ``VARIANTS: dict[str, str]`` (deliberately broken variants, name →
description, for demonstrations). Modules are imported lazily, on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType, ModuleType
from typing import Any

from .._config import CheckConfig
from .._errors import ModelNotFoundError, UnknownVariantError
from .._model import Model

__all__ = ["MODEL_MODULES", "model_names", "model_variants", "load_model"]

MODEL_MODULES: Mapping[str, str] = MappingProxyType(
    {
        "reference": "runx_spec.reference",
        "core": "runx_actors.check.models.core",
    }
)
"""Model name → importable module path."""


def model_names() -> tuple[str, ...]:
    """The registered model names, in registration order."""
    return tuple(MODEL_MODULES)


def _import(name: str) -> ModuleType:
    module_path = MODEL_MODULES.get(name)
    if module_path is None:
        raise ModelNotFoundError(
            f"unknown model {name!r}; registered: {', '.join(MODEL_MODULES)}",
            model=name,
            module=None,
            available=model_names(),
        )
    try:
        return importlib.import_module(module_path)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_path == missing or module_path.startswith(missing + "."):
            raise ModelNotFoundError(
                f"model {name!r} is not available: module {module_path} is not importable "
                f"(not written yet?)",
                model=name,
                module=module_path,
                available=model_names(),
            ) from exc
        raise  # the module exists but one of its own imports is missing: a real bug


def model_variants(name: str) -> Mapping[str, str]:
    """The variants of model *name*: variant name → description (empty if none).

    Raises ``ModelNotFoundError`` when the name is unknown or its module not importable.
    """
    variants: Mapping[str, str] = getattr(_import(name), "VARIANTS", {})
    return MappingProxyType(dict(variants))


def load_model(name: str, config: CheckConfig, variant: str | None = None) -> Model[Any]:
    """Build model *name* for the bounds in *config*; *variant* selects a deliberately broken
    variant (``None``: the model as specified).

    Raises:
        ModelNotFoundError: the name is unknown or its module is not importable yet.
        UnknownVariantError: the module has no such variant (``.available`` lists them).
    """
    module = _import(name)
    if variant is not None:
        variants: Mapping[str, str] = getattr(module, "VARIANTS", {})
        if variant not in variants:
            known = ", ".join(sorted(variants)) or "none"
            raise UnknownVariantError(
                f"model {name!r} has no variant {variant!r} (known: {known})",
                model=name,
                variant=variant,
                available=dict(variants),
            )
    model: Model[Any] = module.build_model(config, variant=variant)
    return model
