"""Welch's t test of two means with its interval: the difference's p-value for many small items at once
(a profiled repeat's operators and kernels), where a permutation test of five repeats a side cannot reach a
corrected level."""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import special

from harness.stats.core import Interval, as_array, check_open_unit


def welch_test(baseline: Sequence[float], candidate: Sequence[float], *,
               confidence: float = 0.95) -> tuple[Interval, float]:
    """(mean(candidate) - mean(baseline) with Welch's t interval, its two-sided p-value). Reference: Welch,
    Biometrika 34 (1947); Satterthwaite's degrees of freedom. Fewer than two values on a side: NaN interval,
    p 1. No spread on either side: a point, p 0 where the means differ and 1 where they do not."""
    a, b = as_array(baseline, "baseline"), as_array(candidate, "candidate")
    check_open_unit(confidence, "confidence")
    estimate = float(b.mean() - a.mean()) if a.size and b.size else math.nan
    if a.size < 2 or b.size < 2:
        return Interval(estimate=estimate, low=math.nan, high=math.nan, confidence=confidence, method="welch_t"), 1.0
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        point = Interval(estimate=estimate, low=estimate, high=estimate, confidence=confidence, method="welch_t")
        return point, 0.0 if estimate != 0 else 1.0
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = float(special.stdtrit(df, (1 + confidence) / 2)) * se
    p = float(2 * special.stdtr(df, -abs(estimate) / se))
    return Interval(estimate=estimate, low=estimate - half, high=estimate + half, confidence=confidence,
                    method="welch_t"), min(1.0, p)


def repeats_for(sd: float, effect: float, *, alpha: float, power: float = 0.8) -> int:
    """About how many repeats a side a two-sample test at `alpha` needs to see `effect` with `power`, for a
    within-side standard deviation `sd` (normal approximation): 2 (z_(1-a/2) + z_power)^2 sd^2 / effect^2."""
    if sd <= 0 or effect <= 0:
        return 2
    z = float(special.ndtri(1 - alpha / 2)) + float(special.ndtri(power))
    return max(2, math.ceil(2 * (z * sd / effect) ** 2))
