"""`nvbench report`: verdicts of a run vs a baseline run or a history."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.results.store import CannotWrite
from harness.commands.common import add_threshold_flags, bad_input, print_report, thresholds_from
from harness.commands.kernel_flags import add_kernel_flags, kernel_extra, kernel_settings_problem


def cmd_report(args: argparse.Namespace) -> int:
    from harness.analysis.load.runs import RunInputError
    from harness.analysis.product.extras import Work
    from harness.analysis.product.pipeline import make_report
    from harness.results.store import UnreadableFile

    from harness.analysis.judge.decide import reach_problem

    try:
        thresholds = thresholds_from(args)
        if args.min_repeats is not None and (problem := reach_problem(
                args.min_repeats, thresholds.level, what=f"--min-repeats {args.min_repeats}")):
            raise ValueError(f"{problem}; give more, or a larger --fdr")
        run_dir, baseline = _sides(args)
        if args.kernels and (problem := _kernels_problem(baseline, run_dir, args)):
            raise ValueError(problem)  # before anything is written
        extras = (Work(), kernel_extra(args)) if args.kernels else (Work(),)
        result = make_report(run_dir, baseline=baseline, history=Path(args.history) if args.history else None,
                             out_dir=Path(args.out) if args.out else None, thresholds=thresholds, extras=extras)
        for line in result.lines:
            print(line, file=sys.stderr)
    except RunInputError as exc:
        return bad_input(exc.problems)
    except (ValueError, UnreadableFile) as exc:
        return bad_input([str(exc)])
    except CannotWrite:  # the command line says it (cli.main): the folder, the bytes, how to go on
        raise
    except OSError as exc:  # e.g. an --out folder that cannot be written (write_all: no file half-new)
        return bad_input([f"{exc.filename or args.out or args.run_dir}: cannot write the report: {exc.strerror}"])
    return print_report(result, args.fail_on_regression)


def _sides(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """(the candidate's run folder, the baseline's): `report A B` compares B with A, as --baseline A B does."""
    if args.run_b is None:
        return Path(args.run_dir), Path(args.baseline) if args.baseline else None
    if args.baseline or args.history:
        raise ValueError(f"report {args.run_dir} {args.run_b}: two run folders already name the baseline (the "
                         "first); drop --baseline/--history")
    return Path(args.run_b), Path(args.run_dir)


def _kernels_problem(baseline: Path | None, run_dir: Path, args: argparse.Namespace) -> str | None:
    """Why `report --kernels` cannot diff these folders (None: it can)."""
    from harness.analysis.product.extras import has_kernels

    if baseline is None:
        return "--kernels diffs two run folders: give a baseline (report A B --kernels)"
    missing = [str(d) for d in (baseline, run_dir) if not has_kernels(d)]
    if missing:
        return f"{', '.join(missing)}: no kernels.parquet (profiled repeats: nvbench ab --kernels)"
    return kernel_settings_problem(args)


def add_parser(subparsers) -> None:
    rp = subparsers.add_parser(
        "report", help="verdicts vs a baseline run or a history: HTML, Markdown, JUnit, Parquet")
    rp.add_argument("run_dir", metavar="RUN_DIR", help="the run folder to judge")
    rp.add_argument("run_b", metavar="RUN_DIR_B", nargs="?",
                    help="a second run folder: `report A B` compares B with A (default: none)")
    side = rp.add_mutually_exclusive_group()
    side.add_argument("--baseline", metavar="RUN_DIR", help="run folder (or pointer file) to compare with (default: "
                      "none, the run is described alone)")
    side.add_argument("--history", metavar="DIR", help="folder of past runs: screen each cell against its history "
                      "(default: none)")
    rp.add_argument("--out", metavar="DIR", help="where the report goes (default: RUN_DIR/report)")
    add_kernel_flags(rp, runs=False)
    add_threshold_flags(rp, history=True)
    rp.set_defaults(func=cmd_report)
