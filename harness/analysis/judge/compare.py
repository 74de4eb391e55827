"""Verdicts: every cell of a candidate run against a baseline run or the other side of an A/B run. Pure given
rows and manifests. What it does: match cells, decide what can be tested (the samples each metric is tested
on) and assemble each cell's verdict from the statistical evidence (harness.analysis.judge.evidence, which hands it
to harness.analysis.judge.decide, the one place that says the word) and the findings beside it
(harness.analysis.judge.findings). The verdict model is harness.analysis.judge.verdict; reading runs is
harness.analysis.load.runs; screening against a history of past runs is harness.analysis.judge.screen.

A verdict is an effect size with an interval and a practical floor: `regression` only when the whole
(FDR-adjusted) interval of the change lies below zero AND the change is larger than the floor. Two
metrics are tested per cell (Bonferroni within the cell, Benjamini-Hochberg across cells): throughput
(the ratio of sums, the headline) and the fast-step rate (harness.stats.window.fast_step_rate), which sees through the
interference of a shared machine; either can call a regression, and the verdict says which did.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from harness.analysis.judge import decide
from harness.analysis.judge.evidence import MetricSamples, PendingCell, tested_verdicts, untestable
from harness.analysis.judge.findings import accuracy_check, node_notes, phase_attribution
from harness.analysis.judge.packing import packing_notes
from harness.analysis.judge.repeats import (
    axes_of, by_cell, cv_of, drill_pct, env_difference, failure_verdict, interference_words, label_of, noise_label, ok_rows,
    rerun_words, throughputs, usable_rows)
from harness.analysis.judge.run import RunData
from harness.analysis.judge.verdict import (
    ACCURACY_NA, FAILED, INCONCLUSIVE, NO_BASELINE, NOT_COMPARABLE, SKIPPED, THROUGHPUT, CellVerdict, Comparison,
    NOTE_MISSING_CELLS, NOTE_SHORT_REPEATS, WARNING, MetricVerdict, Note, Thresholds, build_verdict, merge_fields)
from harness.catalogue.judged import JUDGED, Judged
from harness.results.env import env_diff
from harness.results.interference import clean_rows, too_busy
from harness.stats import inference
from harness.catalogue import col, reasons


def _probes(cand_ok: Sequence[Mapping[str, Any]], base_ok: Sequence[Mapping[str, Any]],
            th: Thresholds) -> tuple[np.ndarray, np.ndarray] | None:
    """Probe seconds of both sides when the comparison can adjust for machine speed: every usable repeat has
    a probe, all of one kind, and the probe varied within a side (else its slope is unknowable)."""
    if not th.speed_adjust:
        return None
    rows = [*cand_ok, *base_ok]
    if any(not (r.get(col.speed_probe_s) or 0) > 0 for r in rows) or \
            len({r.get(col.speed_probe_kind) for r in rows}) != 1:
        return None
    c = np.array([r[col.speed_probe_s] for r in cand_ok], dtype=float)
    b = np.array([r[col.speed_probe_s] for r in base_ok], dtype=float)
    if np.ptp(np.log(c)) <= 1e-12 and np.ptp(np.log(b)) <= 1e-12:
        return None
    return c, b


def _sides(cand_ok: Sequence[Mapping[str, Any]], base_ok: Sequence[Mapping[str, Any]],
           all_ok: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Both sides' throughput and spread, whether or not the cell can be judged."""
    cand_x, base_x = throughputs(cand_ok), throughputs(base_ok)
    unsteady = sum(r.get(col.is_steady) is False for r in all_ok)
    cv = max((c for c in (cv_of(cand_x), cv_of(base_x)) if c is not None), default=None)
    return {col.num_baseline: len(base_ok), col.num_unsteady: unsteady, "noise": noise_label(cv, unsteady),
            "throughput": {col.candidate_cv: cv_of(cand_x), col.baseline_cv: cv_of(base_x),
                           "candidate_value": float(cand_x.mean()) if cand_x.size else None,
                           "baseline_value": float(base_x.mean()) if base_x.size else None}}


