"""The work diff of one cell (pure): each side's counted processes summarised per (phase, counter, key), exact only
where every process agrees, B's per-step count minus A's for the items exact on both sides, said in words; and the
matrix's work gates checked against it. No statistics: a count that every process agrees on needs none."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from harness.catalogue import col
from harness.catalogue.work_gates import (AFTER_WARMUP, BYTES_FOR, COUNTER_BY_NAME, COUNTERS, NO_RISE, NONE_PHASES,
                                          NOT_COUNTED, SAME_WHERE_EXACT, SHOWN_ITEMS, COUNTED_STEP_PHASES,
                                          WORK_CHANGED, WORK_PHASES, WORK_SAME)

Item = tuple[str, str, str]
"""(phase, counter, key): one thing counted."""
_ORDER = {name: i for i, name in enumerate(WORK_PHASES)}
_COUNTER_ORDER = {c.name: i for i, c in enumerate(COUNTERS)}


@dataclass(frozen=True, slots=True, kw_only=True)
class SideWork:
    """One side's counted work of one cell: how many processes were counted and, per item, the range of its
    per-step value over them (a process without the item counted zero of it)."""

    processes: int
    ranges: Mapping[Item, tuple[float, float]] = field(default_factory=dict)

    def is_exact(self, item: Item) -> bool:
        lo, hi = self.ranges.get(item, (0.0, 0.0))
        return lo == hi

    def value(self, item: Item) -> float:
        """The item's value where exact (0 where no process counted it)."""
        return self.ranges.get(item, (0.0, 0.0))[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Placed:
    """Where an item of work.parquet sits: its phase, counter and key (the three parts of an Item)."""

    phase: str
    counter: str
    key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemChange(_Placed):
    """An item exact on both sides whose value differs: A's and B's per step (process and window: counts)."""

    a: float
    b: float

    @property
    def change(self) -> float:
        return self.b - self.a


@dataclass(frozen=True, slots=True, kw_only=True)
class Varying(_Placed):
    """An item whose counted processes disagree on a side: its range there; never diffed."""

    a: tuple[float, float]
    b: tuple[float, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkDiff:
    """B's counted work against A's for one cell."""

    cell_id: str
    a: SideWork
    b: SideWork
    changed: tuple[ItemChange, ...]
    """Exact on both sides and different, in phase order."""
    varying: tuple[Varying, ...]

    @property
    def counted(self) -> bool:
        """Both sides counted at least one process: only then can the work be same or changed."""
        return self.a.processes > 0 and self.b.processes > 0

    @property
    def is_changed(self) -> bool | None:
        return bool(self.changed) if self.counted else None

    def words(self) -> str:
        """`work: same`, `work changed: ...`, `work: same where exact; varying: ...` or `work: no work counted`."""
        if not self.counted:
            missing = [s for s, w in (("A", self.a), ("B", self.b)) if w.processes == 0]
            return f"{NOT_COUNTED} (no counted process on {' or '.join(missing)})"
        vary = f"; varying: {varying_text(self.varying)}" if self.varying else ""
        if self.changed:
            return WORK_CHANGED + changes_text(self.changed) + vary
        return SAME_WHERE_EXACT + vary if self.varying else WORK_SAME


def side_work(rows: Iterable[Mapping[str, Any]], cell_id: str) -> SideWork:
    """A side's work.parquet rows of `cell_id` summarised: every (process, rank) counted, each item's range."""
    units: set[tuple[int, int]] = set()
    values: dict[Item, dict[tuple[int, int], float]] = defaultdict(dict)
    for r in rows:
        if r[col.cell_id] != cell_id:
            continue
        unit = (r[col.process], r[col.rank])
        units.add(unit)
        values[(r[col.phase], r[col.counter], r[col.key] or "")][unit] = float(r[col.per_step])
    ranges = {}
    for item, got in values.items():
        seen = [got.get(u, 0.0) for u in units]
        ranges[item] = (min(seen), max(seen))
    return SideWork(processes=len({p for p, _ in units}), ranges=ranges)


def _sort_key(item: Item, change: float = 0.0) -> tuple:
    phase, counter, key = item
    return _ORDER.get(phase, len(_ORDER)), _COUNTER_ORDER.get(counter, len(_COUNTER_ORDER)), -abs(change), key


def diff_sides(cell_id: str, a: SideWork, b: SideWork) -> WorkDiff:
    """The diff of two sides' summaries: changed items among those exact on both, varying ones apart."""
    changed, varying = [], []
    for item in a.ranges.keys() | b.ranges.keys():
        if not (a.is_exact(item) and b.is_exact(item)):
            varying.append(Varying(phase=item[0], counter=item[1], key=item[2], a=a.ranges.get(item, (0.0, 0.0)),
                                   b=b.ranges.get(item, (0.0, 0.0))))
        elif a.value(item) != b.value(item):
            changed.append(ItemChange(phase=item[0], counter=item[1], key=item[2], a=a.value(item), b=b.value(item)))
    changed.sort(key=lambda c: _sort_key((c.phase, c.counter, c.key), c.change))
    varying.sort(key=lambda v: _sort_key((v.phase, v.counter, v.key)))
    return WorkDiff(cell_id=cell_id, a=a, b=b, changed=tuple(changed), varying=tuple(varying))


def diff_cell(a_rows: Iterable[Mapping[str, Any]], b_rows: Iterable[Mapping[str, Any]], cell_id: str) -> WorkDiff:
    """B's work against A's for one cell, from each side's work.parquet rows (any cells; `cell_id`'s are read)."""
    return diff_sides(cell_id, side_work(a_rows, cell_id), side_work(b_rows, cell_id))


# ---------------------------------------------------------------------------------------------
# words


def _count(n: float, signed: bool = True) -> str:
    text = f"{n:+.0f}" if float(n).is_integer() else f"{n:+.3g}"
    return text if signed else text.lstrip("+")


def _bytes(n: float) -> str:
    """`+4.0 KiB`, `-512 B`."""
    size, unit = abs(n), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    sign = "-" if n < 0 else "+"
    return f"{sign}{size:.0f} {unit}" if unit == "B" else f"{sign}{size:.1f} {unit}"


def _noun(phase: str, counter: str, key: str, n: float) -> tuple[str, bool]:
    """The item's noun for `n` of it and whether the key is in it (then not repeated in brackets)."""
    c = COUNTER_BY_NAME.get(counter)
    if c is None or not c.one:
        return key or counter, True
    noun = c.one if abs(n) == 1 else c.many
    extra = f" {AFTER_WARMUP[(phase, counter)]}" if (phase, counter) in AFTER_WARMUP else ""
    return (f"{key} {noun}{extra}", True) if c.key_is_noun and key else (f"{noun}{extra}", False)


def item_text(phase: str, counter: str, key: str, n: float, *, size: float | None = None,
              signed: bool = True) -> str:
    """One item's words without its phase: `+1 host sync per step (aten::_local_scalar_dense)`, `+16 aten::mm per
    step`, `+1 allocation per step (+4.0 KiB, aten::empty)`; a bytes counter alone: `+4.0 KiB in allocations`."""
    c = COUNTER_BY_NAME.get(counter)
    per = " per step" if phase in COUNTED_STEP_PHASES else ""
    if c is not None and c.bytes_of:
        return f"{_bytes(n)} in {COUNTER_BY_NAME[c.bytes_of].many}{per}" + (f" ({key})" if key else "")
    noun, keyed = _noun(phase, counter, key, n)
    detail = ([_bytes(size)] if size else []) + ([key] if key and not keyed else [])
    return f"{_count(n, signed)} {noun}{per}" + (f" ({', '.join(detail)})" if detail else "")


def _grouped(phrases: Sequence[tuple[str, str]]) -> str:
    """(phase, words) in order -> `forward a, b; optimizer c`, at most SHOWN_ITEMS phrases, then `and N more`."""
    shown, rest = phrases[:SHOWN_ITEMS], len(phrases) - SHOWN_ITEMS
    groups: dict[str, list[str]] = {}
    for phase, words in shown:
        groups.setdefault(phase, []).append(words)
    text = "; ".join(f"{phase} {', '.join(words)}" for phase, words in groups.items())
    return text + (f"; and {rest} more" if rest > 0 else "")


def change_phrases(changes: Sequence[ItemChange]) -> list[tuple[str, str]]:
    """(phase, words) per changed item, its bytes said beside its count (a bytes item alone where only it moved)."""
    by_item = {(c.phase, c.counter, c.key): c for c in changes}
    out = []
    for c in changes:
        bytes_of = COUNTER_BY_NAME[c.counter].bytes_of if c.counter in COUNTER_BY_NAME else None
        if bytes_of and (c.phase, bytes_of, c.key) in by_item:
            continue  # said beside its count
        size = by_item.get((c.phase, BYTES_FOR.get(c.counter, ""), c.key))
        out.append((c.phase, item_text(c.phase, c.counter, c.key, c.change, size=size.change if size else None)))
    return out


def changes_text(changes: Sequence[ItemChange]) -> str:
    """`forward +16 aten::mm per step; optimizer +1 host sync per step (aten::_local_scalar_dense)`."""
    return _grouped(change_phrases(changes))


def _range(r: tuple[float, float]) -> str:
    return f"{_count(r[0], False)}..{_count(r[1], False)}"


def varying_text(varying: Sequence[Varying]) -> str:
    """`forward aten::add on B 2..3 per step`: what varied, where, and its range."""
    phrases = []
    for v in varying:
        noun = v.key if COUNTER_BY_NAME.get(v.counter) and not COUNTER_BY_NAME[v.counter].one else \
            COUNTER_BY_NAME[v.counter].many if v.counter in COUNTER_BY_NAME else v.counter
        noun += f" ({v.key})" if v.key and noun != v.key else ""
        sides = " and ".join(f"{s} {_range(r)}" for s, r in (("A", v.a), ("B", v.b)) if r[0] != r[1])
        phrases.append((v.phase, f"{noun} on {sides}" + (" per step" if v.phase in COUNTED_STEP_PHASES else "")))
    return _grouped(phrases)


# ---------------------------------------------------------------------------------------------
# gates


@dataclass(frozen=True, slots=True, kw_only=True)
class GateCheck:
    """What the work diff says of one gate: broken (words name the counter and the place), or it cannot tell."""

    label: str
    broken: bool
    words: str
    counter: str = ""
    """The gate's counter (work.parquet's `counter`): what a gate alarm records and ends on."""


def _no_rise(diff: WorkDiff, counter: str) -> tuple[list[str], list[str]]:
    """(phases whose total rose, in words; phases that varied, in words) for one counter."""
    risen, unsure = [], []
    items = sorted({i for i in diff.a.ranges.keys() | diff.b.ranges.keys() if i[1] == counter}, key=_sort_key)
    for phase in WORK_PHASES:
        here = [i for i in items if i[0] == phase]
        if any(not (diff.a.is_exact(i) and diff.b.is_exact(i)) for i in here):
            unsure.append(varying_text([v for v in diff.varying if (v.phase, v.counter) == (phase, counter)]))
        elif sum(diff.b.value(i) - diff.a.value(i) for i in here) > 0:
            up = [c for c in diff.changed if (c.phase, c.counter) == (phase, counter) and c.change > 0]
            risen.append(_grouped(change_phrases(up)))
    return risen, unsure


def _none(diff: WorkDiff, counter: str) -> tuple[list[str], list[str]]:
    """(B's counted items of the counter, in words; B's items that varied, in words)."""
    phases = NONE_PHASES.get(counter, WORK_PHASES)
    items = sorted((i for i in diff.b.ranges if i[1] == counter and i[0] in phases), key=_sort_key)
    found = [(i[0], item_text(*i, diff.b.value(i), signed=False) + " on B") for i in items
             if diff.b.is_exact(i) and diff.b.value(i) > 0]
    unsure = [v for v in diff.varying if (v.counter == counter and v.phase in phases and v.b[1] > 0)]
    return ([_grouped(found)] if found else []), ([varying_text(unsure)] if unsure else [])


def check_gates(diff: WorkDiff, gates: Sequence[Any]) -> list[GateCheck]:
    """Each gate (matrix.judge.WorkGate) broken or not; one that a varying item or a side without counted work
    leaves open says it cannot tell. A gate that holds says nothing."""
    out = []
    for gate in gates:
        if diff.b.processes == 0 or (gate.rule == NO_RISE and not diff.counted):
            out.append(GateCheck(label=gate.label, broken=False, words=f"{gate.label}: cannot tell (no work counted)",
                                 counter=gate.counter))
            continue
        broken, unsure = (_no_rise if gate.rule == NO_RISE else _none)(diff, gate.counter)
        if broken:
            out.append(GateCheck(label=gate.label, broken=True, words=f"{gate.label} broken: {'; '.join(broken)}",
                                 counter=gate.counter))
        elif unsure:
            out.append(GateCheck(label=gate.label, broken=False,
                                 words=f"{gate.label}: cannot tell (varying: {'; '.join(unsure)})", counter=gate.counter))
    return out

