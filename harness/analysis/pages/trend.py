"""Rendering of a history (harness.analysis.nights.history) into history.html (templates/history.html: its trends
plotly.js charts drawn by the plotly.min.js written beside it; no network, no server), changes.md and
changes.parquet. No statistics here: every number comes from history; no markup here: templates/history.html holds
it. Every string from results is escaped (the templates' autoescaping and `esc` filter, wording.esc_md for Markdown)
before it is written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.analysis.load.changes_file import change_table
from harness.analysis.nights.history import METRICS, Change, History, Series
from harness.analysis.pages.charts import COLOURS, Chart, figure, interval, slug, vline
from harness.analysis.pages.wording import esc_md
from harness.results import store
from harness.stats import changepoint
from harness.catalogue import col
from harness.analysis.pages.render import Markup, macro, place_assets, render
from harness.analysis.pages.report import page_values

HISTORY_FILES = ("history.html", "changes.md", "changes.parquet")


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryResult:
    out_dir: Path
    files: tuple[Path, ...]
    history: History


Mark = Mapping[str, Any]
"""An event the page marks on the trends (harness.analysis.nights.baselines.event_marks): kind (promotion, ack or alarm),
when (ISO time), cell_id (None: every cell) and text; an alarm's also its event (opened, worse, gone, fixed) and
the run id of its night."""


def write_history(history: History, out_dir: Path, marks: Sequence[Mark] = ()) -> HistoryResult:
    """Render every file first, then write them together: never a half-written page. `marks`: the promotions
    and acknowledgements to mark on each cell's trend."""
    contents = [render_html(history, marks).encode(), render_markdown(history).encode(),
                store.table_bytes(change_table(history))]
    files = [Path(out_dir) / name for name in HISTORY_FILES]
    place_assets(Path(out_dir))
    store.write_all(dict(zip(files, contents)))
    return HistoryResult(out_dir=Path(out_dir), files=tuple(files), history=history)


# ---------------------------------------------------------------------------------------------
# words shared by the page and the Markdown


def change_text(c: Change) -> str:
    unit = "%" if c.unit == "%" else " pt"
    interval = f" [{c.ci_low:+.1f}, {c.ci_high:+.1f}]" if c.ci_low is not None and c.ci_high is not None else ""
    return f"{c.change:+.1f}{unit}{interval}"


def commit_range(c: Change) -> str:
    return f"{c.commit_from}..{c.commit_to}"


def significance_text(c: Change) -> str:
    if c.kind == "drift":
        return f"slope's {c.confidence:.0%} interval excludes 0"
    if c.p_floor is None:
        return f"p = {c.p_value:.3g}"
    if c.p_value <= c.p_floor:
        return f"p <= {c.p_floor:.2g} (the test's floor)"
    return f"p = {c.p_value:.3g} (floor {c.p_floor:.2g})"


def confirmation_text(c: Change) -> str:
    """`confirmed`, `not confirmed` or `could not confirm`, with its note in parentheses; "" when none was asked."""
    if c.confirmation is None:
        return ""
    return c.confirmation + (f" ({c.confirmation_note})" if c.confirmation_note else "")


def _cell_magnitude(history: History, cell_id: str) -> tuple[float, float]:
    """What changed most: the largest |%| change of a rate, then the largest change in points."""
    rel = [abs(c.change) for c in history.changes if c.cell_id == cell_id and c.unit == "%"]
    pts = [abs(c.change) for c in history.changes if c.cell_id == cell_id and c.unit != "%"]
    return max(rel, default=0.0), max(pts, default=0.0)


def sorted_cells(history: History) -> list[str]:
    """Cells, what changed most first; unchanged cells by id."""
    cells = sorted({s.cell_id for s in history.series})
    return sorted(cells, key=lambda cid: tuple(-m for m in _cell_magnitude(history, cid)))


# ---------------------------------------------------------------------------------------------
# the plots

def _y_range(series: Series) -> tuple[float, float]:
    """The first view's y range: the points, widened by their intervals but never past twice the points' own spread
    (a one-repeat night's interval can be wide enough to flatten every other point); zoom shows the rest."""
    values = [p.value for p in series.points]
    lo, hi = min(values), max(values)
    spread = max(hi - lo, abs(hi) * 0.02, 1e-9)
    ends = [x for p in series.points for x in (p.low, p.high) if math.isfinite(x)]
    lo = max(min([lo, *ends]), lo - spread)
    hi = min(max([hi, *ends]), hi + spread)
    pad = (hi - lo) * 0.08 or 1.0
    return lo - pad, hi + pad


