"""The work diff where a user looks (rendering only; the diff, its gates and its attaching:
analysis.product.extras.Work): report.html's section per cell whose work changed."""

from __future__ import annotations

from harness.analysis.judge.verdict import Comparison
from harness.analysis.judge.work_diff import item_text
from harness.analysis.pages.render import Markup, macro
from harness.catalogue import col


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
