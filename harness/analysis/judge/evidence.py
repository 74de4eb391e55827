"""The statistical evidence of each tested cell: permutation p-values, Benjamini-Hochberg across the cells and
Holm within one, each metric's interval (bootstrap, or ancova on the speed probe), handed to decide for the word."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from harness.analysis.judge import decide
from harness.analysis.judge.repeats import cv_of
from harness.analysis.judge.verdict import INCONCLUSIVE, THROUGHPUT, UNCHANGED, Thresholds
from harness.catalogue.judged import Judged
from harness.stats import inference
from harness.stats.core import Interval
from harness.catalogue import col, reasons


@dataclass(slots=True)
class MetricSamples:
    """One judged metric of a testable cell: its per-repeat values on both sides and its own p-value."""

    judged: Judged
    cand: np.ndarray
    baseline: np.ndarray
    p: float = 1.0

    @property
    def name(self) -> str:
        return self.judged.name


@dataclass(slots=True)
class PendingCell:
    """A cell that reached the tests: its samples and the verdict fields known so far."""

    base: dict[str, Any]
    metrics: list[MetricSamples]
    """The headline first, then every other judged metric both sides have, in the catalogue's order."""
    p: float = 1.0
    """The cell's p-value: the smallest metric p-value times the number of metrics (Bonferroni)."""
    note: str = ""
    """Appended to the verdict's reason."""
    cand_probe: np.ndarray | None = None
    """Machine-speed probe seconds of each candidate repeat, when the comparison adjusts for it."""
    base_probe: np.ndarray | None = None

    @property
    def adjusted(self) -> bool:
        return self.cand_probe is not None and self.base_probe is not None


def _log_sd(*sides: np.ndarray) -> float | None:
    """Pooled within-side standard deviation of log values (None without a side of two)."""
    logs = [np.log(x) for x in sides if x.size >= 2]
    dof = sum(x.size - 1 for x in logs)
    return float(math.sqrt(sum(((x - x.mean()) ** 2).sum() for x in logs) / dof)) if dof else None


def untestable(cand_x: np.ndarray, base_x: np.ndarray, th: Thresholds) -> dict[str, Any]:
    """The verdict of a cell with too few usable repeats to be tested (fewer than min_repeats, or fewer than
    a permutation test needs to reach the level): `inconclusive`, with its change where one can be computed
    and the repeats that would likely decide it."""
    n_c, n_b = cand_x.size, base_x.size
    if n_c == 0 or n_b == 0:
        n = max(th.min_repeats, decide.repeats_to_reach(th.level))
        return {"verdict": INCONCLUSIVE, col.decided_by: THROUGHPUT, col.repeats_needed: n,
                "reason": f"{n_c} candidate and {n_b} baseline repeats usable; {decide.needed_text(n)}",
                col.reason_code: reasons.NO_USABLE_REPEATS}
    if n_c >= 2 and n_b >= 2:
        ci = inference.bootstrap_log_ratio(cand_x, base_x, confidence=1 - th.level, num_resamples=th.num_resamples,
                                           seed=th.seed)
        low, high = inference.to_percent(ci.low), inference.to_percent(ci.high)
    else:
        ci, low, high = None, math.nan, math.nan
    effect = inference.to_percent(math.log(cand_x.mean() / base_x.mean()))
    evidence = decide.Evidence(name=THROUGHPUT, effect_pct=effect, ci_low_pct=low, ci_high_pct=high,
                               significant=False, log_sd=_log_sd(cand_x, base_x))
    d = decide.decide([evidence], floor_pct=th.floor_pct, alpha=th.level, n_candidate=n_c, n_baseline=n_b,
                      min_repeats=th.min_repeats)
    change = f"{effect:+.1f}%" + (f" [{low:+.1f}, {high:+.1f}] (bootstrap, untested)" if ci else "")
    dropped = " (unsteady repeats left out)" if th.exclude_unsteady else ""
    return {"verdict": d.verdict, col.decided_by: d.decided_by, col.repeats_needed: d.repeats_needed,
            "throughput": {col.effect_pct: effect, col.ci_low_pct: low if ci else None, col.ci_high_pct: high if ci else None},
            "reason": f"{change}{dropped}: {d.reason}", col.reason_code: d.code, col.reason_figure: f"{change}{dropped}"}


def permutations_for(th: Thresholds, num_tests: int, num_metrics: int) -> int:
    """Random splits per Monte-Carlo permutation test: Thresholds.num_resamples, or more where a matrix is wide
    enough that their resolution would decide the answer. A Monte-Carlo p is at least 1 / (B + 1); the cell's is
    that times its metrics (Bonferroni), and Benjamini-Hochberg's first step over m cells asks for q / m. With
    B + 1 >= 10 m k / q the smallest p a cell can reach is a tenth of that, so no real change is held
    inconclusive by the test's grain (36 cells at q = 0.01 with 10,000 splits could never reject at all)."""
    return max(th.num_resamples, math.ceil(10 * num_tests * num_metrics / th.level))


