"""The report's cell table: one line per judged cell with a detail row a click opens, skipped cells grouped by
reason below it, and the anchors a heatmap tile links to."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from harness.analysis.pages import heatmap
from harness.analysis.judge.verdict import (
    ACCURACY_BELOW, FAILED, FLOOR_OVERRIDE, INSUFFICIENT, NO_BASELINE, NOT_COMPARABLE, SKIPPED, VERDICTS, CellVerdict, Comparison)
from harness.analysis.pages.wording import cell_means, change_text, css_class, esc, num_text, sorted_verdicts
from harness.results.accuracy import chance_text, top1_text
from harness.matrix.cells import cell_label as label
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


def _td(content: str, *, sort: float | str | None = None, num: bool = False) -> str:
    """A table cell; `sort` is what the page's column sort orders by (numbers as numbers, '' last)."""
    key = "" if sort is None or (isinstance(sort, float) and not math.isfinite(sort)) else sort
    css = ' class="num"' if num else ""
    return f'<td{css} data-sort="{esc(key)}">{content}</td>'


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


def _detail(v: CellVerdict, extra: Mapping[str, tuple[dict, dict]]) -> str:
    """A cell's detail row: everything the one line leaves out."""
    facts = [("cell id", f"<code>{esc(v.cell_id)}</code>"), ("reason", esc(v.reason or "-")),
             ("change", f'<span class="mono">{esc(change_text(v))}</span>'), ("noise", esc(v.noise or "-"))]
    if v.repeats_needed is not None:
        facts.append(("repeats to decide", esc(f"~{v.repeats_needed} per side")))
    if v.accuracy_verdict and v.candidate_top1 is not None:
        facts.append(("top-1 check", esc(f"{v.accuracy_verdict}" + (
            f": {v.top1_change:+.4f} [{v.top1_ci_low:+.4f}, {v.top1_ci_high:+.4f}]" if v.top1_change is not None
            else ""))))
    for column, name, spec in EXTRA_COLUMNS:
        this, base = extra[column][0].get(v.cell_id), extra[column][1].get(v.cell_id)
        facts.append((name + (" (this / baseline)" if base is not None else ""), esc(_pair(this, base, spec))))
    items = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in facts)
    return f'<tr class="detail" hidden><td colspan="{len(TABLE_HEAD)}"><dl>{items}</dl></td></tr>'


def render_table(comparison: Comparison) -> str:
    """The judged cells, one line each (sorted by verdict group, then effect), each with a detail row a click
    opens; skipped cells grouped by reason below it."""
    order = {name: i for i, name in enumerate(VERDICTS)}
    extra = {column: (cell_means(comparison.candidate.rows, column),
                      cell_means(comparison.baseline.rows if comparison.baseline else (), column))
             for column, _, _ in EXTRA_COLUMNS}
    ok_rows: dict[str, list[Mapping[str, Any]]] = {}
    for r in comparison.candidate.rows:
        if r["status"] == "ok":
            ok_rows.setdefault(r[col.cell_id], []).append(r)
    head = "".join(f'<th title="{esc(words)}; click to sort">{esc(name)}</th>' for name, words in TABLE_HEAD)
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
                f'<code title="{esc(v.cell_id)}">{esc(label(v.cell_id))}</code>{tag}', sort=label(v.cell_id)),
            _td(f'<span class="v v-{esc(css_class(v.verdict))}">{esc(v.verdict)}</span>', sort=order[v.verdict]),
            _td(f'<span class="mono">{esc(_short_change(v))}</span>', sort=heatmap.shown_metric(v).effect_pct,
                num=True),
            _td(esc(_pair(t.candidate_value, t.baseline_value, ".1f")), sort=t.candidate_value, num=True),
            _td(esc(mdc_text(v, comparison.mode)), sort=v.mdc_pct, num=True),
            _td(f'<span title="{esc(v.floor_source)}">{esc(f"{v.floor_pct:g}")}</span>'
                + (f' <span class="reason">{esc(v.floor_source)}</span>' if v.floor_kind == FLOOR_OVERRIDE
                   else ""), sort=v.floor_pct, num=True),
            _td(esc(_top1_cell(v, ok_rows.get(v.cell_id, []))), sort=v.candidate_top1, num=True),
            _td(f"{v.num_candidate} / {others}", sort=v.num_candidate, num=True),
        ]
        css = "cell drill" if drill else "cell"
        out.append(f'<tbody class="{css}" id="cell-{esc(v.cell_id)}"><tr class="main">{"".join(cells)}</tr>'
                   f"{_detail(v, extra)}</tbody>")
    out.append("</table>")
    out.append('<p class="hint">Click a row for its reason and the rest of its figures (MFU, power, img/J, data '
               "wait), a heading to sort. * : the fast-step rate decided (the detail row shows both metrics).</p>")
    groups = skip_groups(comparison)
    if groups:
        total = sum(len(m) for _, m in groups)
        items = "".join(f'<details id="skip-{i}"><summary><b>{len(members)}</b> {esc(reason)}</summary>'
                        f'<p class="mono">{esc(", ".join(sorted(label(v.cell_id) for v in members)))}</p></details>'
                        for i, (reason, members) in enumerate(groups))
        out.append(f'<div class="skips"><h3>Skipped: {total} cell(s), by reason</h3>{items}</div>')
    if comparison.mode == "history" and comparison.suspects:
        codes = ", ".join(f"<code>{esc(s)}</code>" for s in comparison.suspects)
        out.append(f"<p>Suspects for a confirmation rerun: {codes} (also in suspects.json).</p>")
    return "".join(out)
