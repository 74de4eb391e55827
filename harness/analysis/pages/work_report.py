"""The work diff where a user looks: both run folders' work.parquet diffed per compared cell (work_diff), the words
added to each cell's verdict line and its work fields (verdicts.parquet, summary.md, junit.xml), the matrix's
work gates checked, and report.html's section per cell whose work changed."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Mapping, Sequence

from harness.analysis.judge.verdict import Comparison
from harness.analysis.load.runs import read_work_table
from harness.analysis.judge.work_diff import WorkDiff, check_gates, diff_cell, item_text
from harness.analysis.pages.render import Markup, macro
from harness.catalogue import col
from harness.catalogue.work_gates import WORK_NOTE



def diff_tables(cell_ids: Sequence[str], a_rows: Sequence[Mapping] | None,
                b_rows: Sequence[Mapping] | None) -> dict[str, WorkDiff]:
    """Each cell's diff where at least one side has a work table ({} where neither does: no work was counted at
    all, and the verdicts stay as they were)."""
    if a_rows is None and b_rows is None:
        return {}
    return {cid: diff_cell(a_rows or (), b_rows or (), cid) for cid in cell_ids}


def diff_runs(comparison: Comparison, base_dir: Path, cand_dir: Path) -> dict[str, WorkDiff]:
    """The work diff of every compared cell, B (`cand_dir`) against A (`base_dir`)."""
    return diff_tables([v.cell_id for v in comparison.verdicts], read_work_table(base_dir), read_work_table(cand_dir))


def attach(comparison: Comparison, diffs: Mapping[str, WorkDiff]) -> Comparison:
    """The comparison with each diffed cell's work words after its reason, its work fields set and its broken
    gates (comparison.thresholds.work_gates) named; a gate that cannot tell says so in the words."""
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


def with_work(comparison: Comparison, base_dir: Path, cand_dir: Path) -> Comparison:
    """diff_runs then attach: what `nvbench report A --baseline B`, `nvbench ab` and the nightly's report do."""
    return attach(comparison, diff_runs(comparison, base_dir, cand_dir))


def render_sections(comparison: Comparison) -> Markup:
    """report.html: one section per cell whose work changed, its changed items with A's and B's per step
    (templates/work.html)."""
    sections = []
    for v in comparison.verdicts:
        diff = comparison.work_diffs.get(v.cell_id)
        if diff is None or not diff.is_changed:
            continue
        rows = [{"phase": c.phase, "counter": c.counter, "key": c.key or "-", "a": f"{c.a:g}", "b": f"{c.b:g}",
                 "change": item_text(c.phase, c.counter, c.key, c.change)} for c in diff.changed]
        sections.append({col.cell_id: v.cell_id, "words": diff.words(), "gate": v.work_gate, "rows": rows,
                         "processes_a": diff.a.processes, "processes_b": diff.b.processes})
    return macro("work.html:work_sections", sections)
