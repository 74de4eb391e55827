"""`nvbench baseline promote RUN --reason TEXT` and `nvbench baseline show` (the baseline the nightly judges
against, moved by a command that checks the rules of reports/baselines/README.md), and `nvbench ack
CELL-FILTER --reason TEXT` (an open regression accepted: shown every night, never failing while it stays within
its interval)."""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import subprocess
import sys
from pathlib import Path

from harness.results.store import CannotWrite
from harness.commands.common import EXIT_OK, bad_input

DEFAULT_REPORTS = "reports"


def who() -> str:
    """Who is promoting or acknowledging: git's user.name where it is set, else the login name."""
    try:
        name = subprocess.run(["git", "config", "user.name"], capture_output=True, text=True, timeout=10,
                              check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        name = ""
    return name or getpass.getuser()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def cmd_promote(args: argparse.Namespace) -> int:
    from harness.analysis.nights import baselines
    from harness.analysis.load.runs import RunInputError, load_run
    from harness.results.formats import UnreadableFile

    reports = Path(args.reports)
    if not args.reason.strip():
        return bad_input(["--reason: say why this run is the new normal (it goes beside the pointer)"])
    try:
        run = load_run(Path(args.run))
        nights = baselines.newest_night(reports / "history", exclude=Path(run.path))
        if nights is None and (current := baselines.current_baseline(reports)) is not None:
            nights = load_run(current)  # no history yet: the environment the nights were judged in
        problems = baselines.promotion_problems(run, nights, allow_fire_drill=args.allow_fire_drill)
        if problems:
            return bad_input(problems)
        p = baselines.promote(reports, run, who=who(), when=_now(), reason=args.reason.strip())
    except RunInputError as exc:
        return bad_input(exc.problems)
    except UnreadableFile as exc:
        return bad_input([str(exc)])
    except CannotWrite:  # the command line says it (cli.main): the folder, the bytes, how to go on
        raise
    except OSError as exc:
        return bad_input([f"{exc.filename or reports}: cannot write the baseline: {exc.strerror}"])
    print(baselines.pointer_path(reports))
    print(f"promoted {p.run_id} (commit {p.commit or 'not recorded'}) by {p.who}: {p.reason}"
          + (f"; before: {p.previous}" if p.previous else ""), file=sys.stderr)
    print(f"commit {baselines.pointer_path(reports)} and {baselines.promotions_path(reports)} with that reason",
          file=sys.stderr)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from harness.analysis.nights import baselines
    from harness.analysis.load.runs import RunInputError
    from harness.results.formats import UnreadableFile

    try:
        lines = baselines.show_lines(Path(args.reports))
    except RunInputError as exc:
        return bad_input(exc.problems)
    except UnreadableFile as exc:
        return bad_input([str(exc)])
    print("\n".join(lines))
    return EXIT_OK


def cmd_ack(args: argparse.Namespace) -> int:
    from harness.analysis.nights import alarms, baselines
    from harness.analysis.load.runs import RunInputError
    from harness.results.formats import UnreadableFile

    reports = Path(args.reports)
    problems = [p for p in (alarms.filter_problem(args.cell_filter), _expires_problem(args.expires)) if p]
    if not args.reason.strip():
        problems.append("--reason: say why the change is accepted (an intended trade-off, a new driver)")
    if problems:
        return bad_input(problems)
    try:
        open_ = baselines.read_open(reports)
        mine = [a for a in open_ if alarms.matches(a.change, args.cell_filter)]
        if not mine:
            shown = ", ".join(sorted({a.change.cell_id for a in open_})) or "none"
            return bad_input([f"{args.cell_filter}: no open regression matches in {baselines.alarms_path(reports)} "
                              f"(open: {shown})"])
        when, by = _now(), who()
        acks = [alarms.Ack(change=a.change, reason=args.reason.strip(), who=by, when=when, expires=args.expires)
                for a in mine]
        baselines.add_acks(reports, acks)
    except RunInputError as exc:
        return bad_input(exc.problems)
    except UnreadableFile as exc:
        return bad_input([str(exc)])
    except CannotWrite:  # the command line says it (cli.main): the folder, the bytes, how to go on
        raise
    except OSError as exc:
        return bad_input([f"{exc.filename or reports}: cannot write the acknowledgement: {exc.strerror}"])
    print(baselines.acks_path(reports))
    for a in acks:
        print(f"acknowledged {a.change.cell_id} {a.change.text()}" + (f" until {a.expires}" if a.expires else "")
              + f": {a.reason}", file=sys.stderr)
    return EXIT_OK


def _expires_problem(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:
        return f"--expires {text}: not a date (YYYY-MM-DD)"
    if day < dt.datetime.now(dt.UTC).date():
        return f"--expires {text}: already past"
    return None


def add_parser(subparsers) -> None:
    b = subparsers.add_parser("baseline", help="promote a run to the nightly's baseline, or show it and its history")
    sub = b.add_subparsers(dest="baseline_command", required=True, metavar="{promote,show}",
                           help="promote a run to baseline, or show the baseline and its promotions")
    p = sub.add_parser("promote", help="point reports/baselines/current at RUN, checking the baselines page's rules")
    p.add_argument("run", metavar="RUN", help="the run folder to promote")
    p.add_argument("--reason", required=True, help="why this run is the new normal (required)")
    p.add_argument("--reports", default=DEFAULT_REPORTS, metavar="DIR",
                   help=f"the reports folder holding baselines/ and history/ (default: {DEFAULT_REPORTS})")
    p.add_argument("--allow-fire-drill", action="store_true",
                   help="promote a fire drill run, to rehearse the workflow; the pointer says FIRE DRILL (default: "
                        "off, a drill is refused)")
    p.set_defaults(func=cmd_promote)
    s = sub.add_parser("show", help="the current baseline and every promotion, newest first")
    s.add_argument("--reports", default=DEFAULT_REPORTS, metavar="DIR",
                   help=f"the reports folder holding baselines/ (default: {DEFAULT_REPORTS})")
    s.set_defaults(func=cmd_show)
    a = subparsers.add_parser("ack", help="accept an open regression: shown every night, failing only if it worsens")
    a.add_argument("cell_filter", metavar="CELL-FILTER", help="a cell id, or axis=value[,axis=value...]")
    a.add_argument("--reason", required=True, help="why the change is accepted (required)")
    a.add_argument("--expires", metavar="DATE", help="YYYY-MM-DD after which it alarms again as open (default: never)")
    a.add_argument("--reports", default=DEFAULT_REPORTS, metavar="DIR",
                   help=f"the reports folder holding alarms.json and baselines/ (default: {DEFAULT_REPORTS})")
    a.set_defaults(func=cmd_ack)
