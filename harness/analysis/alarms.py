"""A regression alarms once: tonight's regressions against the alarms still open from earlier nights and the
acknowledged changes (harness.analysis.baselines keeps both on disk). Pure: verdicts and records in, each
regression's status and the next night's open alarms out.

The same change is the same cell and metric with its interval still overlapping the interval of the night
it was first seen; it is worse when its whole interval lies below that one and its change is beyond the
cell's floor further down. A new or worse change fails the night; an open one is reported with the night it
opened and how many nights it has been seen; an acknowledged one (within the acknowledged interval, or
better) never fails; an unchanged or improved cell closes its alarm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness.catalogue.judged import BY_NAME
from harness.analysis.verdict import (
    ACCURACY_BELOW, IMPROVEMENT, REGRESSION, THROUGHPUT, UNCHANGED, CellVerdict)
from harness.matrix.sections import AXES
from harness.catalogue import col

NEW, WORSE, OPEN, ACKNOWLEDGED = "new", "worse", "open", "acknowledged"
"""A regression's status tonight: new and worse fail the night, open and acknowledged do not."""
FAILING = (NEW, WORSE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One cell's change of one metric, with its interval: a regression as tonight's verdict has it."""

    cell_id: str
    metric: str
    """throughput, fast steps or top1."""
    effect: float
    """% for the rates, points (x 100) for top-1."""
    low: float
    high: float
    floor: float
    """The floor of the cell, in the change's unit."""
    axes: tuple[tuple[str, Any], ...] = ()
    fire_drill_pct: float = 0.0
    """The night's fire drill: a drilled change and a real one are never the same change."""

    @property
    def unit(self) -> str:
        return "pt" if self.metric == "top1" else "%"

    def text(self) -> str:
        unit = "%" if self.unit == "%" else " pt"
        return f"{self.metric} {self.effect:+.1f}{unit} [{self.low:+.1f}, {self.high:+.1f}]"


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenAlarm:
    """A regression that alarmed on `since` and has not been shown fixed since: one entry of the alarms state."""

    change: Change
    """The change as it was the night it alarmed (or last worsened): later nights are compared with it."""
    since: str
    """The run id of that night."""
    nights: int = 1
    """Nights it has been seen as a regression, that one included."""
    last: str = ""
    """The newest night that saw it (a night judged twice counts once)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    """An accepted change (`nvbench ack`): of a cell and metric, within an interval, until `expires`."""

    change: Change
    reason: str
    who: str
    when: str
    """ISO date-time it was recorded."""
    expires: str | None = None
    """ISO date (inclusive) after which it no longer holds; None: until removed."""

    def holds_on(self, day: str) -> bool:
        return self.expires is None or day[:10] <= self.expires


@dataclass(frozen=True, slots=True, kw_only=True)
class Alarm:
    """What tonight says of one regression."""

    change: Change
    status: str
    since: str
    nights: int
    reference: Change
    """The interval it was compared with (the open alarm's, or the acknowledgement's)."""
    ack: Ack | None = None
    beyond_ack: bool = False
    """An acknowledged cell whose change is now worse than the acknowledgement: judged as any other alarm."""

    @property
    def fails(self) -> bool:
        return self.status in FAILING

    def text(self) -> str:
        words = {NEW: "new regression", WORSE: f"worse than when it opened ({self.reference.text()})",
                 OPEN: f"open since {self.since}, {self.nights} nights",
                 ACKNOWLEDGED: f"acknowledged ({self.ack.reason if self.ack else ''}), open since {self.since}, "
                               f"{self.nights} nights"}[self.status]
        if self.beyond_ack and self.ack is not None:
            words += f"; beyond its acknowledgement ({self.ack.change.text()})"
        return f"{self.change.cell_id} {self.change.text()}: {words}"


def change_of(v: CellVerdict) -> Change | None:
    """The regression a verdict holds (the metric it rests on, or top-1 below its band), or None."""
    axes = tuple((a, getattr(v, a)) for a in AXES if getattr(v, a) is not None)
    if v.verdict == REGRESSION:
        name = v.decided_by if v.decided_by in BY_NAME else THROUGHPUT
        m = v.metric(name) or v.throughput
        if m.effect_pct is None or m.ci_low_pct is None or m.ci_high_pct is None:
            return None
        return Change(cell_id=v.cell_id, metric=name, effect=m.effect_pct, low=m.ci_low_pct, high=m.ci_high_pct,
                      floor=v.floor_pct, axes=axes, fire_drill_pct=v.fire_drill_pct)
    if v.accuracy_verdict == ACCURACY_BELOW and None not in (v.top1_change, v.top1_ci_low, v.top1_ci_high):
        return Change(cell_id=v.cell_id, metric="top1", effect=100 * v.top1_change, low=100 * v.top1_ci_low,
                      high=100 * v.top1_ci_high, floor=100 * v.accuracy_tolerance, axes=axes,
                      fire_drill_pct=v.fire_drill_pct)
    return None


def is_worse(tonight: Change, reference: Change) -> bool:
    """Tonight's whole interval below the reference's, and its change beyond the floor further down."""
    return tonight.high < reference.low and reference.effect - tonight.effect > tonight.floor


def _key(c: Change) -> tuple[str, str]:
    return c.cell_id, c.metric


def judge_night(verdicts: Sequence[CellVerdict], open_alarms: Sequence[OpenAlarm], acks: Sequence[Ack], *,
                night: str, day: str) -> tuple[list[Alarm], list[OpenAlarm], list[OpenAlarm]]:
    """Tonight's alarms (one per regression), the alarms open after tonight, and those tonight closed (their
    cell unchanged or improved). `night`: tonight's run id; `day`: its ISO date (acknowledgements expire)."""
    before = {_key(a.change): a for a in open_alarms}
    held: dict[tuple[str, str], list[Ack]] = {}
    for ack in acks:  # newest first (baselines.add_acks): the first that applies is used
        if ack.holds_on(day):
            held.setdefault(_key(ack.change), []).append(ack)
    alarms, after, seen = [], {}, set()
    for v in verdicts:
        change = change_of(v)
        if change is None:
            continue
        seen.add(_key(change))
        alarm, state = _one(change, before.get(_key(change)), held.get(_key(change), []), night)
        alarms.append(alarm)
        after[_key(change)] = state
    fixed = {v.cell_id for v in verdicts if v.verdict in (UNCHANGED, IMPROVEMENT) and change_of(v) is None}
    closed = [a for k, a in before.items() if k not in seen and a.change.cell_id in fixed]
    after |= {k: a for k, a in before.items() if k not in seen and a.change.cell_id not in fixed}
    return alarms, list(after.values()), closed


