"""The report's inline SVG plots: the horizontal chart they share (hplot), the change, throughput, accuracy and
bar plots of a comparison, and each cell's step times read from the run folder's steps/*.parquet."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow.compute as pc

from harness.analysis.judge.verdict import Comparison, MetricVerdict
from harness.analysis.pages.wording import cell_means, change_text, css_class, esc, sorted_verdicts
from harness.results import store
from harness.matrix.cells import cell_label as label
from harness.matrix.sections import AXES
from harness.catalogue import col


_LABEL_W, _PLOT_W, _ROW_H, _TOP, _BOTTOM = 220, 340, 20, 10, 40


def ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round axis values from lo to hi, about `count` steps apart (steps of 1, 2, 2.5 or 5 times a power of ten)."""
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def hplot(labels: Sequence[str], lo: float, hi: float, draw: Callable[[int, float, Callable[[float], float]], str],
          *, x_label: str, fmt: str = "g", zero: float | None = None,
          band: tuple[float, float] | None = None, titles: Sequence[str] | None = None) -> str:
    """A horizontal chart, one row per label; `draw(i, y, sx)` returns the SVG of row i (already escaped)."""
    if not labels:
        return "<p>nothing to plot</p>"
    if not hi > lo:
        lo, hi = lo - 1, hi + 1
    pad = (hi - lo) * 0.04
    lo, hi = lo - pad, hi + pad
    width, height = _LABEL_W + _PLOT_W + 20, _TOP + _ROW_H * len(labels) + _BOTTOM
    bottom = _TOP + _ROW_H * len(labels)

    def sx(value: float) -> float:
        return _LABEL_W + (min(max(value, lo), hi) - lo) / (hi - lo) * _PLOT_W

    parts = [f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="{esc(x_label)}">']
    if band is not None:
        parts.append(f'<rect class="floor" x="{sx(band[0]):.1f}" y="{_TOP}" width="{sx(band[1]) - sx(band[0]):.1f}" '
                     f'height="{bottom - _TOP}"/>')
    for tick in ticks(lo, hi):
        x = sx(tick)
        parts.append(f'<line class="axis" x1="{x:.1f}" y1="{_TOP}" x2="{x:.1f}" y2="{bottom}"/>'
                     f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle">{esc(format(tick, fmt))}</text>')
    if zero is not None and lo <= zero <= hi:
        parts.append(f'<line class="zero" x1="{sx(zero):.1f}" y1="{_TOP}" x2="{sx(zero):.1f}" y2="{bottom}"/>')
    for i, name in enumerate(labels):
        y = _TOP + _ROW_H * i + _ROW_H / 2
        shown = name if len(name) <= 34 else name[:33] + "\u2026"
        tip = (titles[i] if titles else name)
        parts.append(f'<text x="{_LABEL_W - 6}" y="{y + 4:.1f}" text-anchor="end"><title>{esc(tip)}</title>'
                     f'{esc(shown)}</text>')
        parts.append(draw(i, y, sx))
    parts.append(f'<text x="{_LABEL_W + _PLOT_W / 2:.1f}" y="{height - 6}" text-anchor="middle">{esc(x_label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _dot(x: float, y: float, css: str, tip: str, r: float = 4.5) -> str:
    return f'<circle class="{esc(css)}" cx="{x:.1f}" cy="{y:.1f}" r="{r}"><title>{esc(tip)}</title></circle>'


def _figure(caption: str, svg: str, note: str = "") -> str:
    return f"<figure><figcaption>{esc(caption)}</figcaption>{svg}" + (f"<p>{esc(note)}</p>" if note else "") + \
        "</figure>"


def _finite(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def change_plot(comparison: Comparison) -> str:
    rows = [v for v in sorted_verdicts(comparison) if v.throughput.effect_pct is not None]
    if not rows:
        return _figure("Change vs baseline", "<p>no cell could be compared</p>")
    floor = comparison.thresholds.floor_pct
    fast = _finite([x for v in rows if v.fast_step for x in _ends(v.fast_step)])
    ends = _finite([x for v in rows for x in _ends(v.throughput)]) + fast + [floor, -floor]
    lo, hi = min(ends), max(ends)

    def draw(i: int, y: float, sx) -> str:
        v = rows[i]
        css = css_class(v.verdict)
        tip = f"{v.cell_id}: {v.verdict}, {change_text(v)}"
        t, f = v.throughput, v.fast_step
        line = ""
        if t.ci_low_pct is not None and t.ci_high_pct is not None:
            line = (f'<line class="ci {esc(css)}" x1="{sx(t.ci_low_pct):.1f}" y1="{y:.1f}" '
                    f'x2="{sx(t.ci_high_pct):.1f}" y2="{y:.1f}"/>')
        line += _dot(sx(t.effect_pct), y, css, tip)
        if f is not None and None not in _ends(f):
            y2 = y + 5  # the fast-step rate just below: hollow dot, dashed interval
            line += (f'<line class="ci fast {esc(css)}" x1="{sx(f.ci_low_pct):.1f}" y1="{y2:.1f}" '
                     f'x2="{sx(f.ci_high_pct):.1f}" y2="{y2:.1f}"/>') + \
                _dot(sx(f.effect_pct), y2, f"fast {css}", tip, r=3)
        return line

    svg = hplot([label(v.cell_id) for v in rows], lo, hi, draw, x_label="change, %", zero=0.0,
                band=(-floor, floor), titles=[v.cell_id for v in rows])
    note = (f"Dots: change of throughput, % of the baseline; lines: interval; shaded: the +/-{floor:g}% practical "
            "floor. Right of 0 is faster; good: inside the shaded floor or right of it.")
    if fast:
        note += " Hollow dots, dashed lines: the fast-step rate (the quieter metric; either can call a regression)."
    return _figure("Change vs baseline, with intervals", svg, note)


def _ends(metric: MetricVerdict) -> tuple[float | None, float | None, float | None]:
    return metric.effect_pct, metric.ci_low_pct, metric.ci_high_pct


def throughput_plots(comparison: Comparison) -> list[str]:
    """One dot plot per axis that varies: each cell's mean throughput at its axis value (filled: this run,
    hollow: the baseline)."""
    by_id = {v.cell_id: v for v in comparison.verdicts}
    means = cell_means(comparison.candidate.rows, col.throughput_img_per_s)
    if not means:
        return [_figure("Throughput by axis", "<p>no cell finished</p>")]
    axes = [a for a in AXES if len({getattr(by_id[c], a) for c in means}) > 1] or ["backend"]
    values = list(means.values()) + _finite(by_id[c].throughput.baseline_value for c in means)
    figures = []
    for axis in axes:
        groups = sorted({str(getattr(by_id[c], axis)) for c in means})
        members = {g: [c for c in means if str(getattr(by_id[c], axis)) == g] for g in groups}

        def draw(i: int, y: float, sx, members=members, groups=groups) -> str:
            out = []
            for cid in members[groups[i]]:
                base = by_id[cid].throughput.baseline_value
                if base is not None:
                    out.append(_dot(sx(base), y, "base", f"{cid} baseline: {base:.1f} img/s", 4))
                out.append(_dot(sx(means[cid]), y, "cand", f"{cid}: {means[cid]:.1f} img/s", 3.5))
            return "".join(out)

        svg = hplot([f"{axis} = {g}" for g in groups], 0.0, max(values), draw, x_label="images/s")
        figures.append(_figure(f"Throughput by {axis}", svg, "Images per second, filled: this run; hollow: "
                               "baseline. One dot per cell. Higher is better."))
    return figures


TOP1_LABEL = "top-1 accuracy (fraction of validation images)"


def accuracy_plot(comparison: Comparison) -> str:
    rows = [v for v in sorted_verdicts(comparison) if v.candidate_top1 is not None]
    if not rows:
        means = cell_means(comparison.candidate.rows, "top1")
        if not means:
            return _figure("Top-1 accuracy", "<p>no accuracy measured (synthetic data has none)</p>")
        ids = sorted(means)
        svg = hplot([label(c) for c in ids], 0.0, 1.0, lambda i, y, sx: _dot(sx(means[ids[i]]), y, "cand",
                    f"{ids[i]}: top-1 {means[ids[i]]:.3f}"), x_label=TOP1_LABEL, titles=ids)
        return _figure("Top-1 accuracy", svg, "Higher is better; the smoke and tiny recipes train too briefly to "
                       "reach the reference's accuracy.")
    tol = comparison.thresholds.accuracy_tolerance

    def draw(i: int, y: float, sx) -> str:
        v = rows[i]
        out = []
        if v.baseline_top1 is not None:
            lo, hi = v.baseline_top1 - tol, v.baseline_top1 + tol
            out.append(f'<rect class="band" x="{sx(lo):.1f}" y="{y - 7:.1f}" width="{sx(hi) - sx(lo):.1f}" '
                       'height="14"/>')
            out.append(_dot(sx(v.baseline_top1), y, "base", f"{v.cell_id} baseline: {v.baseline_top1:.3f}", 4))
        tip = f"{v.cell_id}: {v.candidate_top1:.3f} ({v.accuracy_verdict})"
        out.append(_dot(sx(v.candidate_top1), y, "cand", tip, 3.5))
        return "".join(out)

    svg = hplot([label(v.cell_id) for v in rows], 0.0, 1.0, draw, x_label=TOP1_LABEL, titles=[v.cell_id for v in rows])
    return _figure("Top-1 accuracy against the band", svg, f"Band: baseline +/- {tol:g}; filled: this run. Higher "
                   "is better; good: inside the band or right of it.")


def bar_plot(comparison: Comparison, column: str, caption: str, x_label: str, note: str,
             *, percent: bool = False, at_least: float = 1.0) -> str:
    means = cell_means(comparison.candidate.rows, column)
    if not means:
        return _figure(caption, f"<p>no {esc(column)} in this run</p>")
    ids = sorted(means, key=lambda c: (means[c], c))
    scale = 100.0 if percent else 1.0
    hi = max(at_least, max(means.values())) * scale

    def draw(i: int, y: float, sx) -> str:
        value = means[ids[i]] * scale
        return (f'<rect class="bar" x="{sx(0):.1f}" y="{y - 6:.1f}" width="{max(0.5, sx(value) - sx(0)):.1f}" '
                f'height="12"><title>{esc(ids[i])}: {value:.3g}</title></rect>')

    svg = hplot([label(c) for c in ids], 0.0, hi, draw, x_label=x_label, titles=ids)
    return _figure(caption, svg, note)


# ---------------------------------------------------------------------------------------------
# step times of each cell (steps/*.parquet)


@dataclass(frozen=True, slots=True)
class StepSeries:
    """Rank 0's optimizer steps of one (cell, repeat), in order."""

    repeat: int
    step: np.ndarray
    time_s: np.ndarray
    is_warmup: np.ndarray
    is_epoch_start: np.ndarray


MAX_REPEATS_PLOTTED, MAX_POINTS = 5, 400
"""A cell's step-time plot draws at most this many repeats, each with at most this many points."""


def load_steps(run_dir: Path) -> dict[str, list[StepSeries]]:
    """Every (cell, repeat) of a run folder's steps (one file a job, or folded: store.read_steps; a superseded
    attempt's left out), rank 0, by cell id; {} when the folder has none."""
    if not (Path(run_dir) / "steps").is_dir():
        return {}
    table = store.read_steps(Path(run_dir))
    table = table.filter(pc.equal(table.column("rank"), 0))
    if not table.num_rows:
        return {}
    table = table.sort_by([(col.cell_id, "ascending"), ("repeat", "ascending"), ("step", "ascending")])
    keys = list(zip(table.column(col.cell_id).to_pylist(), table.column("repeat").to_pylist()))
    out: dict[str, list[StepSeries]] = {}
    start = 0
    for end in [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]] + [len(keys)]:
        part = table.slice(start, end - start)
        out.setdefault(keys[start][0], []).append(StepSeries(
            repeat=int(keys[start][1]), step=part.column("step").to_numpy(),
            time_s=part.column(col.step_time_s).to_numpy(),
            is_warmup=part.column(col.is_warmup).fill_null(False).to_numpy(),
            is_epoch_start=part.column(col.is_epoch_start).fill_null(False).to_numpy()))
        start = end
    return out


def _thin(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most MAX_POINTS points that keep every bucket's fastest and slowest step (stalls stay visible)."""
    if x.size <= MAX_POINTS:
        return x, y
    keep = []
    for bucket in np.array_split(np.arange(x.size), MAX_POINTS // 2):
        pair = sorted((bucket[np.argmin(y[bucket])], bucket[np.argmax(y[bucket])]))
        keep.extend(dict.fromkeys(pair))
    return x[keep], y[keep]


_SW, _SH, _SL, _SR, _ST, _SB = 640, 210, 52, 12, 10, 36


def step_plot(series: Sequence[StepSeries]) -> tuple[str, str]:
    """The SVG of one cell's step times (ms per step against the step index) and a note on what it clips."""
    drawn = series[:MAX_REPEATS_PLOTTED]
    measured = np.concatenate([s.time_s[~s.is_warmup] for s in drawn]) * 1e3
    every = np.concatenate([s.time_s for s in drawn]) * 1e3
    top = float(measured.max() if measured.size else every.max()) * 1.15 or 1.0
    last = max(float(s.step.max()) for s in drawn) or 1.0

    def sx(step: float) -> float:
        return _SL + step / last * (_SW - _SL - _SR)

    def sy(ms: float) -> float:
        return _ST + (1 - min(ms, top) / top) * (_SH - _ST - _SB)

    parts = [f'<svg viewBox="0 0 {_SW} {_SH}" width="{_SW}" height="{_SH}" role="img" '
             'aria-label="step time, ms, against step">']
    warm = drawn[0].step[drawn[0].is_warmup]
    if warm.size:
        parts.append(f'<rect class="warmup" x="{sx(0):.1f}" y="{_ST}" width="{sx(warm.max() + 0.5) - sx(0):.1f}" '
                     f'height="{_SH - _ST - _SB}"><title>warmup: {warm.size} steps, not counted</title></rect>')
    for tick in ticks(0.0, top, 4):
        parts.append(f'<line class="axis" x1="{_SL}" y1="{sy(tick):.1f}" x2="{_SW - _SR}" y2="{sy(tick):.1f}"/>'
                     f'<text x="{_SL - 4}" y="{sy(tick) + 4:.1f}" text-anchor="end">{esc(format(tick, "g"))}</text>')
    for tick in sorted({int(t) for t in ticks(0.0, last, 6) if t == int(t)}):  # steps are whole numbers
        parts.append(f'<text x="{sx(tick):.1f}" y="{_SH - _SB + 14}" text-anchor="middle">{tick}</text>')
    for step in drawn[0].step[drawn[0].is_epoch_start]:
        parts.append(f'<line class="epoch" x1="{sx(step):.1f}" y1="{_ST}" x2="{sx(step):.1f}" y2="{_SH - _SB}">'
                     f'<title>step {int(step)} starts a data epoch</title></line>')
    for i, s in enumerate(drawn):
        x, y = _thin(s.step.astype(float), s.time_s * 1e3)
        points = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in zip(x, y))
        parts.append(f'<polyline class="steps r{i}" points="{points}"><title>repeat {s.repeat}</title></polyline>')
    parts.append(f'<text x="{(_SL + _SW) / 2:.0f}" y="{_SH - 6}" text-anchor="middle">optimizer step</text>'
                 f'<text x="12" y="{(_ST + _SH - _SB) / 2:.0f}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {(_ST + _SH - _SB) / 2:.0f})">step time, ms</text></svg>')
    clipped = float(every.max()) > top
    note = f" Steps above {top:.3g} ms are drawn at the top (slowest: {every.max():.4g} ms)." if clipped else ""
    return "".join(parts), note


def step_details(steps: Mapping[str, Sequence[StepSeries]]) -> str:
    """One closed <details> per cell: a reader opens the cells whose step times they want to see."""
    if not steps:
        return "<p>No step records in this run folder (steps/).</p>"
    out = []
    for cid in sorted(steps, key=label):
        series = steps[cid]
        measured = np.concatenate([s.time_s[~s.is_warmup] for s in series]) * 1e3
        median = f"median {np.median(measured):.3g} ms over {measured.size} measured steps" if measured.size else \
            "no measured step"
        svg, clipped = step_plot(series)
        more = f" The first {MAX_REPEATS_PLOTTED} of {len(series)} repeats are drawn." \
            if len(series) > MAX_REPEATS_PLOTTED else ""
        note = ("Rank 0's time per optimizer step, one line per repeat. Shaded: warmup (run, recorded, not "
                "counted); dashed: a data epoch starts. Lower is better; good: a flat line right after the "
                "warmup. Spikes are stalls (data, synchronisation, another process), a step up at a dashed "
                "line an epoch boundary, a slow climb throttling." + clipped + more)
        out.append(f'<details><summary><code title="{esc(cid)}">{esc(label(cid))}</code> \u00b7 {esc(median)}'
                   f"</summary>{_figure(f'Step times: {label(cid)}', svg, note)}</details>")
    return "".join(out)
