"""The kernel diff where a user looks: each compared cell's profiled repeats (kernels.parquet of both run
folders) diffed (kernel_diff), its top operators added to the cell's verdict line (and so to summary.md,
junit.xml, verdicts.parquet and report.html's table), and report/kernels.md and kernels.html written."""

from __future__ import annotations

import dataclasses
import html
import statistics
from pathlib import Path
from typing import Mapping, Sequence

from harness.analysis.judge.kernel_diff import REPLACED, ItemChange, KernelDiff, diff_cell, top_line
from harness.catalogue.kernels import DEFAULT_KERNEL_FDR, DEFAULT_KERNEL_FLOOR_PCT, OPERATORS_NOTE

__all__ = ["attach", "diff_runs", "has_kernels", "changed_cells", "render_html", "render_markdown", "render_sections",
           "top_line", "write"]
from harness.analysis.judge.verdict import IMPROVEMENT, REGRESSION, Comparison
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


def _bar(op: ItemChange, scale: float) -> str:
    """A horizontal bar of the change with its interval, as inline SVG (slower to the right, red)."""
    w, mid = 240, 120
    x = lambda s: mid + (s / scale) * (w / 2 - 4) if scale else mid  # noqa: E731
    colour = "#c0392b" if op.change_s > 0 else "#27ae60"
    lo, hi = (op.ci_low_s, op.ci_high_s) if op.tested else (op.change_s, op.change_s)
    return (f'<svg width="{w}" height="14"><line x1="{mid}" y1="0" x2="{mid}" y2="14" stroke="#999"/>'
            f'<rect x="{min(mid, x(op.change_s)):.1f}" y="3" width="{abs(x(op.change_s) - mid):.1f}" height="8" '
            f'fill="{colour}"/><line x1="{x(lo):.1f}" y1="7" x2="{x(hi):.1f}" y2="7" stroke="#333"/></svg>')


def render_sections(diffs: Mapping[str, KernelDiff], cells: Sequence[str] | None = None) -> str:
    """One section per cell (those of `cells`, None: all): the verdict's operators line, then the table with a
    chart column of each operator's change and interval. Styled inline: it sits in report.html as it is."""
    out = []
    for cid, d in sorted(diffs.items()):
        if cells is not None and cid not in cells:
            continue
        rows = _rows(d)
        scale = max([abs(v) for op, _ in rows for v in (op.ci_low_s, op.ci_high_s, op.change_s) if v == v] or [0])
        out += [f'<section class="kernels" id="kernels-{html.escape(cid)}"><h2>Operators and kernels: '
                f'{html.escape(cid)}</h2><p><b>{html.escape(top_line(d))}</b></p>',
                '<table style="border-collapse:collapse"><tr><th>phase</th><th>operator / kernel</th><th>A ms/step</th>'
                "<th>B ms/step</th><th>change [interval]</th><th>change (bar), interval (line)</th>"
                "<th>verdict</th></tr>"]
        for op, ks in rows:
            out.append(f"<tr><td>{op.phase}</td><td><b>{html.escape(op.operator)}</b></td>"
                       f"<td>{1e3 * op.base_s:.2f}</td><td>{1e3 * op.cand_s:.2f}</td><td>{html.escape(op.text())}</td>"
                       f"<td>{_bar(op, scale)}</td><td>{op.verdict}</td></tr>")
            out += [f'<tr style="color:#555;font-size:90%"><td></td><td>&nbsp;&nbsp;{html.escape(_kernel_name(k))}</td>'
                    f"<td>{1e3 * k.base_s:.2f}</td><td>{1e3 * k.cand_s:.2f}</td><td>{html.escape(k.text())}</td>"
                    f"<td></td><td>{k.verdict}</td></tr>" for k in ks]
        out.append(f"</table><p><small>{d.repeats_base} + {d.repeats_cand} profiled repeats; {html.escape(d.method)}; "
                   f"intervals at {d.ci_level:.2%}</small></p></section>")
    return "\n".join(out)


def render_html(diffs: Mapping[str, KernelDiff]) -> str:
    """kernels.html: every cell's section, on a page of its own."""
    return ("<!doctype html><meta charset='utf-8'><title>nvbench kernels</title><style>body{font:14px sans-serif}"
            "td,th{padding:2px 8px;text-align:left}</style>\n" + render_sections(diffs) + "\n")


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
    store.write_all(files)
    return list(files)

