"""A regression alarms once: tonight's regressions against the alarms still open from earlier nights and the
acknowledged changes (harness.analysis.nights.baselines keeps both on disk). Pure: verdicts and records in, each
regression's status and the next night's open alarms out.

The same change is the same cell and metric with its interval still overlapping the interval of the night
it was first seen; it is worse when its whole interval lies below that one and its change is beyond the
cell's floor further down. A new or worse change fails the night; an open one is reported with the night it
opened and how many nights it has been seen; an acknowledged one (within the acknowledged interval, or
better) never fails. A night that does not show an open regression ends it or says why not (ending). Where the
alarm recorded a change of the cell's counted work (alarm_work), the counts decide: gone when tonight's work is back
to the baseline's on every recorded item, open while it stays as recorded, whatever tonight's timing. Otherwise timing
decides: fixed when the cell is unchanged or improved against the baseline, gone when tonight's repeats are faster
than the alarm night's own beyond the floor (their difference's interval at the nightly's level wholly above zero);
any other night keeps it open with tonight's reading. Each step (opened, worse, acknowledged, gone, fixed) is an
Event of the alarms' history, a gone one with its cause (work or time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness.analysis.judge.work_diff import WorkDiff
from harness.analysis.nights import alarm_work
from harness.analysis.nights.alarm_work import BACK, PARTLY, STAYS, AlarmWork, Culprit
from harness.catalogue.judged import BY_NAME
from harness.analysis.judge.verdict import (
    ACCURACY_BELOW, IMPROVEMENT, REGRESSION, THROUGHPUT, UNCHANGED, CellVerdict)
from harness.matrix.parse import split_axis_filter
from harness.matrix.sections import AXES

NEW, WORSE, OPEN, ACKNOWLEDGED = "new", "worse", "open", "acknowledged"
"""A regression's status tonight: new and worse fail the night, open and acknowledged do not."""
FAILING = (NEW, WORSE)
GONE, FIXED = "gone", "fixed"
"""How an open alarm ends on a night that does not show its regression: fixed (the cell unchanged or improved
against the baseline) or gone (tonight's interval wholly above the regression's: recovered, not shown equal to
the baseline). A night that is neither keeps it OPEN."""
OPENED = "opened"
EVENTS = (OPENED, WORSE, ACKNOWLEDGED, GONE, FIXED)
"""The steps of an alarm's history (Event.kind), each recorded with its night."""
NO_VERDICT = "no verdict"
"""Tonight's word for the cell of an open alarm that tonight's report does not judge."""
NOT_COUNTED_TONIGHT = "its counts cannot tell tonight"
"""A gate alarm's reading where tonight's counts neither are back nor stay (timing never ends a gate alarm)."""
BY_WORK, BY_TIME = "work", "time"
"""What ended a gone alarm (Event.cause, Reading.cause): its counted work back to the baseline's, or tonight's repeats
faster than the alarm night's own."""
BUSY = "not judged (the machine was busy)"
"""Tonight's reading of a cell whose verdict says the machine was busy (CellVerdict.busy): it neither ends an open
alarm nor opens one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricChange:
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
    gate: str = ""
    """A gate alarm's gate (`work gate host_syncs = "no-rise"`; its metric is `gate:<counter>`, its effect the
    counter's rise per step, exact); empty for a timed change."""

    @property
    def unit(self) -> str:
        return "pt" if self.metric == "top1" else "%"

    def text(self) -> str:
        if self.gate:
            return f"{self.gate} broken ({self.effect:+g} per step)"
        unit = "%" if self.unit == "%" else " pt"
        return f"{self.metric} {self.effect:+.1f}{unit} [{self.low:+.1f}, {self.high:+.1f}]"


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenAlarm:
    """A regression that alarmed on `since` and has not been shown fixed since: one entry of the alarms state."""

    change: MetricChange
    """The change as it was the night it alarmed (or last worsened): later nights are compared with it."""
    since: str
    """The run id of that night."""
    nights: int = 1
    """Nights it has been seen as a regression, that one included."""
    last: str = ""
    """The newest night that saw it (a night judged twice counts once)."""
    acknowledged: str = ""
    """When the acknowledgement it was last listed under was recorded (Ack.when; empty: none): its history says
    acknowledged once per acknowledgement."""
    run: str = ""
    """The run folder of the night it opened (or last worsened): its repeats are what a later night's timing is
    compared with directly (empty: an alarm recorded before alarms.json version 3)."""
    work: AlarmWork | None = None
    """The cell's counted work against the baseline that night (None: recorded before version 3)."""
    culprits: tuple[Culprit, ...] = ()
    """The commits the nightly's bisect named for it (empty: none bisected, or none found)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    """An accepted change (`nvbench ack`): of a cell and metric, within an interval, until `expires`."""

    change: MetricChange
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

    change: MetricChange
    status: str
    """NEW, WORSE, OPEN or ACKNOWLEDGED: new and worse fail the night."""
    ack: Ack | None = None
    """The acknowledgement that covers the cell, if one does."""
    beyond_ack: bool = False
    """An acknowledged cell whose change is now worse than the acknowledgement: judged as any other alarm."""
    since: str
    nights: int
    """Nights the regression has been seen, tonight included; `since` is the first one's date."""
    reference: MetricChange
    """The interval it was compared with (the open alarm's, or the acknowledgement's)."""
    work: AlarmWork | None = None
    """The alarm's recorded work (tonight's, when it opened tonight)."""
    work_tonight: str | None = None
    """An open alarm's recorded work change tonight: BACK, STAYS, PARTLY, OTHER, or None (the counts cannot tell)."""
    work_words: str = ""
    """That, in words (alarm_work.tonight_text)."""
    since_opening: MetricChange | None = None
    """Tonight's repeats against the alarm night's own, of its metric (None: not compared)."""

    @property
    def fails(self) -> bool:
        return self.status in FAILING

    def text(self) -> str:
        words = {NEW: "new regression" if not self.change.gate else "new", WORSE: f"worse than when it opened ({self.reference.text()})",
                 OPEN: f"open since {self.since}, {self.nights} nights",
                 ACKNOWLEDGED: f"acknowledged ({self.ack.reason if self.ack else ''}), open since {self.since}, "
                               f"{self.nights} nights"}[self.status]
        if self.beyond_ack and self.ack is not None:
            words += f"; beyond its acknowledgement ({self.ack.change.text()})"
        if self.status in (NEW, WORSE) and self.work is not None:
            words += f"; {self.work.text()}"
        if self.work_tonight == BACK and self.work is not None:
            words += f"; work back to the baseline's, still slower ({self.work.back_text()})"
        elif self.work_words:
            words += f"; {self.work_words}"
        if self.status == OPEN and faster(self.since_opening):
            words += f"; better, still slower than the baseline (faster than the night it opened by " \
                     f"{_plain(self.since_opening)})"
        return f"{self.change.cell_id} {self.change.text()}: {words}"


