"""The matrix as a picture: the first thing report.html shows. One tile per cell of the matrix, laid out on
the axes that vary (the first as rows, the next one or two as columns, the rest as panels), each tile the
cell's img/s and, against a baseline, its change in % on the colour of its verdict, with the verdict's
symbol beside the number so that no colour is the only carrier of meaning. A tile links to the cell's row of
the table (skipped cells: to their reason's group). Plain HTML and CSS (templates/heatmap.html); nothing reaches
the network.

No statistics here: every figure is the comparison's (harness.analysis.judge.compare)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from harness.catalogue.judged import BY_NAME
from harness.analysis.judge.verdict import (
    FAILED, IMPROVEMENT, INCONCLUSIVE, INSUFFICIENT, NO_BASELINE, NOT_COMPARABLE, REGRESSION,
    SKIPPED, SUSPECT_IMPROVEMENT, SUSPECT_REGRESSION, UNCHANGED, CellVerdict, Comparison, MetricVerdict)
from harness.analysis.pages.render import Markup, macro
from harness.matrix.sections import AXES, AXIS_CHOICES
from harness.catalogue import col

MAX_COLUMNS = 8
"""A second column axis joins the first only while their product stays this narrow (tiles of ~80 px)."""

TILE_KINDS = (
    ("regression", "\u25bc", "regression (or suspect regression)"),
    ("inconclusive", "?", "inconclusive: neither shown changed nor shown unchanged (or not judged)"),
    ("unchanged", "=", "unchanged: equivalence shown inside the floor"),
    ("improvement", "\u25b2", "improvement (or suspect improvement)"),
    ("failed", "\u2715", "failed: no usable repeat"),
    ("skipped", "\u2013", "skipped: could not run here"),
    ("ran", "", "ran, no baseline to compare with"),
)
"""(css kind, symbol, legend words) in the legend's order; the palette (report.css, --hm-*) is Okabe-Ito's
vermillion, yellow, grey, blue and black: told apart under the common colour-vision deficiencies."""

_KIND = {REGRESSION: "regression", SUSPECT_REGRESSION: "regression", IMPROVEMENT: "improvement",
         SUSPECT_IMPROVEMENT: "improvement", INCONCLUSIVE: "inconclusive", INSUFFICIENT: "inconclusive",
         NOT_COMPARABLE: "inconclusive", UNCHANGED: "unchanged", FAILED: "failed", SKIPPED: "skipped",
         NO_BASELINE: "ran"}
_SYMBOL = {kind: symbol for kind, symbol, _ in TILE_KINDS}


def tile_kind(verdict: str) -> str:
    """The tile's colour class for a verdict (several verdicts share one: see TILE_KINDS)."""
    return _KIND.get(verdict, "inconclusive")


def shown_metric(v: CellVerdict) -> MetricVerdict:
    """The metric a tile and the table show: the one that made a regression or improvement call (throughput or
    the fast-step rate), else throughput."""
    if v.verdict in (REGRESSION, IMPROVEMENT) and v.decided_by in BY_NAME:
        m = v.metric(v.decided_by)
        if m is not None and m.effect_pct is not None:
            return m
    return v.throughput


def rate_text(img_per_s: float | None) -> str:
    """'87.3', '312', '1.25k', '12.3k': three significant figures in the width of a tile."""
    if img_per_s is None or not math.isfinite(img_per_s):
        return "-"
    if img_per_s >= 1000:
        return f"{img_per_s / 1000:.3g}k"
    return f"{img_per_s:.3g}" if img_per_s >= 100 else f"{img_per_s:.1f}"


@dataclass(frozen=True, slots=True)
class Layout:
    """Which varying axes are rows, columns and panels."""

    rows: tuple[str, ...]
    columns: tuple[str, ...]
    panels: tuple[str, ...]


def _axis_values(verdicts: Sequence[CellVerdict], axis: str) -> list[Any]:
    """The axis's values present, in the order the matrix format declares them (backends as AXIS_CHOICES
    lists them, fp32 before fp16 before bf16, numbers ascending); an unknown value (an older run) last."""
    present = set(getattr(v, axis) for v in verdicts)
    choices = AXIS_CHOICES.get(axis) or ()
    rank = {value: i for i, value in enumerate(choices)}
    return sorted(present, key=lambda x: (x is None, rank.get(x, len(rank)), x if isinstance(x, (int, float))
                                          else 0, str(x)))


