"""The kernel diff where a user looks: each compared cell's profiled repeats (kernels.parquet of both run
folders) diffed (kernel_diff), its top operators added to the cell's verdict line (and so to summary.md,
junit.xml, verdicts.parquet and report.html's table), and report/kernels.md and kernels.html written."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Mapping, Sequence

from harness.analysis.judge.kernel_diff import REPLACED, ItemChange, KernelDiff, diff_cell, top_line
from harness.catalogue.kernels import DEFAULT_KERNEL_FDR, DEFAULT_KERNEL_FLOOR_PCT, OPERATORS_NOTE

__all__ = ["attach", "diff_runs", "has_kernels", "changed_cells", "render_html", "render_markdown", "render_sections",
           "top_line", "write"]
from harness.analysis.judge.verdict import IMPROVEMENT, REGRESSION, Comparison
from harness.analysis.pages.charts import Chart, figure, interval, rows_height, rows_layout, slug, verdict_colour, vline
from harness.analysis.pages.render import Markup, place_assets, macro, render
from harness.analysis.pages.report import page_values
from harness.results import kernels
from harness.catalogue import col

KERNELS_MD, KERNELS_HTML = "kernels.md", "kernels.html"
SHOWN = 12
"""Rows of a cell's table: its operators by the size of their change."""


def _timed_step_s(rows: Sequence[Mapping], cell_id: str) -> float | None:
    """The median timed step (images per step / throughput) of a cell's ok rows; None without one."""
    steps = [r[col.images_per_step] / r[col.throughput_img_per_s] for r in rows
             if r[col.cell_id] == cell_id and r["status"] == "ok" and r.get(col.profile_tool) is None
             and r.get(col.throughput_img_per_s)]
    return statistics.median(steps) if steps else None


def has_kernels(run_dir: Path) -> bool:
    return (Path(run_dir) / kernels.KERNELS_FILE).is_file()


def diff_runs(comparison: Comparison, base_dir: Path, cand_dir: Path, *, floor_pct: float = DEFAULT_KERNEL_FLOOR_PCT,
              fdr_q: float = DEFAULT_KERNEL_FDR) -> dict[str, KernelDiff]:
    """The diff of every compared cell with profiled repeats on both sides, by cell id. UnreadableFile when a
    kernels.parquet is not one; {} where a side has none."""
    if not (has_kernels(base_dir) and has_kernels(cand_dir)):
        return {}
    base = kernels.read_kernels(Path(base_dir) / kernels.KERNELS_FILE)
    cand = kernels.read_kernels(Path(cand_dir) / kernels.KERNELS_FILE)
    out = {}
    for v in comparison.verdicts:
        a = _timed_step_s(comparison.baseline.rows if comparison.baseline else (), v.cell_id)
        b = _timed_step_s(comparison.candidate.rows, v.cell_id)
        diff = diff_cell(base, cand, v.cell_id, q=fdr_q, floor_pct=floor_pct,
                         timed_step_change_s=b - a if a is not None and b is not None else None)
        if diff is not None:
            out[v.cell_id] = diff
    return out


def attach(comparison: Comparison, diffs: Mapping[str, KernelDiff]) -> Comparison:
    """The comparison with each changed cell's operators' line in its own field (verdicts.parquet's `operators`), and
    its reason ending in it for a reader."""
    changed = set(changed_cells(comparison))

    def with_line(v, line: str):
        return dataclasses.replace(v, operators=line, reason=f"{v.reason}{OPERATORS_NOTE}{line}")

    verdicts = tuple(with_line(v, top_line(diffs[v.cell_id])) if v.cell_id in diffs and v.cell_id in changed else v
                     for v in comparison.verdicts)
    return dataclasses.replace(comparison, verdicts=verdicts)


def _rows(diff: KernelDiff) -> list[tuple[ItemChange, list[ItemChange]]]:
    ops = sorted(diff.operators, key=lambda o: (o.verdict not in (REGRESSION, IMPROVEMENT), -abs(o.change_s)))
    return [(op, sorted(diff.kernels_of(op), key=lambda k: -abs(k.change_s))[:4]) for op in ops[:SHOWN]]


def _kernel_name(k: ItemChange) -> str:
    return f"{k.replaced} replaced by {k.kernel}" if k.presence == REPLACED else f"{k.kernel} ({k.presence})"


