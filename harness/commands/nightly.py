"""`nvbench nightly`: the nightly job (ci/nightly.sh execs it): every knob a flag and an NVBENCH_* variable, resolved
flag, then variable, then default, and handed to the conductor (harness.orchestrate.workflows.nightly.run_night)."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from datetime import datetime, timezone

from harness.commands.common import EXIT_BAD_INPUT
from harness.catalogue import col

CONFIRMS = ("auto", "interleaved", "every", "sequential")
BISECTS = ("off", "work", "auto")


@dataclass(frozen=True, slots=True)
class Knob:
    """One knob of the night: flag --NAME, variable NVBENCH_NAME, the default when neither is given."""

    name: str
    """The field of workflows.nightly.Settings (and, upper-cased, of the variable)."""
    default: str
    """Its default; {reports} is the reports folder, {now} the UTC time the night starts."""
    words: str
    """What it does, for --help."""
    keep_empty: bool = False
    """An empty value means something (no flag passed on) instead of the default (a shell's ${X-d}, not ${X:-d})."""
    kind: str = "text"
    """How a value is checked: text, words (split at whitespace), choice, count (>= 1), count0 (>= 0), slots,
    seconds."""
    choices: tuple[str, ...] = ()

    @property
    def variable(self) -> str:
        return f"NVBENCH_{self.name.upper()}"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


KNOBS = (
    Knob("matrix", "matrices/resnet50.toml", "the matrix file the night runs"),
    Knob("reports", "reports", "the reports folder: run folders, history/, baselines/, alarms.json, dashboard/"),
    Knob("baseline", "{reports}/baselines/current", "the baseline tonight is judged against, when it exists (a run "
         "folder or a pointer file, reports/baselines/README.md)"),
    Knob("history", "{reports}/history", "the past nights (links to their run folders), screened when there is no "
         "baseline; tonight joins it"),
    Knob("repeats", "10", "repeats per cell, one process each; empty: the matrix's run.repeats", True, "count"),
    Knob("run_args", "", "more flags for nvbench run, its rerun and its A/B, e.g. \"--fire-drill 10\" for a monthly "
         "drill (the job must fail)", kind="words"),
    Knob("slots", "", "jobs at once (nvbench run/ab --slots N|auto); empty: nvbench's auto, one per GPU for the "
         "backends this machine's calibration cleared", kind="slots"),
    Knob("report_args", "", "more flags for nvbench report and ab, e.g. \"--floor 2\"", kind="words"),
    Knob("confirm", "auto", "how flagged cells are confirmed: auto (an A/B against the baseline's commit where the "
         "code differs), interleaved (an A/B even on the same code), every (every cell by A/B, no screen), "
         "sequential (never an A/B)", kind="choice", choices=CONFIRMS),
    Knob("confirm_repeats", "10", "first pairs of an A/B confirmation; empty: REPEATS", True, "count"),
    Knob("confirm_max_repeats", "20", "pairs a still inconclusive cell may grow to in an A/B; empty: no more", True,
         "count"),
    Knob("kernel_repeats", "", "profiled processes a side when the A/B calls a change; empty: nvbench ab's default; "
         "0: none", kind="count0"),
    Knob("work_repeats", "1", "counted processes per cell after the timed jobs (work.parquet); 0: none; empty: "
         "nvbench run's default (none)",
         True, "count0"),
    Knob(col.run_id, "nightly-{now}", "tonight's run folder, under REPORTS"),
    Knob("bisect", "work", "name the commit of an alarm opened tonight: off, work (by counted work) or auto (by "
         "timed A/Bs too)", kind="choice", choices=BISECTS),
    Knob("bisect_budget_s", "1800", "seconds the culprit step's bisect may take", kind="seconds"),
)


def resolve(given: dict[str, str | None], environ: dict[str, str],
            now: datetime) -> tuple[dict[str, object], str | None]:
    """Each knob's value (flag, then variable, then default) and the first bad one's line, or None."""
    values: dict[str, object] = {}
    for knob in KNOBS:
        source = knob.flag if given.get(knob.name) is not None else knob.variable
        value = given.get(knob.name)
        value = environ.get(knob.variable) if value is None else value
        if value is None or (value == "" and not knob.keep_empty):
            value = knob.default.format(reports=values.get("reports", ""), now=now.strftime("%Y%m%d-%H%M%S"))
        elif problem := _problem(knob, value):
            spelled = f"{knob.variable}={value}" if source == knob.variable else f"{knob.flag} {value}"
            return values, f"{spelled}: {problem}"
        values[knob.name] = tuple(value.split()) if knob.kind == "words" else value
    return values, None


def _problem(knob: Knob, value: str) -> str | None:
    """What is wrong with a value given for `knob`, or None."""
    if knob.kind == "choice" and value not in knob.choices:
        return f"must be {', '.join(knob.choices[:-1])} or {knob.choices[-1]}"
    if knob.kind == "slots" and value != "auto" and not (value.isdigit() and int(value) >= 1):
        return "must be a number of slots (1 or more) or auto"
    least = int(knob.kind == "count")
    if knob.kind in ("count", "count0") and value != "" and not (value.isdigit() and int(value) >= least):
        return f"must be a whole number of at least {least}" + (", or empty" if knob.keep_empty else "")
    if knob.kind == "seconds":
        try:
            if float(value) > 0:
                return None
        except ValueError:
            pass
        return "must be a number of seconds above 0"
    if knob.name == col.run_id and ("/" in value or value in (".", "..")):
        return "must name one folder (no /)"
    return None


def cmd_nightly(args: argparse.Namespace) -> int:
    from harness.orchestrate.workflows import ab, nightly

    given = {knob.name: getattr(args, knob.name) for knob in KNOBS}
    values, problem = resolve(given, dict(os.environ), datetime.now(timezone.utc))
    if problem:
        print(f"nightly: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    settings = nightly.Settings(**values, root=ab.checkout_root(),
                                step_summary=os.environ.get("GITHUB_STEP_SUMMARY") or None,
                                step_output=os.environ.get("GITHUB_OUTPUT") or None)
    return nightly.run_night(settings)


EPILOG = """Judging, first that applies: a baseline (NVBENCH_BASELINE exists): nvbench report --baseline, its
regressions and loose slowdowns confirmed; else a history (NVBENCH_HISTORY holds past runs): each cell screened against its
history, suspects confirmed against the newest past run; else the run is only described. Then the work gates, the
alarms (a regression alarms once), the culprit of a new alarm (NVBENCH_BISECT), the history and its trend (tonight
joins it; fire drills never do) and the dashboard. The whole story: ci/README.md and ci/nightly.sh's header.

Also read: GITHUB_STEP_SUMMARY (the decisive summary.md appended), GITHUB_OUTPUT (report_dir=... appended).
A value that starts with -- is given as --run-args=--VALUE.

exit codes:
  0    ok: every judged cell unchanged or improved
  1    a confirmed regression (new or worse), a confirmed change point, failed cells or a broken work gate
  2    bad input (a knob's bad value: one line naming it)
  3    nothing regressed, but some cell stayed inconclusive (printed last)
  130  interrupted (SIGINT, SIGTERM, SIGHUP): the running child stopped, its run resumable (the line says how)"""


def add_parser(subparsers) -> None:
    n = subparsers.add_parser("nightly", help="the nightly job: run the matrix, judge it against the baseline or "
                              "the history, confirm, alarm, draw the trend (ci/nightly.sh)",
                              epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    for knob in KNOBS:
        default = knob.default.replace("{reports}", "REPORTS").replace("{now}", "YYYYMMDD-HHMMSS, UTC")
        shown = f"; default: {default or 'empty'}"
        n.add_argument(knob.flag, dest=knob.name, metavar=knob.name.upper(),
                       help=f"{knob.words} ({knob.variable}{shown})")
    n.set_defaults(func=cmd_nightly)
