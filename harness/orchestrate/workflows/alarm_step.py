"""The nightly's alarm step (alarm_step, called by `nvbench nightly`): the decisive report's regressions
judged against the alarms open from earlier nights and the acknowledged changes (harness.analysis.nights.alarms), every
other open alarm ended (gone, fixed) or kept with tonight's reading, the alarms state and its history written
for the next night, junit.xml, summary.md and the console told which regressions are new, worse, open or
acknowledged and which alarms are still open or ended tonight, and the night's exit status: 1 for a new or
worse regression or a failed cell, 3 when nothing failed but a cell stayed inconclusive, 0 otherwise, 2 bad
input."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import UTC, datetime
from pathlib import Path
from harness.results.store import CannotWrite
from harness.exits import EXIT_BAD_INPUT, EXIT_FAILURES, EXIT_INCONCLUSIVE, EXIT_OK


def tonight_work(verdicts, base: str | None, cand: str | None) -> dict:
    """Each judged cell's counted work tonight against the baseline (work_diff), from the two run folders the report
    compared; {} where either is unknown or neither counted work."""
    from harness.analysis.load.runs import read_work_table
    from harness.analysis.product.extras import diff_tables

    if not base or not cand or not Path(base).is_dir() or not Path(cand).is_dir():
        return {}
    return diff_tables([v.cell_id for v in verdicts], read_work_table(Path(base)), read_work_table(Path(cand)))


def gate_checks(verdicts_path: Path, work: dict) -> dict:
    """Each cell's work gate checks tonight (the matrix's [judge.work_gates], as the report recorded its settings),
    on its work diff against the baseline: a broken one alarms."""
    from harness.analysis.judge.work_diff import check_gates
    from harness.analysis.load.reports import thresholds_of

    gates = thresholds_of(verdicts_path).work_gates
    return {cid: check_gates(diff, gates) for cid, diff in work.items()} if gates else {}


def against_opening(verdicts_path: Path, cand: str | None, open_before, cells: set[str]) -> dict:
    """(cell, the alarm's night) -> tonight's verdict against the repeats of the night each open alarm opened (its
    run folder), at tonight's report's level: the direct comparison a timing-only alarm ends on. Alarms without a
    recorded run folder, or whose folder is gone, are left out (their old rule stands)."""
    from harness.analysis.judge import compare
    from harness.analysis.judge.verdict import Thresholds
    from harness.analysis.load import verdicts_file
    from harness.analysis.load.runs import load_run
    from harness.catalogue import col

    if not cand or not Path(cand).is_dir():
        return {}
    wanted: dict[str, list] = {}
    for a in open_before:
        if a.run and a.change.cell_id in cells and Path(a.run).is_dir() and Path(a.run) != Path(cand).resolve():
            wanted.setdefault(a.run, []).append(a)
    if not wanted:
        return {}
    known = {f for f in Thresholds.__dataclass_fields__}
    th = Thresholds(**{k: v for k, v in verdicts_file.read_thresholds(verdicts_path).items() if k in known})
    tonight, out = load_run(cand), {}
    for run, mine in wanted.items():
        ids = {a.change.cell_id for a in mine}
        opening = load_run(run)
        comparison = compare.compare_runs(
            dataclasses.replace(tonight, rows=tuple(r for r in tonight.rows if r[col.cell_id] in ids)),
            dataclasses.replace(opening, rows=tuple(r for r in opening.rows if r[col.cell_id] in ids)),
            th, require_same_env=False, baseline_label="the night it opened")
        by_cell = {v.cell_id: v for v in comparison.verdicts}
        out |= {(a.change.cell_id, a.since): by_cell[a.change.cell_id] for a in mine if a.change.cell_id in by_cell}
    return out


def alarm_step(argv: list[str]) -> int:
    from harness.analysis.pages import alarm_formats
    from harness.analysis.pages.ci_formats import render_junit
    from harness.analysis.load.reports import read_comparison
    from harness.analysis.nights import alarms, baselines
    from harness.analysis.load import verdicts_file
    from harness.analysis.load.runs import RunInputError
    from harness.analysis.judge.verdict import FAILED, INCONCLUSIVE
    from harness.results import store

    p = argparse.ArgumentParser(prog="nvbench nightly: alarm step")
    p.add_argument("report_dir")
    p.add_argument("--reports", required=True, help="the reports folder: alarms.json, baselines/acks.json")
    p.add_argument("--night", required=True, help="tonight's run id")
    p.add_argument("--summary", action="append", default=[], help="append the regressions section here too")
    args = p.parse_args(argv)
    report, reports = Path(args.report_dir), Path(args.reports)
    try:
        verdicts = verdicts_file.read_verdicts(report / "verdicts.parquet")
        open_before = baselines.read_open(reports)
        base, cand = verdicts_file.compared_runs(report / "verdicts.parquet")
        work = tonight_work(verdicts, base, cand)
        judged = alarms.judge_night(verdicts, open_before, baselines.read_acks(reports), night=args.night,
                                    when=datetime.now(UTC).isoformat(timespec="seconds"),
                                    run=str(Path(cand).resolve()) if cand else "", work=work,
                                    gates=gate_checks(report / "verdicts.parquet", work),
                                    since_opening=against_opening(report / "verdicts.parquet", cand, open_before,
                                                                  {v.cell_id for v in verdicts}))
        section = alarm_formats.summary_section(judged, args.night).encode()
        files = {baselines.alarms_path(reports): baselines.alarms_bytes(reports, judged.open, judged.events)}
        if (report / "junit.xml").is_file():  # made anew from the verdicts and tonight's alarms
            files[report / "junit.xml"] = render_junit(read_comparison(report / "verdicts.parquet"), judged)
        for summary in [report / "summary.md", *map(Path, args.summary)]:
            files[summary] = (summary.read_bytes() if summary.is_file() else b"") + section
        store.write_all(files)
    except RunInputError as exc:
        print(f"nightly alarms: {exc.problems[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (store.UnreadableFile, ValueError) as exc:
        print(f"nightly alarms: {exc}".splitlines()[0], file=sys.stderr)
        return EXIT_BAD_INPUT
    except CannotWrite as exc:  # a step's failure, not the night's verdict: the night says the step failed
        print(f"nightly: {exc.line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"nightly alarms: {exc.filename or reports}: cannot write: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for a in judged.alarms:
        print(f"{a.status.upper()}: {a.text()}", file=sys.stderr)
    for r in judged.readings:
        print(f"{r.outcome.upper()}: {r.text()}", file=sys.stderr)
    print(f"alarms open after tonight: {len(judged.open)}", file=sys.stderr)
    # a gate alarm's night fails through the gate step (ci/nightly.sh), every night the gate stays broken
    if any(a.fails and not a.change.gate for a in judged.alarms) or any(v.verdict == FAILED for v in verdicts):
        return EXIT_FAILURES
    undecided = any(v.verdict == INCONCLUSIVE and alarms.change_of(v) is None for v in verdicts)
    return EXIT_INCONCLUSIVE if undecided else EXIT_OK
