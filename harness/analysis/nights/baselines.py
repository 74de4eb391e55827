"""The nightly's records under the reports folder: the baseline pointer and its promotions, the acknowledged
changes (both in reports/baselines/, kept in version control) and the alarms still open with their history
(reports/alarms.json, this machine's state). The rules a run must pass to be promoted (reports/baselines/README.md)
live here too. Every file is written whole and atomically (results.store)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.analysis.nights.alarm_work import AlarmWork, Culprit
from harness.analysis.nights.alarms import ACKNOWLEDGED, FIXED, Ack, Event, MetricChange, OpenAlarm
from harness.analysis.judge.repeats import by_cell, drill_pct, env_difference, ok_rows
from harness.analysis.load.runs import RunInputError, load_run, resolve_pointer
from harness.analysis.judge.run import RunData
from harness.results import formats, store
from harness.results.schema import SUPERSEDED
from harness.catalogue import col
from harness.results.env import short_commit

RECORDS_VERSION = 1
"""Version of acks.json and promotions.json (their `version` key)."""
ALARMS_VERSION = 3
"""Version of alarms.json. 1: `open` and `closed` (the alarms an unchanged or improved night closed, each with
its `closed_by` night); 2: `closed` became `events`, the alarms' history (opened, worse, acknowledged, gone,
fixed; harness.analysis.nights.alarms.Event), and an open alarm records the acknowledgement it was last listed under.
3: an open alarm records the run folder of its night (`run`) and the cell's counted work against the baseline that
night (`work`: state, items with both sides' per-step values); an event its `cause` (gone: work or time), the work
and the direct comparison with the alarm's night (`since_opening`). Version 2 entries read with those empty.
An older file is migrated on reading (ALARMS)."""
MAX_EVENTS = 1000
"""The alarms' history keeps this many events, newest first."""
MIN_PROMOTE_REPEATS = 5
"""A baseline needs at least this many repeats a cell (every one ok): fewer can never make a verdict (README's
rule 2)."""


def baselines_dir(reports: Path) -> Path:
    return Path(reports) / "baselines"


def pointer_path(reports: Path) -> Path:
    return baselines_dir(reports) / "current"


def acks_path(reports: Path) -> Path:
    return baselines_dir(reports) / "acks.json"


def promotions_path(reports: Path) -> Path:
    return baselines_dir(reports) / "promotions.json"


def alarms_path(reports: Path) -> Path:
    return Path(reports) / "alarms.json"


def _closed_as_events(data: dict[str, Any]) -> dict[str, Any]:
    """alarms.json 1 -> 2: version 1's closed alarms become `fixed` events (the only way version 1 closed one) of
    their `closed_by` night."""
    events = [{"kind": FIXED, "night": c.get("closed_by", ""), "change": c.get("change"), "since": c.get("since", ""),
               "nights": c.get("nights", 1)} for c in data.get("closed") or [] if isinstance(c, dict)]
    return {k: v for k, v in data.items() if k != "closed"} | {"events": events}


ACKS = formats.Format(name="nvbench acks", kind="file", key="version", current=RECORDS_VERSION)
PROMOTIONS = formats.Format(name="nvbench promotions", kind="file", key="version", current=RECORDS_VERSION)
ALARMS = formats.Format(name="nvbench alarms", kind="file", key="version", current=ALARMS_VERSION, steps={1: _closed_as_events})
"""The JSON records as the one reader reads them (harness.results.formats): alarms.json's version 2 entries read with
version 3's fields empty (their defaults)."""


def _read(path: Path, fmt: formats.Format, key: str) -> list[dict[str, Any]]:
    """The list under `key` of one of these files (an older version migrated); [] when the file does not exist.
    UnreadableFile (one line) when it is not one this nvbench reads."""
    if not path.is_file():
        return []
    data = formats.read_json(path, fmt)
    if not isinstance(data.get(key), list):
        raise fmt.not_one(path, f"a JSON object with a `{key}` list", found=data[fmt.key])
    return data[key]


def _write(path: Path, key: str, items: Sequence[Any]) -> None:
    text = json.dumps({"version": RECORDS_VERSION, key: list(items)}, indent=2, sort_keys=True) + "\n"
    store.write_bytes(path, text.encode())


def _records(path: Path, fmt: formats.Format, key: str, cls: type) -> list[Any]:
    try:
        return [from_record(cls, r) for r in _read(path, fmt, key)]
    except (KeyError, TypeError, AttributeError) as exc:
        raise fmt.unreadable(path, f"an entry of `{key}` is not one this nvbench wrote: {exc}") from None


def read_open(reports: Path) -> list[OpenAlarm]:
    return _records(alarms_path(reports), ALARMS, "open", OpenAlarm)


def read_events(reports: Path) -> list[Event]:
    """The alarms' history, newest first."""
    return _records(alarms_path(reports), ALARMS, "events", Event)


def alarms_bytes(reports: Path, alarms: Sequence[OpenAlarm], events: Sequence[Event]) -> bytes:
    """alarms.json with the alarms open after a night and its events added to the history, newest first."""
    history = [as_record(e) for e in [*reversed(events), *read_events(reports)][:MAX_EVENTS]]
    return (json.dumps({"version": ALARMS_VERSION, "open": [as_record(a) for a in alarms], "events": history},
                       indent=2, sort_keys=True) + "\n").encode()


def write_open(reports: Path, alarms: Sequence[OpenAlarm], events: Sequence[Event] = ()) -> None:
    """The alarms open after a night, and its events added to the history."""
    store.write_bytes(alarms_path(reports), alarms_bytes(reports, alarms, events))


def read_acks(reports: Path) -> list[Ack]:
    return _records(acks_path(reports), ACKS, "acks", Ack)


def add_acks(reports: Path, acks: Sequence[Ack]) -> None:
    """Append acknowledgements (a newer one of the same cell and metric is listed first, so it is the one used)."""
    _write(acks_path(reports), "acks", [as_record(a) for a in acks] + _read(acks_path(reports), ACKS, "acks"))


def read_promotions(reports: Path) -> list[dict[str, Any]]:
    return _read(promotions_path(reports), PROMOTIONS, "promotions")


# ---------------------------------------------------------------------------------------------
# promotion


@dataclass(frozen=True, slots=True, kw_only=True)
class Promotion:
    """One promotion: the run that became the baseline, who did it, when and why."""

    run: str
    """The run folder as the pointer names it (relative to reports/baselines/ when under the reports folder)."""
    run_id: str
    commit: str | None
    """The commit the run's harness came from (`+dirty` when it had uncommitted changes); None: not recorded."""
    who: str
    when: str
    reason: str
    previous: str | None
    """The run the pointer named before, or None."""
    fire_drill_pct: float = 0.0
    """A rehearsal's drill (promote --allow-fire-drill): the pointer says so."""


def promotion_problems(run: RunData, nights: RunData | None, *, allow_fire_drill: bool = False) -> list[str]:
    """One line per rule of reports/baselines/README.md the run breaks: a full run (not --smoke), not a fire drill,
    every cell ok, at least MIN_PROMOTE_REPEATS repeats a cell, the environment of `nights` (the newest
    night, or None: nothing to compare with)."""
    problems, rows = [], [r for r in run.rows if r["status"] != SUPERSEDED]
    if any(r.get(col.is_smoke) for r in rows):
        problems.append(f"{run.path}: a --smoke run (smoke cells measure a shrunken model): promote a full run")
    drill = max((drill_pct(r) for r in rows), default=0.0)
    if drill and not allow_fire_drill:
        problems.append(f"{run.path}: a fire drill (+{drill:g}% injected work): never a baseline "
                        "(--allow-fire-drill rehearses the workflow)")
    bad = sorted({f"{r[col.cell_id]} r{r['repeat']} {r['status']}" for r in rows if r["status"] != "ok"})
    if bad:
        problems.append(f"{run.path}: {len(bad)} repeat(s) not ok ({', '.join(bad[:3])}"
                        f"{', ...' if len(bad) > 3 else ''}): every cell must be ok")
    # repeats counted whatever their status: a failed one is the rule above's, not this one's
    few = sorted(cid for cid, cell in by_cell(rows).items() if len(cell) < MIN_PROMOTE_REPEATS)
    if few:
        problems.append(f"{run.path}: {len(few)} cell(s) with fewer than {MIN_PROMOTE_REPEATS} repeats "
                        f"({', '.join(few[:3])}{', ...' if len(few) > 3 else ''}): run it with --repeats 10")
    if nights is not None and ok_rows(rows) and ok_rows(nights.rows):
        diff = env_difference(ok_rows(rows), ok_rows(nights.rows), run.environment, nights.environment)
        if diff:
            problems.append(f"{run.path}: its environment is not the nights' (newest night {nights.run_id}: "
                            f"{diff}): every cell would be `not comparable`")
    return problems


def newest_night(history: Path, exclude: Path) -> RunData | None:
    """The newest run of the history folder that is not a fire drill and not `exclude`, or None."""
    from harness.analysis.load.runs import load_history

    if not Path(history).is_dir():
        return None
    try:
        runs = load_history(history, exclude=exclude)
    except RunInputError:
        return None
    real = [r for r in runs if not any(drill_pct(row) for row in r.rows)]
    return real[-1] if real else None


def current_baseline(reports: Path) -> Path | None:
    """The run folder reports/baselines/current names (a folder copy or a pointer file), or None."""
    path = pointer_path(reports)
    return resolve_pointer(path) if path.exists() else None


def promote(reports: Path, run: RunData, *, who: str, when: str, reason: str) -> Promotion:
    """Point reports/baselines/current at `run`, with who, when, why and its commit as comments, and add the
    promotion to promotions.json. The pointer and the history are written together (write_all)."""
    folder = baselines_dir(reports)
    target = Path(run.path).resolve()
    try:
        shown = os.path.relpath(target, folder.resolve())
    except ValueError:  # another drive
        shown = str(target)
    if not target.is_relative_to(Path(reports).resolve()):
        shown = str(target)
    previous = current_baseline(reports)
    sha, dirty = run.environment.get("nvbench_git_sha"), run.environment.get("nvbench_git_dirty")
    commit = (str(sha) + ("+dirty" if dirty else "")) if sha else None
    drill = max((drill_pct(r) for r in run.rows), default=0.0)
    p = Promotion(run=shown, run_id=run.run_id, commit=commit, who=who, when=when, reason=reason,
                  previous=str(previous) if previous else None, fire_drill_pct=drill)
    if pointer_path(reports).is_dir():
        raise RunInputError([f"{pointer_path(reports)}: a copied run folder; move it away to promote by pointer"])
    lines = [f"# promoted {when} by {who}: {reason}", f"# run {run.run_id}, commit {commit or 'not recorded'}"]
    if drill:
        lines.append(f"# FIRE DRILL +{drill:g}%: a rehearsal, not a baseline to keep")
    history = [_as_dict(p)] + read_promotions(reports)
    store.write_all({pointer_path(reports): ("\n".join(lines + [shown]) + "\n").encode(),
                     promotions_path(reports): (json.dumps({"version": RECORDS_VERSION, "promotions": history},
                                                           indent=2, sort_keys=True) + "\n").encode()})
    return p


def _as_dict(p: Promotion) -> dict[str, Any]:
    return {k: getattr(p, k) for k in p.__slots__}


def show_lines(reports: Path) -> list[str]:
    """`nvbench baseline show`: the current baseline, then every promotion, newest first, then the alarms
    (alarm_lines)."""
    current = current_baseline(reports)
    lines = [f"current baseline: {current.resolve() if current else 'none'} ({pointer_path(reports)})"]
    if current is not None:
        try:
            run = load_run(current)
            sha = run.environment.get("nvbench_git_sha")
            lines.append(f"  run {run.run_id}, created {run.created_at or '?'}, commit "
                         f"{short_commit(sha) if sha else 'not recorded'}, {len(by_cell(run.rows))} cell(s)")
        except RunInputError as exc:
            lines.append(f"  cannot be read: {exc.problems[0]}")
    promotions = read_promotions(reports)
    lines.append(f"promotions ({len(promotions)}), newest first:" if promotions else
                 "no promotion recorded (promotions.json is written by `nvbench baseline promote`)")
    for p in promotions:
        drill = f" FIRE DRILL +{p[col.fire_drill_pct]:g}%" if p.get(col.fire_drill_pct) else ""
        lines.append(f"  {p.get('when')} {p.get(col.run_id)} (commit {p.get('commit') or 'not recorded'}) by "
                     f"{p.get('who')}: {p.get('reason')}{drill}")
    return lines + alarm_lines(reports)


def alarm_lines(reports: Path) -> list[str]:
    """The alarms open on this machine (alarms.json), then their history, newest first."""
    open_, events = read_open(reports), read_events(reports)
    lines = [f"alarms open ({len(open_)}) in {alarms_path(reports)}:" if open_ else
             f"no alarm open ({alarms_path(reports)})"]
    for a in open_:
        lines.append(f"  {a.change.cell_id} {a.change.text()}: open since {a.since}, {a.nights} nights, last seen "
                     f"{a.last or a.since}" + (", acknowledged" if a.acknowledged else "")
                     + (f"; {a.work.text()}" if a.work is not None else ""))
        lines += [f"    {c.text()}" for c in a.culprits]
    lines.append(f"alarm history ({len(events)} events), newest first:" if events else "no alarm history recorded")
    return lines + [f"  {e.text()}" for e in events]


def event_marks(reports: Path) -> list[Mapping[str, Any]]:
    """What the history page marks on the trends: each promotion (every cell), acknowledgement (its cell) and step
    of an alarm's history (its cell; acknowledged is the acknowledgement's own mark), as {kind, when, cell_id
    (None: every cell), text}, an alarm's with its `event` and the run id of its night."""
    marks = [{"kind": "promotion", "when": p.get("when") or "", col.cell_id: None,
              "text": f"baseline promoted: {p.get(col.run_id)} by {p.get('who')}: {p.get('reason')}"}
             for p in read_promotions(reports)]
    marks += [{"kind": "ack", "when": a.when, col.cell_id: a.change.cell_id,
               "text": f"acknowledged {a.change.text()} by {a.who}: {a.reason}"
                       + (f" (until {a.expires})" if a.expires else "")} for a in read_acks(reports)]
    marks += [{"kind": "alarm", "event": e.kind, "when": e.when, col.run_id: e.night, col.cell_id: e.change.cell_id,
               "text": f"alarm {e.text()}"} for e in read_events(reports) if e.kind != ACKNOWLEDGED]
    return marks


_CHANGES = ("change", "tonight", "since_opening")
"""The fields of a record that hold a MetricChange (its own JSON object)."""
_WORK, _CULPRITS = "work", "culprits"
"""The fields of a record that hold an AlarmWork, and Culprits."""


def as_record(obj: Any) -> dict[str, Any]:
    """An OpenAlarm, an Ack or an Event as the JSON the state and acknowledgement files hold."""
    out = {}
    for k in obj.__slots__:
        value = getattr(obj, k)
        out[k] = _change_record(value) if isinstance(value, MetricChange) else \
            value.to_record() if isinstance(value, AlarmWork) else \
            [c.to_record() for c in value] if k == _CULPRITS else value
    return out


def _change_record(c: MetricChange) -> dict[str, Any]:
    return {col.cell_id: c.cell_id, "metric": c.metric, "effect": c.effect, "low": c.low, "high": c.high,
            "floor": c.floor, "axes": dict(c.axes), col.fire_drill_pct: c.fire_drill_pct} | (
        {"gate": c.gate} if c.gate else {})


def from_record(cls: type, record: Mapping[str, Any]) -> Any:
    """as_record's inverse (KeyError or TypeError on a record that is not one)."""
    fields_ = {}
    for k, value in record.items():
        if k in _CHANGES and value is not None:
            c = dict(value)
            value = MetricChange(**{**c, "axes": tuple(dict(c.get("axes") or {}).items())})
        elif k == _WORK and value is not None:
            value = AlarmWork.from_record(value)
        elif k == _CULPRITS:
            value = tuple(Culprit.from_record(c) for c in value or ())
        fields_[k] = value
    return cls(**fields_)
