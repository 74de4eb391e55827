"""The report's cell table: one line per judged cell with a detail row a click opens, skipped cells grouped by
reason below it, and the anchors a heatmap tile links to."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from harness.analysis.pages import heatmap
from harness.analysis.judge.verdict import (
    ACCURACY_BELOW, FAILED, FLOOR_OVERRIDE, INSUFFICIENT, NO_BASELINE, NOT_COMPARABLE, SKIPPED, VERDICTS, CellVerdict, Comparison)
from harness.analysis.pages.render import Markup, macro
from harness.analysis.pages.wording import cell_means, change_text, css_class, num_text, sorted_verdicts
from harness.results.accuracy import chance_text, top1_text
from harness.catalogue import col


EXTRA_COLUMNS = ((col.mfu_pct, "MFU %", ".1f"), (col.power_avg_w, "power W", ".0f"),
                 (col.img_per_joule, "img/J", ".2f"), (col.exposed_data_wait_frac, "data wait", ".1%"))
"""Row columns a cell's detail row shows beside its verdict: (column, name with unit, format), as each side's
mean."""

TABLE_HEAD = (("cell", "the cell's axis values; its full id in the detail row"),
              ("verdict", "the comparison's call"),
              ("change % [interval]", "change of the metric the verdict rests on, with its interval"),
              ("img/s", "mean images per second: this run / baseline"),
              ("MDC %", ("minimum detectable change at the baseline's spread (80% power); n/a says why there is "
                         "none: it needs two usable repeats a side and a spread between them")),
              ("floor %", "the practical floor that judged the cell (smaller changes are never a regression) and "
                          "the rule that set it: default, --floor, the matrix's judge.floor_pct or a judge.override"),
              ("top-1", "mean top-1 accuracy, fraction of validation images"),
              ("repeats", "usable repeats: this run / baseline (history: runs)"))
"""The cell table's columns: (heading with its unit, what it holds). One line per cell; everything else of a
cell (its reason, the full change, noise, MFU, power, img/J, data wait) is in its detail row."""


def _sort_key(value: float | str | None) -> float | str:
    """What the page's column sort orders by: numbers as numbers, '' (last) where there is none."""
    return "" if value is None or (isinstance(value, float) and not math.isfinite(value)) else value


def _pair(this: float | None, base: float | None, spec: str) -> str:
    """'this / baseline' where the baseline has the figure, else this side's alone."""
    return num_text(this, spec) + (f" / {num_text(base, spec)}" if base is not None else "")


def skip_groups(comparison: Comparison) -> list[tuple[str, list[CellVerdict]]]:
    """Skipped cells by reason, the most common reason first (as the console groups them)."""
    groups: dict[str, list[CellVerdict]] = {}
    for v in comparison.verdicts:
        if v.verdict == SKIPPED:
            groups.setdefault(v.reason or "no reason recorded", []).append(v)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def row_anchors(comparison: Comparison) -> Callable[[CellVerdict], str]:
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
        return top1_text(rows) + chance_text(rows)
    return f"{v.candidate_top1:.3f}" + (" below band" if v.accuracy_verdict == ACCURACY_BELOW else "") \
        + chance_text(rows)


def mdc_text(v: CellVerdict, mode: str) -> str:
    """The MDC column: the figure, or in a few words why there is none."""
    if v.mdc_pct is not None:
        return num_text(v.mdc_pct, ".1f")
    if v.verdict in (FAILED, SKIPPED):
        return "-"
    if mode == "none" or v.verdict == NO_BASELINE:
        return "n/a: no baseline"
    if v.verdict in (NOT_COMPARABLE, INSUFFICIENT):
        return f"n/a: {v.verdict}"
    fewest = min(v.num_candidate, v.num_baseline)
    return f"n/a: {fewest} repeat{'s' if fewest != 1 else ''}" if fewest < 2 else "n/a: no spread"


def _facts(v: CellVerdict, extra: Mapping[str, tuple[dict, dict]]) -> list[tuple[str, str, str]]:
    """A cell's detail row: everything the one line leaves out, as (name, words, style: code, mono or plain)."""
    facts = [("cell id", v.cell_id, "code"), ("reason", v.reason or "-", ""), ("change", change_text(v), "mono"),
             ("noise", v.noise or "-", "")]
    if v.repeats_needed is not None:
        facts.append(("repeats to decide", f"~{v.repeats_needed} per side", ""))
    if v.accuracy_verdict and v.candidate_top1 is not None:
        facts.append(("top-1 check", f"{v.accuracy_verdict}" + (
            f": {v.top1_change:+.4f} [{v.top1_ci_low:+.4f}, {v.top1_ci_high:+.4f}]" if v.top1_change is not None
            else ""), ""))
    for column, name, spec in EXTRA_COLUMNS:
        this, base = extra[column][0].get(v.cell_id), extra[column][1].get(v.cell_id)
        facts.append((name + (" (this / baseline)" if base is not None else ""), _pair(this, base, spec), ""))
    return facts


def _row(v: CellVerdict, comparison: Comparison, extra: Mapping[str, tuple[dict, dict]],
         ok_rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """One judged cell's line and detail row, as the words and sort keys templates/cells.html shows."""
    drill = v.fire_drill_pct or v.baseline_fire_drill_pct
    t = v.throughput
    others = v.num_baseline if comparison.mode != "history" else v.num_history_runs
    sort = {"cell": v.label, "verdict": VERDICTS.index(v.verdict),
            "change": heatmap.shown_metric(v).effect_pct, "rate": t.candidate_value, "mdc": v.mdc_pct,
            "floor": v.floor_pct, "top1": v.candidate_top1, "repeats": v.num_candidate}
    return {col.cell_id: v.cell_id, "label": v.label, "drill_tag": f"drill +{v.fire_drill_pct:g}%" if drill
            else "", "verdict": v.verdict, "verdict_css": css_class(v.verdict), "change": _short_change(v),
            "rate": _pair(t.candidate_value, t.baseline_value, ".1f"), "mdc": mdc_text(v, comparison.mode),
            "floor": f"{v.floor_pct:g}", col.floor_source: v.floor_source,
            "floor_override": v.floor_kind == FLOOR_OVERRIDE,
            "top1": _top1_cell(v, ok_rows.get(v.cell_id, [])), "repeats": f"{v.num_candidate} / {others}",
            "sort": {name: _sort_key(value) for name, value in sort.items()}, "facts": _facts(v, extra)}


def render_table(comparison: Comparison) -> Markup:
    """The judged cells, one line each (sorted by verdict group, then effect), each with a detail row a click
    opens; skipped cells grouped by reason below it (templates/cells.html)."""
    extra = {column: (cell_means(comparison.candidate.rows, column),
                      cell_means(comparison.baseline.rows if comparison.baseline else (), column))
             for column, _, _ in EXTRA_COLUMNS}
    ok_rows: dict[str, list[Mapping[str, Any]]] = {}
    for r in comparison.candidate.rows:
        if r["status"] == "ok":
            ok_rows.setdefault(r[col.cell_id], []).append(r)
    rows = [_row(v, comparison, extra, ok_rows) for v in sorted_verdicts(comparison) if v.verdict != SKIPPED]
    skips = [{"count": len(members), "reason": reason, "labels": ", ".join(sorted(v.label for v in members))}
             for reason, members in skip_groups(comparison)]
    suspects = list(comparison.suspects) if comparison.mode == "history" else []
    return macro("cells.html:cell_table", {"head": TABLE_HEAD, "rows": rows, "skips": skips, "suspects": suspects})
