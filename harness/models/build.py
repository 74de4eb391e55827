"""Model construction: a registry name through its entry's builder, or the user's `package.module:builder` by
importing it. The torch side of harness/models/registry.py and harness/models/user.py.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from torch import nn

from harness.models.registry import entry
from harness.models.user import UserModelError, is_import_path, parse_import_path


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def load_builder(text: str, *, search_dirs: Iterable[str | Path] = ()) -> Callable[..., Any]:
    """The callable an import path names. `search_dirs` go to the front of sys.path and stay there (a cell is its
    own process, and the user's module may import its neighbours later). UserModelError on any failure."""
    path = parse_import_path(text)
    for folder in reversed([str(d) for d in search_dirs]):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        target: Any = importlib.import_module(path.module)
    except (Exception, SystemExit) as exc:  # the user's module may raise anything, even exit, while importing
        raise UserModelError(_one_line(f"{text!r}: cannot import module {path.module!r} "
                                       f"({type(exc).__name__}: {exc})")) from exc
    where = path.module
    for name in path.attr.split("."):
        if not hasattr(target, name):
            raise UserModelError(f"{text!r}: {where!r} has no attribute {name!r}")
        target, where = getattr(target, name), f"{where}.{name}"
    if not callable(target):
        raise UserModelError(f"{text!r}: {where!r} is not a callable builder (type {type(target).__name__})")
    return target


def build_user_model(text: str, *, num_classes: int, search_dirs: Iterable[str | Path] = ()) -> nn.Module:
    """`builder(num_classes=num_classes)` of the import path `text`; it must return a torch.nn.Module.
    Every failure (module missing, attribute missing, builder raises, wrong return) is one UserModelError."""
    builder = load_builder(text, search_dirs=search_dirs)
    call = f"{parse_import_path(text).attr}(num_classes={num_classes})"
    try:
        model = builder(num_classes=num_classes)
    except (Exception, SystemExit) as exc:
        raise UserModelError(_one_line(f"{text!r}: {call} raised {type(exc).__name__}: {exc}")) from exc
    if not isinstance(model, nn.Module):
        raise UserModelError(f"{text!r}: {call} returned type {type(model).__name__}, not a torch.nn.Module")
    return model


def build_model(name: str, *, num_classes: int, zero_init_residual: bool = False,
                search_dirs: Iterable[str | Path] = ()) -> nn.Module:
    """Build registry model `name` (ValueError listing the known names when unknown), or the user's model when
    `name` is an import path (UserModelError; zero_init_residual is a registry models' option only)."""
    if is_import_path(name):
        if zero_init_residual:
            raise UserModelError(f"{name!r}: zero_init_residual applies to registry models only; the user's "
                                 "builder initialises its own model")
        return build_user_model(name, num_classes=num_classes, search_dirs=search_dirs)
    builder = load_builder(entry(name).builder)
    return builder(num_classes=num_classes, zero_init_residual=zero_init_residual)
