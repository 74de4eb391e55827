"""A pull request's comment from its A/B folder (`nvbench ab --base`, ci/pull-request.sh): every cell's counted work
first (exact: `optimizer +1 host sync per step (...)` or `work: same`), then the timed verdicts with their intervals in
one table, then what could not be told and about how many repeats would; rendered through templates/pr_comment.md.

    python ci/pr_comment.py AB_DIR AB_EXIT     # writes AB_DIR/pr-comment.md; exits as the pull request's job does

The job's exit: 1 on a confirmed regression, a failed cell or a broken work gate (also when a busy machine left the
timing undecided: counts need no quiet machine), 3 when undecided, 0 otherwise; 2 and 130 as nvbench ab's."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from markupsafe import Markup

from harness.analysis.judge.verdict import INCONCLUSIVE, CellVerdict, Comparison
from harness.analysis.judge.work_diff import WorkDiff, changes_text, check_gates, varying_text
from harness.analysis.load.reports import read_comparison
from harness.analysis.load.runs import read_work_table
from harness.analysis.product.extras import diff_tables
from harness.analysis.pages.render import render
from harness.analysis.pages.wording import change_text, esc_md, headline_words
from harness.exits import EXIT_BAD_INPUT, EXIT_FAILURES, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_OK
from harness.matrix.parse import load_matrix
from harness.orchestrate.session import runfolder
from harness.orchestrate.workflows.ab import AB_FILE, stopped_busy
from harness.results import store
from harness.results.env import short_commit

COMMENT = "pr-comment.md"
VERDICTS = Path("report") / "verdicts.parquet"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkLine:
    """One cell's counted work, as the comment's first lines say it."""

    cell: str
    text: str
    gate: str
    """The broken gates' labels (`work gate host_syncs = "no-rise" broken`), empty where none broke."""
    rank: int
    """Where the line stands: broken gates first, then changed work, varying, the same, not counted."""


def work_line(cell: str, diff: WorkDiff, gates: Sequence[Any]) -> WorkLine:
    """The cell's work in words without a prefix where it changed (`optimizer +1 host sync per step (...)`), else the
    diff's own words (`work: same`, `work: no work counted (...)`); its broken gates named."""
    broken = [c.label for c in check_gates(diff, gates) if c.broken]
    vary = f"; varying: {varying_text(diff.varying)}" if diff.varying else ""
    if diff.counted and diff.changed:
        text, rank = changes_text(diff.changed) + vary, 1
    else:
        text, rank = diff.words(), (4 if not diff.counted else 2 if diff.varying else 3)
    return WorkLine(cell=cell, text=text, gate="; ".join(f"{label} broken" for label in broken),
                    rank=0 if broken else rank)


def _md(value: Any) -> Markup:
    return Markup(esc_md(value))


def _undecided_text(v: CellVerdict) -> str:
    need = (f"about {v.repeats_needed} repeats a side would likely decide it (NVBENCH_MAX_REPEATS={v.repeats_needed})"
            if v.repeats_needed else "no likely number of repeats at this noise (a quieter runner, or a wider floor)")
    return f"{change_text(v)} in {v.num_candidate} pairs; {need}"


