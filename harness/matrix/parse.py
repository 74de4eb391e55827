"""Matrix TOML -> frozen, validated Matrix, every problem of a file in one MatrixError. The only module that
sees the file's raw tables."""

from __future__ import annotations

import dataclasses
import re
import tomllib
import typing
from pathlib import Path
from typing import Any

from harness.matrix.judge import JudgeConfig, parse_judge
from harness.matrix.knobs import INT64_MAX, check_value, choice_problem, show, suggest
from harness.matrix.sections import (
    AXES,
    AXIS_CHOICES,
    MAX_REPEATS,
    SCHEMA_VERSION,
    SECTIONS,
    TOP_LEVEL,
    Axes,
    Exclude,
    Matrix,
    ModelSettings,
)
from harness.matrix.model_axis import merge_per_model, model_problem, model_settings, user_model_problems
from harness.matrix.rules import cross_problems


class MatrixError(Exception):
    """Every problem found in one matrix file, one line each."""

    def __init__(self, problems: list[str]):
        self.problems = [_one_line(p) for p in problems]
        super().__init__("\n".join(self.problems))


_MAX_LINE = 300


def _one_line(text: str) -> str:
    """`text` as one short printable line: a key or value from the file may hold newlines or be huge."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= _MAX_LINE else text[:_MAX_LINE - 3] + "..."


def _parse_section(raw: Any, cls: type, where: str, problems: list[str]) -> Any:
    if not isinstance(raw, dict):
        problems.append(f"{where}: must be a table, got {type(raw).__name__}")
        return cls()
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            problems.append(f"{where}.{key}: unknown key{suggest(key, fields)}")
            continue
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = _parse_section(value, tp, f"{where}.{key}", problems)
            continue
        conv, problem = check_value(value, tp, dict(fields[key].metadata))
        if problem:
            problems.append(f"{where}.{key}: {problem}")
        else:
            kwargs[key] = conv
    return cls(**kwargs)


def split_axis_filter(text: str) -> tuple[str, str] | None:
    """`axis=value` (a --only filter, a smoke.only entry, a part of `nvbench ack`'s cell filter) -> (axis, value as
    text), both stripped; None where it is not of that form (no `=`, or an empty side). The one parser of the form:
    which axes and values it may name is each caller's to say (axis_filter_value)."""
    axis, sep, value = (part.strip() for part in text.partition("="))
    return (axis, value) if sep and axis and value else None


def axis_filter_value(axis: str, text: str) -> tuple[Any, str | None]:
    """A filter's value as the axis holds it (an integer axis's from plain ASCII digits), or the problem with it."""
    value = int(text) if AXIS_CHOICES[axis] is None and text.isascii() and text.isdigit() else text
    return parse_axis_value(axis, value)


def parse_axis_value(axis: str, value: Any) -> tuple[Any, str | None]:
    if axis == "model":  # a registry name or the user's import path: more than a list of choices
        problem = model_problem(value)
        return (None, problem) if problem else (value, None)
    choices = AXIS_CHOICES[axis]
    if choices is None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return None, f"must be a positive integer, got {show(value)}"
        return (None, f"must fit in 64 bits, got {show(value)}") if value > INT64_MAX else (value, None)
    problem = choice_problem(value, choices)
    return (None, problem) if problem else (value, None)


def _parse_axes(raw: Any, where: str, problems: list[str]) -> Axes:
    if not isinstance(raw, dict):
        problems.append(f"{where}: must be a table, got {type(raw).__name__}")
        return Axes()
    kwargs = {}
    for axis, values in raw.items():
        if axis not in AXIS_CHOICES:
            problems.append(f"{where}.{axis}: unknown axis{suggest(axis, AXES)}")
            continue
        if not isinstance(values, list):
            values = [values]
        if not values:
            problems.append(f"{where}.{axis}: empty list; give at least one value")
            continue
        parsed = []
        for value in values:
            conv, problem = parse_axis_value(axis, value)
            if problem:
                problems.append(f"{where}.{axis}: {problem}")
            elif conv in parsed:
                problems.append(f"{where}.{axis}: duplicate value {conv!r}")
            else:
                parsed.append(conv)
        if parsed:  # else its problems are listed, and the default stands in for the rules that follow
            kwargs[axis] = tuple(parsed)
    return Axes(**kwargs)


