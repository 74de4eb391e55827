"""Change points and drift in a series of nights: where a level changed (harness.stats.nightsplit's two-level
split test, each night with its repeats), a practical floor that merges away steps too small to matter, and a
trend with breaks (whether the level is creeping). E-divisive means with its permutation test stays here as
the reference benchmarks/changepoints.py measures against. Pure functions of floats; `harness.analysis.nights.history`
builds the series.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special as _special

from harness.stats import nightsplit
from harness.stats.core import Interval, as_array, check_open_unit

DEFAULT_MIN_SEGMENT = 2
"""Fewest nights on each side of a change: a level must hold two nights to be a level (one odd night is an
outlier, which the nightly's screen handles), so a step shows on its second night, and the A/B of its
commits confirms it or not; with 3, recall in the middle of 8 nights is a few points higher, but a step shows
a night later, and never within two nights of either end (docs/performance.md, "Change points over nights")."""
DEFAULT_ALPHA = 0.01
"""Level of each divisive step's test: the share of no-change series in which a change point is named (the
maximum over every split and segment is what is tested, so the choice of the split is paid for);
docs/performance.md measures it."""
DEFAULT_SIMULATIONS = nightsplit.DEFAULT_SIMULATIONS
"""Simulated series per test: p resolves to 1 / 2000 (the floor reported beside every p)."""
DEFAULT_PERMUTATIONS = 499
"""E-divisive's reference test: permutations per test."""
DEFAULT_DRIFT_NIGHTS = 14
"""Drift looks at the last K nights, and is not assessed on fewer."""
_CHUNK = 100
"""Permutations drawn per batch; a test stops early once its p-value is known to exceed alpha."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangePoint:
    """A step in the level of a series: the new level starts at `index`."""

    index: int
    """Position (0-based) of the first night of the new level."""
    before: float
    """Level of the segment that ends at index - 1 (back to the previous change point): its nights' mean,
    each weighted by 1 / (night-to-night variance + its repeats' variance / repeats)."""
    after: float
    """Level of the segment that starts at index (up to the next change point)."""
    change: Interval
    """after - before, with a t interval from the two-level model (nights - segments degrees of freedom)."""
    p_value: float
    """p-value of the divisive step that found the change (the maximum over every split of every segment,
    so the choice of the split is paid for)."""
    p_floor: float
    """The smallest p the test could have reported (its simulations' resolution, 1 / (B + 1))."""
    num_before: int
    """Nights in the segment before."""
    num_after: int
    """Nights in the segment after."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Trend:
    """A straight-line slope over the last nights, levels allowed to step at known change points."""

    start: int
    """Index of the window's first value."""
    slope: Interval
    """Change per step of the index (OLS, t interval on n - levels - 1 degrees of freedom)."""
    total: float
    """slope x (window length - 1): the change across the window."""
    num_levels: int
    """Levels fitted beside the slope (1 + change points inside the window)."""


def _check_settings(min_segment: int, alpha: float, num_permutations: int) -> None:
    problems = []
    if min_segment < 2:
        problems.append(f"min_segment={min_segment}: must be >= 2 (a segment's spread needs two values)")
    if not 0 < alpha < 1:
        problems.append(f"alpha={alpha}: must be strictly between 0 and 1")
    if num_permutations < 1 or (num_permutations + 1) * alpha < 1:
        problems.append(f"num_permutations={num_permutations}: at alpha={alpha} at least "
                        f"{math.ceil(1 / alpha) - 1} are needed to ever reject")
    if problems:
        raise ValueError("; ".join(problems))


def divergence_curve(values: Sequence[float], *, min_segment: int = DEFAULT_MIN_SEGMENT,
                     exponent: float = 1.0) -> np.ndarray:
    """E-divisive's statistic for every split of `values` into values[:t] | values[t:]:
    Q(t) = n1 n2 / n (2 E|X - Y|^a - E|X - X'|^a - E|Y - Y'|^a), the energy distance between the two
    sides scaled by their sizes. Entry t - min_segment is Q(t), for t in [min_segment, n - min_segment].
    Reference: Matteson & James, A Nonparametric Approach for Multiple Change Point Analysis of
    Multivariate Data, JASA 109 (2014), eq. 5 (with the end of the second segment fixed at n, as MongoDB's
    and Otava's implementations do)."""
    x = as_array(values, "values")
    if not 0 < exponent < 2:
        raise ValueError(f"exponent={exponent}: must be in (0, 2)")
    return _curves(x[None, :], min_segment, exponent)[0]


def _curves(x: np.ndarray, m: int, exponent: float) -> np.ndarray:
    """divergence_curve of every row of x (shape (rows, n)), from cumulative sums of the distance matrices."""
    n = x.shape[1]
    d = np.abs(x[:, :, None] - x[:, None, :]) ** exponent
    s = np.zeros((x.shape[0], n + 1, n + 1))
    s[:, 1:, 1:] = d.cumsum(axis=1).cumsum(axis=2)
    t = np.arange(m, n - m + 1)
    n1, n2 = t.astype(float), (n - t).astype(float)
    left = s[:, t, t]  # every ordered pair within values[:t]
    cross = s[:, t, n] - left  # pairs across the split, each once
    right = s[:, n, n][:, None] - 2 * s[:, t, n] + left
    return n1 * n2 / n * (2 * cross / (n1 * n2) - left / (n1 * (n1 - 1)) - right / (n2 * (n2 - 1)))


def _best_split(x: np.ndarray, bounds: Sequence[tuple[int, int]], m: int, exponent: float) -> tuple[float, int]:
    best, where = -math.inf, -1
    for a, b in bounds:
        if b - a >= 2 * m:
            curve = _curves(x[None, a:b], m, exponent)[0]
            k = int(np.argmax(curve))
            if curve[k] > best:
                best, where = float(curve[k]), a + m + k
    return best, where


def _permutation_p(x: np.ndarray, bounds: Sequence[tuple[int, int]], observed: float, m: int, exponent: float,
                   alpha: float, num_permutations: int, rng: np.random.Generator) -> float:
    """(1 + #{null >= observed}) / (1 + R), the null being the best split over all segments with each segment's
    values shuffled on its own (Matteson & James, sec. 3.2). Stops early once the answer exceeds alpha."""
    limit = alpha * (num_permutations + 1) - 1  # more than this many exceedances: p > alpha
    exceed, done = 0, 0
    while done < num_permutations:
        size = min(_CHUNK, num_permutations - done)
        null = np.full(size, -np.inf)
        for a, b in bounds:
            if b - a >= 2 * m:
                shuffled = rng.permuted(np.broadcast_to(x[a:b], (size, b - a)), axis=1)
                null = np.maximum(null, _curves(shuffled, m, exponent).max(axis=1))
        exceed += int(np.count_nonzero(null >= observed * (1 - 1e-12)))
        done += size
        if exceed > limit:
            break
    return (1 + exceed) / (1 + done)


def e_divisive(values: Sequence[float], *, min_segment: int = DEFAULT_MIN_SEGMENT, alpha: float = DEFAULT_ALPHA,
               num_permutations: int = DEFAULT_PERMUTATIONS, exponent: float = 1.0,
               seed: int = 0) -> list[tuple[int, float]]:
    """Hierarchical E-divisive means: split at the best split of any current segment (divergence_curve) while
    its permutation p-value is at most alpha. Returns (index, p-value) of every split, sorted by index; a
    p-value is never below what the exact test of the split segment (m values) can reach, 2 / C(m, m // 2),
    though a Monte-Carlo draw can fall there. Every segment keeps at least min_segment values. Deterministic for a given seed. Reference: Matteson &
    James (2014), sec. 3; as used for performance series by Daly et al., The Use of Change Point Detection
    to Identify Software Performance Regressions in a Continuous Integration System, ICPE 2020."""
    x = as_array(values, "values")
    _check_settings(min_segment, alpha, num_permutations)
    rng = np.random.default_rng(seed)
    found: list[tuple[int, float]] = []
    while True:
        cuts = sorted(i for i, _ in found)
        bounds = list(zip([0, *cuts], [*cuts, x.size]))
        observed, where = _best_split(x, bounds, min_segment, exponent)
        if where < 0:
            break
        p = _permutation_p(x, bounds, observed, min_segment, exponent, alpha, num_permutations, rng)
        size = next(b - a for a, b in bounds if a < where < b)
        p = max(p, 2 / math.comb(size, size // 2))  # never below what the exact test can reach (a draw can)
        if p > alpha:
            break
        found.append((where, p))
    return sorted(found)


def welch_difference(before: Sequence[float], after: Sequence[float], *, confidence: float = 0.95) -> Interval:
    """mean(after) - mean(before) with Welch's t interval (Welch-Satterthwaite degrees of freedom). Reference:
    Welch, The generalization of 'Student's' problem when several different population variances are
    involved, Biometrika 34 (1947). Fewer than two values on a side: low/high NaN; no spread: a point."""
    a, b = as_array(before, "before"), as_array(after, "after")
    check_open_unit(confidence, "confidence")
    estimate = float(b.mean() - a.mean())
    if a.size < 2 or b.size < 2:
        return Interval(estimate=estimate, low=math.nan, high=math.nan, confidence=confidence, method="welch_t")
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        return Interval(estimate=estimate, low=estimate, high=estimate, confidence=confidence, method="welch_t")
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = float(_special.stdtrit(df, (1 + confidence) / 2)) * se
    return Interval(estimate=estimate, low=estimate - half, high=estimate + half, confidence=confidence,
                    method="welch_t")


TESTS = ("two-level", "permutation")
"""The significance tests change_points knows: nightsplit's two-level split test (the default), and
E-divisive's permutation test of the nights' means (the reference it replaced)."""


def permutation_floor(num_nights: int, *, min_segment: int = DEFAULT_MIN_SEGMENT,
                      num_permutations: int = DEFAULT_PERMUTATIONS) -> float:
    """The smallest p E-divisive's permutation test can report on a series of `num_nights`: the cleanest split
    of k | n - k nights is matched by every arrangement with the same nights on each side, and its mirror,
    so p >= 2 / C(n, k) (k the most balanced split allowed), and never below 1 / (permutations + 1)."""
    if num_nights < 2 * min_segment:
        return 1.0
    return max(2 / math.comb(num_nights, num_nights // 2), 1 / (num_permutations + 1))


def _nights(values: Sequence[float | Sequence[float]]) -> nightsplit.Nights:
    try:
        return nightsplit.nights_of(values)
    except ValueError as exc:
        raise ValueError(str(exc).replace("nights", "values", 1)) from None


def _check_magnitude(min_magnitude: float, confidence: float) -> None:
    check_open_unit(confidence, "confidence")
    if not (math.isfinite(min_magnitude) and min_magnitude >= 0):
        raise ValueError(f"min_magnitude={min_magnitude}: must be a finite number >= 0")


def _significant(nights: nightsplit.Nights, test: str, min_segment: int, alpha: float, num_simulations: int | None,
                 num_permutations: int, seed: int) -> tuple[dict[int, float], float]:
    """{index: p} of every divisive step `test` accepts at alpha, and the test's p floor."""
    if test == "permutation":
        found = e_divisive(nights.means, min_segment=min_segment, alpha=alpha, num_permutations=num_permutations,
                           seed=seed)
        floor = permutation_floor(nights.means.size, min_segment=min_segment, num_permutations=num_permutations)
        return dict(found), floor
    if test != "two-level":
        raise ValueError(f"test={test!r}: must be one of {', '.join(TESTS)}")
    if min_segment < 2:
        raise ValueError(f"min_segment={min_segment}: must be >= 2 (a segment's spread needs two nights)")
    check_open_unit(alpha, "alpha")
    sims = num_simulations or nightsplit.simulations_for(alpha)
    found = nightsplit.split_test(nights, min_segment=min_segment, alpha=alpha, num_simulations=sims, seed=seed)
    return dict(found), 1 / (sims + 1)


def change_points(values: Sequence[float | Sequence[float]], *, min_segment: int = DEFAULT_MIN_SEGMENT,
                  min_magnitude: float = 0.0, alpha: float = DEFAULT_ALPHA, num_simulations: int | None = None,
                  num_permutations: int = DEFAULT_PERMUTATIONS, test: str = "two-level", confidence: float = 0.95,
                  seed: int = 0) -> tuple[ChangePoint, ...]:
    """Steps in the level of a series of nights (each item one night: its repeats, or one value) that are
    significant (`test` at alpha) and at least `min_magnitude` (in the values' unit: on log values, a
    relative change) between the two segments they separate. The floor is applied as Otava's merge step
    applies its: the smallest step below it is removed, its neighbours' segments merge and their steps are
    measured again, until every step clears it. Reference: Fleming et al., Hunter: Using Change Point
    Detection to Hunt for Performance Regressions, ICPE 2023, sec. 4.2. Levels and changes come from the
    two-level model fitted to the final segments (nightsplit.fit_levels), at `confidence`.
    num_simulations: the two-level test's (default: nightsplit.simulations_for(alpha))."""
    nights = _nights(values)
    _check_magnitude(min_magnitude, confidence)
    found, floor = _significant(nights, test, min_segment, alpha, num_simulations, num_permutations, seed)
    cuts = sorted(found)
    while cuts:
        steps = nightsplit.fit_levels(nights, cuts, confidence=confidence).steps
        weakest = min(range(len(cuts)), key=lambda k: abs(steps[k].estimate))
        if abs(steps[weakest].estimate) >= min_magnitude:
            break
        del cuts[weakest]
    fit = nightsplit.fit_levels(nights, cuts, confidence=confidence)
    edges = [0, *cuts, nights.means.size]
    return tuple(ChangePoint(index=cut, before=fit.levels[k], after=fit.levels[k + 1], change=fit.steps[k],
                             p_value=found[cut], p_floor=floor, num_before=cut - edges[k],
                             num_after=edges[k + 2] - cut) for k, cut in enumerate(cuts))


def trend(values: Sequence[float], *, breaks: Sequence[int] = (), confidence: float = 0.95) -> Trend | None:
    """Least-squares slope of `values` against their index, with one level per segment between `breaks`
    (indices where a new level starts) so that a step is not mistaken for a slope; Student t interval of
    the slope on n - levels - 1 degrees of freedom. None when fewer than 2 degrees of freedom are left.
    Reference: Draper & Smith, Applied Regression Analysis, 3rd ed., 1998, ch. 14 (dummy variables)."""
    y = as_array(values, "values")
    check_open_unit(confidence, "confidence")
    cuts = sorted({int(b) for b in breaks if 0 < b < y.size})
    levels = len(cuts) + 1
    df = y.size - levels - 1
    if df < 2:
        return None
    t = np.arange(y.size, dtype=float)
    level = np.searchsorted(np.asarray(cuts), np.arange(y.size), side="right")
    design = np.column_stack([(level == k).astype(float) for k in range(levels)] + [t])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coef
    sigma2 = float(residual @ residual) / df
    cov = sigma2 * np.linalg.inv(design.T @ design)
    slope, se = float(coef[-1]), math.sqrt(max(float(cov[-1, -1]), 0.0))
    half = float(_special.stdtrit(df, (1 + confidence) / 2)) * se
    return Trend(start=0, slope=Interval(estimate=slope, low=slope - half, high=slope + half, confidence=confidence,
                                         method="ols_t"), total=slope * (y.size - 1), num_levels=levels)


def drift(values: Sequence[float], *, last: int = DEFAULT_DRIFT_NIGHTS, breaks: Sequence[int] = (),
          min_total: float = 0.0, confidence: float = 0.95) -> Trend | None:
    """The trend over the last `last` values (breaks inside that window keep their own levels), returned
    only when it is a drift: its interval excludes 0 and |total| >= min_total (the practical floor). None
    too when there are fewer than `last` values: a slope over a shorter window than asked reads each
    segment's own rise as a trend (`drift_assessed` says which)."""
    y = as_array(values, "values")
    if last < 4:
        raise ValueError(f"last={last}: a drift needs at least 4 values")
    if not drift_assessed(y.size, last):
        return None
    start = y.size - last
    fitted = trend(y[start:], breaks=[b - start for b in breaks if b > start], confidence=confidence)
    if fitted is None:
        return None
    excludes_zero = fitted.slope.low > 0 or fitted.slope.high < 0
    if not (excludes_zero and abs(fitted.total) >= min_total):
        return None
    return Trend(start=start, slope=fitted.slope, total=fitted.total, num_levels=fitted.num_levels)


def drift_assessed(num_values: int, last: int = DEFAULT_DRIFT_NIGHTS) -> bool:
    """Whether a series this long has the window a drift is fitted over."""
    return num_values >= last
