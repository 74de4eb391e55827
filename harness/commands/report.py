"""`nvbench report`: verdicts of a run vs a baseline run or a history."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.commands.common import add_threshold_flags, bad_input, print_report, thresholds_from


def cmd_report(args: argparse.Namespace) -> int:
    from harness.analysis.runs import RunInputError
    from harness.analysis.report import make_report

    from harness.analysis.decide import reach_problem

    try:
        thresholds = thresholds_from(args)
        if args.min_repeats is not None and (problem := reach_problem(
                args.min_repeats, thresholds.level, what=f"--min-repeats {args.min_repeats}")):
            raise ValueError(f"{problem}; give more, or a larger --fdr")
        result = make_report(Path(args.run_dir), baseline=Path(args.baseline) if args.baseline else None,
                             history=Path(args.history) if args.history else None,
                             out_dir=Path(args.out) if args.out else None, thresholds=thresholds)
    except RunInputError as exc:
        return bad_input(exc.problems)
    except ValueError as exc:
        return bad_input([str(exc)])
    except OSError as exc:  # e.g. an --out folder that cannot be written (write_all: no file half-new)
        return bad_input([f"{exc.filename or args.out or args.run_dir}: cannot write the report: {exc.strerror}"])
    return print_report(result, args.fail_on_regression)


def add_parser(subparsers) -> None:
    rp = subparsers.add_parser(
        "report", help="verdicts vs a baseline run or a history: HTML, Markdown, JUnit, Parquet")
    rp.add_argument("run_dir", metavar="RUN_DIR", help="the run folder to judge")
    side = rp.add_mutually_exclusive_group()
    side.add_argument("--baseline", metavar="RUN_DIR", help="run folder (or pointer file) to compare with (default: "
                      "none, the run is described alone)")
    side.add_argument("--history", metavar="DIR", help="folder of past runs: screen each cell against its history "
                      "(default: none)")
    rp.add_argument("--out", metavar="DIR", help="where the report goes (default: RUN_DIR/report)")
    add_threshold_flags(rp, history=True)
    rp.set_defaults(func=cmd_report)
