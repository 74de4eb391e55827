"""The matrix's `[judge]` section: the practical floor a verdict uses, for every cell and per axis value
(`[[judge.override]]`, e.g. a noisier backend's), and the work gates (`[judge.work_gates]`: counter = rule),
validated as every other key is. Pure: no torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from harness.matrix.knobs import FROZEN, show, suggest
from harness.catalogue import col
from harness.catalogue.work_gates import COUNTER_BY_NAME, GATE_RULES

FLOOR_KEY = col.floor_pct
GATES_KEY = "work_gates"
JUDGE_KEYS = (FLOOR_KEY, "override", GATES_KEY)


@dataclass(**FROZEN)
class FloorOverride:
    """Cells whose axis values all match (a value list: any of them) are judged with this floor."""

    match: tuple[tuple[str, tuple[Any, ...]], ...]
    floor_pct: float
    index: int = 0
    """Its position among the file's [[judge.override]] tables: the report names it."""

    def matches(self, values: Mapping[str, Any]) -> bool:
        return all(values.get(axis) in allowed for axis, allowed in self.match)

    @property
    def label(self) -> str:
        """`judge.override[0] backend=dali-cpu`: which rule set a cell's floor."""
        what = " ".join(f"{axis}={'|'.join(map(str, allowed))}" for axis, allowed in self.match)
        return f"judge.override[{self.index}] {what}"


@dataclass(**FROZEN)
class WorkGate:
    """A rule on one counter of the work diff (harness.catalogue.work_gates.GATE_RULES): broken, it fails the
    cell whatever its timing says."""

    counter: str
    rule: str
    """no-rise or none."""

    @property
    def label(self) -> str:
        """`work gate host_syncs = "no-rise"`: as the matrix spells it."""
        return f'work gate {self.counter} = "{self.rule}"'


@dataclass(**FROZEN)
class JudgeConfig:
    """How the matrix's cells are judged."""

    floor_pct: float | None = None
    """Practical floor in % of every cell (None: the report's own, --floor or its default)."""
    overrides: tuple[FloorOverride, ...] = ()
    """Floors per axis value; the first override that matches a cell sets its floor."""
    work_gates: tuple[WorkGate, ...] = ()
    """Rules on the work diff's counters ([judge.work_gates]), in the file's order."""


def floor_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number in [0, 100), got {type(value).__name__} {show(value)}"
    if not (math.isfinite(value) and 0 <= value < 100):
        return f"must be in [0, 100), got {show(value)}"
    return None


def parse_judge(raw: Any, axes: Any, parse_axis_value: Callable[[str, Any], tuple[Any, str | None]],
                problems: list[str]) -> JudgeConfig:
    """`[judge]` as a JudgeConfig; its problems (one line each, `judge.key: ...`) appended to `problems`.
    `axes`: the matrix's Axes (an override's value must be on its axis)."""
    if not isinstance(raw, dict):
        problems.append(f"judge: must be a table, got {type(raw).__name__}")
        return JudgeConfig()
    floor = None
    for key in raw:
        if key not in JUDGE_KEYS:
            problems.append(f"judge.{key}: unknown key{suggest(key, JUDGE_KEYS)}")
    if FLOOR_KEY in raw:
        if problem := floor_problem(raw[FLOOR_KEY]):
            problems.append(f"judge.{FLOOR_KEY}: {problem}")
        else:
            floor = float(raw[FLOOR_KEY])
    overrides = raw.get("override", [])
    if not isinstance(overrides, list):
        problems.append(f"judge.override: must be an array of tables ([[judge.override]]), got "
                        f"{type(overrides).__name__}")
        overrides = []
    parsed = [_override(entry, i, axes, parse_axis_value, problems) for i, entry in enumerate(overrides)]
    return JudgeConfig(floor_pct=floor, overrides=tuple(o for o in parsed if o is not None),
                       work_gates=_work_gates(raw.get(GATES_KEY, {}), problems))


def _work_gates(raw: Any, problems: list[str]) -> tuple[WorkGate, ...]:
    """`[judge.work_gates]`: counter = rule, each counter one of work.parquet's, each rule one of GATE_RULES."""
    here = f"judge.{GATES_KEY}"
    if not isinstance(raw, dict):
        problems.append(f"{here}: must be a table of counter = rule ({', '.join(map(repr, GATE_RULES))}), got "
                        f"{type(raw).__name__}")
        return ()
    gates = []
    for counter, rule in raw.items():
        if counter not in COUNTER_BY_NAME:
            hint = suggest(counter, COUNTER_BY_NAME) or f" (one of {', '.join(COUNTER_BY_NAME)})"
            problems.append(f"{here}.{counter}: unknown counter{hint}")
        elif not isinstance(rule, str) or rule not in GATE_RULES:
            hint = suggest(rule, GATE_RULES) if isinstance(rule, str) else ""
            problems.append(f"{here}.{counter}: must be {' or '.join(map(repr, GATE_RULES))}, got {show(rule)}{hint}")
        else:
            gates.append(WorkGate(counter=counter, rule=rule))
    return tuple(gates)


def _override(entry: Any, index: int, axes: Any, parse_axis_value, problems: list[str]) -> FloorOverride | None:
    here = f"judge.override[{index}]"
    if not isinstance(entry, dict):
        problems.append(f"{here}: must be a table of axis = value pairs and {FLOOR_KEY}")
        return None
    known = (FLOOR_KEY, *(f.name for f in axes.__dataclass_fields__.values()))
    before = len(problems)
    match = []
    for key, values in entry.items():
        if key == FLOOR_KEY:
            continue
        if key not in known:
            problems.append(f"{here}.{key}: unknown key (an axis or {FLOOR_KEY}){suggest(key, known)}")
            continue
        allowed = []
        for value in values if isinstance(values, list) else [values]:
            conv, problem = parse_axis_value(key, value)
            if problem:
                problems.append(f"{here}.{key}: {problem}")
            elif conv not in getattr(axes, key):
                problems.append(f"{here}.{key}: value {conv!r} is not on the axis "
                                f"({', '.join(map(str, getattr(axes, key)))})")
            else:
                allowed.append(conv)
        match.append((key, tuple(allowed)))
    if FLOOR_KEY not in entry:
        problems.append(f"{here}: missing {FLOOR_KEY} (the floor of the cells it matches)")
    elif problem := floor_problem(entry[FLOOR_KEY]):
        problems.append(f"{here}.{FLOOR_KEY}: {problem}")
    if not any(key != FLOOR_KEY for key in entry):
        problems.append(f"{here}: names no axis; the section's own {FLOOR_KEY} sets every cell's floor")
    if len(problems) > before:
        return None
    return FloorOverride(match=tuple(match), floor_pct=float(entry[FLOOR_KEY]), index=index)
