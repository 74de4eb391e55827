"""A knob's declaration (its doc, bounds and allowed names) and the check of one TOML value against it."""

from __future__ import annotations

import difflib
import math
import types
import typing
from dataclasses import field
from typing import Any, Literal

INT64_MAX = 2**63 - 1
"""Integers are stored as Parquet int64."""


class Problem(typing.NamedTuple):
    """A problem of a matrix file, typed where it is found: the key it is about (`recipe.epochs`) and what is wrong
    with it. Shown as `key: message`; code that needs the key reads `key`, never the words."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


def knob(default: Any, doc: str, *, min: float | None = None, gt: float | None = None,
         max: float | None = None, lt: float | None = None, choices: tuple[str, ...] | None = None) -> Any:
    """A config field with its documentation, numeric bounds and allowed names (checked by the parser)."""
    meta = {"doc": doc, "min": min, "gt": gt, "max": max, "lt": lt, "choices": choices}
    if isinstance(default, (list, dict)):
        raise TypeError("mutable defaults are not allowed; use a tuple")
    return field(default=default, metadata=meta)


FROZEN = dict(frozen=True, slots=True, kw_only=True)


def suggest(key: str, known: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(t) for t in typing.get_args(tp))
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"list of {type_name(typing.get_args(tp)[0])}"
    return getattr(tp, "__name__", str(tp))


def choice_problem(value: Any, choices: tuple[Any, ...]) -> str | None:
    if value in choices and isinstance(value, type(choices[0])):
        return None
    hint = suggest(value, choices) if isinstance(value, str) else ""
    return f"unknown value {show(value)}{hint}; choose from {', '.join(map(str, choices))}"


def show(value: Any) -> str:
    """repr of a value from the file, cut short: a message line names it, it need not hold it all."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_value(value: Any, tp: Any, meta: dict[str, Any]) -> tuple[Any, str | None]:
    """Convert a TOML value to `tp`; return (converted, problem)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):  # e.g. int | Literal["auto"]: the first member that takes it
        problems = {}
        for member in typing.get_args(tp):
            conv, problem = check_value(value, member, meta)
            if problem is None:
                return conv, None
            problems[typing.get_origin(member) or member] = problem
        if isinstance(value, int) and not isinstance(value, bool) and int in problems:
            return None, problems[int]  # a number out of range says which range
        if isinstance(value, str) and Literal in problems:
            return None, problems[Literal]  # a misspelt word gets its suggestion
        return None, f"must be {type_name(tp)}, got {type(value).__name__} {show(value)}"
    if origin is Literal:
        return value, choice_problem(value, typing.get_args(tp))
    if origin is tuple:
        if not isinstance(value, list):
            return None, f"must be a {type_name(tp)}, got {type(value).__name__}"
        items = []
        for item in value:
            conv, problem = check_value(item, typing.get_args(tp)[0], meta)
            if problem:
                return None, f"item {show(item)}: {problem}"
            items.append(conv)
        return tuple(items), None
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif tp is str:
        ok = isinstance(value, str)
    else:  # pragma: no cover - a declaration error, not user input
        raise TypeError(f"unsupported knob type {tp}")
    if not ok:
        return None, f"must be {type_name(tp)}, got {type(value).__name__} {show(value)}"
    if tp is str and meta.get("choices"):
        return value, choice_problem(value, meta["choices"])
    return value, _bound_problem(value, meta) if tp in (int, float) else None


def _bound_problem(value: float, meta: dict[str, Any]) -> str | None:
    if not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if isinstance(value, int) and abs(value) > INT64_MAX:
        return f"must fit in 64 bits, got {show(value)}"
    if meta.get("min") is not None and value < meta["min"]:
        return f"must be >= {meta['min']:g}, got {value!r}"
    if meta.get("gt") is not None and value <= meta["gt"]:
        return f"must be > {meta['gt']:g}, got {value!r}"
    if meta.get("max") is not None and value > meta["max"]:
        return f"must be <= {meta['max']:g}, got {value!r}"
    if meta.get("lt") is not None and value >= meta["lt"]:
        return f"must be < {meta['lt']:g}, got {value!r}"
    return None
