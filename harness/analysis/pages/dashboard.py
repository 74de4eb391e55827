"""The dashboard over a nightly's history (`nvbench dashboard REPORTS --out DIR`): one static page a team publishes
from CI, opened from disk or served by any web server. The matrix's cells as a grid coloured by their latest state,
each linking to its trend over every night (change points, alarms, acknowledgements and promotions marked);
filters by axis value and by state; the alarms open with the night each opened. Read from the history
(harness.analysis.nights.history) and the reports folder's baselines/ (alarms, acknowledgements, promotions): no
statistics here, and every number on the page is one of theirs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.analysis.nights import baselines
from harness.analysis.nights.alarms import OpenAlarm
from harness.analysis.nights.history import Change, History, Series
from harness.analysis.pages.charts import Chart, slug
from harness.analysis.pages.render import place_assets, macro, render
from harness.analysis.pages.report import page_values
from harness.analysis.pages.trend import Mark, cell_marks, change_text, legend, mark_items, plot_changes, trend_chart
from harness.catalogue.axes import AXES
from harness.results import store

DASHBOARD_FILE = "index.html"
REGRESSION, ACKNOWLEDGED, FAILED, BUSY, IMPROVED, SLOWER, OK = (
    "open regression", "acknowledged", "failed", "busy", "improved", "slower", "ok")
STATES = (REGRESSION, SLOWER, FAILED, ACKNOWLEDGED, BUSY, IMPROVED, OK)
"""A cell's latest state, in the order a person should look: an open alarm, a recent step down the nightly did not
alarm on (a history without alarms), no ok repeat on the newest night, an alarm accepted, a night not judged because
the machine was busy, a recent step up, nothing to say."""
RECENT_NIGHTS = 7
"""A change point among the newest this many nights colours its cell (improved, or slower where no alarm says)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CellState:
    """One cell of the grid: its axes, its latest state and why, its newest throughput."""

    cell_id: str
    axes: Mapping[str, Any]
    state: str
    why: str
    latest: float | None
    """The newest night's throughput (img/s), None where that night has no ok repeat."""
    label: str
    """What the grid names it by: its label as the nights' rows recorded it (its id where none did)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Dashboard:
    history: History
    cells: tuple[CellState, ...]
    alarms: tuple[OpenAlarm, ...]
    marks: tuple[Mark, ...]
    reports: str


def _recent(history: History, cid: str) -> Change | None:
    """The cell's newest throughput step among the newest RECENT_NIGHTS nights, or None."""
    first = len(history.nights) - RECENT_NIGHTS + 1
    steps = [c for c in history.changes if c.cell_id == cid and c.metric == "throughput" and c.kind == "step"
             and c.night >= first]
    return max(steps, key=lambda c: c.night, default=None)


def cell_state(history: History, series: Series, alarms: Sequence[OpenAlarm], has_alarms: bool) -> CellState:
    """The latest state of one cell (STATES), from its alarms, the newest night and its recent change points."""
    cid = series.cell_id
    newest = history.nights[-1] if history.nights else None
    point = series.points[-1] if series.points and newest and series.points[-1].night == len(history.nights) - 1 \
        else None
    mine = [a for a in alarms if a.change.cell_id == cid]
    recent = _recent(history, cid)
    if [a for a in mine if not a.acknowledged]:
        a = next(a for a in mine if not a.acknowledged)
        state, why = REGRESSION, f"{a.change.text()}: open since {a.since}, {a.nights} night(s)"
    elif newest is not None and cid in newest.busy:
        state, why = BUSY, f"not judged on {newest.run_id}: {newest.busy_text()}"
    elif point is None:
        state, why = FAILED, f"no ok repeat on the newest night ({newest.run_id if newest else '-'})"
    elif mine:
        state, why = ACKNOWLEDGED, f"{mine[0].change.text()}: acknowledged {mine[0].acknowledged}"
    elif recent is not None and recent.change < 0 and not has_alarms:
        state, why = SLOWER, f"throughput {change_text(recent)} at night {recent.night} ({recent.run_id})"
    elif recent is not None and recent.change > 0:
        state, why = IMPROVED, f"throughput {change_text(recent)} at night {recent.night} ({recent.run_id})"
    else:
        state, why = OK, "no open alarm, no recent change"
    return CellState(cell_id=cid, axes=dict(series.axes), state=state, why=why, label=series.label or cid,
                     latest=point.value if point is not None else None)


def build(history: History, reports: Path | None) -> Dashboard:
    """The dashboard's data: each cell's state (by axes), the open alarms and the marks of the reports folder."""
    alarm_file = reports is not None and baselines.alarms_path(reports).is_file()
    alarms = tuple(baselines.read_open(reports)) if alarm_file else ()
    marks = tuple(baselines.event_marks(reports)) if reports is not None else ()
    throughput = sorted((s for s in history.series if s.metric == "throughput"),
                        key=lambda s: tuple(str(s.axes.get(a) or "") for a in AXES) + (s.cell_id,))
    cells = tuple(cell_state(history, s, alarms, alarm_file) for s in throughput)
    return Dashboard(history=history, cells=cells, alarms=alarms, marks=marks, reports=str(reports or ""))