def _p_value(p: PendingCell, m: MetricSamples, th: Thresholds, num_permutations: int) -> float:
    if p.adjusted and m.judged.speed_adjusted:
        return inference.ancova_permutation_p(m.cand, m.baseline, p.cand_probe, p.base_probe,
                                              num_permutations=num_permutations, seed=th.seed)
    return inference.permutation_p_value(m.cand, m.baseline, num_permutations=num_permutations, seed=th.seed)


def _interval(pending: PendingCell, m: MetricSamples, level: float,
              th: Thresholds) -> tuple[Interval, dict[str, Any], str]:
    """The metric's change with its interval, the speed-adjustment fields (with the metric's minimum
    detectable change at its share of the level), and the method in words."""
    n_c, n_b, alpha = m.cand.size, m.baseline.size, th.level / len(pending.metrics)
    if not (pending.adjusted and m.judged.speed_adjusted):
        ci = inference.bootstrap_log_ratio(m.cand, m.baseline, confidence=level, num_resamples=th.num_resamples,
                                       seed=th.seed)
        cv = cv_of(m.baseline)
        mdc = 100 * inference.min_detectable_change(cv, n_c, n_b, alpha=alpha) if cv else None
        return ci, {col.mdc_pct: mdc, "log_sd": _log_sd(m.cand, m.baseline)}, \
            f"permutation + benjamini_hochberg; {ci.method} interval"
    fit = inference.ancova_fit(m.cand, m.baseline, pending.cand_probe, pending.base_probe)
    extra = {col.unadjusted_effect_pct: inference.to_percent(fit.unadjusted),
             col.speed_probe_change_pct: inference.to_percent(fit.covariate_shift), col.speed_slope: fit.slope,
             "log_sd": fit.residual_sd if math.isfinite(fit.residual_sd) else None,
             # what the adjusted comparison could see: its residual noise in place of the raw spread
             col.mdc_pct: 100 * inference.min_detectable_change(fit.residual_sd, n_c, n_b, alpha=alpha)
             if math.isfinite(fit.residual_sd) and fit.residual_sd > 0 else None}
    return fit.interval(level), extra, "speed-adjusted (ancova on the probe) freedman_lane permutation + " \
        "benjamini_hochberg; ancova_t interval"


