"""An alarm's counted work (issue 70), pure: when a regression alarms, the items of the cell's work that changed
against the baseline that night, with both sides' per-step values (or that its work was the same, or not counted);
on a later night, whether tonight's counted work is back to the baseline's on every recorded item, still as recorded,
or otherwise. Counts are exact, so this answer needs no repeats and no quiet machine."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.analysis.judge.work_diff import ItemChange, WorkDiff, changes_text

CHANGED, SAME, NOT_COUNTED = "changed", "same", "not counted"
"""What an alarm's work was the night it opened (AlarmWork.state)."""
BACK, STAYS, PARTLY, OTHER = "back", "stays", "partly", "other"
"""What tonight's counted work is against an alarm's recorded change (work_tonight): back to the baseline's on every
recorded item, still as recorded on every one, some back and the rest as recorded (the change partly undone: it
stays open on what stays), or neither (some item at a third value, or varying tonight)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkItem:
    """One item of work that changed the night an alarm opened: where, and its per-step value on each side."""

    phase: str
    counter: str
    key: str
    baseline: float
    """The baseline's per-step value (every counted process agreed)."""
    alarmed: float
    """The alarm night's per-step value."""

    @property
    def item(self) -> tuple[str, str, str]:
        return self.phase, self.counter, self.key

    def as_change(self, a: float, b: float) -> ItemChange:
        return ItemChange(phase=self.phase, counter=self.counter, key=self.key, a=a, b=b)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlarmWork:
    """An alarm's counted work against the baseline the night it opened."""

    state: str
    """CHANGED, SAME or NOT_COUNTED."""
    items: tuple[WorkItem, ...] = ()
    """CHANGED: the items exact on both sides that differed."""

    def text(self) -> str:
        """`work changed: forward +16 aten::mm per step`, `work: same`, `work: not counted`."""
        if self.state == CHANGED:
            return "work changed: " + changes_text([i.as_change(i.baseline, i.alarmed) for i in self.items])
        return f"work: {self.state}"

    def back_text(self) -> str:
        """`forward -16 aten::mm per step back to the baseline's`: the recorded change undone, in words."""
        return changes_text([i.as_change(i.alarmed, i.baseline) for i in self.items]) + " back to the baseline's"

    def to_record(self) -> dict[str, Any]:
        return {"state": self.state, "items": [{"phase": i.phase, "counter": i.counter, "key": i.key,
                                                "baseline": i.baseline, "alarmed": i.alarmed} for i in self.items]}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AlarmWork:
        return cls(state=str(record["state"]), items=tuple(WorkItem(**i) for i in record.get("items") or ()))


@dataclass(frozen=True, slots=True, kw_only=True)
class Culprit:
    """The commit a bisect named for an alarm (the nightly's culprit step): the first whose counted work is the bad
    end's on some of the alarm's items (by work), or the first slower one (by time)."""

    point: str
    """The commit's full sha."""
    subject: str
    """Its subject line."""
    by: str
    """work or time."""
    words: str
    """What changed there: `optimizer +1 host sync per step`, or the timed change."""

    def text(self) -> str:
        return f"first bad commit {self.point[:12]} {self.subject}: {self.words}"

    def to_record(self) -> dict[str, Any]:
        return {"point": self.point, "subject": self.subject, "by": self.by, "words": self.words}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Culprit:
        return cls(**{k: str(record[k]) for k in ("point", "subject", "by", "words")})


def at_open(diff: WorkDiff | None, counter: str | None = None) -> AlarmWork:
    """The work an alarm records the night it opens, from that night's diff of the cell against the baseline (a
    gate alarm's: the items of its `counter` only)."""
    if diff is None or not diff.counted:
        return AlarmWork(state=NOT_COUNTED)
    changed = [c for c in diff.changed if counter is None or c.counter == counter]
    if not changed:
        return AlarmWork(state=SAME)
    return AlarmWork(state=CHANGED, items=tuple(WorkItem(phase=c.phase, counter=c.counter, key=c.key, baseline=c.a,
                                                         alarmed=c.b) for c in changed))


def work_tonight(recorded: AlarmWork | None, diff: WorkDiff | None) -> str | None:
    """BACK, STAYS or OTHER: tonight's counted work (its diff against the baseline) on the items the alarm recorded,
    each read where every counted process of tonight agrees on it; None where the counts cannot decide (the alarm
    recorded no changed item, or tonight counted nothing). Tonight's baseline may differ from the alarm's: an item
    is compared by its value, never by whether tonight's diff lists it."""
    if recorded is None or recorded.state != CHANGED or diff is None or not diff.counted:
        return None
    states = {state for _, state in item_states(recorded, diff)}
    if OTHER in states:
        return OTHER
    return states.pop() if len(states) == 1 else PARTLY


def item_states(recorded: AlarmWork, diff: WorkDiff) -> list[tuple[WorkItem, str]]:
    """Each recorded item tonight: BACK, STAYS or OTHER (a third value, or tonight's processes disagree on it)."""
    out = []
    for item in recorded.items:
        value = diff.b.value(item.item)
        exact = diff.b.is_exact(item.item)
        out.append((item, BACK if exact and value == item.baseline else STAYS if exact and value == item.alarmed
                    else OTHER))
    return out


def tonight_text(recorded: AlarmWork, state: str | None, diff: WorkDiff | None = None) -> str:
    """Tonight's work against the recorded change, in words (PARTLY names what is back and what stays: `diff`)."""
    if state == PARTLY and diff is not None:
        states = item_states(recorded, diff)
        back = AlarmWork(state=CHANGED, items=tuple(i for i, s in states if s == BACK))
        stays = AlarmWork(state=CHANGED, items=tuple(i for i, s in states if s == STAYS))
        return (f"its work change partly undone ({back.back_text()}), the rest stays "
                f"({stays.text().removeprefix('work changed: ')}, exact)")
    if state == BACK:
        return f"its work change was undone ({recorded.back_text()})"
    if state == STAYS:
        return f"its work change stays ({recorded.text().removeprefix('work changed: ')}, exact)"
    if state == OTHER:
        return "its work changed otherwise (not back to the baseline's, not as recorded)"
    return ""
