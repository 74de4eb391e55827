"""`nvbench history` (change points and drifts over nightly runs), `nvbench dashboard` (a static site of a
nightly's history) and `nvbench export` (a run in another tool's format)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.results.store import CannotWrite
from harness.analysis.load.export import FORMATS as EXPORT_FORMATS
from harness.analysis.pages.wording import coverage_line
from harness.commands.common import EXIT_INCONCLUSIVE, EXIT_OK, bad_input, own_default
from harness.catalogue import col


def cmd_history(args: argparse.Namespace) -> int:
    """Change points and drifts of every cell over a folder of nightly runs: history.html, changes.md,
    changes.parquet (harness.analysis.nights.history)."""
    from harness.analysis.nights import history
    from harness.analysis.load.runs import RunInputError
    from harness.orchestrate.workflows.confirm import new_lines, write_trend

    folder = Path(args.history_dir)
    out = Path(args.out) if args.out else folder / "trend"
    given = {name: getattr(args, name) for name in (col.floor_pct, "min_segment", "alpha", "drift_nights")
             if getattr(args, name) is not None}
    try:
        result = write_trend(folder, out, settings=history.HistorySettings(**given), use_cache=not args.no_cache,
                             reports=Path(args.reports) if args.reports else None, summaries=args.summary)
    except RunInputError as exc:
        return bad_input(exc.problems)
    except ValueError as exc:
        return bad_input([str(exc)])
    except CannotWrite:  # the command line says it (cli.main): the folder, the bytes, how to go on
        raise
    except OSError as exc:
        return bad_input([f"{exc.filename or out}: cannot write the history: {exc.strerror}"])
    for skipped in result.history.skipped:
        print(f"skipped {skipped.path}: {skipped.why}", file=sys.stderr)
    for path in result.files:
        print(path)
    h = result.history
    print(coverage_line(h.coverage, f": {len(h.changes)} change(s), {sum(c.is_new for c in h.changes)} new tonight"))
    for line in new_lines(h):
        print(line, file=sys.stderr)
    return EXIT_INCONCLUSIVE if h.coverage.nothing_to_judge else EXIT_OK


def cmd_dashboard(args: argparse.Namespace) -> int:
    """The dashboard over a nightly's history: DIR/index.html and plotly.min.js (harness.analysis.pages.dashboard)."""
    from harness.analysis.nights import history
    from harness.analysis.pages import dashboard
    from harness.analysis.load.runs import RunInputError

    reports = Path(args.reports)
    folder = Path(args.history) if args.history else reports / "history"
    if not reports.is_dir():
        return bad_input([f"{reports}: no such folder (REPORTS: the nightly's reports folder)"])
    if not folder.is_dir():
        return bad_input([f"{folder}: no such folder: the nightly's history of run folders (--history DIR names "
                          "another)"])
    try:
        loaded = history.load_history(folder, use_cache=not args.no_cache)
        files = dashboard.write_dashboard(loaded, Path(args.out), reports)
    except RunInputError as exc:
        return bad_input(exc.problems)
    except ValueError as exc:
        return bad_input([str(exc)])
    except CannotWrite:  # the command line says it (cli.main): the folder, the bytes, how to go on
        raise
    except OSError as exc:
        return bad_input([f"{exc.filename or args.out}: cannot write the dashboard: {exc.strerror}"])
    for skipped in loaded.skipped:
        print(f"skipped {skipped.path}: {skipped.why}", file=sys.stderr)
    for path in files:
        print(path)
    print(coverage_line(loaded.coverage, f" of {len({s.cell_id for s in loaded.series})} cell(s)"))
    return EXIT_INCONCLUSIVE if loaded.coverage.nothing_to_judge else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    """A run's cells in another tool's format (harness.analysis.load.export)."""
    from harness.analysis.load.export import export_run
    from harness.analysis.load.runs import RunInputError

    try:
        count = export_run(Path(args.run_dir), args.format, Path(args.out))
    except RunInputError as exc:
        return bad_input(exc.problems)
    except CannotWrite:  # the command line says it (cli.main): the folder, the bytes, how to go on
        raise
    except OSError as exc:
        return bad_input([f"{exc.filename or args.out}: cannot write the export: {exc.strerror}"])
    print(args.out)
    print(f"{count} benchmark(s) in {args.format} format", file=sys.stderr)
    return EXIT_OK