def _mark_x(history: History, mark: Mark) -> float:
    """Where an event sits among the nights: on its own night where it names one the history holds (an alarm's),
    else before the first night created after it (the right edge: after all)."""
    night = [i for i, n in enumerate(history.nights) if mark.get(col.run_id) and n.run.run_id == mark.get(col.run_id)]
    if night:
        return night[0]
    when = str(mark.get("when") or "")
    later = [i for i, n in enumerate(history.nights) if n.run.created_at and n.run.created_at > when]
    return (later[0] if later else len(history.nights)) - 0.5


def mark_letter(mark: Mark) -> str:
    """P a promotion, A an acknowledgement, an alarm's step by its first letter (O opened, W worse, G gone, F fixed)."""
    kind = str(mark.get("kind") or "")
    return str(mark.get("event") or "?")[:1].upper() if kind == "alarm" else ("P" if kind == "promotion" else "A")


def cell_marks(marks: Sequence[Mark], cell_id: str) -> list[Mark]:
    """The marks of one cell's trend, oldest first: every promotion, the cell's own acknowledgements and alarms."""
    return sorted((m for m in marks if m.get(col.cell_id) in (None, cell_id)), key=lambda m: m.get("when") or "")


def mark_items(marks: Sequence[Mark]) -> list[dict[str, str]]:
    """A cell's marks as its legend lists them: letter, when (to the minute) and words."""
    return [{"letter": mark_letter(m), "when": str(m.get("when") or "")[:16], "text": m.get("text")} for m in marks]


_TONE = {"opened": "bad", "worse": "bad", "gone": "good", "fixed": "good"}


def trend_chart(history: History, series: Series, marks: Sequence[Mark] = (), *, chart_id: str | None = None,
                height: int = 240, caption: str | None = None) -> Chart:
    """One metric of one cell over the nights: a point and its interval per night (hover: the night, its run, commit
    and value), each level between change points as a line, change points dashed with their number and change, a
    drift as a slope, and the marks (alarms, acknowledgements, promotions) dotted with their letter."""
    unit = _unit(series)
    nights = history.nights
    points = [p for p in series.points]
    drill = [bool(nights[p.night].fire_drill_pct) for p in points]
    data = []
    for name, keep, colour in (("night", False, COLOURS["info"]), ("fire-drill night", True, COLOURS["warn"])):
        part = [p for p, d in zip(points, drill) if d == keep]
        if not part:
            continue
        ends = [(p.low, p.high) if math.isfinite(p.low) and math.isfinite(p.high) else (None, None) for p in part]
        data.append({"type": "scattergl", "mode": "markers", "name": name, "x": [p.night + 1 for p in part],
                     "y": [p.value for p in part],
                     "error_y": interval([p.value for p in part], [e[0] for e in ends], [e[1] for e in ends])
                     | {"thickness": 1, "color": "rgba(9,105,218,0.45)"},
                     "customdata": [[nights[p.night].run_id, nights[p.night].commit, p.num_repeats,
                                     f" FIRE DRILL +{nights[p.night].fire_drill_pct:g}%" if keep else ""] for p in part],
                     "hovertemplate": "night %{x}: %{customdata[0]} (%{customdata[1]})<br>%{y:.4g} " + unit
                                      + ", %{customdata[2]} repeat(s)%{customdata[3]}<extra></extra>",
                     "marker": {"color": colour, "size": 6}})
    changes = plot_changes(history, series)
    for a, b, level in _levels(series, [c for c in changes if c.kind == "step"]):
        data.append({"type": "scatter", "mode": "lines", "name": "level", "legendgroup": "level",
                     "showlegend": not any(d.get("legendgroup") == "level" for d in data), "x": [a + 0.6, b + 0.4],
                     "y": [level, level], "hoverinfo": "skip",
                     "line": {"color": COLOURS["neutral"], "width": 2}})
    shapes, notes = [], []
    for k, c in enumerate(changes, start=1):
        colour = COLOURS["bad" if c.change < 0 else "good"]
        short = f"{k}: {c.change:+.1f}{'%' if c.unit == '%' else ' pt'}"
        tip = f"{c.kind} at night {c.night} ({c.run_id}): {change_text(c)}, {commit_range(c)}, {significance_text(c)}"
        if c.kind == "drift":
            data.append({"type": "scatter", "mode": "lines", "name": f"drift {short}", "x": [c.night, c.night +
                         c.nights_after - 1], "y": [c.before, c.after], "hovertemplate": tip + "<extra></extra>",
                         "line": {"color": colour, "width": 2, "dash": "dashdot"}})
            continue
        shapes.append(vline(c.night - 0.5, colour, "dash", 1.5))
        notes.append((c.night - 0.5, short, tip, colour))
    for m in marks:
        x = _mark_x(history, m) + 1
        colour = COLOURS[_TONE.get(str(m.get("event") or ""), "neutral")]
        shapes.append(vline(x, colour, "dot", 1.2))
        notes.append((x, mark_letter(m), str(m.get("text") or ""), colour))
    if notes:  # each change and mark's words on hover, at the top of the plot
        data.append({"type": "scatter", "mode": "markers+text", "name": "changes and marks", "x": [n[0] for n in notes],
                     "y": [1.0] * len(notes), "yaxis": "y2", "text": [n[1] for n in notes], "textposition": "top center",
                     "customdata": [n[2] for n in notes], "hovertemplate": "%{customdata}<extra></extra>",
                     "marker": {"symbol": "triangle-down", "size": 8, "color": [n[3] for n in notes]},
                     "textfont": {"color": [n[3] for n in notes], "size": 11}, "cliponaxis": False})
    lo, hi = _y_range(series)
    layout = {"xaxis": {"title": {"text": "night"}, "range": [0.5, len(nights) + 0.5]},
              "yaxis": {"title": {"text": unit}, "range": [lo, hi]},
              "yaxis2": {"overlaying": "y", "range": [0, 1.12], "visible": False, "fixedrange": True},
              "shapes": shapes, "showlegend": False, "margin": {"l": 60, "r": 12, "t": 22, "b": 40}}
    return Chart(id=chart_id or f"trend-{slug(series.cell_id)}-{slug(series.metric)}",
                 caption=caption or f"{series.metric} ({unit})", figure=figure(data, layout), height=height)