def _ab_probes(probes: tuple[np.ndarray, np.ndarray] | None,
               th: Thresholds) -> tuple[tuple[np.ndarray, np.ndarray] | None, str]:
    """An interleaved A/B's probes, or None with a note when the probe differs between its sides. Pairs run side
    by side in time, so the machine's state falls on both sides alike: a probe that reads differently on one side
    was moved by that side's software (its libraries, its threads), and adjusting for it, or holding the cell on it,
    would judge the instrument instead of the change. The cell is then judged unadjusted."""
    if probes is None:
        return None, ""
    shift, _, _, balanced = decide.probe_balance(*probes, floor_pct=th.floor_pct, alpha=th.level,
                                                 confidence=1 - th.level)
    if balanced:
        return probes, ""
    return None, (f" (the machine-speed probe read {shift:+.1f}% on B: interleaved pairs share the machine's state, "
                  "so the sides' software moved it; judged unadjusted)")


def busy_sides(cand_ok: Sequence[Mapping[str, Any]], base_ok: Sequence[Mapping[str, Any]], *, ab: bool) -> str:
    """'7 of 10 windows of the candidate taken under interference' for each side too busy to stand for its cell
    (harness.results.interference.too_busy), '' when neither is."""
    names = ("B", "A") if ab else ("the candidate", "the baseline")
    return "; ".join(f"{len(ok) - len(clean_rows(ok))} of {len(ok)} windows of {name} taken under interference"
                     for name, ok in zip(names, (cand_ok, base_ok)) if too_busy(ok))


def _prepare(cid: str, cand_rows: list, base_rows: list | None, candidate: RunData, baseline: RunData,
             th: Thresholds, require_same_env: bool, mode: str = "baseline") -> tuple[dict[str, Any], PendingCell | None]:
    """Common verdict fields, and the samples when the cell can be tested (else a final verdict). A cell
    that cannot be judged still carries both sides' figures."""
    th = th.for_cell(axes_of(cand_rows))  # the cell's own floor ([judge] overrides)
    common = {col.cell_id: cid, col.cell_label: label_of(cand_rows), **axes_of(cand_rows), col.floor_pct: th.floor_pct, col.floor_source: th.floor_origin,
              col.floor_kind: th.floor_kind,
              col.fdr_q: th.fdr_q, col.accuracy_tolerance: th.accuracy_tolerance,
              col.fire_drill_pct: max(map(drill_pct, cand_rows)), col.is_smoke: bool(cand_rows[0].get(col.is_smoke)),
              col.candidate_run_id: candidate.run_id, col.baseline_run_id: baseline.run_id, col.busy: False}
    cand_ok = usable_rows(cand_rows, th)
    common |= {col.num_candidate: len(cand_ok)}
    if not ok_rows(cand_rows):
        return common | failure_verdict(cand_rows), None
    if not base_rows:
        x = throughputs(cand_ok)
        common["throughput"] = {"candidate_value": float(x.mean()) if x.size else None, col.candidate_cv: cv_of(x)}
        return common | {"verdict": NO_BASELINE, "reason": f"cell not in the baseline {baseline.run_id}",
                         col.reason_code: reasons.NOT_IN_BASELINE}, None
    common[col.baseline_fire_drill_pct] = max(map(drill_pct, base_rows))
    base_ok = usable_rows(base_rows, th)
    common |= _sides(cand_ok, base_ok, ok_rows(cand_rows) + ok_rows(base_rows))
    if bool(base_rows[0].get(col.is_smoke)) != common[col.is_smoke]:
        which = "candidate" if common[col.is_smoke] else "baseline"
        why = f"the {which} is a --smoke run; smoke and full runs measure different things"
        return common | {"verdict": NOT_COMPARABLE, "reason": why, col.reason_code: reasons.SMOKE_MISMATCH}, None
    if busy := busy_sides(ok_rows(cand_rows), ok_rows(base_rows), ab=mode == "ab"):
        return common | {"verdict": INCONCLUSIVE, col.busy: True,
                         "reason": f"not judged: the machine was busy ({busy}); run it again on a quiet machine",
                         col.reason_code: reasons.MACHINE_BUSY}, None
    diff = env_difference(ok_rows(cand_rows), ok_rows(base_rows), candidate.environment, baseline.environment)
    if diff:
        common[col.env_diff] = diff
        if require_same_env:
            return common | {"verdict": NOT_COMPARABLE, "reason": f"environment differs: {diff}",
                             col.reason_code: reasons.ENVIRONMENT_DIFFERS}, None
    cand_x, base_x = throughputs(cand_ok), throughputs(base_ok)
    base_cv = cv_of(base_x)
    if base_cv and min(len(cand_ok), len(base_ok)) >= 2:
        common[col.mdc_pct] = 100 * inference.min_detectable_change(base_cv, len(cand_ok), len(base_ok), alpha=th.level)
    smallest_p = decide.smallest_permutation_p(len(cand_ok), len(base_ok))
    if min(len(cand_ok), len(base_ok)) < th.min_repeats or smallest_p > th.level:
        return merge_fields(common, untestable(cand_x, base_x, th)), None  # both sides' img/s stay beside the change
    probes, probe_note = _probes(cand_ok, base_ok, th), ""
    if mode == "ab":
        probes, probe_note = _ab_probes(probes, th)
    metrics = [MetricSamples(JUDGED[0], cand_x, base_x)]
    left_out = []
    for judged in JUDGED[1:]:
        samples = _samples(judged, cand_ok, base_ok, th)
        if samples is None:
            continue
        if (len(metrics) + 1) * smallest_p > th.level:  # split one more way the level would be out of reach
            left_out.append(judged.name)
            continue
        metrics.append(MetricSamples(judged, *samples))
        common[judged.name] = {"candidate_value": float(samples[0].mean()), "baseline_value": float(samples[1].mean())}
    note = (f" ({', '.join(left_out)} not tested: at {len(cand_ok)} + {len(base_ok)} repeats only {len(metrics)} "
            f"metric{'s' if len(metrics) > 1 else ''} can reach p <= {th.level:.3g})") if left_out else ""
    note += probe_note
    return common, PendingCell(base=common, metrics=metrics, cand_probe=probes and probes[0],
                               base_probe=probes and probes[1], note=note)