def layout(verdicts: Sequence[CellVerdict]) -> Layout:
    varying = [a for a in AXES if len(_axis_values(verdicts, a)) > 1]
    if not varying:
        return Layout((), (), ())
    rows, rest = varying[:1], varying[1:]
    columns: list[str] = []
    width = 1
    for axis in rest[:2]:
        size = len(_axis_values(verdicts, axis))
        if columns and width * size > MAX_COLUMNS:
            break
        columns.append(axis)
        width *= size
    return Layout(tuple(rows), tuple(columns), tuple(a for a in rest if a not in columns))


def _key_text(axes: Sequence[str], values: Sequence[Any]) -> str:
    """'nhwc fp16'; a number says its axis ('ws8', 'ga2') as cell ids do."""
    short = {col.world_size: "ws", col.grad_accum: "ga"}
    return " ".join(f"{short[a]}{v}" if a in short else str(v) for a, v in zip(axes, values))


@dataclass(frozen=True, slots=True, kw_only=True)
class Tile:
    """One cell's tile: its colour class, whether a fire drill ran, where it links, its tooltip and its two lines."""

    kind: str
    drill: bool
    href: str
    cell_id: str
    verdict: str
    tip: str
    figure: str
    second: str


def _tile(v: CellVerdict, rate: float | None, href: str, change: Callable[[CellVerdict], str]) -> Tile:
    kind = tile_kind(v.verdict)
    drill = bool(v.fire_drill_pct or v.baseline_fire_drill_pct)
    effect = shown_metric(v).effect_pct
    if kind == "skipped":
        figure, second = "skipped", ""
    elif kind == "failed":
        figure, second = "failed", ""
    else:
        figure = rate_text(rate)
        second = f"{_SYMBOL[kind]} {effect:+.1f}%" if effect is not None else _SYMBOL[kind]
    tip = f"{v.cell_id}\n{v.verdict}" + (f": {change(v)}" if effect is not None else "") + \
        (f"\n{rate:.1f} img/s" if rate is not None else "") + (f"\n{v.reason}" if v.reason else "") + \
        ("\nFIRE DRILL: not a result" if drill else "")
    return Tile(kind=kind, drill=drill, href=href, cell_id=v.cell_id, verdict=v.verdict, tip=tip, figure=figure,
                second=second)


def render(comparison: Comparison, *, rates: Mapping[str, float], row_anchor: Callable[[CellVerdict], str],
           change: Callable[[CellVerdict], str]) -> Markup:
    """The heatmap (templates/heatmap.html): a legend, then one panel per combination of the panel axes. `rates`:
    each cell's mean img/s over its usable repeats; `row_anchor(v)`: the fragment a tile links to; `change(v)`: the
    words of a cell's change for the tile's tooltip."""
    verdicts = list(comparison.verdicts)
    if not verdicts:
        return macro("heatmap.html:heatmap", None)
    lay = layout(verdicts)
    by_key = {tuple(getattr(v, a) for a in AXES): v for v in verdicts}
    values = {a: _axis_values(verdicts, a) for a in AXES}
    fixed = {a: values[a][0] for a in AXES if len(values[a]) == 1}
    row_keys = list(itertools.product(*(values[a] for a in lay.rows))) or [()]
    col_keys = list(itertools.product(*(values[a] for a in lay.columns))) or [()]
    panel_keys = list(itertools.product(*(values[a] for a in lay.panels))) or [()]

    def tile(row: tuple, key: tuple, panel: tuple) -> Tile | None:
        chosen = fixed | dict(zip(lay.rows, row)) | dict(zip(lay.columns, key)) | dict(zip(lay.panels, panel))
        v = by_key.get(tuple(chosen.get(a) for a in AXES))
        return None if v is None else _tile(v, rates.get(v.cell_id), row_anchor(v), change)

    panels = [{"caption": _key_text(lay.panels, panel) if lay.panels else "",
               "columns": [_key_text(lay.columns, key) for key in col_keys],
               "rows": [{"key": _key_text(lay.rows, row), "tiles": [tile(row, key, panel) for key in col_keys]}
                        for row in row_keys]}
              for panel in panel_keys]
    shown = {tile_kind(v.verdict) for v in verdicts}
    legend = [(kind, symbol, words) for kind, symbol, words in TILE_KINDS if kind != "ran" or "ran" in shown]
    axes_words = (" \u00b7 ".join(filter(None, [f"rows: {', '.join(lay.rows)}" if lay.rows else "",
                                                  f"columns: {', '.join(lay.columns)}" if lay.columns else "",
                                                  f"panels: {', '.join(lay.panels)}" if lay.panels else ""])))
    what = "img/s of this run and the change of the metric its verdict rests on" \
        if comparison.baseline is not None or comparison.mode == "history" else "img/s of this run"
    return macro("heatmap.html:heatmap", {"what": what, "axes_words": axes_words, "legend": legend,
                                          "panels": panels})
