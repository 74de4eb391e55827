"""The nightly (`nvbench nightly`, ci/nightly.sh): run_night, its conductor, runs the matrix, judges it, confirms
what it flags and publishes the report, each child (`nvbench run`, `report`, `ab`, `dashboard`) dying with it; and
the quick reads it asks between its steps. What a night does and its exit codes: ci/README.md.

A confirmation targets the suspects of a history screen (suspects.json) or, in a baseline comparison
(verdicts.parquet), every regression, every inconclusive cell and every slowdown with p <= SCREEN_P: the A/B decides,
so the screen can be loose (benchmarks/detector.py measures both). The baseline's code can be checked out again (a
git worktree) only when its run recorded a commit and no uncommitted changes; otherwise, or when the A/B could not
run a side, the nightly falls back: a sequential rerun of history suspects, the baseline verdict as it is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import harness
from harness.analysis.load import verdicts_file
from harness.analysis.load.runs import load_run
from harness.analysis.judge.verdict import INCONCLUSIVE, REGRESSION, CellVerdict
from harness.orchestrate.session import runfolder, stopping
from harness.orchestrate.workflows.confirm import unusable_side
from harness.results import store
from harness.results.env import git_state
from harness.exits import EXIT_BAD_INPUT, EXIT_FAILURES, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_OK

NO_AB = 4
"""_confirm_ab's answer when no A/B confirmation could be had (3 is nvbench's `inconclusive`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """One night's knobs (harness.commands.nightly declares each: its meaning, flag, variable and default). A
    string knob left empty passes no flag to the command it feeds, as ci/nightly.sh's empty variables did."""

    matrix: str
    reports: str
    baseline: str
    history: str
    run_id: str
    repeats: str = ""
    run_args: tuple[str, ...] = ()
    slots: str = ""
    report_args: tuple[str, ...] = ()
    confirm: str = "auto"
    confirm_repeats: str = ""
    confirm_max_repeats: str = ""
    kernel_repeats: str = ""
    work_repeats: str = ""
    bisect: str = "work"
    bisect_budget_s: str = "1800"
    root: Path
    """The git checkout whose commits the A/Bs and the bisect check out (this harness's)."""
    step_summary: str | None = None
    """$GITHUB_STEP_SUMMARY (GitHub Actions): the decisive summary.md is appended here too."""
    step_output: str | None = None
    """$GITHUB_OUTPUT: `report_dir=...` is appended here."""

    @property
    def run(self) -> str:
        return f"{self.reports}/{self.run_id}"

    @property
    def job_args(self) -> list[str]:
        """The flags the run, its rerun and its A/B share: slots, repeats, then NVBENCH_RUN_ARGS."""
        return [*_flag("--slots", self.slots), *_flag("--repeats", self.repeats), *self.run_args]


SCREEN_P = 0.2
"""A baseline comparison's slowdown with a p-value up to this goes to the A/B confirmation."""


def targets(report_dir: Path) -> list[str]:
    """Sorted, de-duplicated `--only AXIS=VALUE` flags covering every cell the report asks to confirm."""
    if (report_dir / "suspects.json").is_file():
        flags = {f for s in store.read_json(report_dir / "suspects.json") for f in s["only"]}
    else:
        verdicts = verdicts_file.read_verdicts(report_dir / "verdicts.parquet")
        flags = {f for v in verdicts if _screened(v) for f in v.axis_filters()}
    return [arg for flag in sorted(flags) for arg in ("--only", flag)]


def _screened(v: CellVerdict) -> bool:
    if v.verdict in (REGRESSION, INCONCLUSIVE):  # the A/B decides what one night could not
        return True
    effect, p = v.decided_effect_pct, v.p_value  # the deciding metric's change, the cell's p
    return effect is not None and p is not None and effect < 0 and p <= SCREEN_P