def change_of(v: CellVerdict) -> MetricChange | None:
    """The regression a verdict holds (the metric it rests on, or top-1 below its band), or None."""
    if v.verdict == REGRESSION:
        return measured(v, v.decided_by if v.decided_by in BY_NAME else THROUGHPUT)
    if v.accuracy_verdict == ACCURACY_BELOW:
        return measured(v, "top1")
    return None


def measured(v: CellVerdict, metric: str) -> MetricChange | None:
    """A verdict's change of one metric with its interval, whatever the verdict (None: it has no interval)."""
    axes = tuple((a, getattr(v, a)) for a in AXES if getattr(v, a) is not None)
    if metric == "top1":
        if None in (v.top1_change, v.top1_ci_low, v.top1_ci_high):
            return None
        return MetricChange(cell_id=v.cell_id, metric="top1", effect=100 * v.top1_change, low=100 * v.top1_ci_low,
                      high=100 * v.top1_ci_high, floor=100 * v.accuracy_tolerance, axes=axes,
                      fire_drill_pct=v.fire_drill_pct)
    m = v.metric(metric)
    if m is None or m.effect_pct is None or m.ci_low_pct is None or m.ci_high_pct is None:
        return None
    return MetricChange(cell_id=v.cell_id, metric=metric, effect=m.effect_pct, low=m.ci_low_pct, high=m.ci_high_pct,
                  floor=v.floor_pct, axes=axes, fire_drill_pct=v.fire_drill_pct)


