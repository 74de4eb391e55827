"""The pages' charts as plotly.js figures (drawn in the browser by templates/charts.js from the plotly package's
plotly.min.js): the report's change, throughput, accuracy and bar plots of a comparison, each cell's step times read
from the run folder's steps/*.parquet, and the pieces the history and the dashboard share. A Chart holds the numbers
it shows as JSON data, read from the same rows the tables read: a test reads them back from the page."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from harness.analysis.judge.verdict import Comparison, MetricVerdict
from harness.analysis.pages.render import Markup, macro
from harness.analysis.pages.wording import cell_labels, cell_means, change_text, sorted_verdicts
from harness.analysis.load.step_times import StepSeries
from harness.matrix.sections import AXES
from harness.catalogue import col

COLOURS = {"bad": "#cf222e", "good": "#1a7f37", "warn": "#9a6700", "neutral": "#6e7781", "info": "#0969da",
           "line": "#d1d9e0", "panel": "#f6f8fa", "warn-bg": "#fff8c5", "ink": "#1f2328"}
"""The pages' colours (templates/report.css's), for the charts; a colour always goes with words."""
REPEAT_COLOURS = ("#0969da", "#bf3989", "#1a7f37", "#9a6700", "#6e7781")
_VERDICT_TONE = {"regression": "bad", "failed": "bad", "suspect regression": "bad", "improvement": "good",
                 "suspect improvement": "good", "insufficient data": "warn", "not comparable": "warn"}
_ROW_PX, _FRAME_PX = 24, 90


def verdict_colour(verdict: str) -> str:
    return COLOURS[_VERDICT_TONE.get(verdict, "neutral")]


def finite(value: Any) -> Any:
    """JSON for a chart: non-finite floats as null (JSON has no NaN), numpy values as Python ones."""
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.ndarray):
        return [finite(v) for v in value.tolist()]
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


@dataclass(frozen=True, slots=True, kw_only=True)
class Chart:
    """One chart of a page: a plotly.js figure (data and layout; None: nothing to draw, `empty` says why), its
    caption and the words under it. `id` is its box's id, unique on the page."""

    id: str
    caption: str
    figure: Mapping[str, Any] | None
    note: str = ""
    empty: str = "nothing to plot"
    height: int = 300

    def html(self) -> Markup:
        return macro("figure", self)


def figure(data: Sequence[Mapping[str, Any]], layout: Mapping[str, Any]) -> dict[str, Any]:
    """A plotly.js figure with the pages' frame: small margins, closest-point hover, a legend that filters."""
    base = {"margin": {"l": 60, "r": 16, "t": 8, "b": 44}, "hovermode": "closest", "font": {"size": 12},
            "legend": {"orientation": "h", "y": -0.2}, "plot_bgcolor": "#ffffff", "paper_bgcolor": "#ffffff"}
    return finite({"data": list(data), "layout": base | dict(layout)})


def rows_layout(labels: Sequence[str], x_title: str, **extra: Any) -> dict[str, Any]:
    """A horizontal chart's layout: one row a label, top to bottom in the given order."""
    return {"margin": {"l": 230, "r": 16, "t": 8, "b": 60}, "xaxis": {"title": {"text": x_title}, "zeroline": False},
            "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": list(labels),
                      "autorange": "reversed", "automargin": True}} | extra


def rows_height(n: int) -> int:
    return _FRAME_PX + _ROW_PX * max(n, 1)


def band(lo: float, hi: float, colour: str = COLOURS["panel"]) -> dict[str, Any]:
    """A shaded vertical band across the whole plot (the practical floor)."""
    return {"type": "rect", "xref": "x", "yref": "paper", "x0": lo, "x1": hi, "y0": 0, "y1": 1,
            "fillcolor": colour, "line": {"width": 0}, "layer": "below"}


def vline(x: float, colour: str = COLOURS["ink"], dash: str = "solid", width: float = 1.0) -> dict[str, Any]:
    return {"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
            "line": {"color": colour, "dash": dash, "width": width}}


def interval(effect: Sequence[float | None], low: Sequence[float | None], high: Sequence[float | None]) -> dict:
    """Asymmetric error bars from each point's interval (none where an end is missing)."""
    plus = [None if e is None or h is None else h - e for e, h in zip(effect, high)]
    minus = [None if e is None or lo is None else e - lo for e, lo in zip(effect, low)]
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "thickness": 2, "width": 0}