def holm_within(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Which metrics of one cell are significant when the cell is tested at `alpha` (Holm's step-down,
    i.e. closed testing over Bonferroni: the smallest p-value needs k p <= alpha, the next (k - 1) p <=
    alpha, and so on while they pass). With one metric: p <= alpha."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    out = [False] * len(p_values)
    for rank, i in enumerate(order):
        if (len(p_values) - rank) * p_values[i] > alpha * (1 + 1e-12):
            break
        out[i] = True
    return out


def _decide(pending: PendingCell, alpha: float, p_adjusted: float, level: float, th: Thresholds,
            num_tested: int) -> dict[str, Any]:
    """The evidence of a tested cell, and decide's verdict on it. `alpha`: the level Benjamini-Hochberg
    tested the cell at (R q / m with R cells rejected; 0 when none was). Which metrics are significant
    follows Holm within the cell (holm_within); each metric's interval is at the FCR level split between the
    metrics. Where the comparison is adjusted for the machine-speed probe, the probe's balance between the
    sides goes to decide too, with the unadjusted change it falls back on (tested at the level split over
    the `num_tested` cells: Bonferroni, since the fallback is not part of the cells' BH)."""
    th = th.for_cell(pending.base)  # the cell's own floor ([judge] overrides)
    k = len(pending.metrics)
    level_m = 1 - (1 - level) / k
    out: dict[str, Any] = {col.p_value: pending.p, col.p_adjusted: p_adjusted, col.ci_level: level_m}
    evidence, texts, reach = [], [], []
    for m, significant in zip(pending.metrics, holm_within([m.p for m in pending.metrics], alpha)):
        ci, extra, method = _interval(pending, m, level_m, th)
        mdc = extra.pop(col.mdc_pct, None)
        if mdc is not None:
            reach.append(mdc)
        effect, low, high = (inference.to_percent(x) for x in (ci.estimate, ci.low, ci.high))
        metric = {col.effect_pct: effect, col.ci_low_pct: low, col.ci_high_pct: high, col.p_value: m.p}
        text = f"{effect:+.1f}% [{low:+.1f}, {high:+.1f}]"
        if m.name == THROUGHPUT:  # the headline carries the method and the speed adjustment
            out |= {"method": method + (f"; Bonferroni over {k} metrics" if k > 1 else "")
                    + (f"; level split over {th.looks} looks" if th.looks > 1 else "")}
            if pending.adjusted:
                metric |= {col.unadjusted_effect_pct: extra[col.unadjusted_effect_pct], col.speed_slope: extra[col.speed_slope]}
                out[col.speed_probe_change_pct] = extra[col.speed_probe_change_pct]
                text += (f" adjusted for machine speed (probe {extra[col.speed_probe_change_pct]:+.1f}%, "
                         f"unadjusted {extra[col.unadjusted_effect_pct]:+.1f}%)")
        e = decide.Evidence(name=m.name, effect_pct=effect, ci_low_pct=low, ci_high_pct=high, significant=significant,
                            log_sd=extra.get("log_sd"), higher_is_better=m.judged.higher_is_better,
                            worse=m.judged.worse, better=m.judged.better)
        out[m.name] = metric | {"verdict": e.call(th.floor_pct)}
        texts.append(f"{m.name} {text}" if k > 1 else text)
        evidence.append(e)
    if reach:  # either metric can call a change: the comparison reaches as far as the better one
        out[col.mdc_pct] = min(reach)
    probe = _probe_balance(pending, level_m, th, num_tested) if pending.adjusted else None
    if probe is not None and not probe.balanced:  # the adjustment extrapolates: show what was judged instead
        net = probe.net
        out["throughput"] |= {col.effect_pct: net.effect_pct, col.ci_low_pct: net.ci_low_pct, col.ci_high_pct: net.ci_high_pct}
        out["method"] += "; probe unbalanced: judged net of the probe's shift (slope -1)"
        texts[0] = (f"{THROUGHPUT + ' ' if k > 1 else ''}{net.text()} net of the machine's speed (probe "
                    f"{probe.shift_pct:+.1f}%, unadjusted {out['throughput'][col.unadjusted_effect_pct]:+.1f}%)")
    d = decide.decide(evidence, floor_pct=th.floor_pct, alpha=th.level, n_candidate=pending.metrics[0].cand.size,
                      n_baseline=pending.metrics[0].baseline.size, min_repeats=th.min_repeats, probe=probe)
    change = "; ".join(texts) + f" at {level_m:.1%}"
    reason = f"{change}: {d.reason}{pending.note}"
    if d.verdict == UNCHANGED or d.verdict == INCONCLUSIVE and not probe:
        reason += _reach_note(out.get(col.mdc_pct, pending.base.get(col.mdc_pct)), evidence, th)
    return out | {"verdict": d.verdict, col.decided_by: d.decided_by, col.repeats_needed: d.repeats_needed,
                  "reason": reason, col.reason_code: d.code, col.reason_figure: change}


def _reach_note(mdc: float | None, evidence: Sequence[decide.Evidence], th: Thresholds) -> str:
    effects = [abs(e.effect_pct) for e in evidence]
    if mdc is not None and mdc > max(th.floor_pct, *effects):
        return f" (at this noise only changes beyond ~{mdc:.0f}% are reliably seen)"
    return ""


def _probe_balance(pending: PendingCell, level: float, th: Thresholds, num_tested: int) -> decide.ProbeBalance:
    """The probe's balance between the sides, with (when unbalanced) the unadjusted throughput change net of
    what the probe's shift can explain."""
    shift, shift_ci, p, balanced = decide.probe_balance(pending.cand_probe, pending.base_probe,
                                                        floor_pct=th.floor_pct, alpha=th.level, confidence=level)
    if balanced:
        return decide.ProbeBalance(shift_pct=shift, p_value=p, balanced=True)
    m = pending.metrics[0]
    ci = inference.bootstrap_log_ratio(m.cand, m.baseline, confidence=level, num_resamples=th.num_resamples,
                                       seed=th.seed)
    p_plain = inference.permutation_p_value(m.cand, m.baseline, num_permutations=th.num_resamples, seed=th.seed)
    plain = decide.Evidence(name=m.name, effect_pct=inference.to_percent(ci.estimate),
                            ci_low_pct=inference.to_percent(ci.low), ci_high_pct=inference.to_percent(ci.high),
                            significant=p_plain <= th.level / num_tested, log_sd=_log_sd(m.cand, m.baseline))
    return decide.ProbeBalance(shift_pct=shift, p_value=p, balanced=False,
                               net=decide.net_of_probe(plain, shift, shift_ci))


def tested_verdicts(testable: Sequence[PendingCell], th: Thresholds) -> dict[int, dict[str, Any]]:
    """The verdict fields of every testable cell, by id(): each metric's permutation p-value, the cell's
    (Bonferroni over its metrics), Benjamini-Hochberg across the cells, then _decide on each."""
    for p in testable:
        splits = permutations_for(th, len(testable), len(p.metrics))
        for m in p.metrics:
            m.p = _p_value(p, m, th, splits)
        p.p = min(1.0, len(p.metrics) * min(m.p for m in p.metrics))
    decided: dict[int, dict[str, Any]] = {}
    if testable:
        adjusted, rejected = inference.benjamini_hochberg([p.p for p in testable], q=th.level)
        level = inference.fcr_adjusted_confidence(int(rejected.sum()), len(testable), q=th.level)
        alpha = int(rejected.sum()) * th.level / len(testable)  # the BH threshold the rejected cells passed
        for p, adj, rej in zip(testable, adjusted, rejected):
            decided[id(p)] = _decide(p, alpha if rej else 0.0, float(adj), level, th, len(testable))
    return decided
