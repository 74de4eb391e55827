"""Rendering of a comparison (harness.analysis.compare) into report.html (self-contained: inline CSS and SVG, no
network), summary.md (a CI comment or job summary), junit.xml (a confirmed regression is a failed test)
and verdicts.parquet. No statistics here: every number comes from compare or the run's rows.

Every string that comes from results or matrices is escaped (html.escape for HTML and SVG, ElementTree
for XML, _md for Markdown) before it is written.
"""

from __future__ import annotations

import html
import json
import math
import re
import string
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.analysis import compare, heatmap, screen
from harness.analysis.runs import RunInputError, load_history, load_run
from harness.analysis.verdict import (
    ACCURACY_BELOW,
    FAILED,
    IMPROVEMENT,
    INCONCLUSIVE,
    INSUFFICIENT,
    METRIC_COLUMNS,
    NO_BASELINE,
    NOT_COMPARABLE,
    REGRESSION,
    SKIPPED,
    SUSPECT_IMPROVEMENT,
    SUSPECT_REGRESSION,
    THROUGHPUT,
    UNCHANGED,
    VERDICT_COLUMNS,
    VERDICTS,
    CellVerdict,
    Comparison,
    MetricVerdict,
    Thresholds,
)
from harness.results import env as env_fields
from harness.results import store
from harness.results.accuracy import top1_text
from harness.results.env import ENV_KEY_FIELDS
from harness.results.schema import STEP_SCHEMA
from harness.spec.cells import cell_label as label
from harness.spec.matrix import AXES
from harness.stats.window import FAST_STEP_QUANTILE

VERDICTS_VERSION = 6
"""Version of verdicts.parquet (schema metadata nvbench.verdicts_version). 1: first release. 2: the
speed-adjustment columns unadjusted_effect_pct, speed_probe_change_pct and speed_slope. 3: the fast-step
rate (decided_by, throughput_p_value, fast_effect_pct, fast_ci_low_pct, fast_ci_high_pct, fast_p_value,
candidate_fast_img_per_s, baseline_fast_img_per_s); p_value is the cell's (Bonferroni over its metrics). 4: the
compile axis (`compile`; null when read from an older file). 5: the verdict `inconclusive` (a cell that is
neither shown changed nor shown inside the floor; `unchanged` now means equivalence shown) and its
`repeats_needed`; older files read with repeats_needed null, their verdicts as they were written. 6: the
phase the change sits in (phase, phase_change_ms with its interval, step_change_ms, attribution); null or
empty when read from an older file."""

REPORT_FILES = ("report.html", "summary.md", "verdicts.parquet", "junit.xml")

VERSION_KEY = b"nvbench.verdicts_version"

_ARROW_TYPES = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportResult:
    out_dir: Path
    files: tuple[Path, ...]
    comparison: Comparison


# ---------------------------------------------------------------------------------------------
# entry point: load, compare, render, write


def make_report(run_dir: Path, *, baseline: Path | None = None, history: Path | None = None,
                out_dir: Path | None = None, thresholds: Thresholds | None = None) -> ReportResult:
    """Compare `run_dir` with a baseline run, a history folder, or nothing, and write the four files."""
    problems: list[str] = []

    def attempt(load):
        try:
            return load()
        except RunInputError as exc:
            problems.extend(exc.problems)
            return None

    candidate = attempt(lambda: load_run(run_dir))
    baseline_run = attempt(lambda: load_run(baseline)) if baseline else None
    runs = attempt(lambda: load_history(history, exclude=run_dir)) if history else None
    if problems:
        raise RunInputError(problems)
    th = thresholds or Thresholds()
    if baseline_run is not None:
        comparison = compare.compare_runs(candidate, baseline_run, th)
    elif runs is not None:
        comparison = screen.screen_history(candidate, runs, th, label=f"history: {len(runs)} run(s) in {history}")
    else:
        comparison = compare.describe_only(candidate, th)
    return write_report(comparison, Path(out_dir) if out_dir else Path(run_dir) / "report")


def write_report(comparison: Comparison, out_dir: Path) -> ReportResult:
    """Render every file first, then write them together: a report is never half new, half old."""
    steps = load_steps(Path(comparison.candidate.path)) if Path(comparison.candidate.path).is_dir() else {}
    contents = [render_html(comparison, steps).encode(), render_markdown(comparison).encode(),
                store.table_bytes(verdict_table(comparison)), render_junit(comparison)]
    files = [out_dir / name for name in REPORT_FILES]
    if comparison.mode == "history":
        files.append(out_dir / "suspects.json")
        contents.append((json.dumps(suspects(comparison), indent=2, sort_keys=True, default=str) + "\n").encode())
    store.write_all(dict(zip(files, contents)))
    if comparison.mode != "history":  # a history screen's suspects must not outlive it in this folder
        (out_dir / "suspects.json").unlink(missing_ok=True)
    return ReportResult(out_dir=out_dir, files=tuple(files), comparison=comparison)


def suspects(comparison: Comparison) -> list[dict[str, Any]]:
    """History mode: what a confirmation rerun should target, with the `--only` filters that select it."""
    out = []
    for v in comparison.verdicts:
        if v.cell_id in comparison.suspects:
            out.append({"cell_id": v.cell_id, "verdict": v.verdict, "effect_pct": v.throughput.effect_pct,
                        "robust_z": v.robust_z, "only": v.axis_filters()})
    return out


# ---------------------------------------------------------------------------------------------
# shared wording


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else \
        f"{format(value, spec)}{suffix}"