def _samples(judged: Judged, cand_ok: Sequence[Mapping[str, Any]], base_ok: Sequence[Mapping[str, Any]],
             th: Thresholds) -> tuple[np.ndarray, np.ndarray] | None:
    """A judged metric's per-repeat values on both sides when the comparison tests it: its switch (if any) is
    on and every usable repeat recorded a positive value (rows written before nvbench recorded it, or without
    the instrument, read as null: those cells are judged on the others)."""
    if judged.switch is not None and not getattr(th, judged.switch):
        return None
    if any(not (r.get(judged.column) or 0) > 0 for r in [*cand_ok, *base_ok]):
        return None
    return (np.array([r[judged.column] for r in cand_ok], dtype=float),
            np.array([r[judged.column] for r in base_ok], dtype=float))


def compare_runs(candidate: RunData, baseline: RunData, thresholds: Thresholds | None = None, *,
                 require_same_env: bool = True, mode: str = "baseline", baseline_label: str | None = None,
                 candidate_label: str = "", sides: tuple[str, ...] = ()) -> Comparison:
    """Verdict for every cell of `candidate` against `baseline`, matched by cell_id.

    Per testable cell: log ratio of mean throughput across repeats with a percentile bootstrap interval
    (inference.bootstrap_log_ratio, resampling repeats) and an exact permutation p-value of the same statistic
    (inference.permutation_p_value: its false-alarm rate is at most the level at any number of repeats, where
    the percentile bootstrap's is not); Benjamini-Hochberg across the testable cells at fdr_q; intervals at
    the FCR-adjusted level 1 - R q / m (Benjamini & Yekutieli). With Thresholds.speed_adjust (the default)
    and a machine-speed probe of one kind on every usable repeat of both sides (CPU cells),
    the change is instead the difference of mean log throughput at equal probe time (inference.ancova_fit, t
    interval) tested by a Freedman-Lane permutation (inference.ancova_permutation_p). With Thresholds.fast_steps
    the fast-step rate is tested the same way beside throughput: the cell's p-value is the smaller one times
    two, Holm within the cell says which metric is significant, intervals are at half the error each. A
    regression needs all three, for one metric: BH rejects (and Holm keeps the metric), the whole interval
    lies below 0, and the change is beyond the floor.
    `require_same_env=False` (A/B runs, where the environment is what is being compared) reports
    environment differences instead of refusing. `candidate_label` and `sides` name the two sides of an A/B
    (Comparison.title, Comparison.sides). Repeats re-run after a start transient (status superseded) are left
    out, and each cell's reason says how many there were.
    """
    th = thresholds or Thresholds()
    cand_cells, base_cells = by_cell(candidate.rows), by_cell(baseline.rows)
    prepared = [_prepare(cid, rows, base_cells.get(cid), candidate, baseline, th, require_same_env, mode)
                for cid, rows in sorted(cand_cells.items())]
    testable = [p for _, p in prepared if p is not None]
    decided = tested_verdicts(testable, th)
    verdicts = []
    for common, p in prepared:
        fields_ = merge_fields(common, decided[id(p)]) if p is not None else common
        cid = common[col.cell_id]
        if p is not None or common["verdict"] not in (FAILED, SKIPPED):
            fields_ |= accuracy_check(ok_rows(cand_cells[cid]), ok_rows(base_cells.get(cid, [])), th,
                                      fields_.get(col.ci_level) or 1 - th.level)
            if fields_["verdict"] == NOT_COMPARABLE:
                fields_[col.accuracy_verdict] = ACCURACY_NA
        if p is not None:
            fields_ |= phase_attribution(ok_rows(cand_cells[cid]), ok_rows(base_cells.get(cid, [])),
                                         fields_.get(col.ci_level) or 1 - th.level)
        drills = (fields_.get(col.fire_drill_pct) or 0.0, fields_.get(col.baseline_fire_drill_pct) or 0.0)
        if any(drills):  # never silent: a drill's verdict says so in its own words
            fields_["reason"] = f"FIRE DRILL (candidate +{drills[0]:g}%, baseline +{drills[1]:g}% injected work): " \
                + fields_["reason"]
            fields_[col.reason_figure] = ""  # the drill's words lead the reason now
        fields_["reason"] += rerun_words(cand_cells[cid], base_cells.get(cid, []), ab=mode == "ab") \
            + interference_words(cand_cells[cid], base_cells.get(cid, []), ab=mode == "ab")
        verdicts.append(build_verdict(fields_))
    missing = sorted(set(base_cells) - set(cand_cells))
    notes = (Note(f"{len(missing)} baseline cell(s) not in this run: {', '.join(missing)}", kind=NOTE_MISSING_CELLS),) \
        if missing else ()
    reach = decide.repeats_to_reach(th.level)
    short = [v for v in verdicts if v.verdict == INCONCLUSIVE and not v.busy
             and 0 < min(v.num_candidate, v.num_baseline) < reach]
    if short:
        notes = (Note(f"{len(short)} cell(s) have fewer usable repeats than a permutation test needs to reach "
                      f"p <= {th.level:.3g} ({reach} a side): they are inconclusive whatever their numbers",
                      WARNING, NOTE_SHORT_REPEATS),) + notes
    notes += node_notes(cand_cells, base_cells) + packing_notes([*candidate.rows, *baseline.rows])
    return Comparison(
        mode=mode, candidate=candidate, baseline_label=baseline_label or f"run {baseline.run_id}",
        baseline_environment=baseline.environment, thresholds=th, verdicts=tuple(verdicts), notes=notes,
        environment_diff=tuple(env_diff(baseline.environment, candidate.environment)), baseline=baseline,
        candidate_label=candidate_label, sides=sides)