def _finite(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def change_chart(comparison: Comparison, cells: Iterable[str] | None = None, *, chart_id: str = "chart-change",
                 caption: str = "Change vs baseline, with intervals") -> Chart:
    """Each compared cell's (of `cells`, None: all) change of throughput with its interval (and the fast-step
    rate's where tested), one trace a verdict so the legend filters by it; the floor shaded."""
    keep = None if cells is None else set(cells)
    rows = [v for v in sorted_verdicts(comparison) if v.throughput.effect_pct is not None
            and (keep is None or v.cell_id in keep)]
    if not rows:
        return Chart(id=chart_id, caption="Change vs baseline", figure=None, empty="no cell could be compared")
    floor = comparison.thresholds.floor_pct
    labels = [v.label for v in rows]
    data = []
    for verdict in dict.fromkeys(v.verdict for v in rows):
        part = [v for v in rows if v.verdict == verdict]
        data.append({"type": "scatter", "mode": "markers", "name": verdict, "legendgroup": verdict,
                     "x": [v.throughput.effect_pct for v in part], "y": [v.label for v in part],
                     "error_x": interval(*zip(*(_ends(v.throughput) for v in part))),
                     "customdata": [[v.cell_id, change_text(v)] for v in part],
                     "hovertemplate": "%{customdata[0]}<br>" + verdict + ": %{customdata[1]}<extra></extra>",
                     "marker": {"color": verdict_colour(verdict), "size": 9}})
    fast = [v for v in rows if v.fast_step is not None and None not in _ends(v.fast_step)]
    if fast:
        data.append({"type": "scatter", "mode": "markers", "name": "fast-step rate",
                     "x": [v.fast_step.effect_pct for v in fast], "y": [v.label for v in fast],
                     "error_x": interval(*zip(*(_ends(v.fast_step) for v in fast))) | {"thickness": 1},
                     "customdata": [[v.cell_id] for v in fast],
                     "hovertemplate": "%{customdata[0]}<br>fast steps %{x:+.1f}%<extra></extra>",
                     "marker": {"symbol": "circle-open", "size": 7, "color": COLOURS["ink"]}})
    layout = rows_layout(labels, "change of throughput, % (right of 0: faster)",
                         shapes=[band(-floor, floor), vline(0.0)])
    note = (f"Dots: change of throughput, % of the baseline; bars: interval; shaded: the +/-{floor:g}% practical "
            "floor. Right of 0 is faster; good: inside the shaded floor or right of it. Click a verdict in the legend "
            "to hide or show its cells.")
    if fast:
        note += " Hollow dots: the fast-step rate (the quieter metric; either can call a regression)."
    return Chart(id=chart_id, caption=caption, figure=figure(data, layout), note=note, height=rows_height(len(rows)))


def _ends(metric: MetricVerdict) -> tuple[float | None, float | None, float | None]:
    return metric.effect_pct, metric.ci_low_pct, metric.ci_high_pct


def throughput_charts(comparison: Comparison) -> list[Chart]:
    """One dot chart per axis that varies: each cell's mean throughput at its axis value (filled: this run,
    hollow: the baseline)."""
    by_id = {v.cell_id: v for v in comparison.verdicts}
    means = cell_means(comparison.candidate.rows, col.throughput_img_per_s)
    if not means:
        return [Chart(id="chart-throughput", caption="Throughput by axis", figure=None, empty="no cell finished")]
    axes = [a for a in AXES if len({getattr(by_id[c], a) for c in means}) > 1] or ["backend"]
    charts = []
    for axis in axes:
        groups = sorted({str(getattr(by_id[c], axis)) for c in means})
        ids = sorted(means, key=lambda c: (groups.index(str(getattr(by_id[c], axis))), c))
        based = [c for c in ids if by_id[c].throughput.baseline_value is not None]
        data = [{"type": "scatter", "mode": "markers", "name": "baseline", "x": [by_id[c].throughput.baseline_value
                                                                                 for c in based],
                 "y": [f"{axis} = {getattr(by_id[c], axis)}" for c in based], "customdata": based,
                 "hovertemplate": "%{customdata} baseline: %{x:.1f} img/s<extra></extra>",
                 "marker": {"symbol": "circle-open", "size": 10, "color": COLOURS["info"]}}] if based else []
        data.append({"type": "scatter", "mode": "markers", "name": "this run", "x": [means[c] for c in ids],
                     "y": [f"{axis} = {getattr(by_id[c], axis)}" for c in ids], "customdata": ids,
                     "hovertemplate": "%{customdata}: %{x:.1f} img/s<extra></extra>",
                     "marker": {"size": 8, "color": COLOURS["info"]}})
        layout = rows_layout([f"{axis} = {g}" for g in groups], "images/s") | {
            "xaxis": {"title": {"text": "images/s"}, "rangemode": "tozero"}}
        charts.append(Chart(id=f"chart-throughput-{slug(axis)}", caption=f"Throughput by {axis}",
                            figure=figure(data, layout), height=rows_height(len(groups)),
                            note="Images per second, filled: this run; hollow: baseline. One dot per cell (hover for "
                                 "its name). Higher is better."))
    return charts


TOP1_LABEL = "top-1 accuracy (fraction of validation images)"


def accuracy_chart(comparison: Comparison) -> Chart:
    rows = [v for v in sorted_verdicts(comparison) if v.candidate_top1 is not None]
    layout_x = {"title": {"text": TOP1_LABEL}, "range": [0, 1]}
    if not rows:
        means = cell_means(comparison.candidate.rows, "top1")
        if not means:
            return Chart(id="chart-accuracy", caption="Top-1 accuracy", figure=None,
                         empty="no accuracy measured (synthetic data has none)")
        ids, names = sorted(means), cell_labels(comparison.candidate.rows)
        data = [{"type": "scatter", "mode": "markers", "name": "this run", "x": [means[c] for c in ids],
                 "y": [names[c] for c in ids], "customdata": ids,
                 "hovertemplate": "%{customdata}: top-1 %{x:.3f}<extra></extra>",
                 "marker": {"size": 8, "color": COLOURS["info"]}}]
        return Chart(id="chart-accuracy", caption="Top-1 accuracy", height=rows_height(len(ids)),
                     figure=figure(data, rows_layout([names[c] for c in ids], TOP1_LABEL) | {"xaxis": layout_x}),
                     note="Higher is better; the smoke and tiny recipes train too briefly to reach the reference's "
                          "accuracy.")
    tol = comparison.thresholds.accuracy_tolerance
    based = [v for v in rows if v.baseline_top1 is not None]
    data = [{"type": "scatter", "mode": "markers", "name": f"baseline +/- {tol:g}",
             "x": [v.baseline_top1 for v in based], "y": [v.label for v in based],
             "error_x": {"type": "constant", "value": tol, "thickness": 6, "width": 0, "color": "rgba(9,105,218,0.2)"},
             "customdata": [v.cell_id for v in based],
             "hovertemplate": "%{customdata} baseline: %{x:.3f}<extra></extra>",
             "marker": {"symbol": "circle-open", "size": 10, "color": COLOURS["info"]}}] if based else []
    data.append({"type": "scatter", "mode": "markers", "name": "this run", "x": [v.candidate_top1 for v in rows],
                 "y": [v.label for v in rows], "customdata": [[v.cell_id, v.accuracy_verdict] for v in rows],
                 "hovertemplate": "%{customdata[0]}: %{x:.3f} (%{customdata[1]})<extra></extra>",
                 "marker": {"size": 8, "color": COLOURS["info"]}})
    return Chart(id="chart-accuracy", caption="Top-1 accuracy against the band", height=rows_height(len(rows)),
                 figure=figure(data, rows_layout([v.label for v in rows], TOP1_LABEL) | {"xaxis": layout_x}),
                 note=f"Band: baseline +/- {tol:g}; filled: this run. Higher is better; good: inside the band or "
                      "right of it.")


def bar_chart(comparison: Comparison, column: str, caption: str, x_label: str, note: str,
              *, percent: bool = False, at_least: float = 1.0) -> Chart:
    means = cell_means(comparison.candidate.rows, column)
    if not means:
        return Chart(id=f"chart-{slug(column)}", caption=caption, figure=None, empty=f"no {column} in this run")
    ids, names = sorted(means, key=lambda c: (means[c], c)), cell_labels(comparison.candidate.rows)
    scale = 100.0 if percent else 1.0
    hi = max(at_least, max(means.values())) * scale
    data = [{"type": "bar", "orientation": "h", "name": caption, "x": [means[c] * scale for c in ids],
             "y": [names[c] for c in ids], "customdata": ids, "marker": {"color": COLOURS["info"]},
             "hovertemplate": "%{customdata}: %{x:.3g}<extra></extra>"}]
    layout = rows_layout([names[c] for c in ids], x_label) | {"xaxis": {"title": {"text": x_label},
                                                                          "range": [0, hi * 1.04]}, "showlegend": False}
    return Chart(id=f"chart-{slug(column)}", caption=caption, figure=figure(data, layout), note=note,
                 height=rows_height(len(ids)))


# ---------------------------------------------------------------------------------------------
# step times of each cell (steps/*.parquet)


MAX_REPEATS_PLOTTED, MAX_POINTS = 5, 400
"""A cell's step-time plot draws at most this many repeats, each with at most this many points."""


def _thin(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most MAX_POINTS points that keep every bucket's fastest and slowest step (stalls stay visible)."""
    if x.size <= MAX_POINTS:
        return x, y
    keep = []
    for bucket in np.array_split(np.arange(x.size), MAX_POINTS // 2):
        pair = sorted((bucket[np.argmin(y[bucket])], bucket[np.argmax(y[bucket])]))
        keep.extend(dict.fromkeys(pair))
    return x[keep], y[keep]


def step_chart(cid: str, series: Sequence[StepSeries], name: str = "") -> Chart:
    """One cell's step times (ms per step against the step index), a WebGL line per repeat: the warmup shaded,
    each data epoch's first step dashed; the y range clipped above the slowest measured step (zoom shows more)."""
    drawn = series[:MAX_REPEATS_PLOTTED]
    measured = np.concatenate([s.time_s[~s.is_warmup] for s in drawn]) * 1e3
    every = np.concatenate([s.time_s for s in drawn]) * 1e3
    top = float(measured.max() if measured.size else every.max()) * 1.15 or 1.0
    data = []
    for i, s in enumerate(drawn):
        x, y = _thin(s.step.astype(float), s.time_s * 1e3)
        data.append({"type": "scattergl", "mode": "lines", "name": f"repeat {s.repeat}", "x": x, "y": y,
                     "line": {"color": REPEAT_COLOURS[i % len(REPEAT_COLOURS)], "width": 1.2},
                     "hovertemplate": f"repeat {s.repeat}, step %{{x}}: %{{y:.3g}} ms<extra></extra>"})
    shapes = []
    warm = drawn[0].step[drawn[0].is_warmup]
    if warm.size:
        shapes.append(band(-0.5, float(warm.max()) + 0.5, COLOURS["warn-bg"]))
    shapes += [vline(float(step), COLOURS["neutral"], "dash") for step in drawn[0].step[drawn[0].is_epoch_start]]
    last = max(int(s.step.max()) for s in drawn)
    layout = {"xaxis": {"title": {"text": "optimizer step"}, "dtick": max(1, round(last / 8)), "tick0": 0},
              "yaxis": {"title": {"text": "step time, ms"}, "range": [0, top]}, "shapes": shapes}
    clipped = float(every.max()) > top
    more = f" The first {MAX_REPEATS_PLOTTED} of {len(series)} repeats are drawn." \
        if len(series) > MAX_REPEATS_PLOTTED else ""
    note = ("Rank 0's time per optimizer step, one line per repeat. Shaded: warmup (run, recorded, not counted); "
            "dashed: a data epoch starts. Lower is better; good: a flat line right after the warmup. Spikes are "
            "stalls (data, synchronisation, another process), a step up at a dashed line an epoch boundary, a slow "
            "climb throttling." + (f" Steps above {top:.3g} ms are above the view (slowest: {every.max():.4g} ms): "
                                   "zoom out to see them." if clipped else "") + more)
    return Chart(id=f"chart-steps-{slug(cid)}", caption=f"Step times: {name or cid}", figure=figure(data, layout),
                 note=note, height=260)


def step_details(steps: Mapping[str, Sequence[StepSeries]], names: Mapping[str, str]) -> Markup:
    """One closed <details> per cell: a reader opens the cells whose step times they want to see (the chart is
    drawn when its box opens)."""
    cells = []
    for cid in sorted(steps, key=lambda c: names.get(c, c)):
        series = steps[cid]
        measured = np.concatenate([s.time_s[~s.is_warmup] for s in series]) * 1e3
        median = f"median {np.median(measured):.3g} ms over {measured.size} measured steps" if measured.size else \
            "no measured step"
        name = names.get(cid, cid)
        cells.append({"id": cid, "label": name, "median": median, "chart": step_chart(cid, series, name)})
    return macro("step_details", cells)
