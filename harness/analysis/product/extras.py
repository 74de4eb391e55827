"""What a comparison adds beside its timing, each extra plugged in one way (the Extra protocol): its diff of the two
run folders, how that diff attaches to the verdicts, its sections of report.html, its files beside the report and
its lines on stderr. Work (work.parquet: what a step does, counted exactly) and kernels (kernels.parquet: profiled
repeats, where the time went, to the operator)."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from harness.analysis.judge.kernel_diff import KernelDiff, diff_cell as kernel_diff_cell, top_line
from harness.analysis.judge.verdict import Comparison
from harness.analysis.judge.work_diff import WorkDiff, check_gates, diff_cell as work_diff_cell
from harness.analysis.load.runs import read_work_table
from harness.analysis.pages import kernel_report, work_report
from harness.analysis.pages.render import Markup
from harness.catalogue import col
from harness.catalogue.kernels import DEFAULT_KERNEL_FDR, DEFAULT_KERNEL_FLOOR_PCT, OPERATORS_NOTE
from harness.catalogue.work_gates import WORK_NOTE
from harness.results import kernels


class Extra(Protocol):
    """One thing a comparison adds beside its timing."""

    name: str
    optional: bool
    """True: a side's unreadable file leaves this extra out with a warning; False: it is the command's error."""

    def diffs(self, comparison: Comparison, base_dir: Path, cand_dir: Path) -> Mapping[str, Any]:
        """Each compared cell's diff of the two run folders (A: base_dir, B: cand_dir), by cell id."""

    def attach(self, comparison: Comparison, diffs: Mapping[str, Any]) -> Comparison:
        """The comparison with its verdicts told the diffs (their fields, and their reasons' words for a reader)."""

    def sections(self, comparison: Comparison, diffs: Mapping[str, Any]) -> Markup:
        """Its sections of report.html (under the headline)."""

    def files(self, out_dir: Path, diffs: Mapping[str, Any]) -> dict[Path, bytes]:
        """Its files beside the report, written with it."""

    def lines(self, diffs: Mapping[str, Any]) -> list[str]:
        """Its lines for stderr."""


# ---------------------------------------------------------------------------------------------
# work


def diff_tables(cell_ids: Sequence[str], a_rows: Sequence[Mapping] | None,
                b_rows: Sequence[Mapping] | None) -> dict[str, WorkDiff]:
    """Each cell's work diff where at least one side has a work table ({} where neither does: no work was counted
    at all, and the verdicts stay as they were)."""
    if a_rows is None and b_rows is None:
        return {}
    return {cid: work_diff_cell(a_rows or (), b_rows or (), cid) for cid in cell_ids}


def attach_work(comparison: Comparison, diffs: Mapping[str, WorkDiff]) -> Comparison:
    """The comparison with each diffed cell's work words after its reason, its work fields set and its broken
    gates (comparison.thresholds.work_gates) named and flagged; a gate that cannot tell says so in the words."""
    gates = comparison.thresholds.work_gates
    verdicts = []
    for v in comparison.verdicts:
        diff = diffs.get(v.cell_id)
        if diff is None:
            verdicts.append(v)
            continue
        checks = check_gates(diff, gates)
        broken = "; ".join(c.words for c in checks if c.broken)
        words = "; ".join([diff.words(), *(c.words for c in checks)])
        verdicts.append(dataclasses.replace(v, reason=f"{v.reason}{WORK_NOTE}{words}", work=diff.words(),
                                            work_changed=diff.is_changed, work_gate=broken or None,
                                            work_gate_broken=bool(broken)))
    return dataclasses.replace(comparison, verdicts=tuple(verdicts), work_diffs=dict(diffs))


@dataclass(frozen=True, slots=True)
class Work:
    """The counted work of both sides, diffed per cell: exact, so the gates decide on it whatever the timing."""

    optional: bool = False
    name: str = "work"

    def diffs(self, comparison: Comparison, base_dir: Path, cand_dir: Path) -> dict[str, WorkDiff]:
        return diff_tables([v.cell_id for v in comparison.verdicts], read_work_table(base_dir),
                           read_work_table(cand_dir))

    def attach(self, comparison: Comparison, diffs: Mapping[str, WorkDiff]) -> Comparison:
        return attach_work(comparison, diffs)

    def sections(self, comparison: Comparison, diffs: Mapping[str, WorkDiff]) -> Markup:
        return work_report.render_sections(comparison)

    def files(self, out_dir: Path, diffs: Mapping[str, WorkDiff]) -> dict[Path, bytes]:
        return {}

    def lines(self, diffs: Mapping[str, WorkDiff]) -> list[str]:
        return []