def change_text(v: CellVerdict) -> str:
    """'-3.1% [-3.8, -2.4]', '-3.1% (z -4.2)' in history mode, or '-'; with the fast-step rate's change
    after it where the comparison tested it ('...; fast steps -5.0% [-6.1, -3.9]'), the metric the
    verdict rests on marked with '*'; for a regression or improvement, the phase whose time changed most
    ('...; optimizer +20.3 ms [+18.9, +21.6] of +21.0 ms per step')."""
    text = _metric_change_text(v)
    if v.attribution and v.verdict in (REGRESSION, IMPROVEMENT):  # where in the step the change sits
        text += f"; {v.attribution}"
    return text


def _metric_change_text(v: CellVerdict) -> str:
    t, f = v.throughput, v.fast_step
    if t.effect_pct is None:
        return "-"
    if t.ci_low_pct is not None and t.ci_high_pct is not None:
        text = f"{t.effect_pct:+.1f}% [{t.ci_low_pct:+.1f}, {t.ci_high_pct:+.1f}]"
    else:
        return f"{t.effect_pct:+.1f}%" + (f" (z {v.robust_z:+.1f})" if v.robust_z is not None else "")
    if f is None or f.effect_pct is None:
        return text
    fast = f"fast steps {f.effect_pct:+.1f}% [{f.ci_low_pct:+.1f}, {f.ci_high_pct:+.1f}]"
    if v.verdict in (REGRESSION, IMPROVEMENT):  # mark the metric that made the call
        text, fast = (text + "*", fast) if v.decided_by == THROUGHPUT else (text, fast + "*")
    return f"{text}; {fast}"


def _css_class(verdict: str) -> str:
    return verdict.replace(" ", "-")


def sorted_verdicts(comparison: Comparison) -> list[CellVerdict]:
    """In groups by verdict, in VERDICTS order (what needs a person first: inconclusive cells before
    unchanged ones); within a group by the change of the metric each verdict rests on, most negative first,
    cells without an effect last."""
    order = {name: i for i, name in enumerate(VERDICTS)}
    return sorted(comparison.verdicts, key=lambda v: (order.get(v.verdict, 99), v.decided_effect_pct is None,
                                                      v.decided_effect_pct or 0.0, v.cell_id))


def headline_words(comparison: Comparison) -> str:
    counts = comparison.counts()
    parts = [f"{n} {name}{'s' if n != 1 and name.endswith(('regression', 'improvement')) else ''}"
             for name, n in counts.items()]
    acc = sum(v.accuracy_verdict == ACCURACY_BELOW for v in comparison.verdicts)
    if acc:
        parts.append(f"{acc} accuracy below band")
    return ", ".join(parts) or "no cells"


def _drill_banner(comparison: Comparison) -> str | None:
    drilled = [v for v in comparison.verdicts if v.fire_drill_pct or v.baseline_fire_drill_pct]
    if not drilled:
        return None
    pct = max(max(v.fire_drill_pct, v.baseline_fire_drill_pct) for v in drilled)
    return (f"FIRE DRILL: {len(drilled)} cell(s) ran with calibrated extra work (up to +{pct:g}% per step, "
            "nvbench run --fire-drill). These verdicts test the detector; they are not results.")


def _method_text(comparison: Comparison) -> str:
    th = comparison.thresholds
    if comparison.mode == "history":
        return (f"History screening: per cell, the median and scaled MAD of mean throughput over the last "
                f"{th.history_runs} comparable runs (at least {th.history_min_runs}); a suspect has |robust z| >= "
                f"{th.history_z:g} and a change beyond the {th.floor_pct:g}% floor. Suspects are not confirmed: "
                "rerun them (suspects.json) and compare against a baseline.")
    return (f"Throughput per repeat is a ratio of sums over the measured window. Change = log ratio of mean "
            f"throughput across repeats with a percentile bootstrap interval ({th.num_resamples} resamples of "
            f"repeats, seed {th.seed}); exact permutation test of the same ratio, Benjamini-Hochberg across cells "
            f"at q = {th.fdr_q:g}{_looks_text(th)}, intervals at the FCR-adjusted level 1 - R q / m. Regression: "
            f"BH rejects, the whole interval lies below 0 and the change is beyond the {th.floor_pct:g}% floor. "
            f"Unchanged: every tested metric's interval lies inside +/- {th.floor_pct:g}% (equivalence shown, "
            f"two one-sided tests). Inconclusive: anything else, with about how many repeats per side would "
            f"likely decide it (normal approximation from the observed spread, 80% power); also every cell whose "
            f"repeats cannot reach the level, and every speed-adjusted cell whose probe differed between the "
            f"sides beyond the floor or its own spread. At least "
            f"{th.min_repeats} repeats per side{'; unsteady repeats left out' if th.exclude_unsteady else ''}. "
            f"Top-1: Wald interval of the difference, band +/- {th.accuracy_tolerance:g}. MDC: minimum detectable "
            "change (80% power) at the baseline's repeat-to-repeat spread." + _fast_text(comparison)
            + _adjusted_text(comparison))


def _looks_text(th: Thresholds) -> str:
    return f" split over {th.looks} looks of the adaptive A/B (Bonferroni)" if th.looks > 1 else ""