def recorded_code(run_dir: Path | None) -> str | None:
    """The commit a run's harness came from (None: this checkout's), or None when it cannot be re-created."""
    if run_dir is None:
        sha, dirty = git_state(Path(harness.__file__).resolve().parent)  # the package, as collect_env reads it
    else:
        env = load_run(run_dir).environment
        sha, dirty = env.get("nvbench_git_sha"), env.get("nvbench_git_dirty")
    return sha if sha and dirty is False else None


def inconclusive_lines(report_dir: Path) -> list[str]:
    """`INCONCLUSIVE cell: reason` for every inconclusive cell of a report's verdicts.parquet (`NOT JUDGED cell:
    reason` for one the machine kept busy: a quiet machine, not more repeats, would decide it)."""
    verdicts = verdicts_file.read_verdicts(report_dir / "verdicts.parquet")
    return [f"  {'NOT JUDGED' if v.busy else 'INCONCLUSIVE'} {v.cell_id}: {v.reason}" for v in verdicts
            if v.verdict == INCONCLUSIVE]


def gate_lines(report_dir: Path) -> list[str]:
    """`WORK GATE BROKEN: cell: work gate ... broken: <where>` (wording.gate_line, as report and ab print it) for
    every cell of a report's verdicts.parquet whose counted work broke a gate: the night fails on it from one
    counted process, whatever the timing says."""
    from harness.analysis.pages.wording import gate_line

    verdicts = verdicts_file.read_verdicts(report_dir / "verdicts.parquet")
    return [f"  {gate_line(v)}" for v in verdicts if v.work_gate_broken]


