"""The one comparison pipeline: load the runs, compare them, attach the extras (work, kernels: product.extras), write
the report once. `nvbench report`, `nvbench ab` and `nvbench calibrate-slots` all come through here (the nightly
through `nvbench report` and `nvbench ab`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from harness.analysis.judge import compare, screen
from harness.analysis.judge.run import RunData
from harness.analysis.judge.verdict import Comparison, Thresholds, with_judge
from harness.analysis.load.runs import RunInputError, load_history, load_run
from harness.analysis.pages.report import ReportResult, write_report
from harness.analysis.product.extras import Extra, Work
from harness.results.formats import UnreadableFile


@dataclass(frozen=True, slots=True, kw_only=True)
class Compared:
    """A comparison and the run folders its extras diff (None: no baseline run, no extras)."""

    comparison: Comparison
    base_dir: Path | None = None
    cand_dir: Path | None = None


def run_thresholds(th: Thresholds, run: RunData) -> Thresholds:
    """`th` with the floors of the [judge] section of the matrix `run` recorded. RunInputError when invalid."""
    from harness.matrix.parse import judge_from_text

    if not run.matrix_text:
        return th
    try:
        return with_judge(th, judge_from_text(run.matrix_text, f"{run.path}/manifest.json matrix_text"))
    except ValueError as exc:
        raise RunInputError(str(exc).splitlines()) from None


def compare_folders(run_dir: Path, *, baseline: Path | None = None, history: Path | None = None,
                    thresholds: Thresholds | None = None) -> Compared:
    """Load `run_dir` and what it is compared with (a baseline run, a history folder, or nothing) and compare them;
    RunInputError naming every folder that cannot be read."""
    problems: list[str] = []

    def attempt(load):
        try:
            return load()
        except RunInputError as exc:
            problems.extend(exc.problems)
            return None

    candidate = attempt(lambda: load_run(run_dir))
    baseline_run = attempt(lambda: load_run(baseline)) if baseline else None
    runs = attempt(lambda: load_history(history, exclude=run_dir)) if history else None
    if problems:
        raise RunInputError(problems)
    th = run_thresholds(thresholds or Thresholds(), candidate)
    if baseline_run is not None:
        return Compared(comparison=compare.compare_runs(candidate, baseline_run, th), base_dir=Path(baseline_run.path),
                        cand_dir=Path(candidate.path))
    if runs is not None:
        return Compared(comparison=screen.screen_history(candidate, runs, th,
                                                         label=f"history: {len(runs)} run(s) in {history}"))
    return Compared(comparison=compare.describe_only(candidate, th))


def write(compared: Compared, out_dir: Path, extras: Sequence[Extra] = ()) -> ReportResult:
    """Each extra's diff of the two run folders attached in turn (none without a baseline run), then the report written
    once: its four files, the extras' sections in report.html and their files beside it. An optional extra whose
    file a side cannot read is left out, its warning among the result's lines (stderr's)."""
    comparison, done, lines = compared.comparison, [], []
    if compared.base_dir is not None and compared.cand_dir is not None:
        for extra in extras:
            try:
                diffs = extra.diffs(comparison, compared.base_dir, compared.cand_dir)
            except UnreadableFile as exc:
                if not extra.optional:
                    raise
                lines.append(f"warning: {exc}: no {extra.name} diff")
                continue
            comparison = extra.attach(comparison, diffs)
            done.append((extra, diffs))
    files: dict[Path, bytes] = {}
    for extra, diffs in done:
        files |= extra.files(out_dir, diffs)
        lines += extra.lines(diffs)
    result = write_report(comparison, out_dir, sections={e.name: e.sections(comparison, d) for e, d in done},
                          extra_files=files)
    return replace(result, lines=tuple(lines))


def make_report(run_dir: Path, *, baseline: Path | None = None, history: Path | None = None,
                out_dir: Path | None = None, thresholds: Thresholds | None = None,
                extras: Sequence[Extra] = (Work(),)) -> ReportResult:
    """`nvbench report`: compare `run_dir` with a baseline run (its counted work diffed beside the timing, and any
    other extra), a history folder, or nothing, and write the report (RUN/report unless `out_dir`)."""
    compared = compare_folders(run_dir, baseline=baseline, history=history, thresholds=thresholds)
    return write(compared, Path(out_dir) if out_dir else Path(run_dir) / "report", extras)