def _parse_excludes(raw: Any, axes: Axes, where: str, problems: list[str]) -> tuple[Exclude, ...]:
    if not isinstance(raw, list):
        problems.append(f"{where}: must be an array of tables ([[exclude]]), got {type(raw).__name__}")
        return ()
    excludes = []
    for i, entry in enumerate(raw):
        here = f"{where}[{i}]"
        if not isinstance(entry, dict) or not entry:
            problems.append(f"{here}: must be a non-empty table of axis = value pairs")
            continue
        match = []
        for axis, values in entry.items():
            if axis not in AXIS_CHOICES:
                problems.append(f"{here}.{axis}: unknown axis{suggest(axis, AXES)}")
                continue
            values = values if isinstance(values, list) else [values]
            allowed = []
            for value in values:
                conv, problem = parse_axis_value(axis, value)
                if problem:
                    problems.append(f"{here}.{axis}: {problem}")
                elif conv not in getattr(axes, axis):
                    problems.append(f"{here}.{axis}: value {conv!r} is not on the axis "
                                    f"({', '.join(map(str, getattr(axes, axis)))})")
                else:
                    allowed.append(conv)
            match.append((axis, tuple(allowed)))
        excludes.append(Exclude(match=tuple(match)))
    return tuple(excludes)


def parse_matrix(raw: dict[str, Any], source: str, source_text: str = "", *,
                 check_paths: bool = True) -> Matrix:
    """Validate a decoded TOML document; raise MatrixError listing every problem."""
    if "version" not in raw and "benchmark" not in raw:
        raise MatrixError([f"{source}: not an nvbench matrix (no `version = {SCHEMA_VERSION}` and no "
                           "[benchmark] table)"])
    problems: list[str] = []
    for key in raw:
        if key not in TOP_LEVEL:
            problems.append(f"{key}: unknown section{suggest(key, TOP_LEVEL)}")
    version = raw.get("version")
    if version is None:
        problems.append(f"version: missing; the file's first line should be `version = {SCHEMA_VERSION}`")
    elif type(version) is not int or version != SCHEMA_VERSION:
        problems.append(f"version: unsupported matrix version {show(version)}; this nvbench reads {SCHEMA_VERSION}")
    if "benchmark" not in raw:
        problems.append("benchmark: missing table; a matrix names its model and sizes in [benchmark]")
    sections = {name: _parse_section(raw.get(name, {}), cls, name, problems) for name, cls in SECTIONS.items()}
    given = {f"{name}.{key}" for name in SECTIONS if isinstance(raw.get(name), dict) for key in raw[name]}
    in_axes = isinstance(raw.get("axes"), dict) and "model" in raw["axes"]
    axes = _model_axis(in_axes, sections, _parse_axes(raw.get("axes", {}), "axes", problems), given, problems)
    excludes = _parse_excludes(raw.get("exclude", []), axes, "exclude", problems)
    problems += _smoke_only_problems(sections["smoke"].only, axes)
    judge = parse_judge(raw.get("judge", {}), axes, parse_axis_value, problems)
    models = tuple(model_settings(m, key="axes.model" if in_axes else "benchmark.model", given=given,
                                  benchmark=sections["benchmark"], recipe=sections["recipe"], source=source)
                   for m in axes.model)
    problems += merge_per_model(models, {s.model: s.recipe.problems() + user_model_problems(s) for s in models})
    problems += sections["executor"].problems()
    problems += merge_per_model(models, {s.model: _cross_problems(s, sections, axes, excludes, check_paths)
                                         for s in models})
    if problems:
        raise MatrixError([f"{source}: {p}" for p in problems])
    return Matrix(source=source, source_text=source_text, version=version, axes=axes, excludes=excludes,
                  models=models, judge=judge, **sections)


def _model_axis(in_axes: bool, sections: dict[str, Any], axes: Axes, given: set[str], problems: list[str]) -> Axes:
    """`axes` with its model axis: as the file lists it (`in_axes`), or else benchmark.model alone. A file names
    its models in one place: both is an error, not a silent choice of one."""
    bench = sections["benchmark"]
    if "benchmark.model" in given:
        problem = model_problem(bench.model)
        if problem:
            problems.append(f"benchmark.model: {problem}")
            sections["benchmark"] = bench = dataclasses.replace(bench, model=Axes().model[0])  # for the rules
    if in_axes and "benchmark.model" in given:
        problems.append("benchmark.model: the file also has axes.model; name the model in one place: "
                        "axes.model (one or several), or benchmark.model (one)")
    return axes if in_axes else dataclasses.replace(axes, model=(bench.model,))


