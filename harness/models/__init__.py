"""The models: the registry (registry.py, plain data, no torch), the user's own model by import path (user.py), and
the networks with their builders (build.py and one module per family). A new model is a module and one entry in
registry.ENTRIES (harness.matrix.sections.MODEL_NAMES reads the names from there).

Importing this package imports no torch: `build_model` and `build_user_model` load build.py on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.models.registry import ENTRIES, MODELS, ModelEntry, Recipe, entry, model_names
from harness.models.user import UserModelError, import_path_hash, import_path_problem, is_import_path, model_token

if TYPE_CHECKING:
    from harness.models.build import build_model, build_user_model

__all__ = ["ENTRIES", "MODELS", "ModelEntry", "Recipe", "UserModelError", "build_model", "build_user_model",
           "entry", "import_path_hash", "import_path_problem", "is_import_path", "model_names", "model_token"]

_LAZY = {"build_model", "build_user_model"}


def __getattr__(name: str) -> Any:
    # PEP 562: the torch side loads only when a builder is asked for, so the validator can import the registry.
    if name in _LAZY:
        from harness.models import build

        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