def faster(since_opening: MetricChange | None) -> bool:
    """Tonight's repeats faster than the alarm night's own: the interval of their difference wholly above zero and
    its change beyond the floor (the nightly's level and floor: the rule a change is called by)."""
    return since_opening is not None and since_opening.low > 0 and since_opening.effect > since_opening.floor


def _opening(alarmed: MetricChange, since_opening: CellVerdict | None) -> MetricChange | None:
    """Tonight's change of the alarm's metric against the night it opened, judged by the floor the alarm has."""
    found = measured(since_opening, alarmed.metric) if since_opening is not None else None
    return replace(found, floor=alarmed.floor) if found is not None else None


def _plain(c: MetricChange) -> str:
    unit = "%" if c.unit == "%" else " pt"
    return f"{c.effect:+.1f}{unit} [{c.low:+.1f}, {c.high:+.1f}]"


def is_worse(tonight: MetricChange, reference: MetricChange) -> bool:
    """Tonight's whole interval below the reference's, and its change beyond the floor further down (a gate alarm:
    never; it stays open while its gate is broken, whatever the count)."""
    return not tonight.gate and tonight.high < reference.low and reference.effect - tonight.effect > tonight.floor


def gate_changes(v: CellVerdict, checks: Sequence[Any], diff: WorkDiff | None) -> list[MetricChange]:
    """A MetricChange per broken gate of a cell (work_diff.GateCheck): the gate's counter's rise per step."""
    axes = tuple((a, getattr(v, a)) for a in AXES if getattr(v, a) is not None)
    out = []
    for check in checks:
        if not check.broken:
            continue
        rise = sum(c.change for c in (diff.changed if diff is not None else ()) if c.counter == check.counter)
        out.append(MetricChange(cell_id=v.cell_id, metric=f"gate:{check.counter}", effect=rise, low=rise, high=rise,
                                floor=0.0, axes=axes, fire_drill_pct=v.fire_drill_pct, gate=check.label))
    return out


def _key(c: MetricChange) -> tuple[str, str]:
    return c.cell_id, c.metric


@dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    """What tonight read for the cell of an open alarm that is not a regression tonight, and what became of it."""

    alarm: OpenAlarm
    verdict: str
    """Tonight's call of the cell (inconclusive, unchanged, failed, ...), or NO_VERDICT."""
    tonight: MetricChange | None
    """Tonight's change of the alarm's metric with its interval; None: tonight has no interval of it."""
    outcome: str
    """FIXED or GONE (the alarm ends tonight), or OPEN (it stays: why_open says why)."""
    cause: str = ""
    """GONE: BY_WORK or BY_TIME."""
    work_tonight: str | None = None
    """The alarm's recorded work change tonight: BACK, STAYS, PARTLY, OTHER, or None (the counts cannot tell)."""
    work_words: str = ""
    """That, in words (alarm_work.tonight_text)."""
    since_opening: MetricChange | None = None
    """Tonight's repeats against the alarm night's own, of its metric (None: not compared)."""

    @property
    def ends(self) -> bool:
        return self.outcome != OPEN

    def why_open(self) -> str:
        if self.work_tonight in (STAYS, PARTLY):
            return self.work_words
        if self.verdict in (NO_VERDICT, NOT_COUNTED_TONIGHT):
            return "the cell has no verdict tonight" if self.verdict == NO_VERDICT else self.verdict
        if self.verdict == BUSY:
            return "the machine was busy tonight: no evidence either way"
        if self.tonight is None:
            return f"tonight has no {self.alarm.change.metric} interval"
        if self.since_opening is not None:
            return (f"against the night it opened {_plain(self.since_opening)}: not faster beyond the floor "
                    f"({self.since_opening.floor:g}{self.since_opening.unit}), neither gone nor fixed")
        return (f"tonight's interval reaches into the regression's ({self.tonight.low:+.1f} is not above "
                f"{self.alarm.change.high:+.1f}): neither gone nor fixed")

    def text(self) -> str:
        a = self.alarm
        read = f"tonight {self.verdict}" + (f" {self.tonight.text()}" if self.tonight is not None else "")
        head = f"{a.change.cell_id}: open since {a.since} ({a.change.text()}), {a.nights} nights; {read}"
        if self.work_tonight == alarm_work.OTHER:
            head += f"; {self.work_words}"
        if self.outcome == GONE and self.cause == BY_WORK:
            return f"{head}: gone: {self.work_words}"
        if self.outcome == GONE and self.since_opening is not None:
            return f"{head}: gone (faster than the night it opened by {_plain(self.since_opening)})"
        if self.outcome == GONE:
            return f"{head}: gone, wholly above the regression's interval (recovered, not shown equal to the baseline)"
        if self.outcome == FIXED:
            return f"{head}: fixed ({'unchanged' if self.verdict == UNCHANGED else 'improved'} against the baseline)"
        return f"{head}: still open, {self.why_open()}"