# ---------------------------------------------------------------------------------------------
# kernels


def has_kernels(run_dir: Path) -> bool:
    return (Path(run_dir) / kernels.KERNELS_FILE).is_file()


def _timed_step_s(rows: Sequence[Mapping], cell_id: str) -> float | None:
    """The median timed step (images per step / throughput) of a cell's ok rows; None without one."""
    steps = [r[col.images_per_step] / r[col.throughput_img_per_s] for r in rows
             if r[col.cell_id] == cell_id and r["status"] == "ok" and r.get(col.profile_tool) is None
             and r.get(col.throughput_img_per_s)]
    return statistics.median(steps) if steps else None


def kernel_diffs(comparison: Comparison, base_dir: Path, cand_dir: Path, *,
                 floor_pct: float = DEFAULT_KERNEL_FLOOR_PCT, fdr_q: float = DEFAULT_KERNEL_FDR) -> dict[str, KernelDiff]:
    """The kernel diff of every compared cell with profiled repeats on both sides, by cell id. UnreadableFile when a
    kernels.parquet is not one; {} where a side has none."""
    if not (has_kernels(base_dir) and has_kernels(cand_dir)):
        return {}
    base = kernels.read_kernels(Path(base_dir) / kernels.KERNELS_FILE)
    cand = kernels.read_kernels(Path(cand_dir) / kernels.KERNELS_FILE)
    out = {}
    for v in comparison.verdicts:
        a = _timed_step_s(comparison.baseline.rows if comparison.baseline else (), v.cell_id)
        b = _timed_step_s(comparison.candidate.rows, v.cell_id)
        diff = kernel_diff_cell(base, cand, v.cell_id, q=fdr_q, floor_pct=floor_pct,
                                timed_step_change_s=b - a if a is not None and b is not None else None)
        if diff is not None:
            out[v.cell_id] = diff
    return out


def attach_kernels(comparison: Comparison, diffs: Mapping[str, KernelDiff]) -> Comparison:
    """The comparison with each changed cell's operators' line in its own field (verdicts.parquet's `operators`), and
    its reason ending in it for a reader."""
    changed = set(kernel_report.changed_cells(comparison))

    def with_line(v, line: str):
        return dataclasses.replace(v, operators=line, reason=f"{v.reason}{OPERATORS_NOTE}{line}")

    verdicts = tuple(with_line(v, top_line(diffs[v.cell_id])) if v.cell_id in diffs and v.cell_id in changed else v
                     for v in comparison.verdicts)
    return dataclasses.replace(comparison, verdicts=verdicts)


@dataclass(frozen=True, slots=True)
class Kernels:
    """Where the time went, to the operator: both sides' profiled repeats diffed per cell (never the verdict)."""

    floor_pct: float = DEFAULT_KERNEL_FLOOR_PCT
    fdr_q: float = DEFAULT_KERNEL_FDR
    optional: bool = False
    name: str = "kernels"

    def diffs(self, comparison: Comparison, base_dir: Path, cand_dir: Path) -> dict[str, KernelDiff]:
        return kernel_diffs(comparison, base_dir, cand_dir, floor_pct=self.floor_pct, fdr_q=self.fdr_q)

    def attach(self, comparison: Comparison, diffs: Mapping[str, KernelDiff]) -> Comparison:
        return attach_kernels(comparison, diffs)

    def sections(self, comparison: Comparison, diffs: Mapping[str, KernelDiff]) -> Markup:
        return kernel_report.render_sections(diffs, kernel_report.changed_cells(comparison))

    def files(self, out_dir: Path, diffs: Mapping[str, KernelDiff]) -> dict[Path, bytes]:
        return kernel_report.files(out_dir, diffs)

    def lines(self, diffs: Mapping[str, KernelDiff]) -> list[str]:
        return [f"kernels {cid}: {top_line(diff)}" for cid, diff in sorted(diffs.items())]