def render_markdown(diffs: Mapping[str, KernelDiff]) -> str:
    lines = ["## nvbench: operators and kernels, B against A (profiled repeats)", ""]
    for cid, d in sorted(diffs.items()):
        lines += [f"### {cid}", "", f"**{top_line(d)}**", "",
                  f"{d.repeats_base} + {d.repeats_cand} profiled repeats; {d.method}; intervals at {d.ci_level:.2%}",
                  "", "| phase | operator / kernel | A ms/step | B ms/step | change [interval] | verdict |",
                  "|---|---|---|---|---|---|"]
        for op, ks in _rows(d):
            lines.append(f"| {op.phase} | **{op.operator}** | {1e3 * op.base_s:.2f} | {1e3 * op.cand_s:.2f} | "
                         f"{op.text()} | {op.verdict} |")
            lines += [f"|  | &nbsp;&nbsp;{_kernel_name(k)} | {1e3 * k.base_s:.2f} | {1e3 * k.cand_s:.2f} | "
                      f"{k.text()} | {k.verdict} |" for k in ks]
        lines.append("")
    return "\n".join(lines)


def kernel_chart(cid: str, diff: KernelDiff) -> Chart:
    """Each shown operator's change in ms a step with its interval (right of 0: slower), coloured by its verdict."""
    ops = [op for op, _ in _rows(diff)]
    labels = [f"{op.phase} {op.operator}" for op in ops]
    data = []
    for verdict in dict.fromkeys(op.verdict for op in ops):
        part = [op for op in ops if op.verdict == verdict]
        ends = [(1e3 * op.ci_low_s, 1e3 * op.ci_high_s) if op.tested else (None, None) for op in part]
        data.append({"type": "scatter", "mode": "markers", "name": verdict, "x": [1e3 * op.change_s for op in part],
                     "y": [f"{op.phase} {op.operator}" for op in part],
                     "error_x": interval([1e3 * op.change_s for op in part], [e[0] for e in ends],
                                         [e[1] for e in ends]),
                     "customdata": [[op.text(), f"{1e3 * op.base_s:.2f}", f"{1e3 * op.cand_s:.2f}"] for op in part],
                     "hovertemplate": "%{y}: %{customdata[0]} (A %{customdata[1]} ms, B %{customdata[2]} ms a step)"
                                      "<extra></extra>",
                     "marker": {"color": verdict_colour(verdict), "size": 9}})
    layout = rows_layout(labels, "change, ms per step (right of 0: slower)", shapes=[vline(0.0)])
    return Chart(id=f"kernels-chart-{slug(cid)}", caption=f"Operators' change: {cid}", figure=figure(data, layout),
                 height=rows_height(len(ops)), note="Dots: B's time a step minus A's; bars: the interval.")


def render_sections(diffs: Mapping[str, KernelDiff], cells: Sequence[str] | None = None) -> Markup:
    """One section per cell (those of `cells`, None: all): the verdict's operators line, a chart of each operator's
    change and interval, then the table of operators and their kernels (templates/macros.html)."""
    sections = [{"id": cid, "line": top_line(d), "chart": kernel_chart(cid, d),
                 "rows": [{"op": op, "kernels": [{"k": k, "name": _kernel_name(k)} for k in ks]} for op, ks in _rows(d)],
                 "method": f"{d.repeats_base} + {d.repeats_cand} profiled repeats; {d.method}; intervals at "
                           f"{d.ci_level:.2%}"}
                for cid, d in sorted(diffs.items()) if cells is None or cid in cells]
    return macro("kernel_sections", sections)


def render_html(diffs: Mapping[str, KernelDiff]) -> str:
    """kernels.html: every cell's section, on a page of its own."""
    return render("page.html", **page_values("nvbench kernels", f"{len(diffs)} cell(s), B against A",
                                              "Operators and kernels over profiled repeats (nvbench ab)."),
                  banner="", sections=[("", "", render_sections(diffs))])


def changed_cells(comparison: Comparison) -> list[str]:
    """The cells whose verdict called a change: report.html gets their sections."""
    return [v.cell_id for v in comparison.verdicts if v.verdict in (REGRESSION, IMPROVEMENT) or v.is_regression]


def write(out_dir: Path, diffs: Mapping[str, KernelDiff]) -> list[Path]:
    """report/kernels.md and report/kernels.html (nothing when there is no diff)."""
    from harness.results import store

    if not diffs:
        return []
    files = {Path(out_dir) / KERNELS_MD: render_markdown(diffs).encode(),
             Path(out_dir) / KERNELS_HTML: render_html(diffs).encode()}
    place_assets(Path(out_dir))
    store.write_all(files)
    return list(files)