def ending(alarm: OpenAlarm, v: CellVerdict | None, diff: WorkDiff | None = None,
           since_opening: CellVerdict | None = None) -> Reading:
    """What a night that does not show an open regression does to it. The counts first, where the alarm recorded a
    work change and tonight counted the cell (`diff`: tonight's work against the baseline): GONE (BY_WORK) when
    tonight's work is back to the baseline's on every recorded item, OPEN while it stays as recorded. Then timing:
    FIXED when the cell is unchanged or improved (and regresses on nothing else); GONE (BY_TIME) when tonight's
    repeats are faster than the alarm night's own beyond the floor (`since_opening`: tonight's comparison with that
    night, at the nightly's level); without that comparison (an alarm recorded before alarms.json version 3), when
    tonight's interval lies wholly above the regression's; else OPEN."""
    state = alarm_work.work_tonight(alarm.work, diff)
    words = alarm_work.tonight_text(alarm.work, state, diff) if alarm.work is not None else ""
    if v is None:
        return Reading(alarm=alarm, verdict=NO_VERDICT, tonight=None, outcome=OPEN, work_tonight=state,
                       work_words=words)
    tonight = measured(v, alarm.change.metric)
    opening = _opening(alarm.change, since_opening)
    if state in (BACK, STAYS, PARTLY):  # exact whatever tonight's machine was like
        outcome, cause = (GONE, BY_WORK) if state == BACK else (OPEN, "")
        return Reading(alarm=alarm, verdict=v.verdict, tonight=tonight, outcome=outcome, cause=cause,
                       work_tonight=state, work_words=words, since_opening=opening)
    if alarm.change.gate:  # a gate alarm ends by its counts alone
        return Reading(alarm=alarm, verdict=NOT_COUNTED_TONIGHT, tonight=None, outcome=OPEN, work_tonight=state,
                       work_words=words)
    if v.busy and alarm.change.metric != "top1":  # the machine's load decided tonight's windows: no evidence
        return Reading(alarm=alarm, verdict=BUSY, tonight=None, outcome=OPEN, work_tonight=state, work_words=words)
    cause = ""
    if v.verdict in (UNCHANGED, IMPROVEMENT) and change_of(v) is None:
        outcome = FIXED
    elif since_opening is not None:
        outcome, cause = (GONE, BY_TIME) if faster(opening) and not (since_opening.busy and opening.metric != "top1") \
            else (OPEN, "")
    elif tonight is not None and tonight.low > alarm.change.high:
        outcome, cause = GONE, BY_TIME
    else:
        outcome = OPEN
    return Reading(alarm=alarm, verdict=v.verdict, tonight=tonight, outcome=outcome, cause=cause, work_tonight=state,
                   work_words=words, since_opening=opening)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One step of an alarm's history (the alarms state keeps them, newest first)."""

    kind: str
    """One of EVENTS."""
    night: str
    """The run id of the night it happened."""
    change: MetricChange
    """The regression as the alarm holds it (for worse: the new level)."""
    since: str
    """The night the alarm opened (for worse: tonight, where it opened again at the new level)."""
    nights: int
    """Nights it had been seen as a regression."""
    tonight: MetricChange | None = None
    """Gone and fixed: tonight's change of its metric, with its interval (None: tonight had none)."""
    note: str = ""
    """Worse: the level it was at; acknowledged: the acknowledgement's reason, who and when."""
    when: str = ""
    """ISO date-time the alarm step judged the night (where the history page marks it)."""
    cause: str = ""
    """Gone: BY_WORK (its counted work back to the baseline's) or BY_TIME; empty for the other kinds."""
    work: AlarmWork | None = None
    """The alarm's counted work as recorded when it opened (opened, worse: that night's; gone: what was undone)."""
    since_opening: MetricChange | None = None
    """Gone by time: tonight's repeats against the alarm night's own."""

    def text(self) -> str:
        c = self.change
        words = f"{self.night} {self.kind}: {c.cell_id} {c.text()}"
        if self.kind != OPENED:
            words += f", open since {self.since}, {self.nights} nights"
        if self.kind == GONE and self.cause == BY_WORK and self.work is not None:
            words += f"; {alarm_work.tonight_text(self.work, BACK)}"
        elif self.kind == GONE and self.since_opening is not None:
            words += f"; faster than the night it opened by {_plain(self.since_opening)}"
        elif self.kind in (OPENED, WORSE) and self.work is not None:
            words += f"; {self.work.text()}"
        if self.kind in (GONE, FIXED):
            words += "; tonight " + (self.tonight.text() if self.tonight is not None else "no interval")
        return words + (f"; {self.note}" if self.note else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class NightAlarms:
    """What the alarm step makes of one night."""

    alarms: tuple[Alarm, ...]
    """One per regression tonight."""
    readings: tuple[Reading, ...]
    """Each alarm open before tonight that tonight did not see as a regression: ended, or kept saying why."""
    open: tuple[OpenAlarm, ...]
    """The alarms open after tonight (the state for the next night): tonight's regressions, then the kept ones."""
    events: tuple[Event, ...]
    """Tonight's steps of the alarms' history."""

    @property
    def closed(self) -> list[Reading]:
        return [r for r in self.readings if r.ends]

    @property
    def kept(self) -> list[Reading]:
        return [r for r in self.readings if not r.ends]


def judge_night(verdicts: Sequence[CellVerdict], open_alarms: Sequence[OpenAlarm], acks: Sequence[Ack], *,
                night: str, when: str, work: Mapping[str, WorkDiff] | None = None,
                since_opening: Mapping[tuple[str, str], CellVerdict] | None = None, run: str = "",
                gates: Mapping[str, Sequence[Any]] | None = None) -> NightAlarms:
    """Tonight's alarms (one per regression), what tonight read for every other open alarm (ending it or not),
    the alarms open after tonight and tonight's history. `night`: tonight's run id; `when`: its ISO date-time
    (acknowledgements expire by its date); `run`: tonight's run folder (a new alarm's, for later nights' direct
    comparisons); `work`: each cell's counted work against the baseline tonight (work_diff); `since_opening`:
    (cell, the alarm's night) -> tonight's verdict against that night's repeats; `gates`: each cell's work gate
    checks tonight (work_diff.GateCheck): a broken one alarms as a change of its own (gate_changes), recording its
    counter's changed items, and ends gone when they are back to the baseline's."""
    work, since_opening, gates = work or {}, since_opening or {}, gates or {}
    before = {_key(a.change): a for a in open_alarms}
    held: dict[tuple[str, str], list[Ack]] = {}
    for ack in acks:  # newest first (baselines.add_acks): the first that applies is used
        if ack.holds_on(when):
            held.setdefault(_key(ack.change), []).append(ack)
    alarms, after, events = [], {}, []
    changes = [(v, c) for v in verdicts for c in [change_of(v)] if c is not None]
    changes += [(v, c) for v in verdicts for c in gate_changes(v, gates.get(v.cell_id, ()), work.get(v.cell_id))]
    for v, change in changes:
        previous = before.get(_key(change))
        opening = since_opening.get((v.cell_id, previous.since)) if previous is not None else None
        recorded = alarm_work.at_open(work.get(v.cell_id), counter=change.metric.removeprefix("gate:")
                                      if change.gate else None)
        alarm, state, steps = _one(change, previous, held.get(_key(change), []), night, work=recorded, run=run)
        if alarm.status not in (NEW, WORSE) and previous is not None:
            state_ = alarm_work.work_tonight(previous.work, work.get(v.cell_id))
            alarm = replace(alarm, work=previous.work, work_tonight=state_,
                            work_words=alarm_work.tonight_text(previous.work, state_, work.get(v.cell_id))
                            if previous.work is not None else "", since_opening=_opening(previous.change, opening))
        alarms.append(alarm)
        after[_key(change)] = state
        events += [replace(e, when=when) for e in steps]
    by_cell = {v.cell_id: v for v in verdicts}
    readings = [ending(a, by_cell.get(a.change.cell_id), work.get(a.change.cell_id),
                       since_opening.get((a.change.cell_id, a.since))) for k, a in before.items() if k not in after]
    after |= {_key(r.alarm.change): r.alarm for r in readings if not r.ends}
    events += [Event(kind=r.outcome, night=night, change=r.alarm.change, since=r.alarm.since, nights=r.alarm.nights,
                     tonight=r.tonight, when=when, cause=r.cause, work=r.alarm.work, since_opening=r.since_opening)
               for r in readings if r.ends]
    return NightAlarms(alarms=tuple(alarms), readings=tuple(readings), open=tuple(after.values()),
                       events=tuple(events))


def _one(change: MetricChange, previous: OpenAlarm | None, acks: Sequence[Ack],
         night: str, *, work: AlarmWork | None = None, run: str = "") -> tuple[Alarm, OpenAlarm, list[Event]]:
    """One regression against its open alarm and its acknowledgement: its alarm, its open alarm after, and its
    history's steps tonight. A drilled change is never the same as a real one (a drill's alarm must not hide a
    real regression)."""
    drilled = bool(change.fire_drill_pct)
    if previous is not None and bool(previous.change.fire_drill_pct) != drilled:
        previous = None
    ack = next((a for a in acks if bool(a.change.fire_drill_pct) == drilled), None)
    again = previous is not None and previous.since == night  # its first judgement recorded its step
    if previous is None or again:  # a night judged again is still its own first night
        status, state = NEW, OpenAlarm(change=change, since=night, nights=1, last=night, run=run, work=work)
    elif is_worse(change, previous.change):
        status, state = WORSE, OpenAlarm(change=change, since=night, nights=1, last=night, run=run, work=work)
    else:
        nights = previous.nights + (previous.last != night)
        status, state = OPEN, replace(previous, nights=nights, last=night)
    steps = []
    if status in (NEW, WORSE) and not again:
        note = f"was {previous.change.text()}, open since {previous.since}" if status == WORSE else ""
        steps.append(Event(kind=OPENED if status == NEW else WORSE, night=night, change=change, since=night,
                           nights=1, note=note, work=work))
    reference = previous.change if status != NEW and previous is not None else change
    beyond = ack is not None and is_worse(change, ack.change)
    if ack is not None and not beyond:
        status, reference = ACKNOWLEDGED, ack.change
        if previous is None or previous.acknowledged != ack.when:
            steps.append(Event(kind=ACKNOWLEDGED, night=night, change=state.change, since=state.since,
                               nights=state.nights, note=f"{ack.reason} ({ack.who}, {ack.when[:10]})"))
        state = replace(state, acknowledged=ack.when)
    else:
        state = replace(state, acknowledged="")
    return Alarm(change=change, status=status, since=state.since, nights=state.nights, reference=reference,
                 ack=ack, beyond_ack=beyond, work=state.work), state, steps


def matches(change: MetricChange, cell_filter: str) -> bool:
    """A cell filter (`nvbench ack`): the cell's id, or `axis=value[,axis=value...]` all of which it has."""
    if cell_filter == change.cell_id:
        return True
    pairs = [split_axis_filter(p) for p in cell_filter.split(",")]
    if not all(pair is not None and pair[0] in AXES for pair in pairs):
        return False
    values = {a: str(v) for a, v in change.axes}
    return all(values.get(axis) == value for axis, value in pairs)


def filter_problem(cell_filter: str) -> str | None:
    """Why a cell filter can match nothing (a misspelt axis), or None."""
    if "=" not in cell_filter:
        return None  # a cell id
    for pair in map(split_axis_filter, cell_filter.split(",")):
        if pair is None or pair[0] not in AXES:
            return (f"{cell_filter!r}: expected a cell id or axis=value[,axis=value...] with axes from "
                    f"{', '.join(AXES)}")
    return None
