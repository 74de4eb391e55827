"""The model axis, spec side: what a model's name may be (a registry name, or the user's own as
'package.module:builder'), the settings each model on the axis trains with (its registry defaults in the keys the
file leaves out), and the lines `nvbench validate` prints about them. Reads only the models' torch-free modules."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.models.registry import entry
from harness.models.user import import_path_problem, is_import_path
from harness.matrix.knobs import Problem, choice_problem, show
from harness.matrix.sections import MODEL_NAMES, BenchmarkConfig, Matrix, ModelSettings, RecipeConfig

YOUR_OWN = "or your own model as 'package.module:builder'"


def model_problem(value: Any) -> str | None:
    """Why `value` names no model (one line), or None: a registry name, or an import path of the right form (the
    form only: nothing is imported here)."""
    if not isinstance(value, str):
        return f"must be str, got {type(value).__name__} {show(value)}"
    if is_import_path(value):
        return import_path_problem(value)
    problem = choice_problem(value, MODEL_NAMES)
    return f"{problem}; {YOUR_OWN}" if problem else None


def model_settings(model: str, *, key: str, benchmark: BenchmarkConfig, recipe: RecipeConfig, given: set[str],
                   source: str) -> ModelSettings:
    """`model`'s settings: a registry model's defaults (its Recipe.matrix_defaults) fill the keys of [benchmark]
    and [recipe] that are not in `given` ("section.key" written in the file); the user's model trains with the
    file's sections as they are, its module looked for beside the matrix file, then in the working directory."""
    sections = {"benchmark": dataclasses.replace(benchmark, model=model), "recipe": recipe}
    if is_import_path(model):
        folders = dict.fromkeys(str(p) for p in (Path(source).resolve().parent, Path.cwd()))
        return ModelSettings(model=model, key=key, search_dirs=tuple(folders), **sections)
    changed = []
    for section, defaults in entry(model).recipe.matrix_defaults().items():
        mine = {k: v for k, v in defaults.items()
                if f"{section}.{k}" not in given and getattr(sections[section], k) != v}
        sections[section] = dataclasses.replace(sections[section], **mine)
        changed += [(f"{section}.{k}", v) for k, v in mine.items()]
    return ModelSettings(model=model, key=key, from_model=tuple(changed), **sections)


def user_model_problems(settings: ModelSettings) -> list[Problem]:
    """What a user model cannot do with this recipe, as 'key: message'."""
    if is_import_path(settings.model) and settings.recipe.zero_init_residual:
        return [(Problem("recipe.zero_init_residual", f"applies to registry models only; {settings.model!r} initialises its "
                 "own weights (set it false, or drop it)"))]
    return []


def merge_per_model(models: tuple[ModelSettings, ...], problems: dict[str, list[Problem]]) -> list[str]:
    """Each model's problems as one list of lines: a problem every model has, as it is; one only some have, once,
    naming them, and which of them set its key by their registry default."""
    having: dict[Problem, list[ModelSettings]] = {}
    for s in models:
        for problem in problems[s.model]:
            having.setdefault(problem, []).append(s)
    out = []
    for problem, mine in having.items():
        if len(mine) == len(models):
            out.append(str(problem))
            continue
        key = problem.key
        defaulted = [s.model for s in mine if key in {k for k, _ in s.from_model}]
        note = f"; {', '.join(defaulted)}'s registry default sets {key}: give it in the file to override" \
            if defaulted else ""
        out.append(f"{problem} (model{'s' if len(mine) > 1 else ''} {', '.join(s.model for s in mine)}{note})")
    return out


def defaults_lines(matrix: Matrix, models: Iterable[str] | None = None) -> list[Problem]:
    """One line per model whose registry defaults set something in this file, with what the reference's recipe
    does that nvbench does not (Recipe.not_honoured); `models` limits it (e.g. to the cells --only keeps)."""
    keep = set(models) if models is not None else None
    lines = []
    for s in matrix.models:
        if (keep is not None and s.model not in keep) or is_import_path(s.model):
            continue
        sets = ", ".join(f"{k} = {v!r}" for k, v in s.from_model)
        missing = "; ".join(entry(s.model).recipe.not_honoured())
        if sets:
            lines.append(f"{s.model}: its registry defaults set {sets}"
                         + (f"; of its reference recipe nvbench does not do: {missing}" if missing else ""))
    return lines