class _Exit(Exception):
    """The night ends here with this exit status (a step's own last line already said why)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def log(line: str) -> None:
    print(f"nightly: {line}", file=sys.stderr, flush=True)


def run_night(settings: Settings) -> int:
    """The night, step by step: its exit status (0 ok, 1 failed, 2 bad input, 3 inconclusive, 130 stopped)."""
    night = _Night(settings)
    previous = {sig: signal.signal(sig, night.on_signal) for sig in stopping.STOP_SIGNALS}
    try:
        return night.steps()
    except _Exit as done:
        return done.code
    except KeyboardInterrupt as exc:
        return night.stopped(getattr(exc, "signum", signal.SIGINT))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Night:
    """One night's state between its steps: the child running, the A/B's worktree, the decisive report."""

    def __init__(self, s: Settings):
        self.s = s
        self.children = stopping.OneChild()  # the night's one running child
        self.worktree: str | None = None  # the baseline's checkout while an A/B confirmation runs
        self.signum: int | None = None
        self.last_report = f"{s.run}/report"  # the report whose verdicts decide the night

    def on_signal(self, signum: int, frame) -> None:
        if self.signum is None:  # one orderly stop: a second signal (Ctrl-C reaches a child too) must not cut it
            self.signum = signum
            raise stopping.Stopped(signum)

    def stopped(self, signum: int) -> int:
        """A stop signal: the running child stopped as on Ctrl-C (its run stays resumable), the A/B's worktree
        removed, the line that resumes the run, exit 130."""
        for sig in stopping.STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        self.children.stop()
        self._remove_worktree()
        log(f"stopped by {signal.Signals(signum).name}; finish the run with: nvbench run --resume {self.s.run}")
        return EXIT_INTERRUPTED

    def child(self, *argv: str, capture: bool = False, quiet: bool = False) -> tuple[int, str]:
        return self.children.run(argv, capture=capture, quiet=quiet)

    def step(self, function, *args, **kwargs) -> int:
        """An in-process step (alarms, culprits, history): its exit status; a stop signal stops the night; a
        crash is its traceback and exit 1, as the step's own process had."""
        sys.stdout.flush()
        try:
            rc = function(*args, **kwargs)
        except Exception:  # noqa: BLE001  the step failed; the night's verdict stands, and says so
            traceback.print_exc()
            rc = EXIT_FAILURES
        sys.stdout.flush()
        sys.stderr.flush()
        if rc == EXIT_INTERRUPTED and self.signum is not None:  # the step stopped on our signal: so does the night
            raise stopping.Stopped(self.signum)
        return rc

    def publish(self, report_dir: str) -> None:
        """GitHub Actions: the Markdown as the job summary, the report folder as a step output."""
        summary = Path(report_dir) / "summary.md"
        if self.s.step_summary and summary.is_file():
            with open(self.s.step_summary, "a", encoding="utf-8") as f:
                f.write(summary.read_text(encoding="utf-8"))
        if self.s.step_output:
            with open(self.s.step_output, "a", encoding="utf-8") as f:
                f.write(f"report_dir={report_dir}\n")

    def _remove_worktree(self) -> None:
        if self.worktree:
            subprocess.run(["git", "-C", str(self.s.root), "worktree", "remove", "--force", self.worktree],
                           capture_output=True, check=False)
            self.worktree = None

    def steps(self) -> int:
        s = self.s
        log(f"run {s.run_id}: {s.matrix}" + (f" x{s.repeats} repeats" if s.repeats else ""))
        work = ["--work-repeats", s.work_repeats] if s.work_repeats else []
        # What the run will cost (its estimate is the dry run's last line) and, once it ran, beside what it took.
        _, dry = self.child("nvbench", "run", s.matrix, "--dry-run", "--reports", s.reports, *work, *s.job_args,
                            capture=True)
        log((dry.splitlines() or [""])[-1])
        run_rc, _ = self.child("nvbench", "run", s.matrix, "--out", s.run, "--reports", s.reports, "--no-progress",
                               *work, *s.job_args)
        if Path(s.run, "manifest.json").is_file():
            log(_took(s.run))
        if run_rc >= 2:
            log(f"nvbench run exited {run_rc}")
            return run_rc
        if run_rc == 1 and not _finished(s.run):
            # A full disk (its one line above names the folder and the bytes) or nvbench itself stopped.
            log(f"the run stopped before its end: nothing is judged tonight; once fixed, finish it with: "
                f"nvbench run --resume {s.run}")
            return EXIT_FAILURES
        report_rc = self.judge()
        gate_rc = self.gates()
        report_rc = self.alarms(report_rc)
        self.culprits(report_rc, gate_rc)
        history_rc = self.history()
        return self.verdict(run_rc, report_rc, gate_rc, history_rc)

    def report(self, *args: str) -> int:
        return self.child("nvbench", "report", *args)[0]

    def judge(self) -> int:
        """The baseline's verdicts, confirmed; else the history's screen, its suspects confirmed; else a description.
        The decisive report's exit status."""
        s, run = self.s, self.s.run
        if os.path.exists(s.baseline):
            log(f"judging against the baseline {s.baseline}")
            rc = self.report(run, "--baseline", s.baseline, "--out", f"{run}/report", "--fail-on-regression",
                             *s.report_args)
            only = _targets(f"{run}/report")
            ab_only = ["--only-all"] if s.confirm == "every" else only
            ab_rc = NO_AB
            if rc in (0, 1, 3) and ab_only:
                self.publish(f"{run}/report")  # the screen; the A/B's report follows it
                ab_rc = self.confirm_ab(s.baseline, f"{run}-ab", ab_only)
            if ab_rc != NO_AB:
                return ab_rc
            if rc in (0, 1, 3):
                # No A/B: the comparison across nights is the verdict. Across nights the fast-step rate sees a slower
                # machine as sharply as slower code (docs/performance.md), so that verdict rests on throughput alone.
                log("no A/B confirmation: the baseline verdict stands, judged on throughput alone")
                rc = self.report(run, "--baseline", s.baseline, "--out", f"{run}/report", "--fail-on-regression",
                                 "--no-fast-steps", *s.report_args)
            self.publish(f"{run}/report")
            return rc
        if os.path.isdir(s.history) and os.listdir(s.history):
            return self.screen()
        log(f"no baseline ({s.baseline}) and no history ({s.history}): describing the run only")
        rc = self.report(run, "--out", f"{run}/report")
        self.publish(f"{run}/report")
        return rc

    def screen(self) -> int:
        """Every cell against its own history; suspects confirmed by A/B against the newest past run, else rerun."""
        s, run = self.s, self.s.run
        log(f"screening against the history in {s.history}")
        rc = self.report(run, "--history", s.history, "--out", f"{run}/report", *s.report_args)
        self.publish(f"{run}/report")
        only = _targets(f"{run}/report")
        ab_only = ["--only-all"] if s.confirm == "every" else only
        past = sorted(e.name for e in os.scandir(s.history) if not e.name.startswith(".") and e.is_dir())
        previous = f"{s.history}/{past[-1]}/" if past else ""
        ab_rc = NO_AB
        if rc == 0 and ab_only and previous:
            ab_rc = self.confirm_ab(previous, f"{run}-ab", ab_only)
            if ab_rc != NO_AB:
                rc = ab_rc
        if rc == 0 and only and ab_rc == NO_AB:
            log(f"suspects: confirming with a rerun ({' '.join(only)}) against {previous or 'nothing'}")
            self.child("nvbench", "run", s.matrix, "--out", f"{run}-confirm", "--no-progress", *only, *s.job_args)
            if previous:
                rc = self.report(f"{run}-confirm", "--baseline", previous, "--out", f"{run}-confirm/report",
                                 "--fail-on-regression", "--no-fast-steps", *s.report_args)
                self.publish(f"{run}-confirm/report")
                self.last_report = f"{run}-confirm/report"
        return rc

    def confirm_ab(self, base: str, out: str, only: list[str]) -> int:
        """The cells selected by `only`, interleaved, under the baseline's commit (A) and tonight's checkout (B):
        nvbench ab's exit status (0, 1, 3 inconclusive), or NO_AB when an A/B confirmation cannot be had."""
        s = self.s
        only = [] if only == ["--only-all"] else only  # NVBENCH_CONFIRM=every: no filter, every cell
        if s.confirm == "sequential":
            return NO_AB
        try:
            sha = recorded_code(Path(base)) or ""
        except (OSError, ValueError) as exc:
            print(f"nightly: {exc}".splitlines()[0], file=sys.stderr)
            return NO_AB
        if not sha:
            log("the baseline's commit is not recorded clean: no A/B confirmation")
            return NO_AB
        head = recorded_code(None) or ""
        if s.confirm == "auto" and sha == head:
            log(f"tonight runs the baseline's code ({sha}): no A/B confirmation "
                "(NVBENCH_CONFIRM=interleaved forces one)")
            return NO_AB
        src = f"{out}-baseline-src"
        self.worktree = src
        added = subprocess.run(["git", "-C", str(s.root), "worktree", "add", "--detach", "--force", src, sha],
                               capture_output=True, check=False)
        if added.returncode != 0:
            self.worktree = None
            log(f"cannot check out the baseline's commit {sha}: no A/B confirmation")
            return NO_AB
        log(f"confirming by A/B: A = {sha} (baseline), B = tonight" + (f" ({head})" if head else "")
            + f": {' '.join(only)}")
        rc, _ = self.child("nvbench", "ab", s.matrix, "--a-checkout", src, "--out", out, *only, *s.job_args,
                           *_flag("--repeats", s.confirm_repeats), *_flag("--max-repeats", s.confirm_max_repeats),
                           *_flag("--kernel-repeats", s.kernel_repeats), "--fail-on-regression", *s.report_args)
        self._remove_worktree()
        if rc == EXIT_INTERRUPTED:
            log(f"interrupted during the A/B confirmation (rows so far in {out})")
            raise _Exit(EXIT_INTERRUPTED)
        if rc == EXIT_BAD_INPUT or rc > EXIT_INCONCLUSIVE or not _ran(out):
            log(f"the A/B confirmation did not run (exit {rc}): no A/B confirmation")
            return NO_AB
        self.publish(f"{out}/report")
        self.last_report = f"{out}/report"
        return rc

    def gates(self) -> int:
        """A work gate ([judge.work_gates]) fails the night from one counted process, whatever the timing says:
        read from tonight's report against the baseline; it fails every night it stays broken."""
        verdicts = Path(self.s.run, "report", "verdicts.parquet")
        if not verdicts.is_file():
            return EXIT_OK
        try:
            lines = gate_lines(verdicts.parent)
        except (OSError, ValueError) as exc:
            print(f"nightly: {exc}".splitlines()[0], file=sys.stderr)
            return EXIT_BAD_INPUT
        for line in lines:
            print(line, file=sys.stderr)
        return EXIT_FAILURES if lines else EXIT_OK

    def alarms(self, report_rc: int) -> int:
        """A regression alarms once (alarm_step): only a new one, or one worse, fails the night."""
        from harness.orchestrate.workflows.alarm_step import alarm_step

        if not Path(self.last_report, "verdicts.parquet").is_file() or report_rc not in (0, 1, 3):
            return report_rc
        rc = self.step(alarm_step, [self.last_report, "--reports", self.s.reports, "--night", self.s.run_id,
                                    *_flag("--summary", self.s.step_summary)])
        if rc == EXIT_INTERRUPTED:
            log("interrupted during the alarm step")
            raise _Exit(EXIT_INTERRUPTED)
        if rc not in (0, 1, 3):
            log(f"the alarm step failed (exit {rc})")
        return rc

    def culprits(self, report_rc: int, gate_rc: int) -> None:
        """The commit that did it (NVBENCH_BISECT): joins the alarm's record, summary.md and the night's last
        lines; the night's exit status is not changed by it."""
        from harness.orchestrate.workflows.culprit_step import culprit_step

        s = self.s
        if s.bisect == "off" or EXIT_FAILURES not in (report_rc, gate_rc) or not os.path.exists(s.baseline):
            return
        rc = self.step(culprit_step, [
            "--reports", s.reports, "--night", s.run_id, "--run", s.run, "--baseline", s.baseline, "--matrix",
            s.matrix, "--repo", str(s.root), "--mode", s.bisect, "--budget-s", s.bisect_budget_s,
            "--summary", f"{self.last_report}/summary.md", *_flag("--summary", s.step_summary)])
        if rc == EXIT_INTERRUPTED:
            log("interrupted during the culprit step")
            raise _Exit(EXIT_INTERRUPTED)
        if rc != EXIT_OK:
            log(f"the culprit step failed (exit {rc}): the night's verdict stands")

    def history(self) -> int:
        """Tonight joins the history (a link; fire drills never do), its trend drawn with tonight's new change
        points confirmed (confirm.history_step), and the dashboard over every night. 1: a confirmed change point."""
        from harness.orchestrate.workflows.confirm import history_step

        s = self.s
        if "--fire-drill" in s.run_args:
            log("fire drill: not added to the history")
            return EXIT_OK
        Path(s.history).mkdir(parents=True, exist_ok=True)
        link = Path(s.history, s.run_id)
        if link.is_symlink() or link.is_file():
            link.unlink()
        link.symlink_to(os.path.abspath(s.run))
        rc = self.step(history_step, Path(s.history), Path(s.run, "history"), matrix=Path(s.matrix), repo=s.root,
                       reports=Path(s.reports), summaries=[Path(x) for x in (f"{s.run}/report/summary.md",
                                                                             s.step_summary) if x],
                       no_ab="NVBENCH_CONFIRM=sequential: no A/B" if s.confirm == "sequential" else None,
                       ab_args=[*_flag("--repeats", s.confirm_repeats), *_flag("--max-repeats", s.confirm_max_repeats),
                                *s.report_args])
        if rc == EXIT_FAILURES:
            log(f"a change point new tonight is confirmed by A/B of its commits (see {s.run}/history/changes.md)")
        elif rc == EXIT_INCONCLUSIVE:
            log("the history had nothing to judge (its line above says what it left out and why)")
        elif rc == EXIT_INTERRUPTED:
            log("interrupted during the history's A/B confirmation")
            raise _Exit(EXIT_INTERRUPTED)
        elif rc != EXIT_OK:
            log(f"the history step failed (exit {rc}): no trend page tonight")
        # The dashboard over every night and the alarms open: REPORTS/dashboard, a static site to publish.
        dash_rc, _ = self.child("nvbench", "dashboard", s.reports, "--history", s.history, "--out",
                                f"{s.reports}/dashboard", quiet=True)
        if dash_rc not in (0, 3):  # 3: written, with nothing in the history to judge (the history's line says why)
            log(f"the dashboard could not be written (exit {dash_rc}): the night's verdict stands")
        return EXIT_FAILURES if rc == EXIT_FAILURES else EXIT_OK

    def verdict(self, run_rc: int, report_rc: int, gate_rc: int, history_rc: int) -> int:
        """The night's exit status and its last lines."""
        from harness.orchestrate.workflows.culprit_step import CULPRITS_FILE, culprit_lines

        if report_rc == EXIT_BAD_INPUT or report_rc > EXIT_INCONCLUSIVE:
            return report_rc
        if Path(self.s.run, CULPRITS_FILE).is_file():
            for line in _read(culprit_lines, self.s.run):
                print(line, file=sys.stderr)
        if report_rc == EXIT_FAILURES:
            log("confirmed regression (new or worse) or failed cells")
            return EXIT_FAILURES
        if gate_rc == EXIT_FAILURES:
            log("a work gate is broken (counted work, whatever the timing): see above")
            return EXIT_FAILURES
        if gate_rc != EXIT_OK:
            log(f"the work gate step failed (exit {gate_rc})")
            return gate_rc
        if history_rc == EXIT_FAILURES:
            log("confirmed change point")
            return EXIT_FAILURES
        if run_rc == EXIT_FAILURES:
            log("cells failed (see the report's failed and skipped cells)")
            return EXIT_FAILURES
        if report_rc == EXIT_INCONCLUSIVE:
            # Last and loud: the night could not tell for these cells; absence of evidence is not a pass.
            log("INCONCLUSIVE: nothing regressed, but these cells could not be decided (more repeats would, or a "
                "quiet machine where it was busy):")
            for line in _read(inconclusive_lines, self.last_report):
                print(line, file=sys.stderr)
            return EXIT_INCONCLUSIVE
        log("ok")
        return EXIT_OK


