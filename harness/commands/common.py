"""What the commands share: exit codes, the bad-input printer, the reach warning, the threshold flags, the
environment probe and the report printer of report and ab."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from typing import Any
from harness.catalogue import col

from harness.exits import EXIT_BAD_INPUT, EXIT_FAILURES, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_OK  # noqa: F401

EXIT_CODES_TEXT = f"""exit codes:
  {EXIT_OK}    done: every cell ran (run), nothing regressed (report, ab with --fail-on-regression)
  {EXIT_FAILURES}    a cell failed, or (--fail-on-regression) a confirmed regression or a broken work gate
  {EXIT_BAD_INPUT}    bad input: one line per problem, naming the file and key; nothing was written
  {EXIT_INCONCLUSIVE}    (--fail-on-regression) nothing regressed, but some cell stayed inconclusive
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C, SIGTERM, SIGHUP): a run resumes with nvbench run --resume RUN_DIR"""
"""What `nvbench --help` ends with: the codes above, in a user's words."""


def reach_warning(repeats: int, *, smoke: bool, what: str) -> None:
    """One line up front when runs of `repeats` repeats could never be told apart at the report's default level
    (a description needs no verdict: 1 repeat and --smoke runs say nothing)."""
    from harness.analysis.judge.decide import reach_problem
    from harness.analysis.judge.verdict import Thresholds

    if repeats >= 2 and not smoke and (problem := reach_problem(repeats, Thresholds().level, what=what)):
        print(f"warning: {problem}: two such runs can only be inconclusive", file=sys.stderr)


def bad_input(problems: list[str]) -> int:
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT


def fire_drill_problem(pct: float | None) -> str | None:
    if pct is not None and not 0 < pct <= 1000:
        return f"--fire-drill {pct:g}: must be a percentage in (0, 1000]"
    return None


class _OwnDefault:
    """A default that --help prints, read from the code that owns the setting when help is formatted, not when
    the parser is built: the report's thresholds live beside scipy, which every command would otherwise load."""

    def __init__(self, read: Callable[[], Any]):
        self._read = read

    def __str__(self) -> str:
        return default_text(self._read())


def default_text(value: Any) -> str:
    """A default in --help's words: on/off, 0.01, 3 (a float without trailing zeros), reports."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def own_default(action: argparse.Action, read: Callable[[], Any]) -> argparse.Action:
    """Let `action`'s help say `%(own_default)s`: the value `read()` gives, the default of the code that owns
    the setting (so --help cannot drift from it)."""
    action.own_default = _OwnDefault(read)
    return action


def knob_default(config: type, name: str) -> Callable[[], Any]:
    """The matrix format's default of `config`'s field `name` (harness.matrix: read as the file's parser does)."""
    import dataclasses

    return lambda: next(f.default for f in dataclasses.fields(config) if f.name == name)


def threshold_default(name: str) -> Callable[[], Any]:
    def read() -> Any:
        from harness.analysis.judge.verdict import Thresholds

        return getattr(Thresholds(), name)

    return read


def add_threshold_flags(p: argparse.ArgumentParser, *, history: bool) -> None:
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 on a confirmed regression, a failed cell or a broken work gate ([judge.work_gates]), "
                        "3 when nothing regressed but a cell stayed inconclusive, 0 otherwise")
    flags = [
        (("--floor",), {"dest": col.floor_pct, "type": float, "metavar": "PCT"},
         "practical floor: smaller changes are never a regression (default: %(own_default)s %%)"),
        (("--fdr",), {"dest": col.fdr_q, "type": float, "metavar": "Q"},
         "Benjamini-Hochberg FDR across cells (default: %(own_default)s)"),
        (("--min-repeats",), {"type": int, "metavar": "N"},
         "fewest usable repeats per side (default: %(own_default)s)"),
        (("--exclude-unsteady",), {"action": "store_true", "default": None},
         "leave out repeats whose window failed the steadiness check (default: %(own_default)s)"),
        (("--accuracy-tolerance",), {"type": float, "metavar": "FRACTION"},
         "top-1 band half-width (default: %(own_default)s)"),
        (("--speed-adjust",), {"action": argparse.BooleanOptionalAction, "default": None},
         ("compare CPU cells at equal machine-speed probe time where every repeat has a probe (default: "
          "%(own_default)s; docs/performance.md)")),
        (("--fast-steps",), {"action": argparse.BooleanOptionalAction, "default": None},
         ("test the fast-step rate beside throughput where every repeat recorded it; either can call a regression "
          "(default: %(own_default)s; --no-fast-steps: throughput alone)")),
    ]
    if history:
        flags.append((("--history-runs",), {"type": int, "metavar": "N"},
                      "past runs that form the history baseline (default: %(own_default)s)"))
    for names, kwargs, words in flags:
        action = p.add_argument(*names, help=words, **kwargs)
        own_default(action, threshold_default(action.dest))


