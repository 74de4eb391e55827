"""History screening: tonight's run against each cell's own past (median and MAD of the last comparable
runs). A screen finds suspects for a confirmation rerun; it confirms nothing (harness.analysis.judge.compare
judges, harness.analysis.judge.decide says the word)."""

from __future__ import annotations

import math
from typing import Any, Sequence, Mapping

from harness.analysis.judge.repeats import (
    axes_of, by_cell, cv_of, drill_pct, env_difference, failure_verdict, format_diff, label_of, noise_label, ok_rows,
    throughputs,
    usable_rows)
from harness.analysis.judge.run import RunData
from harness.analysis.judge.verdict import (
    INSUFFICIENT, NO_BASELINE, NOT_COMPARABLE, SUSPECT_IMPROVEMENT, SUSPECT_REGRESSION, UNCHANGED, CellVerdict,
    Comparison, Thresholds, build_verdict, merge_fields)
from harness.results.env import cell_env_fields, env_diff
from harness.stats import inference
from harness.catalogue import col, reasons


def _history_values(cid: str, cand_ok: Sequence[Mapping[str, Any]], candidate: RunData,
                    history: Sequence[tuple[RunData, Mapping[str, list]]],
                    th: Thresholds) -> tuple[list[float], RunData | None, int]:
    """Mean throughput of the cell in each comparable past run (newest last, at most history_runs),
    the newest past run holding the cell at all, and how many drill runs were left out. `history`: each
    run with its rows by cell."""
    values, newest, drills = [], None, 0
    is_smoke = bool(cand_ok[0].get(col.is_smoke))
    for run, cells in history:
        rows = cells.get(cid)
        if not rows:
            continue
        newest = run
        ok = [r for r in usable_rows(rows, th) if bool(r.get(col.is_smoke)) == is_smoke]
        if any(drill_pct(r) for r in rows):
            drills += 1
            continue
        if ok and not env_difference(cand_ok, ok, candidate.environment, run.environment, subset=True):
            values.append(float(throughputs(ok).mean()))
    return values[-th.history_runs:], newest, drills


def screen_history(candidate: RunData, history: Sequence[RunData], thresholds: Thresholds | None = None, *,
                   label: str = "history") -> Comparison:
    """Screen every cell against its own history: the median and scaled MAD of its mean throughput over
    the last `history_runs` comparable runs (same env_key and smoke-ness; fire drills never count). A
    cell is a suspect when its robust z is at least history_z AND the change beyond the floor; suspects
    are what a confirmation rerun should target, not confirmed regressions."""
    base_th = thresholds or Thresholds()
    verdicts, suspects = [], []
    grouped = [(run, by_cell(run.rows)) for run in history]  # once per run, not once per cell and run
    for cid, rows in sorted(by_cell(candidate.rows).items()):
        th = base_th.for_cell(axes_of(rows))  # the cell's own floor ([judge] overrides)
        common = {col.cell_id: cid, col.cell_label: label_of(rows), **axes_of(rows), col.floor_pct: th.floor_pct, col.floor_source: th.floor_origin,
                  col.floor_kind: th.floor_kind,
                  col.fdr_q: th.fdr_q,
                  col.accuracy_tolerance: th.accuracy_tolerance, col.fire_drill_pct: max(map(drill_pct, rows)),
                  col.is_smoke: bool(rows[0].get(col.is_smoke)), col.candidate_run_id: candidate.run_id,
                  col.baseline_run_id: label, "method": "history_median_mad"}
        ok = usable_rows(rows, th)
        if not ok_rows(rows):
            verdicts.append(CellVerdict(**common, **failure_verdict(rows)))
            continue
        x = float(throughputs(ok).mean()) if ok else float(throughputs(ok_rows(rows)).mean())
        values, newest, drills = _history_values(cid, ok_rows(rows), candidate, grouped, th)
        common |= {col.num_candidate: len(ok), col.num_history_runs: len(values),
                   "throughput": {"candidate_value": x, col.candidate_cv: cv_of(throughputs(ok)) if ok else None}}
        verdicts.append(build_verdict(merge_fields(common, _screen(x, values, newest, drills, rows, candidate, th))))
        if verdicts[-1].verdict in (SUSPECT_REGRESSION, SUSPECT_IMPROVEMENT):
            suspects.append(cid)
    return Comparison(mode="history", candidate=candidate, baseline_label=label, baseline_environment=None,
                      thresholds=base_th, verdicts=tuple(verdicts), suspects=tuple(suspects))


def _screen(x: float, values: list[float], newest: RunData | None, drills: int, rows: Sequence[Mapping[str, Any]],
            candidate: RunData, th: Thresholds) -> dict[str, Any]:
    if newest is None:
        return {"verdict": NO_BASELINE, "reason": "cell in no past run", col.reason_code: reasons.HISTORY_ABSENT}
    if not values:
        fields_ = cell_env_fields(backend=str(rows[0].get("backend")), device=rows[0].get("device"),
                                  world_size=int(rows[0].get(col.world_size) or 1))
        diff = format_diff(env_diff(newest.environment, candidate.environment, fields=fields_))
        why = f"environment differs from the newest past run {newest.run_id}: {diff}" if diff else \
            f"no past run with the same environment and smoke setting ({drills} fire drill(s) left out)"
        return {"verdict": NOT_COMPARABLE, "reason": why, col.env_diff: diff,
                col.reason_code: reasons.HISTORY_NOT_COMPARABLE}
    if len(values) < th.history_min_runs:
        return {"verdict": INSUFFICIENT,
                "reason": f"{len(values)} comparable past run(s); need at least {th.history_min_runs}",
                col.reason_code: reasons.HISTORY_TOO_FEW}
    med, mad = inference.median_mad(values)
    z = inference.robust_z(x, values)
    effect = inference.to_percent(math.log(x / med))
    out = {"throughput": {col.effect_pct: effect, "baseline_value": med}, col.history_median_img_per_s: med,
           col.history_mad_img_per_s: mad, col.robust_z: z if math.isfinite(z) else None,
           col.mdc_pct: max(th.floor_pct, 100 * th.history_z * mad / med),
           "noise": noise_label(mad / med, 0) + " (run to run)"}
    shown = f"{effect:+.1f}% vs the median of {len(values)} runs (robust z {z:+.1f})"
    if abs(z) >= th.history_z and abs(effect) >= th.floor_pct:
        verdict = SUSPECT_REGRESSION if effect < 0 else SUSPECT_IMPROVEMENT
        return out | {"verdict": verdict, "reason": f"{shown}: rerun this cell to confirm", col.reason_figure: shown,
                      col.reason_code: reasons.HISTORY_SUSPECT}
    why, code = ("within the run-to-run spread", reasons.HISTORY_WITHIN_SPREAD) if abs(z) < th.history_z else \
        (f"within the {th.floor_pct:g}% floor", reasons.HISTORY_WITHIN_FLOOR)
    return out | {"verdict": UNCHANGED, "reason": f"{shown}: {why}", col.reason_figure: shown, col.reason_code: code}