def plot_changes(history: History, series: Series) -> list[Change]:
    """The changes one plot marks, oldest first (their numbers on the plot and in its legend)."""
    return sorted((c for c in history.changes if c.cell_id == series.cell_id and c.metric == series.metric),
                  key=lambda c: (c.night, c.kind))


def _levels(series: Series, steps: Sequence[Change]) -> list[tuple[int, int, float]]:
    """Each segment between change points: its first night, the night after it (0-based) and its level (the
    geometric mean of a rate's points, the mean of a fraction's)."""
    starts = sorted(c.night - 1 for c in steps)  # Change.night is 1-based
    edges = [series.points[0].night, *starts, series.points[-1].night + 1]
    out = []
    for a, b in zip(edges, edges[1:]):
        inside = [p.value for p in series.points if a <= p.night < b]
        if inside:
            level = math.exp(sum(map(math.log, inside)) / len(inside)) if min(inside) > 0 else sum(inside) / len(inside)
            out.append((a, b, level))
    return out


def legend(changes: Sequence[Change]) -> list[dict[str, Any]]:
    """The plot's changes in words (templates/macros.html's change_legend): kind, night, change with its interval,
    commit range, significance, the A/B's word; numbered in this order."""
    return [{"direction": "down" if c.change < 0 else "up", "kind": c.kind, "night": c.night, col.run_id: c.run_id,
             "change": change_text(c), "commits": commit_range(c), "significance": significance_text(c),
             "confirmation": confirmation_text(c) if c.confirmation else ""} for c in changes]


# ---------------------------------------------------------------------------------------------
# the page


_CONFIRMATION_CSS = {"confirmed": "confirmed", "not confirmed": "unconfirmed", "could not confirm": "unknown"}