def _flag(*pair: str | None) -> list[str]:
    """(FLAG, VALUE) as two words, or none where VALUE is empty or None (a shell's ${VALUE:+FLAG "$VALUE"})."""
    return list(pair) if pair[-1] else []


def _read(function, path: str) -> list:
    """A quick read of a run's or report's files; an unreadable one is its one line on stderr and nothing."""
    try:
        return function(Path(path))
    except (OSError, ValueError) as exc:
        print(f"nightly: {exc}".splitlines()[0], file=sys.stderr)
        return []


def _targets(report_dir: str) -> list[str]:
    """The --only flags to confirm; none when the report cannot say (its error is the report's own to print)."""
    try:
        return targets(Path(report_dir))
    except (OSError, ValueError):
        return []


def _ran(ab_dir: str) -> bool:
    why = _read(lambda p: [unusable_side(p)], ab_dir)
    if why and why[0]:
        print(why[0], file=sys.stderr)
    return why == [None]


def _finished(run: str) -> bool:
    left = _read(lambda p: [runfolder.unfinished(p)], run)
    if left and left[0]:
        print(f"nightly: {run}: {left[0][0]} of {left[0][1]} jobs never ended (the run stopped before its end)",
              file=sys.stderr)
    return left == [None]


def _took(run: str) -> str:  # the run's 'took Y; estimated X' line
    from harness.orchestrate.cost.pricing import took_line

    line = _read(lambda p: [took_line(store.read_json(p / "manifest.json"))], run)
    return line[0] or f"{run}: no estimate recorded" if line else ""
