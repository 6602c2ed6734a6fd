"""Checkable models by name (``reference``: the spec's reference machine; ``core``: the real
protocol core), built for a ``CheckConfig``."""

from ._registry import MODEL_MODULES as MODEL_MODULES
from ._registry import load_model as load_model
from ._registry import model_names as model_names
from ._registry import model_variants as model_variants

__all__ = ["MODEL_MODULES", "load_model", "model_names", "model_variants"]

for _name in ("load_model", "model_names", "model_variants"):
    globals()[_name].__module__ = __name__
del _name