def _changes_table(history: History) -> Markup:
    rows = []
    for c in history.changes:
        tone = "bad" if c.change < 0 and c.metric != "data wait" or c.change > 0 and c.metric == "data wait" else "good"
        rows.append({
            "night": c.night, col.run_id: c.run_id, col.cell_id: c.cell_id, "metric": c.metric, "kind": c.kind,
            "tone": tone, "change": change_text(c), "level": f"{c.before:.4g} -> {c.after:.4g}",
            "significance": significance_text(c), "commits": commit_range(c), "is_new": c.is_new,
            "drill": f"FIRE DRILL +{c.fire_drill_pct:g}%" if c.fire_drill_pct else "",
            "confirmation": c.confirmation, "confirmation_note": c.confirmation_note,
            "confirmation_css": _CONFIRMATION_CSS.get(c.confirmation or "", "")
            + (f" {tone}" if c.confirmation == "confirmed" else "")})
    return macro("history.html:changes_table", {"confidence": f"{history.settings.confidence:.0%}", "rows": rows})


def _work_section(history: History) -> Markup:
    """The nights a cell's counted work changed (exact: no statistics), newest first; nothing without work."""
    return macro("history.html:work_section", [
        {"night": w.night, col.run_id: w.run_id, col.cell_id: w.cell_id, "words": w.words, "is_new": w.is_new,
         "drill": "", "commits": f"{w.commit_from}..{w.commit_to}"} for w in history.work_steps])


def _cell_figures(history: History, marks: Sequence[Mark] = ()) -> Markup:
    by_cell: dict[str, list[Series]] = {}
    for s in history.series:
        by_cell.setdefault(s.cell_id, []).append(s)
    cells = []
    for cid in sorted_cells(history):
        changed = {c.metric for c in history.changes if c.cell_id == cid}
        shown = [s for s in by_cell[cid] if s.metric == "throughput" or s.metric in changed]
        mine = cell_marks(marks, cid)
        rel, pts = _cell_magnitude(history, cid)
        note = f"largest change {rel:.1f}%" if rel else (f"largest change {pts:.1f} pt" if pts else "no change")
        cells.append({col.cell_id: cid, "note": note, "marks": mark_items(mine),
                      "plots": [(trend_chart(history, s, mine), legend(plot_changes(history, s))) for s in shown]})
    return macro("history.html:cell_trends", cells)


def _unit(series: Series) -> str:
    return next(m.unit for m in METRICS if m.name == series.metric)


def _nights_table(history: History) -> Markup:
    def notes(n) -> str:
        said = [f"+{n.fire_drill_pct:g}% fire drill" if n.fire_drill_pct else "", n.busy_text()]
        return "; ".join(x for x in said if x)

    return macro("history.html:nights_table", [
        {"busy": bool(n.busy), col.run_id: n.run_id, "created_at": n.run.created_at, "commit": n.commit,
         "notes": notes(n)} for n in history.nights])


def _skipped(history: History) -> Markup:
    return macro("history.html:skipped", [(path, why) for path, why, _ in history.skipped])


def method_text(history: History) -> str:
    s = history.settings
    sims = s.num_simulations or changepoint.nightsplit.simulations_for(s.alpha)
    return (f"One point per night and cell: the mean over the run's ok repeats (interval: t over repeats; one "
            f"repeat: its window's own). Change points, on log rates and on fractions as they are: each night is "
            f"its repeats, around a level shared by its segment plus a night effect of its own (a two-level model); "
            f"the best split of every segment is tested by its standardized step, the p-value being the share of "
            f"{sims} series simulated from the fitted no-change model whose best split is as extreme, so the choice "
            f"of the split is paid for (p floor 1/{sims + 1}); a split is kept when p <= {s.alpha:g}, at least "
            f"{s.min_segment} nights a side; then steps smaller than the practical floor ({s.floor_pct:g}% for "
            f"rates, {100 * s.top1_floor:g} pt top-1, {100 * s.data_wait_floor:g} pt data wait) are merged away. "
            f"Change: t interval at {s.confidence:.0%} between the two levels. Drift: a slope over the last "
            f"{s.drift_nights} nights (levels step at the change points) whose {s.confidence:.0%} interval excludes 0 "
            f"and whose total exceeds the floor; a series of fewer nights is not assessed. A/B of the commits: the "
            f"nightly reruns a new step's cells interleaved under the commit before and the commit after it; only "
            f"a confirmed slowdown fails the night. Fire-drill nights are shown and marked, never left out. Windows taken "
            f"under interference are left out of a night's points; a cell with fewer than half of its windows clean "
            f"is busy that night: marked, and no point of its series.")