def comment_values(folder: Path, comparison: Comparison | None, lines: Mapping[str, WorkLine],
                   meta: Mapping[str, Any]) -> dict[str, Any]:
    """What templates/pr_comment.md shows, every text escaped for Markdown."""
    base = meta.get("base") or {}
    checkout = meta.get("checkout") or {}
    verdicts = sorted(comparison.verdicts, key=lambda v: v.cell_label or v.cell_id) if comparison else []
    labels = {v.cell_id: v.cell_label or v.cell_id for v in verdicts}
    work = sorted(lines.values(), key=lambda w: (w.rank, w.cell))
    short = {0: "gate broken", 1: "changed", 2: "same where exact", 3: "same", 4: "not counted"}
    rows = [{"cell": _md(labels[v.cell_id]), "verdict": _md(v.verdict), "change": _md(change_text(v)),
             "pairs": v.num_candidate, "work": _md(short[lines[v.cell_id].rank] if v.cell_id in lines else "-")}
            for v in verdicts]
    busy = stopped_busy(folder)
    broken = sum(bool(w.gate) for w in lines.values())
    levels = {v.ci_level for v in verdicts if v.ci_level}
    return {
        "work": [{"text": _md(w.text), "cell": _md(w.cell), "gate": _md(w.gate)} for w in work],
        "head": _md(_side(meta, "b", checkout)), "base": _md(f"{base.get('rev', '?')} @ "
                                                             f"{short_commit(base.get('commit')) or '?'}"),
        "headline": _md(", ".join(filter(None, [f"{broken} work gate(s) broken" if broken else "",
                                                headline_words(comparison) if comparison else "no timed verdict"]))),
        "rows": rows,
        "no_verdict": _md(f"{busy}; on a quiet runner, nvbench ab --resume {folder} finishes the same pairs" if busy
                          else "the A/B wrote no report (its log says why)"),
        "undecided": [{"cell": _md(labels[v.cell_id]), "text": _md(_undecided_text(v))}
                      for v in verdicts if v.verdict == INCONCLUSIVE],
        "folder": _md(str(folder)),
        "interval": f"{100 * levels.pop():g}% interval" if len(levels) == 1 else "interval",
    }


def _side(meta: Mapping[str, Any], side: str, checkout: Mapping[str, Any]) -> str:
    return (meta.get("labels") or {}).get(side) or str(checkout.get(side) or "this checkout")


def read_folder(folder: Path) -> tuple[Comparison | None, dict[str, WorkLine], dict[str, Any]]:
    """The A/B's comparison (None where it wrote no report: a busy machine), each cell's work line, its ab.json."""
    meta = store.read_json(folder / AB_FILE)
    comparison = read_comparison(folder / VERDICTS) if (folder / VERDICTS).is_file() else None
    if comparison is not None:
        cells = {v.cell_id: v.cell_label or v.cell_id for v in comparison.verdicts}
        gates = comparison.thresholds.work_gates
    else:
        cells = {cid: c.label for cid, c in runfolder.load_plan(folder / "b")[2].items()}
        gates = load_matrix(meta["matrix_source"]).judge.work_gates
    diffs = diff_tables(sorted(cells), read_work_table(folder / "a"), read_work_table(folder / "b"))
    return comparison, {cid: work_line(cells[cid], diff, gates) for cid, diff in diffs.items()}, meta


def job_exit(ab_exit: int, lines: Mapping[str, WorkLine]) -> int:
    """The pull request job's exit: nvbench ab's, but 1 wherever a work gate broke (a busy machine's 3 included)."""
    if ab_exit in (EXIT_BAD_INPUT, EXIT_INTERRUPTED):
        return ab_exit
    if ab_exit == EXIT_FAILURES or any(w.gate for w in lines.values()):
        return EXIT_FAILURES
    return ab_exit if ab_exit in (EXIT_OK, EXIT_INCONCLUSIVE) else EXIT_FAILURES


def write_comment(folder: Path) -> tuple[Path, dict[str, WorkLine]]:
    """AB_DIR/pr-comment.md, written atomically; its path and the work lines it holds."""
    comparison, lines, meta = read_folder(folder)
    text = render("pr_comment.md", **comment_values(folder, comparison, lines, meta))
    store.write_bytes(folder / COMMENT, text.encode())
    return folder / COMMENT, lines


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2 or not argv[1].lstrip("-").isdigit():
        print("usage: python ci/pr_comment.py AB_DIR AB_EXIT", file=sys.stderr)
        return EXIT_BAD_INPUT
    folder = Path(argv[0])
    if not (folder / AB_FILE).is_file():
        print(f"{folder}: not an A/B folder (no {AB_FILE}): no comment", file=sys.stderr)
        return EXIT_BAD_INPUT
    path, lines = write_comment(folder)
    print(path)
    return job_exit(int(argv[1]), lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
