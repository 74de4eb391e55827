"""The user's own model, named by import path `package.module:builder`: the form's check, its short hash and its
cell-id token, and the error every failure to build one raises. Pure and torch-free: the matrix validator's side
(harness/models/build.py imports and builds).
"""

from __future__ import annotations

import hashlib
import importlib.util
import keyword
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

FORM = "'package.module:builder'"
HASH_CHARS = 8
"""Hex digits of the import path's SHA-256 in cell ids: 4 billion values, stable across runs and machines."""


class UserModelError(Exception):
    """A user model that cannot be built: one line naming the import path and what went wrong."""


@dataclass(frozen=True, slots=True)
class ImportPath:
    module: str
    """Dotted module name, imported with importlib (absolute only)."""
    attr: str
    """The builder's name in that module; dots reach an attribute of an attribute (`Class.create`)."""

    def __str__(self) -> str:
        return f"{self.module}:{self.attr}"


def is_import_path(model: str) -> bool:
    """A model name with ':' is the user's own model; every other name is a registry name."""
    return ":" in model


def _dotted(text: str) -> bool:
    return all(part.isidentifier() and not keyword.iskeyword(part) for part in text.split("."))


def import_path_problem(text: str) -> str | None:
    """Why `text` is not of the form 'package.module:builder' (one line), or None when it is. Imports nothing."""
    module, sep, attr = text.partition(":")
    if not sep or not module or not attr or ":" in attr:
        return f"{text!r}: expected {FORM}: one ':' between a module and its builder"
    if not _dotted(module):
        return f"{text!r}: {module!r} is not an absolute module name (dotted Python identifiers)"
    if not _dotted(attr):
        return f"{text!r}: {attr!r} is not a Python name"
    return None


def parse_import_path(text: str) -> ImportPath:
    """`text` as an ImportPath; UserModelError with the form's problem when it is malformed."""
    problem = import_path_problem(text)
    if problem:
        raise UserModelError(problem)
    module, _, attr = text.partition(":")
    return ImportPath(module, attr)


def import_path_hash(text: str) -> str:
    """Short stable hash of the import path exactly as written (for cell ids)."""
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]


def model_token(model: str) -> str:
    """The model's part of a cell id: a registry name as it is; an import path as `<module tail>.<builder>-<hash>`,
    in letters, digits, '.' and '-' only (file names, and no '_' that would read as the id's separator)."""
    if not is_import_path(model):
        return model
    module, _, attr = model.partition(":")
    readable = re.sub(r"[^A-Za-z0-9.]+", "-", f"{module.rpartition('.')[2]}.{attr}").strip("-.")
    return f"{readable}-{import_path_hash(model)}"


def module_problem(text: str, search_dirs: Iterable[str | Path] = ()) -> str | None:
    """Why the import path's module cannot be found (one line), or None. Finds without running the module itself;
    its parent packages' __init__ files do run (that is how Python finds a submodule)."""
    path = parse_import_path(text)
    extra = [str(d) for d in search_dirs if str(d) not in sys.path]
    sys.path[:0] = extra
    try:
        found = importlib.util.find_spec(path.module)
    except Exception as exc:  # a parent package that fails to import
        return f"{text!r}: cannot import module {path.module!r} ({type(exc).__name__}: {exc})".replace("\n", " ")
    finally:
        for entry in extra:
            sys.path.remove(entry)
    return None if found else f"{text!r}: no module named {path.module!r}"