def render_html(history: History, marks: Sequence[Mark] = ()) -> str:
    nights = history.nights
    span = f"{nights[0].run_id} .. {nights[-1].run_id}" if nights else "no nights"
    new = sum(c.is_new for c in history.changes)
    confirmed = sum(c.confirmation == "confirmed" for c in history.changes)
    subtitle = (f"{len(nights)} night(s) in {history.folder} ({span}) \u00b7 {len(history.changes)} change(s), "
                f"{new} new tonight, {confirmed} confirmed by A/B \u00b7 {len(history.skipped)} run(s) skipped"
                + (f" \u00b7 {history.drift_note()}" if history.drift_note() else ""))
    return render("page.html", **page_values(
        "nvbench history", subtitle, f"{method_text(history)} Written {datetime.now(UTC).isoformat(timespec='seconds')}.",
        css=("report.css", "history.css")), banner="", sections=[
        ("changes", "Change points and drifts, newest first", _changes_table(history)),
        ("", "", _work_section(history)),
        ("cells", "Cells, what changed most first", _cell_figures(history, marks)),
        ("nights", "Nights", _nights_table(history)),
        ("skipped", "Skipped runs", _skipped(history))])


# ---------------------------------------------------------------------------------------------
# Markdown


def _md_row(c: Change) -> str:
    tags = (" **new**" if c.is_new else "") + (f" FIRE DRILL +{c.fire_drill_pct:g}%" if c.fire_drill_pct else "")
    ab = confirmation_text(c) or ("" if c.kind == "drift" else "not asked")
    ab = f"**{esc_md(ab)}**" if c.confirmation == "confirmed" else esc_md(ab)
    return (f"| {c.night} | {esc_md(c.run_id)}{tags} | {esc_md(c.cell_id)} | {esc_md(c.metric)} | {c.kind} | "
            f"{esc_md(change_text(c))} | {esc_md(significance_text(c))} | {esc_md(commit_range(c))} | {ab} |")


_HEADER = ["| night | run | cell | metric | kind | change | significance | commits | A/B of the commits |",
           "|---|---|---|---|---|---|---|---|---|"]


def _work_lines(steps) -> list[str]:
    """`- work changed at night 3 (run): cell: forward +16 aten::mm per step (commits a..b)`, one per step."""
    return [f"- {esc_md(w.text())} (commits {esc_md(w.commit_from)}..{esc_md(w.commit_to)})" for w in steps]


def new_changes_markdown(history: History) -> str:
    """The section the nightly's summary.md gets: tonight's new change points and drifts, and tonight's work."""
    new = [c for c in history.changes if c.is_new]
    work = _work_lines([w for w in history.work_steps if w.is_new])
    lines = ["", "### Change points new tonight", ""]
    lines += _HEADER + [_md_row(c) for c in new] if new else [f"None (history of {len(history.nights)} night(s))."]
    return "\n".join(lines + ["", *work] + ([""] if work else []))


def render_markdown(history: History) -> str:
    lines = [f"## nvbench history: {len(history.nights)} night(s), {len(history.changes)} change(s)", ""]
    if history.changes:
        lines += _HEADER + [_md_row(c) for c in history.changes]
    else:
        lines.append("No change point and no drift in any series.")
    if history.work_steps:
        lines += ["", "**Work changed** (counted exactly, night against night, newest first):", "",
                  *_work_lines(history.work_steps)]
    if note := history.drift_note():
        lines += ["", f"**{esc_md(note[0].upper() + note[1:])}.**"]
    if busy := [(i, n) for i, n in enumerate(history.nights, start=1) if n.busy]:
        lines += ["", "**Busy nights** (the machine was busy: these cells' nights are left out of their series, "
                      "neither a change point nor evidence against one):", ""]
        lines += [f"- night {i} ({esc_md(n.run_id)}): {esc_md(n.busy_text())}" for i, n in busy]
    if history.skipped:
        lines += ["", "**Skipped runs:**", ""] + [f"- {esc_md(path)}: {esc_md(why)}" for path, why, _ in history.skipped]
    lines += ["", f"_{esc_md(method_text(history))}_", ""]
    return "\n".join(lines)