def _setting_default(name: str):
    def read():
        from harness.analysis.nights.history import HistorySettings

        return getattr(HistorySettings(), name)

    return read


def add_parser(subparsers) -> None:
    h = subparsers.add_parser("history", help="change points and drifts per cell over a folder of nightly runs")
    h.add_argument("history_dir", metavar="HISTORY_DIR", help="folder of nightly run folders, one per night")
    h.add_argument("--out", metavar="DIR", help="where history.html, changes.md, changes.parquet go "
                   "(default: HISTORY_DIR/trend)")
    for names, kwargs, words in (
            (("--floor",), {"dest": col.floor_pct, "type": float, "metavar": "PCT"},
             "practical floor of throughput and fast-step changes (default: %(own_default)s %%)"),
            (("--min-segment",), {"type": int, "metavar": "N"},
             "fewest nights on each side of a change (default: %(own_default)s)"),
            (("--alpha",), {"type": float, "metavar": "A"},
             "test level of each change point (default: %(own_default)s)"),
            (("--drift-nights",), {"type": int, "metavar": "K"},
             "a drift is a slope over the last K nights (default: %(own_default)s)")):
        action = h.add_argument(*names, help=words, **kwargs)
        own_default(action, _setting_default(action.dest))
    h.add_argument("--summary", metavar="FILE", action="append", default=[],
                   help="append tonight's new change points to this Markdown file (repeatable; default: none)")
    h.add_argument("--reports", metavar="DIR", help="mark on each trend the baseline promotions and acknowledged "
                   "changes recorded in DIR/baselines (default: none marked)")
    h.add_argument("--no-cache", action="store_true",
                   help="neither read nor write HISTORY_DIR/.nvbench-cache, the per-night summaries and change "
                        "detections earlier runs kept (default: off: they are reused, the answer is the same)")
    h.set_defaults(func=cmd_history)
    d = subparsers.add_parser("dashboard", help="a static dashboard of a nightly's history: the cells' latest states, "
                              "their trends, the open alarms")
    d.add_argument("reports", metavar="REPORTS", help="the nightly's reports folder: its baselines/ (alarms, "
                   "acknowledgements, promotions) and, unless --history says otherwise, its history/ of run folders")
    d.add_argument("--out", required=True, metavar="DIR", help="where index.html and plotly.min.js go")
    d.add_argument("--history", metavar="DIR", help="the folder of nightly run folders (default: REPORTS/history)")
    d.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the history's .nvbench-cache (default: off: reused, the same answer)")
    d.set_defaults(func=cmd_dashboard)
    x = subparsers.add_parser("export", help="a run's cells in another tool's format (pytest-benchmark's or a CI "
                              "dashboard's JSON)")
    x.add_argument("run_dir", metavar="RUN", help="the run folder to export")
    x.add_argument("--format", required=True, choices=EXPORT_FORMATS,
                   help="pytest-benchmark: one benchmark per cell (named and grouped by cell id), seconds per image "
                        "of each measured step as its rounds, so ops (1 / mean) is img/s; github-action-benchmark: "
                        "its customBiggerIsBetter list, img/s per cell with its interval as range, the axes and commit "
                        "as extra; bencher: Bencher Metric Format, per cell throughput with its interval, top1 and the "
                        "counted work per step (host_syncs, op_calls, allocations) where the run counted it")
    x.add_argument("--out", required=True, metavar="FILE", help="the JSON file to write")
    x.set_defaults(func=cmd_export)