def _smoke_only_problems(filters: tuple[str, ...], axes: Axes) -> list[str]:
    """smoke.only's filters: `axis=value`, each value on its axis (or no smoke run would keep a cell of it)."""
    problems = []
    for text in filters:
        pair = split_axis_filter(text)
        if pair is None or pair[0] not in AXIS_CHOICES:
            hint = suggest(pair[0], AXES) if pair is not None else ""
            problems.append(f"smoke.only: {text!r}: expected axis=value with one of the axes ({', '.join(AXES)})"
                            f"{hint}")
            continue
        axis = pair[0]
        conv, problem = axis_filter_value(*pair)
        if problem:
            problems.append(f"smoke.only: {text!r}: {problem}")
        elif conv not in getattr(axes, axis):
            problems.append(f"smoke.only: {text!r}: {conv!r} is not on the axis "
                            f"({', '.join(map(str, getattr(axes, axis)))})")
    return problems


def _cross_problems(settings: ModelSettings, sections: dict[str, Any], axes: Axes, excludes: tuple[Exclude, ...],
                    check_paths: bool) -> list[str]:
    """The rules across sections for the cells of one model, with that model's settings."""
    mine = sections | {"benchmark": settings.benchmark, "recipe": settings.recipe}
    return cross_problems(mine, dataclasses.replace(axes, model=(settings.model,)), excludes,
                          check_paths=check_paths)


def _toml_position(message: str) -> tuple[str, str]:
    """tomllib's message split into (what, where): 'Invalid value', 'line 2, column 5'."""
    match = re.search(r" \(at (line \d+, column \d+|end of document)\)$", message)
    if not match:
        return message, ""
    where = match.group(1).replace("end of document", "the end of the file")
    return message[:match.start()], where


def _decode(path: Path, data: bytes) -> str:
    try:
        # utf-8-sig: a byte-order mark (some Windows editors write one) is not part of the TOML.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = len(data[data.rfind(b"\n", 0, exc.start) + 1:exc.start].decode("utf-8", "replace")) + 1
        raise MatrixError([f"{path}: not UTF-8 text at line {line}, column {column} (byte 0x{data[exc.start]:02x}); "
                           "a matrix file is UTF-8 TOML"]) from None


def load_matrix(path: str | Path, *, check_paths: bool = True) -> Matrix:
    """Read and validate a matrix file; every failure is a MatrixError naming the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MatrixError([f"{path}: matrix file not found"]) from None
    except OSError as exc:
        raise MatrixError([f"{path}: cannot read matrix file: {exc.strerror}"]) from None
    text = _decode(path, data)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        what, where = _toml_position(str(exc))
        raise MatrixError([f"{path}: malformed TOML" + (f" at {where}" if where else "") + f": {what}"]) from None
    return parse_matrix(raw, str(path), text, check_paths=check_paths)


def with_repeats(matrix: Matrix, repeats: int | None) -> Matrix:
    """`matrix` with run.repeats replaced (the `--repeats` flag); None leaves it as written."""
    if repeats is None:
        return matrix
    if not 1 <= repeats <= MAX_REPEATS:
        raise MatrixError([f"--repeats {repeats}: run.repeats must be >= 1 and <= {MAX_REPEATS}"])
    return dataclasses.replace(matrix, run=dataclasses.replace(matrix.run, repeats=repeats))


def judge_from_text(matrix_text: str, source: str) -> JudgeConfig:
    """The `[judge]` of a matrix as a run recorded it (manifest.json's matrix_text); the default when it has
    none. ValueError (one line per problem, naming `source`) when it is invalid."""
    try:
        raw = tomllib.loads(matrix_text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{source}: its matrix is not TOML ({exc})".splitlines()[0]) from None
    if "judge" not in raw:
        return JudgeConfig()
    problems: list[str] = []
    axes = _parse_axes(raw.get("axes", {}), "axes", problems)
    if not (isinstance(raw.get("axes"), dict) and "model" in raw["axes"]):
        model = (raw.get("benchmark") or {}).get("model", Axes().model[0])
        axes = dataclasses.replace(axes, model=(model,))
    judge = parse_judge(raw["judge"], axes, parse_axis_value, problems)
    if problems:
        raise ValueError("\n".join(f"{source}: {p}" for p in problems))
    return judge