def _fast_text(comparison: Comparison) -> str:
    tested = sum(v.fast_step is not None for v in comparison.verdicts)
    if not tested:
        return ""
    return (f" Fast steps ({tested} cell(s): every repeat on both sides recorded it): images per step over the "
            f"{100 * FAST_STEP_QUANTILE:g}th percentile of the step times, the speed of the steps "
            "interference left alone; tested as "
            "throughput is, Bonferroni within the cell (Holm for which metric), each interval at half the "
            "level's error; either metric can call a regression (* marks the one that did); MDC: the better "
            "metric's.")


def _adjusted_text(comparison: Comparison) -> str:
    adjusted = sum(v.throughput.unadjusted_effect_pct is not None for v in comparison.verdicts)
    if not adjusted:
        return ""
    return (f" Speed-adjusted ({adjusted} cell(s): every repeat on both sides carried a machine-speed probe): "
            "change = difference of mean log throughput at equal probe time (analysis of covariance, t "
            "interval), Freedman-Lane permutation test; MDC at the spread the probe leaves unexplained.")


# ---------------------------------------------------------------------------------------------
# inline SVG


_LABEL_W, _PLOT_W, _ROW_H, _TOP, _BOTTOM = 220, 340, 20, 10, 40


def _ticks(lo: float, hi: float, count: int = 6) -> list[float]:
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
             f'aria-label="{_e(x_label)}">']
    if band is not None:
        parts.append(f'<rect class="floor" x="{sx(band[0]):.1f}" y="{_TOP}" width="{sx(band[1]) - sx(band[0]):.1f}" '
                     f'height="{bottom - _TOP}"/>')
    for tick in _ticks(lo, hi):
        x = sx(tick)
        parts.append(f'<line class="axis" x1="{x:.1f}" y1="{_TOP}" x2="{x:.1f}" y2="{bottom}"/>'
                     f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle">{_e(format(tick, fmt))}</text>')
    if zero is not None and lo <= zero <= hi:
        parts.append(f'<line class="zero" x1="{sx(zero):.1f}" y1="{_TOP}" x2="{sx(zero):.1f}" y2="{bottom}"/>')
    for i, name in enumerate(labels):
        y = _TOP + _ROW_H * i + _ROW_H / 2
        shown = name if len(name) <= 34 else name[:33] + "\u2026"
        tip = (titles[i] if titles else name)
        parts.append(f'<text x="{_LABEL_W - 6}" y="{y + 4:.1f}" text-anchor="end"><title>{_e(tip)}</title>'
                     f'{_e(shown)}</text>')
        parts.append(draw(i, y, sx))
    parts.append(f'<text x="{_LABEL_W + _PLOT_W / 2:.1f}" y="{height - 6}" text-anchor="middle">{_e(x_label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _dot(x: float, y: float, css: str, tip: str, r: float = 4.5) -> str:
    return f'<circle class="{_e(css)}" cx="{x:.1f}" cy="{y:.1f}" r="{r}"><title>{_e(tip)}</title></circle>'


def _figure(caption: str, svg: str, note: str = "") -> str:
    return f"<figure><figcaption>{_e(caption)}</figcaption>{svg}" + (f"<p>{_e(note)}</p>" if note else "") + \
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
        css = _css_class(v.verdict)
        tip = f"{v.cell_id}: {v.verdict}, {change_text(v)}"
        t, f = v.throughput, v.fast_step
        line = ""
        if t.ci_low_pct is not None and t.ci_high_pct is not None:
            line = (f'<line class="ci {_e(css)}" x1="{sx(t.ci_low_pct):.1f}" y1="{y:.1f}" '
                    f'x2="{sx(t.ci_high_pct):.1f}" y2="{y:.1f}"/>')
        line += _dot(sx(t.effect_pct), y, css, tip)
        if f is not None and None not in _ends(f):
            y2 = y + 5  # the fast-step rate just below: hollow dot, dashed interval
            line += (f'<line class="ci fast {_e(css)}" x1="{sx(f.ci_low_pct):.1f}" y1="{y2:.1f}" '
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


def _cell_means(rows: Sequence[Mapping[str, Any]], column: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for r in rows:
        if r["status"] == "ok" and r.get(column) is not None and math.isfinite(r[column]):
            values.setdefault(r["cell_id"], []).append(float(r[column]))
    return {cid: float(np.mean(v)) for cid, v in values.items()}


def throughput_plots(comparison: Comparison) -> list[str]:
    """One dot plot per axis that varies: each cell's mean throughput at its axis value (filled: this run,
    hollow: the baseline)."""
    by_id = {v.cell_id: v for v in comparison.verdicts}
    means = _cell_means(comparison.candidate.rows, "throughput_img_per_s")
    if not means:
        return [_figure("Throughput by axis", "<p>no cell finished</p>")]
    axes = [a for a in AXES if len({getattr(by_id[c], a) for c in means}) > 1] or ["backend"]
    values = list(means.values()) + _finite(by_id[c].throughput.baseline_img_per_s for c in means)
    figures = []
    for axis in axes:
        groups = sorted({str(getattr(by_id[c], axis)) for c in means})
        members = {g: [c for c in means if str(getattr(by_id[c], axis)) == g] for g in groups}

        def draw(i: int, y: float, sx, members=members, groups=groups) -> str:
            out = []
            for cid in members[groups[i]]:
                base = by_id[cid].throughput.baseline_img_per_s
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
        means = _cell_means(comparison.candidate.rows, "top1")
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
    means = _cell_means(comparison.candidate.rows, column)
    if not means:
        return _figure(caption, f"<p>no {_e(column)} in this run</p>")
    ids = sorted(means, key=lambda c: (means[c], c))
    scale = 100.0 if percent else 1.0
    hi = max(at_least, max(means.values())) * scale

    def draw(i: int, y: float, sx) -> str:
        value = means[ids[i]] * scale
        return (f'<rect class="bar" x="{sx(0):.1f}" y="{y - 6:.1f}" width="{max(0.5, sx(value) - sx(0)):.1f}" '
                f'height="12"><title>{_e(ids[i])}: {value:.3g}</title></rect>')

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
    """Every (cell, repeat) of a run folder's steps/, rank 0, by cell id; {} when the folder has none."""
    out: dict[str, list[StepSeries]] = {}
    for path in sorted((Path(run_dir) / "steps").glob("*.parquet")):
        table = store.read_table(path, STEP_SCHEMA)
        table = table.filter(pc.equal(table.column("rank"), 0)).sort_by("step")
        if not table.num_rows:
            continue
        column = {name: table.column(name) for name in ("step", "step_time_s", "is_warmup", "is_epoch_start")}
        out.setdefault(table.column("cell_id")[0].as_py(), []).append(StepSeries(
            repeat=int(table.column("repeat")[0].as_py()), step=column["step"].to_numpy(),
            time_s=column["step_time_s"].to_numpy(), is_warmup=column["is_warmup"].fill_null(False).to_numpy(),
            is_epoch_start=column["is_epoch_start"].fill_null(False).to_numpy()))
    return {cid: sorted(series, key=lambda s: s.repeat) for cid, series in out.items()}


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
    for tick in _ticks(0.0, top, 4):
        parts.append(f'<line class="axis" x1="{_SL}" y1="{sy(tick):.1f}" x2="{_SW - _SR}" y2="{sy(tick):.1f}"/>'
                     f'<text x="{_SL - 4}" y="{sy(tick) + 4:.1f}" text-anchor="end">{_e(format(tick, "g"))}</text>')
    for tick in sorted({int(t) for t in _ticks(0.0, last, 6) if t == int(t)}):  # steps are whole numbers
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
        out.append(f'<details><summary><code title="{_e(cid)}">{_e(label(cid))}</code> \u00b7 {_e(median)}'
                   f"</summary>{_figure(f'Step times: {label(cid)}', svg, note)}</details>")
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# HTML


def _cards(comparison: Comparison) -> str:
    kinds = {REGRESSION: "bad", FAILED: "bad", SUSPECT_REGRESSION: "bad", IMPROVEMENT: "good",
             SUSPECT_IMPROVEMENT: "good", NOT_COMPARABLE: "warn", INSUFFICIENT: "warn", INCONCLUSIVE: "warn"}
    cards = [f'<div class="card {kinds.get(name, "")}"><span class="n">{n}</span>{_e(name)}</div>'
             for name, n in comparison.counts().items()]
    acc = sum(v.accuracy_verdict == ACCURACY_BELOW for v in comparison.verdicts)
    if acc:
        cards.append(f'<div class="card bad"><span class="n">{acc}</span>accuracy below band</div>')
    notes = "".join(f"<p>{_e(n)}</p>" for n in comparison.notes)
    return f'<div class="cards">{"".join(cards)}</div><p>Compared with {_e(comparison.baseline_label)}.</p>{notes}'


EXTRA_COLUMNS = (("mfu_pct", "MFU %", ".1f"), ("power_avg_w", "power W", ".0f"),
                 ("img_per_joule", "img/J", ".2f"), ("exposed_data_wait_frac", "data wait", ".1%"))
"""Row columns a cell's detail row shows beside its verdict: (column, name with unit, format), as each side's
mean."""

TABLE_HEAD = (("cell", "the cell's axis values; its full id in the detail row"),
              ("verdict", "the comparison's call"),
              ("change % [interval]", "change of the metric the verdict rests on, with its interval"),
              ("img/s", "mean images per second: this run / baseline"),
              ("MDC %", "minimum detectable change at the baseline's spread (80% power)"),
              ("top-1", "mean top-1 accuracy, fraction of validation images"),
              ("repeats", "usable repeats: this run / baseline (history: runs)"))
"""The cell table's columns: (heading with its unit, what it holds). One line per cell; everything else of a
cell (its reason, the full change, noise, MFU, power, img/J, data wait) is in its detail row."""


def _td(content: str, *, sort: float | str | None = None, num: bool = False) -> str:
    """A table cell; `sort` is what the page's column sort orders by (numbers as numbers, '' last)."""
    key = "" if sort is None or (isinstance(sort, float) and not math.isfinite(sort)) else sort
    css = ' class="num"' if num else ""
    return f'<td{css} data-sort="{_e(key)}">{content}</td>'


def _pair(this: float | None, base: float | None, spec: str) -> str:
    """'this / baseline' where the baseline has the figure, else this side's alone."""
    return _num(this, spec) + (f" / {_num(base, spec)}" if base is not None else "")


def skip_groups(comparison: Comparison) -> list[tuple[str, list[CellVerdict]]]:
    """Skipped cells by reason, the most common reason first (as the console groups them)."""
    groups: dict[str, list[CellVerdict]] = {}
    for v in comparison.verdicts:
        if v.verdict == SKIPPED:
            groups.setdefault(v.reason or "no reason recorded", []).append(v)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def _anchors(comparison: Comparison) -> Callable[[CellVerdict], str]:
    """Where a heatmap tile links: the cell's rows, or a skipped cell's reason group."""
    group_of = {v.cell_id: i for i, (_, members) in enumerate(skip_groups(comparison)) for v in members}
    return lambda v: f"#skip-{group_of[v.cell_id]}" if v.cell_id in group_of else f"#cell-{v.cell_id}"


def _short_change(v: CellVerdict) -> str:
    """The table's change: '-3.1 [-3.8, -2.4]' (% in the heading), '*' where the fast-step rate decided."""
    m = heatmap.shown_metric(v)
    if m.effect_pct is None:
        return "-"
    if m.ci_low_pct is None or m.ci_high_pct is None:
        return f"{m.effect_pct:+.1f}" + (f" (z {v.robust_z:+.1f})" if v.robust_z is not None else "")
    star = "*" if m is not v.throughput else ""
    return f"{m.effect_pct:+.1f}{star} [{m.ci_low_pct:+.1f}, {m.ci_high_pct:+.1f}]"


def _top1_cell(v: CellVerdict, rows: Sequence[Mapping[str, Any]]) -> str:
    if v.candidate_top1 is None:
        return top1_text(rows)
    return f"{v.candidate_top1:.3f}" + (" below band" if v.accuracy_verdict == ACCURACY_BELOW else "")


def _detail(v: CellVerdict, extra: Mapping[str, tuple[dict, dict]]) -> str:
    """A cell's detail row: everything the one line leaves out."""
    facts = [("cell id", f"<code>{_e(v.cell_id)}</code>"), ("reason", _e(v.reason or "-")),
             ("change", f'<span class="mono">{_e(change_text(v))}</span>'), ("noise", _e(v.noise or "-"))]
    if v.repeats_needed is not None:
        facts.append(("repeats to decide", _e(f"~{v.repeats_needed} per side")))
    if v.accuracy_verdict and v.candidate_top1 is not None:
        facts.append(("top-1 check", _e(f"{v.accuracy_verdict}" + (
            f": {v.top1_change:+.4f} [{v.top1_ci_low:+.4f}, {v.top1_ci_high:+.4f}]" if v.top1_change is not None
            else ""))))
    for column, name, spec in EXTRA_COLUMNS:
        this, base = extra[column][0].get(v.cell_id), extra[column][1].get(v.cell_id)
        facts.append((name + (" (this / baseline)" if base is not None else ""), _e(_pair(this, base, spec))))
    items = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in facts)
    return f'<tr class="detail" hidden><td colspan="{len(TABLE_HEAD)}"><dl>{items}</dl></td></tr>'


def _table(comparison: Comparison) -> str:
    """The judged cells, one line each (sorted by verdict group, then effect), each with a detail row a click
    opens; skipped cells grouped by reason below it."""
    order = {name: i for i, name in enumerate(VERDICTS)}
    extra = {column: (_cell_means(comparison.candidate.rows, column),
                      _cell_means(comparison.baseline.rows if comparison.baseline else (), column))
             for column, _, _ in EXTRA_COLUMNS}
    ok_rows: dict[str, list[Mapping[str, Any]]] = {}
    for r in comparison.candidate.rows:
        if r["status"] == "ok":
            ok_rows.setdefault(r["cell_id"], []).append(r)
    head = "".join(f'<th title="{_e(words)}; click to sort">{_e(name)}</th>' for name, words in TABLE_HEAD)
    out = [f'<table class="cells sortable"><thead><tr>{head}</tr></thead>']
    for v in sorted_verdicts(comparison):
        if v.verdict == SKIPPED:
            continue
        drill = v.fire_drill_pct or v.baseline_fire_drill_pct
        tag = f' <span class="tag">drill +{v.fire_drill_pct:g}%</span>' if drill else ""
        t = v.throughput
        others = v.num_baseline if comparison.mode != "history" else v.num_history_runs
        cells = [
            _td(f'<button class="more" type="button" aria-expanded="false" title="details">\u25b8</button>'
                f'<code title="{_e(v.cell_id)}">{_e(label(v.cell_id))}</code>{tag}', sort=label(v.cell_id)),
            _td(f'<span class="v v-{_e(_css_class(v.verdict))}">{_e(v.verdict)}</span>', sort=order[v.verdict]),
            _td(f'<span class="mono">{_e(_short_change(v))}</span>', sort=heatmap.shown_metric(v).effect_pct, num=True),
            _td(_e(_pair(t.candidate_img_per_s, t.baseline_img_per_s, ".1f")), sort=t.candidate_img_per_s, num=True),
            _td(_e(_num(v.mdc_pct, ".1f")), sort=v.mdc_pct, num=True),
            _td(_e(_top1_cell(v, ok_rows.get(v.cell_id, []))), sort=v.candidate_top1, num=True),
            _td(f"{v.num_candidate} / {others}", sort=v.num_candidate, num=True),
        ]
        css = "cell drill" if drill else "cell"
        out.append(f'<tbody class="{css}" id="cell-{_e(v.cell_id)}"><tr class="main">{"".join(cells)}</tr>'
                   f"{_detail(v, extra)}</tbody>")
    out.append("</table>")
    out.append('<p class="hint">Click a row for its reason and the rest of its figures (MFU, power, img/J, data '
               "wait), a heading to sort. * : the fast-step rate decided (the detail row shows both metrics).</p>")
    groups = skip_groups(comparison)
    if groups:
        total = sum(len(m) for _, m in groups)
        items = "".join(f'<details id="skip-{i}"><summary><b>{len(members)}</b> {_e(reason)}</summary>'
                        f'<p class="mono">{_e(", ".join(sorted(label(v.cell_id) for v in members)))}</p></details>'
                        for i, (reason, members) in enumerate(groups))
        out.append(f'<div class="skips"><h3>Skipped: {total} cell(s), by reason</h3>{items}</div>')
    if comparison.mode == "history" and comparison.suspects:
        codes = ", ".join(f"<code>{_e(s)}</code>" for s in comparison.suspects)
        out.append(f"<p>Suspects for a confirmation rerun: {codes} (also in suspects.json).</p>")
    return "".join(out)


SETUP_ROWS = (("device", None), ("driver", "driver_version"), ("CUDA", "cuda_runtime"), ("cuDNN", "cudnn_version"),
              ("torch", "torch_version"), ("DALI", "dali_version"), ("nvbench", None))
"""The header's rows: what each side ran on, in words (None: composed from several fields)."""


def _device(env: Mapping[str, Any]) -> str:
    if env.get("gpu_name"):
        count = env.get("gpu_count") or 1
        return f"{env['gpu_name']}" + (f" x{count}" if count != 1 else "")
    cores = f", {env['cpu_count']} cores" if env.get("cpu_count") else ""
    return f"CPU: {env.get('cpu_model') or '?'}{cores}"


def _setup_value(env: Mapping[str, Any] | None, name: str, field_: str | None) -> str:
    if env is None:
        return "-"
    if name == "device":
        return _device(env)
    if name == "nvbench":
        sha = env.get("nvbench_git_sha")
        dirty = " (uncommitted changes)" if env.get("nvbench_git_dirty") else ""
        return f"{env.get('nvbench_version') or '?'} git {str(sha)[:10] if sha else 'not recorded'}{dirty}"
    return "-" if env.get(field_) is None else str(env[field_])


def _setup(comparison: Comparison) -> str:
    """Both sides' device, driver, CUDA, cuDNN, torch, DALI and git revision, and the matrix efficiency where
    the run's manifest records it."""
    sides = [("this run", comparison.candidate.environment, comparison.candidate.matrix_efficiency)]
    if comparison.baseline_environment is not None:
        base = comparison.baseline
        sides.append(("baseline", comparison.baseline_environment, base.matrix_efficiency if base else None))
    head = "".join(f"<th>{_e(name)}</th>" for name, _, _ in sides)
    rows = [f"<tr><th>{_e(name)}</th>" + "".join(f"<td>{_e(_setup_value(env, name, field_))}</td>"
                                                  for _, env, _ in sides) + "</tr>" for name, field_ in SETUP_ROWS]
    if any(eff is not None for _, _, eff in sides):
        rows.append('<tr><th title="measured window seconds / run wall seconds">matrix efficiency</th>'
                    + "".join(f"<td>{_e(_num(eff, '.2f'))}</td>" for _, _, eff in sides) + "</tr>")
    return f'<table class="setup"><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _scope(name: str) -> str:
    """Which cells an environment field must match for (harness.results.env.cell_env_fields)."""
    if name in env_fields.DALI_KEY_FIELDS:
        return "dali-* cells"
    if name in env_fields.COMMS_KEY_FIELDS:
        return "multi-rank GPU cells"
    if name in env_fields.GPU_KEY_FIELDS:
        return "GPU cells"
    return "every cell" if name in env_fields.HOST_KEY_FIELDS else "-"


def _environment(comparison: Comparison) -> str:
    env = comparison.candidate.environment
    parts = []
    if comparison.baseline_environment is None:
        parts.append("<p>No second side to compare with.</p>")
    elif comparison.environment_diff:
        rows = "".join(f"<tr><td><code>{_e(name)}</code></td><td>{_e(_scope(name))}</td>"
                       f"<td>{_e(a)}</td><td>{_e(b)}</td></tr>" for name, a, b in comparison.environment_diff)
        parts.append("<table><thead><tr><th>field</th><th>must match for</th><th>baseline</th><th>this run</th>"
                     f"</tr></thead><tbody>{rows}</tbody></table>")
    else:
        parts.append("<p>None: both sides ran in the same recorded environment.</p>")
    full = "".join(f"<tr><td><code>{_e(k)}</code></td><td>{_e(v)}</td></tr>" for k, v in env.items())
    parts.append(f"<details><summary>This run's environment</summary><table><tbody>{full}</tbody></table></details>")
    return "".join(parts)


def _failures(comparison: Comparison) -> str:
    """Every repeat that did not finish, with its reason and log; skipped cells are counted here and listed by
    reason under the cell table."""
    rows = comparison.candidate.rows
    bad = sorted((r for r in rows if r["status"] not in ("ok", "skipped")), key=lambda r: (r["cell_id"], r["repeat"]))
    skipped = sum(v.verdict == SKIPPED for v in comparison.verdicts)
    out = []
    if bad:
        body = "".join(f'<tr><td><code title="{_e(r["cell_id"])}">{_e(label(r["cell_id"]))}</code></td>'
                       f'<td class="num">{r["repeat"]}</td><td><span class="v v-failed">{_e(r["status"])}</span></td>'
                       f'<td class="reason">{_e(r.get("reason"))}</td><td><code>{_e(r.get("log_path") or "-")}</code>'
                       "</td></tr>" for r in bad)
        out.append("<table class=\"failures\"><thead><tr><th>cell</th><th>repeat</th><th>status</th><th>reason</th>"
                   f"<th>log</th></tr></thead><tbody>{body}</tbody></table>")
    else:
        out.append("<p>No failed repeat.</p>")
    if skipped:
        out.append(f'<p>{skipped} cell(s) skipped: listed by reason under <a href="#cells">the cell table</a>.</p>')
    return "".join(out)


def _heatmap(comparison: Comparison) -> str:
    rates = {v.cell_id: v.throughput.candidate_img_per_s for v in comparison.verdicts
             if v.throughput.candidate_img_per_s is not None}
    rates = _cell_means(comparison.candidate.rows, "throughput_img_per_s") | rates
    return heatmap.render(comparison, rates=rates, row_anchor=_anchors(comparison), change=_metric_change_text)


def _template(name: str) -> str:
    return resources.files("harness.analysis").joinpath("templates", name).read_text()


def render_html(comparison: Comparison, steps: Mapping[str, Sequence[StepSeries]] | None = None) -> str:
    """The report page; `steps` (load_steps of the candidate) gives each cell its step-time plot."""
    cand = comparison.candidate
    banner = _drill_banner(comparison)
    plots = [change_plot(comparison), *throughput_plots(comparison), accuracy_plot(comparison),
             bar_plot(comparison, "exposed_data_wait_frac", "Exposed data wait",
                      "% of the window the GPU waited for data",
                      "The time the training stream sat idle waiting for a batch (CUDA events around each fetch; "
                      "on CPU the host's wait), over the window. Lower is better; good: 0, the loader never stalled "
                      "the GPU. The host's own time in next() (host_data_wait_frac) overlaps queued GPU work and is "
                      "not shown here.", percent=True, at_least=0.05),
             bar_plot(comparison, "loader_efficiency", "Loader efficiency", "throughput / synthetic twin (ratio)",
                      "Real-data cells with a synthetic twin: their throughput over the twin's. Higher is better; "
                      "good: 1.0, the loader keeps up with the compute.")]
    env = cand.environment
    subtitle = (f"{cand.run_id} vs {comparison.baseline_label} \u00b7 created {cand.created_at or '?'} \u00b7 "
                f"host {env.get('hostname') or '?'}")
    return string.Template(_template("report.html")).substitute(
        title=_e(f"nvbench report: {cand.run_id}"), css=_template("report.css"), subtitle=_e(subtitle),
        setup=_setup(comparison), banner=f'<div class="banner">{_e(banner)}</div>' if banner else "",
        headline=_cards(comparison), heatmap=_heatmap(comparison), table=_table(comparison), plots="\n".join(plots),
        steps=step_details(steps or {}), environment=_environment(comparison), failures=_failures(comparison),
        method=_e(f"{_method_text(comparison)} Written {datetime.now(timezone.utc).isoformat(timespec='seconds')}."),
        script=_template("report.js"))


# ---------------------------------------------------------------------------------------------
# Markdown


def _md(value: Any) -> str:
    """Text safe inside a Markdown table cell: HTML escaped, pipes and emphasis characters neutralised."""
    text = html.escape("" if value is None else str(value), quote=False)
    text = re.sub(r"([\\`*_\[\]|#~])", r"\\\1", text)
    return " ".join(text.split())


def _md_row(v: CellVerdict) -> str:
    drill = f" (fire drill +{v.fire_drill_pct:g}%)" if v.fire_drill_pct or v.baseline_fire_drill_pct else ""
    return (f"| {_md(label(v.cell_id))}{_md(drill)} | **{_md(v.verdict)}** | {_md(change_text(v))} | "
            f"{_md(_num(v.mdc_pct, '.1f', '%'))} | {_md(v.noise or '-')} | {_md(v.reason)} |")


def render_markdown(comparison: Comparison) -> str:
    cand = comparison.candidate
    head = "| cell | verdict | change [interval] | MDC | noise | reason |\n|---|---|---|---|---|---|"
    lines = [f"## nvbench: {_md(cand.run_id)} vs {_md(comparison.baseline_label)}", ""]
    banner = _drill_banner(comparison)
    if banner:
        lines += [f"> **{_md(banner)}**", ""]
    regs = comparison.regressions
    lines += [f"**{_md(headline_words(comparison))}**" + (" \u2014 no confirmed regression." if not regs else ""), ""]
    lines += [f"- {_md(n)}" for n in comparison.notes]
    attention = [v for v in sorted_verdicts(comparison)
                 if v.verdict not in (UNCHANGED, NO_BASELINE, INCONCLUSIVE) or v.is_regression]
    if attention:
        lines += ["", head, *(_md_row(v) for v in attention)]
    open_ = [v for v in sorted_verdicts(comparison) if v.verdict == INCONCLUSIVE and not v.is_regression]
    if open_:
        lines += ["", f"**Inconclusive: {len(open_)} cell(s) neither shown changed nor shown inside the "
                      f"{comparison.thresholds.floor_pct:g}% floor** (more repeats would likely decide them):", "",
                  head, *(_md_row(v) for v in open_)]
    lines += ["", f"<details><summary>All {len(comparison.verdicts)} cells</summary>", "", head,
              *(_md_row(v) for v in sorted_verdicts(comparison)), "", "</details>"]
    bad = [r for r in cand.rows if r["status"] != "ok"]
    if bad:
        lines += ["", "**Failed and skipped:**", ""]
        lines += [f"- {_md(r['cell_id'])} r{r['repeat']}: {_md(r['status'])}: {_md(r.get('reason'))}" for r in bad]
    if comparison.environment_diff:
        lines += ["", "**Environment differences** (baseline -> this run):", ""]
        lines += [f"- {_md(name)} (must match for {_md(_scope(name))}): {_md(a)} -> {_md(b)}"
                  if name in ENV_KEY_FIELDS else f"- {_md(name)}: {_md(a)} -> {_md(b)}"
                  for name, a, b in comparison.environment_diff]
    if comparison.suspects:
        lines += ["", "**Suspects for a confirmation rerun:** " + ", ".join(_md(s) for s in comparison.suspects)]
    lines += ["", f"<sub>{_md(_method_text(comparison))}</sub>", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# JUnit XML and verdicts.parquet


_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _x(value: Any) -> str:
    """ElementTree escapes markup but not characters XML 1.0 forbids (terminal escapes in a log line)."""
    return _XML_BAD.sub("\ufffd", "" if value is None else str(value))


def render_junit(comparison: Comparison) -> bytes:
    """One <testcase> per cell: a confirmed regression is a <failure>, a failed cell an <error>, and cells
    that were not decided (inconclusive) or could not be judged (skipped, not comparable, insufficient data,
    no baseline) are <skipped> with the verdict and its reason as the message: never a pass."""
    cand = comparison.candidate
    suite = ET.Element("testsuite", name=_x(f"nvbench.{cand.run_id}"),
                       timestamp=_x(cand.created_at), hostname=_x(cand.environment.get("hostname") or ""))
    props = ET.SubElement(suite, "properties")
    th = asdict(comparison.thresholds)
    for name, value in [("baseline", comparison.baseline_label), ("mode", comparison.mode),
                        ("fire_drill_pct", comparison.fire_drill_pct), *th.items()]:
        ET.SubElement(props, "property", name=_x(name), value=_x(value))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    durations = _cell_means(cand.rows, "duration_s")
    for v in sorted(comparison.verdicts, key=lambda v: v.cell_id):
        counts["tests"] += 1
        drill = f" [FIRE DRILL +{v.fire_drill_pct:g}%]" if v.fire_drill_pct or v.baseline_fire_drill_pct else ""
        case = ET.SubElement(suite, "testcase", classname=_x(f"nvbench.{v.backend}.{v.precision}"),
                             name=_x(v.cell_id + drill), time=f"{durations.get(v.cell_id, 0.0):.3f}")
        message = _x(f"{v.verdict}: {change_text(v)}")
        if v.is_regression:
            counts["failures"] += 1
            what = "throughput" if v.verdict == REGRESSION else "accuracy"
            if v.verdict != REGRESSION:
                message = _x(f"top-1 {v.accuracy_verdict}: {v.top1_change:+.4f} "
                             f"[{v.top1_ci_low:+.4f}, {v.top1_ci_high:+.4f}]")
            ET.SubElement(case, "failure", message=message, type=f"{what}-regression").text = _x(v.reason)
        elif v.verdict == FAILED:
            counts["errors"] += 1
            ET.SubElement(case, "error", message=_x(v.reason), type="cell-failed").text = _x(v.reason)
        elif v.verdict in (INCONCLUSIVE, SKIPPED, NOT_COMPARABLE, INSUFFICIENT, NO_BASELINE):
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=_x(f"{v.verdict}: {v.reason}"))
        ET.SubElement(case, "system-out").text = _x(f"{v.verdict}: {v.reason}")
    for key, value in counts.items():
        suite.set(key, str(value))
    root = ET.Element("testsuites", name="nvbench", **{k: str(v) for k, v in counts.items()})
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def verdict_schema() -> pa.Schema:
    """verdicts.parquet's columns (verdict.VERDICT_COLUMNS), typed from the CellVerdict and MetricVerdict fields."""
    types = {f.name: f.type for f in fields(CellVerdict)}
    metric = {f.name: f.type for f in fields(MetricVerdict)}
    types |= {column: metric[name] for columns in METRIC_COLUMNS.values() for name, column in columns.items()}
    return pa.schema([pa.field(name, _ARROW_TYPES[str(types[name]).split("|")[0].strip()])
                      for name in VERDICT_COLUMNS])


def verdict_table(comparison: Comparison) -> pa.Table:
    """One row per cell; schema metadata carries the version, mode, baseline and thresholds."""
    schema = verdict_schema().with_metadata({
        VERSION_KEY: str(VERDICTS_VERSION).encode(), b"nvbench.table": b"verdicts",
        b"nvbench.mode": comparison.mode.encode(), b"nvbench.baseline": comparison.baseline_label.encode(),
        b"nvbench.thresholds": json.dumps(asdict(comparison.thresholds), sort_keys=True).encode(),
        b"nvbench.run_id": comparison.candidate.run_id.encode()})
    rows = [v.to_row() for v in comparison.verdicts]
    arrays = [pa.array([r[f.name] for r in rows], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def read_verdicts(path: Path) -> list[CellVerdict]:
    """verdicts.parquet back as CellVerdicts. Older versions lack the speed-adjustment (2), fast-step (3),
    compile (4) and repeats_needed (5) columns: they read as null. store.UnreadableFile, naming the file, when it is no verdicts table."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise store.UnreadableFile(f"{path}: not a readable verdicts table ({type(exc).__name__})") from None
    version = int((table.schema.metadata or {}).get(VERSION_KEY, b"0"))
    if not 1 <= version <= VERDICTS_VERSION:
        why = "no nvbench.verdicts_version in its metadata" if version < 1 else \
            f"version {version} is newer than this nvbench's {VERDICTS_VERSION}; upgrade nvbench"
        raise store.UnreadableFile(f"{path}: not a verdicts table this nvbench reads ({why})")
    return [CellVerdict.from_row(row) for row in table.to_pylist()]