def _filters(cells: Sequence[CellState]) -> list[dict[str, Any]]:
    """One filter a varying axis (its values in order), and one of the states present."""
    out = []
    for axis in AXES:
        values = sorted({str(c.axes.get(axis)) for c in cells if c.axes.get(axis) is not None})
        if len(values) > 1:
            out.append({"name": axis, "values": values})
    states = [s for s in STATES if any(c.state == s for c in cells)]
    return out + [{"name": "state", "values": states}] if len(states) > 1 else out


def series_labels(history: History) -> dict[str, str]:
    """cell id -> its label, as the nights' rows recorded it (history.Series.label)."""
    return {s.cell_id: s.label or s.cell_id for s in history.series}


def trend_id(cid: str) -> str:
    return f"trend-{slug(cid)}"


def _trends(d: Dashboard) -> list[dict[str, Any]]:
    """Each cell's trends: throughput always, another metric where it changed; the cell's marks and legend."""
    by_cell: dict[str, list[Series]] = {}
    for s in d.history.series:
        by_cell.setdefault(s.cell_id, []).append(s)
    out = []
    for c in d.cells:
        changed = {x.metric for x in d.history.changes if x.cell_id == c.cell_id}
        shown = [s for s in by_cell[c.cell_id] if s.metric == "throughput" or s.metric in changed]
        mine = cell_marks(d.marks, c.cell_id)
        charts: list[Chart] = [trend_chart(d.history, s, mine, chart_id=f"{trend_id(c.cell_id)}-{slug(s.metric)}",
                                           height=220) for s in shown]
        out.append({"cell": c, "id": trend_id(c.cell_id), "label": c.label,
                    "charts": [(chart, legend(plot_changes(d.history, s))) for chart, s in zip(charts, shown)],
                    "marks": mark_items(mine)})
    return out


def _alarm_rows(d: Dashboard) -> list[dict[str, Any]]:
    created = {n.run_id: n.run.created_at for n in d.history.nights}
    names = series_labels(d.history)
    return [{"cell": a.change.cell_id, "label": names.get(a.change.cell_id, a.change.cell_id), "href": f"#{trend_id(a.change.cell_id)}",
             "change": a.change.text(), "since": a.since, "since_when": created.get(a.since, "")[:10],
             "nights": a.nights, "last": a.last or a.since, "acknowledged": a.acknowledged,
             "culprits": [c.text() for c in a.culprits]}
            for a in sorted(d.alarms, key=lambda a: (bool(a.acknowledged), a.since, a.change.cell_id))]


def render_html(d: Dashboard) -> str:
    h = d.history
    nights = h.nights
    span = f"{nights[0].run_id} .. {nights[-1].run_id}" if nights else "no nights"
    counts = {s: sum(c.state == s for c in d.cells) for s in STATES}
    subtitle = (f"{len(nights)} night(s) in {h.folder} ({span}) \u00b7 {len(d.cells)} cell(s): "
                + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    open_alarms = [a for a in d.alarms if not a.acknowledged]
    focus = [trend_chart(h, s, cell_marks(d.marks, s.cell_id), chart_id=f"focus-{slug(s.cell_id)}", height=190,
                         caption=f"{s.label or s.cell_id}: throughput (img/s) over every night")
             for s in h.series if s.metric == "throughput" and s.cell_id in {a.change.cell_id for a in open_alarms}]
    method = (f"Each tile is a cell's latest state: {REGRESSION} (an alarm in {d.reports or 'the reports folder'}'s "
              f"baselines/alarms.json not acknowledged), {SLOWER} (a throughput step down among the newest "
              f"{RECENT_NIGHTS} nights where no alarms file says more), {FAILED} (no ok repeat on the newest night), "
              f"{ACKNOWLEDGED}, {BUSY} (too few clean windows on the newest night), {IMPROVED} (a throughput step up "
              f"among the newest {RECENT_NIGHTS} nights), {OK}. Trends: one point per night (the mean of its ok "
              "repeats, its interval), change points as `nvbench history` finds them. Written "
              f"{datetime.now(UTC).isoformat(timespec='seconds')}.")
    sections = [("grid", "The matrix, latest night", macro("dashboard_grid", d.cells, _filters(d.cells), trend_id)),
                ("alarms", f"Alarms open ({len(open_alarms)})", macro("dashboard_alarms", _alarm_rows(d), focus)),
                ("trends", "Trends, cell by cell", macro("dashboard_trends", _trends(d)))]
    return render("page.html", **page_values("nvbench dashboard", subtitle, method, css=("report.css", "history.css",
                                                                                        "dashboard.css"),
                                             scripts=("dashboard.js",)), banner="", sections=sections)


def write_dashboard(history: History, out_dir: Path, reports: Path | None = None) -> list[Path]:
    """index.html and plotly.min.js in `out_dir`, written together (never a half-new page)."""
    page = render_html(build(history, reports)).encode()
    place_assets(Path(out_dir))
    store.write_all({Path(out_dir) / DASHBOARD_FILE: page})
    return [Path(out_dir) / DASHBOARD_FILE]