def describe_only(candidate: RunData, thresholds: Thresholds | None = None) -> Comparison:
    """No baseline: every cell's own figures and failures, verdict `no baseline`."""
    th = thresholds or Thresholds()
    verdicts = []
    for cid, rows in sorted(by_cell(candidate.rows).items()):
        ok = usable_rows(rows, th)
        x = throughputs(ok)
        unsteady = sum(r.get(col.is_steady) is False for r in ok_rows(rows))
        said = failure_verdict(rows) if not ok_rows(rows) else {
            "verdict": NO_BASELINE, "reason": "no baseline given", col.reason_code: reasons.NO_BASELINE_GIVEN}
        own = th.for_cell(axes_of(rows))
        verdicts.append(CellVerdict(
            cell_id=cid, cell_label=label_of(rows), **axes_of(rows), **said, floor_pct=own.floor_pct,
            floor_source=own.floor_origin, floor_kind=own.floor_kind,
            fdr_q=th.fdr_q,
            accuracy_tolerance=th.accuracy_tolerance, num_candidate=len(ok),
            metrics={THROUGHPUT: MetricVerdict(candidate_value=float(x.mean()) if x.size else None,
                                               candidate_cv=cv_of(x) if x.size else None)},
            num_unsteady=unsteady, noise=noise_label(cv_of(x), unsteady) if x.size else "",
            fire_drill_pct=max(map(drill_pct, rows)), is_smoke=bool(rows[0].get(col.is_smoke)),
            candidate_run_id=candidate.run_id))
    return Comparison(mode="none", candidate=candidate, baseline_label="nothing (no baseline given)",
                      baseline_environment=None, thresholds=th, verdicts=tuple(verdicts),
                      notes=packing_notes(candidate.rows))
