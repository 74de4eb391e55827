"""What a column is: its name, type, unit, meaning and grain (per step, or per (cell, repeat)). Types are named,
not Arrow objects, so that the torch-free and pyarrow-free parts of nvbench can read the declarations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

S, F, I, B, TS = "string", "float64", "int64", "bool", "timestamp[us, UTC]"
"""The column types: a text, a float, an integer, a flag, a UTC time."""
LI = "list<int64>"
"""A list of integers (pids): typed, so no reader splits a joined text; writers join it where they show it."""
TYPES = (S, F, I, B, TS, LI)
Grain = Literal["step", "repeat", "cell", "kernel", "work", "change"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """One column of a table nvbench writes."""

    name: str
    type: str
    """One of TYPES."""
    unit: str
    """Empty for a text, a flag or a dimensionless ratio."""
    doc: str
    """Its meaning in a sentence or two: the Parquet field's description and docs/results.md's."""
    grain: Grain
    """What one row is: a step of one rank, a (cell, repeat), a cell of a comparison, or a (phase, operator,
    kernel) of a profiled repeat, or a (phase, counter, key) of a counted process, or a change of a history."""

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"column {self.name}: type {self.type!r} is none of {TYPES}")


def per_repeat(name: str, type_: str, unit: str, doc: str) -> Column:
    return Column(name=name, type=type_, unit=unit, doc=doc, grain="repeat")


def per_step(name: str, type_: str, unit: str, doc: str) -> Column:
    return Column(name=name, type=type_, unit=unit, doc=doc, grain="step")


def per_cell(name: str, type_: str, unit: str, doc: str) -> Column:
    return Column(name=name, type=type_, unit=unit, doc=doc, grain="cell")


def per_kernel(name: str, type_: str, unit: str, doc: str) -> Column:
    return Column(name=name, type=type_, unit=unit, doc=doc, grain="kernel")


def per_work(name: str, type_: str, unit: str, doc: str) -> Column:
    return Column(name=name, type=type_, unit=unit, doc=doc, grain="work")


def per_change(name: str, type_: str, unit: str, doc: str) -> Column:
    return Column(name=name, type=type_, unit=unit, doc=doc, grain="change")
