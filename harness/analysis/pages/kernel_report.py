"""The kernel diff where a user looks (rendering only; the diff and its attaching: analysis.product.extras.Kernels):
each changed cell's section of report.html, and report/kernels.md and kernels.html."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from harness.analysis.judge.kernel_diff import REPLACED, ItemChange, KernelDiff, top_line

from harness.analysis.judge.verdict import IMPROVEMENT, REGRESSION, Comparison
from harness.analysis.pages.charts import Chart, figure, interval, rows_height, rows_layout, slug, verdict_colour, vline
from harness.analysis.pages.render import Markup, macro, render
from harness.analysis.pages.report import page_values

KERNELS_MD, KERNELS_HTML = "kernels.md", "kernels.html"
SHOWN = 12
"""Rows of a cell's table: its operators by the size of their change."""


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


def files(out_dir: Path, diffs: Mapping[str, KernelDiff]) -> dict[Path, bytes]:
    """report/kernels.md and report/kernels.html, rendered (nothing when there is no diff): the report's pipeline
    writes them with the report (analysis.product.pipeline)."""
    if not diffs:
        return {}
    return {Path(out_dir) / KERNELS_MD: render_markdown(diffs).encode(),
            Path(out_dir) / KERNELS_HTML: render_html(diffs).encode()}