def thresholds_from(args: argparse.Namespace):
    """verdict.Thresholds from the report/ab flags that were given (the rest keep their defaults)."""
    from harness.analysis.judge.verdict import FLOOR_FLAG, Thresholds

    given = {name: getattr(args, name) for name in (col.floor_pct, col.fdr_q, "min_repeats", "exclude_unsteady",
                                                     "history_runs", col.accuracy_tolerance, "speed_adjust",
                                                     "fast_steps")
             if getattr(args, name, None) is not None}
    if col.floor_pct in given:  # the report names where each cell's floor came from
        given["floor_origin"] = given[col.floor_kind] = FLOOR_FLAG
    return Thresholds(**given)


def print_report(result, fail_on_regression: bool) -> int:
    """The report's files, then the verdict lines on stdout, where `> log` keeps them (warnings stay on stderr):
    the sides of an A/B, the headline, and the cells a person must read (analysis/pages/ci_formats.py: a line per
    regression and failure, the inconclusive ones grouped, loud); the exit status of --fail-on-regression."""
    from harness.analysis.judge.repeats import num_superseded
    from harness.analysis.pages.ci_formats import verdict_lines
    from harness.analysis.judge.verdict import FAILED, INCONCLUSIVE, WARNING
    from harness.analysis.pages.wording import gate_line, headline_words
    from harness.fit import wrap

    comparison, width = result.comparison, shutil.get_terminal_size().columns
    for note in comparison.notes:
        if note.severity == WARNING:
            print("\n".join(wrap(str(note), width, indent="  ")), file=sys.stderr)
    for run in (comparison.baseline, comparison.candidate):
        for line in (run.unreadable if run is not None else ()):
            print(f"warning: {line}: its row is left out, the other rows stand", file=sys.stderr)
    for path in result.files:
        print(path)
    for line in comparison.sides:
        print(line)
    rows = [*comparison.candidate.rows, *(comparison.baseline.rows if comparison.baseline else ())]
    reruns = num_superseded(rows)
    rerun = f" ({reruns} repeat{'s' if reruns != 1 else ''} re-run after a start transient)" if reruns else ""
    print(f"{comparison.title}: {headline_words(comparison)}{rerun}")
    for line in verdict_lines(comparison, width):  # grouped, fitted: as `run` does
        print(line)
    for v in comparison.broken_gates:  # a gate fails its cell whatever the timing: said last, on its own line
        print(gate_line(v))
    failed = [v for v in comparison.verdicts if v.verdict == FAILED]
    open_ = [v for v in comparison.verdicts if v.verdict == INCONCLUSIVE and not v.is_regression]
    if not fail_on_regression:
        return EXIT_OK
    if comparison.regressions or failed or comparison.broken_gates:
        return EXIT_FAILURES
    return EXIT_INCONCLUSIVE if open_ else EXIT_OK


def add_slots_flag(p: argparse.ArgumentParser) -> None:
    from harness.matrix.sections import RunConfig

    own_default(p.add_argument(
        "--slots", type=_slots_arg, metavar="N|auto",
        help="jobs at once on this machine, one world-size-1 job per slot (a GPU and the cores near it; without "
             "GPUs, a share of the cores); auto: one per GPU for the backends this machine's calibration cleared "
             "(nvbench calibrate-slots), else one at a time (default: the matrix's [run] slots, itself "
             "%(own_default)s when unset)"), knob_default(RunConfig, "slots"))


def _slots_arg(text: str):
    from harness.orchestrate.placement.slots import parse_slots

    try:
        return parse_slots(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def slot_packing(requested, *, device: str, env: dict, key: str, backends, executor_kind: str = "local",
                 source=None):
    """The run's Packing from `--slots` (or the matrix's [run] slots), this machine (`device`: the run's, as
    probed: cuda or cpu) and its calibration, with its
    lines said on stderr; None under SLURM (its scheduler places each job; a slot request is said and ignored).
    Raises SlotError or CalibrationError (one line each) for the caller's bad_input. `source`: the matrix file
    (or run folder) the number came from, when it was not `--slots`; a refusal then names it and its key, as
    every other bad value in a matrix file is named."""
    from harness.orchestrate.placement import packing
    from harness.orchestrate.placement.machine import probe_machine

    if executor_kind != "local":
        if requested != "auto" and requested != 1:
            print(f"note: --slots {requested}: slots are this machine's; SLURM places each job itself "
                  "(executor.max_parallel, gpus_per_node): ignored", file=sys.stderr)
        return None
    path = packing.calibration_path(env, key)
    how = f"measure it with `nvbench calibrate-slots MATRIX` (writes {path})"
    chosen, lines = packing.decide(requested, probe_machine(device), calibration=packing.read_calibration(path),
                                   backends=backends, how_to_calibrate=how,
                                   what=f"{source}: run.slots = {requested}" if source else None)
    for line in lines:
        print(line, file=sys.stderr)
    return chosen