def _one(change: Change, previous: OpenAlarm | None, acks: Sequence[Ack], night: str) -> tuple[Alarm, OpenAlarm]:
    """One regression against its open alarm and its acknowledgement: its alarm, and its open alarm after. A
    drilled change is never the same as a real one (a drill's alarm must not hide a real regression)."""
    drilled = bool(change.fire_drill_pct)
    if previous is not None and bool(previous.change.fire_drill_pct) != drilled:
        previous = None
    ack = next((a for a in acks if bool(a.change.fire_drill_pct) == drilled), None)
    if previous is None or previous.since == night:  # a night judged again is still its own first night
        status, state = NEW, OpenAlarm(change=change, since=night, nights=1, last=night)
    elif is_worse(change, previous.change):
        status, state = WORSE, OpenAlarm(change=change, since=night, nights=1, last=night)
    else:
        nights = previous.nights + (previous.last != night)
        status, state = OPEN, replace(previous, nights=nights, last=night)
    reference = previous.change if status != NEW and previous is not None else change
    beyond = ack is not None and is_worse(change, ack.change)
    if ack is not None and not beyond:
        status, reference = ACKNOWLEDGED, ack.change
    return Alarm(change=change, status=status, since=state.since, nights=state.nights, reference=reference,
                 ack=ack, beyond_ack=beyond), state


def matches(change: Change, cell_filter: str) -> bool:
    """A cell filter (`nvbench ack`): the cell's id, or `axis=value[,axis=value...]` all of which it has."""
    if cell_filter == change.cell_id:
        return True
    pairs = [p.partition("=") for p in cell_filter.split(",")]
    if not all(sep and axis.strip() in AXES for axis, sep, _ in pairs):
        return False
    values = {a: str(v) for a, v in change.axes}
    return all(values.get(axis.strip()) == value.strip() for axis, _, value in pairs)


def filter_problem(cell_filter: str) -> str | None:
    """Why a cell filter can match nothing (a misspelt axis), or None."""
    if "=" not in cell_filter:
        return None  # a cell id
    for axis, sep, value in (p.partition("=") for p in cell_filter.split(",")):
        if not sep or axis.strip() not in AXES or not value.strip():
            return (f"{cell_filter!r}: expected a cell id or axis=value[,axis=value...] with axes from "
                    f"{', '.join(AXES)}")
    return None


def as_record(obj: Any) -> dict[str, Any]:
    """An OpenAlarm or an Ack as the JSON the state and acknowledgement files hold."""
    out = {k: getattr(obj, k) for k in obj.__slots__ if k != "change"}
    c = obj.change
    out["change"] = {col.cell_id: c.cell_id, "metric": c.metric, "effect": c.effect, "low": c.low, "high": c.high,
                     "floor": c.floor, "axes": dict(c.axes), col.fire_drill_pct: c.fire_drill_pct}
    return out


def from_record(cls: type, record: Mapping[str, Any]) -> Any:
    """as_record's inverse (KeyError or TypeError on a record that is not one)."""
    c = dict(record["change"])
    change = Change(**{**c, "axes": tuple(dict(c.get("axes") or {}).items())})
    return cls(change=change, **{k: v for k, v in record.items() if k != "change"})
