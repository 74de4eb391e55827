"""Statistics that compare runs: effect sizes with intervals, tests, multiplicity across cells, history
screening and comparisons adjusted for the machine-speed probe. What the analysis computes."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special as _special

from harness.stats.core import MAD_TO_SIGMA, Interval, as_array, check_open_unit, check_same_length

# ---------------------------------------------------------------------------------------------
# comparing runs


def to_percent(log_ratio: float) -> float:
    """Relative change in percent from a natural-log ratio: 100 (exp(x) - 1)."""
    return 100.0 * math.expm1(log_ratio)


def mean_interval(values: Sequence[float], *, confidence: float = 0.95) -> Interval:
    """Mean of independent repeats with the Student t interval mean +/- t_{n-1} s / sqrt(n) (s: the sample
    standard deviation). Reference: Casella & Berger, Statistical Inference, 2nd ed., 2002, sec. 9.2.2
    (example 9.2.5: the t interval). Fewer than two values: low/high NaN."""
    x = as_array(values, "values")
    check_open_unit(confidence, "confidence")
    mean = float(x.mean())
    if x.size < 2:
        return Interval(estimate=mean, low=math.nan, high=math.nan, confidence=confidence, method="t")
    half = float(_special.stdtrit(x.size - 1, (1 + confidence) / 2)) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Interval(estimate=mean, low=mean - half, high=mean + half, confidence=confidence, method="t")


def bootstrap_log_ratio(
    candidate: Sequence[float],
    baseline: Sequence[float],
    *,
    confidence: float = 0.95,
    num_resamples: int = 10_000,
    seed: int = 0,
) -> Interval:
    """Effect size log(mean(candidate) / mean(baseline)) with a percentile bootstrap interval.

    Inputs are per-repeat values (e.g. throughput of each repeat), > 0. The effect uses arithmetic
    means, so :func:`to_percent` of it is the relative change in mean throughput. Method: stratified
    nonparametric bootstrap; each resample draws len(candidate) values with replacement from
    candidate and, independently, len(baseline) from baseline; the interval is the
    (1-c)/2 and (1+c)/2 percentiles of the resampled log ratios (percentile method, not BCa).
    Deterministic for a given seed (numpy PCG64). Caveat: with few repeats per side (< ~10) the
    percentile interval is somewhat too narrow. Reference: Efron & Tibshirani, An Introduction to
    the Bootstrap, 1993, ch. 13 (percentile interval) and sec. 8.3 (two-sample bootstrap).
    With fewer than two values on either side low/high are NaN.
    """
    cand = as_array(candidate, "candidate", positive=True)
    base = as_array(baseline, "baseline", positive=True)
    check_open_unit(confidence, "confidence")
    if num_resamples < 1:
        raise ValueError(f"num_resamples={num_resamples}: must be >= 1")
    estimate = float(math.log(cand.mean() / base.mean()))
    method = "bootstrap_percentile"
    if cand.size < 2 or base.size < 2:
        return Interval(
            estimate=estimate, low=math.nan, high=math.nan, confidence=confidence, method=method
        )
    cand_idx, base_idx = _resample_indices(seed, cand.size, base.size, num_resamples)
    cand_means = cand[cand_idx].mean(axis=1)
    base_means = base[base_idx].mean(axis=1)
    tails = [(1 - confidence) / 2, (1 + confidence) / 2]
    low, high = np.quantile(np.log(cand_means / base_means), tails)
    return Interval(
        estimate=estimate, low=float(low), high=float(high), confidence=confidence, method=method
    )


_DRAWS: dict[tuple[int, int, int, int], tuple[np.ndarray, np.ndarray]] = {}
"""The bootstrap's draws by (seed, sizes, resamples); a few kept (a report has one or two sizes of cell)."""


def _resample_indices(seed: int, n_cand: int, n_base: int, num_resamples: int) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap's draws, the same for every cell of one size and seed: drawn once per report, not per cell."""
    key = (seed, n_cand, n_base, num_resamples)
    if key not in _DRAWS:
        if len(_DRAWS) >= 8:
            _DRAWS.clear()
        rng = np.random.default_rng(seed)
        cand = rng.integers(0, n_cand, (num_resamples, n_cand))
        base = rng.integers(0, n_base, (num_resamples, n_base))
        cand.flags.writeable = base.flags.writeable = False
        _DRAWS[key] = (cand, base)
    return _DRAWS[key]


def benjamini_hochberg(
    p_values: Sequence[float], *, q: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    """Benjamini-Hochberg step-up procedure controlling the false discovery rate at q.

    Method: sort p ascending, p_(1) <= ... <= p_(m); adjusted p_(i) = min_{j>=i} min(1, m p_(j) / j)
    (monotone in p); reject H_(i) when its adjusted p <= q, equivalently all i <= the largest i with
    p_(i) <= i q / m. Returns (adjusted p, rejected) in the input order. Reference: Benjamini &
    Hochberg, "Controlling the false discovery rate", JRSS B 57(1), 1995, 289-300 (their example
    with 15 p-values rejects 4 at q = 0.05).
    """
    p = as_array(p_values, "p_values")
    if np.any((p < 0) | (p > 1)):
        i = int(np.flatnonzero((p < 0) | (p > 1))[0])
        raise ValueError(f"p_values[{i}] = {p[i]}; p-values must lie in [0, 1]")
    check_open_unit(q, "q")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    adjusted_sorted = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    return adjusted, adjusted <= q


def median_mad(values: Sequence[float]) -> tuple[float, float]:
    """Median and the scaled median absolute deviation, 1.4826 * median(|x - median(x)|).

    Method: the factor 1.4826 = 1 / Phi^-1(3/4) makes the MAD a consistent estimator of the
    standard deviation for normal data. References: Hampel, JASA 69, 1974; Rousseeuw & Croux,
    "Alternatives to the median absolute deviation", JASA 88, 1993.
    """
    x = as_array(values, "values")
    med = float(np.median(x))
    return med, float(MAD_TO_SIGMA * np.median(np.abs(x - med)))


def robust_z(x: float, values: Sequence[float]) -> float:
    """Robust z-score of x against values: (x - median) / (1.4826 MAD).

    Method: median/MAD in place of mean/standard deviation so that outliers in ``values`` do not
    mask x (Iglewicz & Hoaglin, How to Detect and Handle Outliers, 1993, "modified z-score"). When
    the MAD is 0 (more than half the values equal), returns 0.0 if x equals the median and
    +/-inf otherwise.
    """
    if not math.isfinite(x):
        raise ValueError(f"x is {x}; must be finite")
    med, mad = median_mad(values)
    if mad == 0:
        return 0.0 if x == med else math.copysign(math.inf, x - med)
    return (x - med) / mad


def min_detectable_change(
    baseline_cv: float, n_a: int, n_b: int, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """Smallest relative change in the mean a two-sided two-sample t test detects with given power.

    Method (normal-theory approximation with t quantiles, equal variances):
    delta / mu = (t_{1-alpha/2, nu} + t_{power, nu}) * cv * sqrt(1/n_a + 1/n_b), nu = n_a + n_b - 2.
    Returned as a fraction (0.05 = 5 %). With z quantiles and n_a = n_b = n this is Lehr's
    n = 16 / (delta/sigma)^2 at alpha 0.05, power 0.8. References: Snedecor & Cochran, Statistical
    Methods, 8th ed., 1989, sec. 6.14; van Belle, Statistical Rules of Thumb, 2nd ed., 2008, sec. 2.3.
    """
    if not (math.isfinite(baseline_cv) and baseline_cv > 0):
        raise ValueError(f"baseline_cv={baseline_cv}: must be finite and > 0")
    if n_a < 2 or n_b < 2:
        raise ValueError(f"n_a={n_a}, n_b={n_b}: need at least 2 repeats per side")
    check_open_unit(alpha, "alpha")
    check_open_unit(power, "power")
    nu = n_a + n_b - 2
    factor = _special.stdtrit(nu, 1 - alpha / 2) + _special.stdtrit(nu, power)
    return float(factor * baseline_cv * math.sqrt(1 / n_a + 1 / n_b))


# ---------------------------------------------------------------------------------------------
# verdicts across many cells (used by harness.analysis.judge.compare)


def fcr_adjusted_confidence(num_selected: int, num_tests: int, *, q: float = 0.05) -> float:
    """Confidence level of the false-coverage-rate adjusted intervals after Benjamini-Hochberg selection.

    Method: when R of m parameters are selected by BH at level q, intervals at level 1 - R q / m for the
    selected ones keep the false coverage-statement rate <= q; R = 0 is treated as 1, so an unselected
    parameter's interval (its p > q/m) still covers 0 and agrees with not being selected. With m = 1 this
    is the plain 1 - q. Reference: Benjamini & Yekutieli, "False discovery rate-adjusted multiple
    confidence intervals for selected parameters", JASA 100(469), 2005, 71-81 (Definition 1).
    """
    if num_tests < 1:
        raise ValueError(f"num_tests={num_tests}: must be >= 1")
    if not 0 <= num_selected <= num_tests:
        raise ValueError(f"num_selected={num_selected}: must lie in [0, num_tests={num_tests}]")
    check_open_unit(q, "q")
    return 1.0 - max(num_selected, 1) * q / num_tests


def two_proportion_interval(
    p1: float, n1: float, p2: float, n2: float, *, confidence: float = 0.95
) -> Interval:
    """Wald interval for the difference of two proportions, p1 - p2.

    Method: (p1 - p2) +/- z_{(1+c)/2} sqrt(p1 (1 - p1) / n1 + p2 (1 - p2) / n2), unpooled standard
    error. Used for top-1 accuracy (a proportion of n validation images). Reference: Agresti,
    Categorical Data Analysis, 2nd ed., 2002, sec. 3.1 (Physicians' Health Study: placebo 189 of 11034
    and aspirin 104 of 11037 heart attacks give 0.0077 with 95 % interval (0.005, 0.011)).
    """
    for value, name in ((p1, "p1"), (p2, "p2")):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}={value}: a proportion must lie in [0, 1]")
    for value, name in ((n1, "n1"), (n2, "n2")):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name}={value}: must be finite and > 0")
    check_open_unit(confidence, "confidence")
    se = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    half = _special.ndtri((1 + confidence) / 2) * se
    diff = p1 - p2
    return Interval(
        estimate=diff, low=diff - half, high=diff + half, confidence=confidence, method="wald"
    )


def permutation_p_value(
    candidate: Sequence[float],
    baseline: Sequence[float],
    *,
    max_exact: int | None = None,
    num_permutations: int = 10_000,
    seed: int = 0,
) -> float:
    """Two-sided permutation test of "no change" for T = log(mean(candidate) / mean(baseline)).
    ``max_exact`` None: every split is counted wherever that is cheap (_countable); a number: only up to
    that many splits.

    Method: under H0 (both samples from one distribution) every split of the pooled values into groups
    of the original sizes is equally likely; p = #{splits with |T*| >= |T|} / #splits. All C(n, k)
    splits are enumerated when there are at most ``max_exact`` of them (an exact test: its false-alarm
    rate is at most the level for any distribution and any sample size); otherwise ``num_permutations``
    random splits give p = (1 + #{|T*| >= |T|}) / (B + 1). The smallest attainable p is 2 / C(n, k)
    for equal group sizes (0.1 with 3 + 3 values, 0.0079 with 5 + 5): small samples cannot be
    significant at all, which is the honest answer. A 1e-12 relative tolerance counts floating-point
    ties as ties. References: Fisher, The Design of Experiments, 1935, sec. 21; Efron & Tibshirani,
    An Introduction to the Bootstrap, 1993, ch. 15 (two-sample permutation test, ASL); Phipson & Smyth,
    "Permutation p-values should never be zero", Stat. Appl. Genet. Mol. Biol. 9(1), 2010.
    """
    cand = as_array(candidate, "candidate", positive=True)
    base = as_array(baseline, "baseline", positive=True)
    if num_permutations < 1:
        raise ValueError(f"num_permutations={num_permutations}: must be >= 1")
    pooled = np.concatenate([cand, base])
    n, k = pooled.size, cand.size
    observed = abs(math.log(cand.mean() / base.mean()))
    if _countable(n, k) and (max_exact is None or math.comb(n, k) <= max_exact):
        if n > 2 * _HALF_MAX or math.comb(n, k) <= _ENUMERATE:
            pass  # a few splits: enumerate them as they are
        else:
            return float(_count_by_halves(pooled, k, observed) / math.comb(n, k))
        idx = np.array(list(itertools.combinations(range(n), k)), dtype=np.intp)
        in_cand = np.zeros((idx.shape[0], n), dtype=bool)
        np.put_along_axis(in_cand, idx, True, axis=1)
        extreme = _count_extreme(pooled, in_cand, observed)
        return float(extreme / idx.shape[0])
    rng = np.random.default_rng(seed)
    extreme = 0
    for size in _chunks(num_permutations):
        order = rng.permuted(np.tile(np.arange(n), (size, 1)), axis=1)
        in_cand = np.zeros((size, n), dtype=bool)
        np.put_along_axis(in_cand, order[:, :k], True, axis=1)
        extreme += _count_extreme(pooled, in_cand, observed)
    return float((1 + extreme) / (num_permutations + 1))


_ENUMERATE = 20_000
"""Splits enumerated one by one at most (the exact test as first written)."""
_HALF_MAX = 20
"""Values in each half when splits are counted by halves (2^20 subset sums a half)."""


def _countable(n: int, k: int) -> bool:
    return math.comb(n, k) <= _ENUMERATE or n <= 2 * _HALF_MAX


def _subset_sums(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sum and the size of every subset of x (2^len(x) of them)."""
    bits = (np.arange(2 ** x.size)[:, None] >> np.arange(x.size)) & 1
    return bits @ x, bits.sum(axis=1)


def _count_by_halves(pooled: np.ndarray, k: int, observed: float) -> int:
    """#{k-subsets of pooled whose |T*| >= observed}, without listing them: T* grows with the subset's sum S
    (T* = log((S / k) / ((total - S) / (n - k)))), so |T*| >= t is S >= hi or S <= lo; every k-subset is a
    j-subset of the first half plus a (k - j)-subset of the second, and each half's sums are sorted and
    searched (meet in the middle). The same 1e-12 tolerance on T as the enumeration."""
    n, total = pooled.size, float(pooled.sum())
    t = observed * (1 - 1e-12)
    if t <= 0:
        return math.comb(n, k)
    hi = k * math.exp(t) * total / (n - k + k * math.exp(t))
    lo = k * math.exp(-t) * total / (n - k + k * math.exp(-t))
    half = n // 2
    sums_a, size_a = _subset_sums(pooled[:half])
    sums_b, size_b = _subset_sums(pooled[half:])
    count = 0
    for j in range(max(0, k - (n - half)), min(k, half) + 1):
        sa, sb = sums_a[size_a == j], np.sort(sums_b[size_b == k - j])
        count += int(np.sum(sb.size - np.searchsorted(sb, hi - sa, side="left")))
        count += int(np.sum(np.searchsorted(sb, lo - sa, side="right")))
    return count


PERMUTATION_CHUNK = 50_000
"""Random splits drawn at a time: a wide matrix asks for hundreds of thousands (evidence.permutations_for), and
their index arrays stay tens of MB this way. One chunk below it, so results there are as before chunking."""


def _chunks(total: int) -> list[int]:
    return [min(PERMUTATION_CHUNK, total - start) for start in range(0, total, PERMUTATION_CHUNK)]


def _count_extreme(pooled: np.ndarray, in_cand: np.ndarray, observed: float) -> int:
    k = int(in_cand[0].sum())
    cand_means = (in_cand * pooled).sum(axis=1) / k
    base_means = (~in_cand * pooled).sum(axis=1) / (pooled.size - k)
    stat = np.abs(np.log(cand_means / base_means))
    return int(np.count_nonzero(stat >= observed * (1 - 1e-12)))


# ---------------------------------------------------------------------------------------------
# comparisons adjusted for a covariate (the machine-speed probe of CPU cells)


@dataclass(frozen=True, slots=True, kw_only=True)
class AncovaFit:
    """Two groups compared on log scale with one covariate held fixed: log y = a + effect [candidate] +
    slope log x + error, fitted by least squares (one slope for both groups)."""

    effect: float
    """Adjusted log ratio, candidate vs baseline: the difference in mean log y at equal x."""
    se: float
    """Standard error of `effect` (normal-theory, residual variance with `df` degrees of freedom)."""
    df: int
    """Residual degrees of freedom, n_candidate + n_baseline - 3."""
    slope: float
    """Pooled within-group slope of log y on log x."""
    unadjusted: float
    """mean(log candidate) - mean(log baseline), before the adjustment."""
    covariate_shift: float
    """mean(log x | candidate) - mean(log x | baseline): how far apart the groups sat on the covariate."""
    residual_sd: float
    """Residual standard deviation (log scale): the noise the covariate does not explain."""

    def interval(self, confidence: float = 0.95) -> Interval:
        """t interval effect +/- t_{(1+c)/2, df} se."""
        check_open_unit(confidence, "confidence")
        half = _special.stdtrit(self.df, (1 + confidence) / 2) * self.se
        return Interval(estimate=self.effect, low=float(self.effect - half), high=float(self.effect + half),
                        confidence=confidence, method="ancova_t")


def _ancova_design(candidate, baseline, cand_cov, base_cov) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y_c = np.log(as_array(candidate, "candidate", positive=True))
    y_b = np.log(as_array(baseline, "baseline", positive=True))
    x_c = np.log(as_array(cand_cov, "cand_cov", positive=True))
    x_b = np.log(as_array(base_cov, "base_cov", positive=True))
    check_same_length(y_c, x_c, "candidate", "cand_cov")
    check_same_length(y_b, x_b, "baseline", "base_cov")
    if y_c.size < 2 or y_b.size < 2:
        raise ValueError(f"{y_c.size} candidate and {y_b.size} baseline values: need at least 2 per side")
    within = np.concatenate([x_c - x_c.mean(), x_b - x_b.mean()])
    if not np.any(np.abs(within) > 1e-12):
        raise ValueError("the covariate does not vary within either group: its slope cannot be estimated")
    y = np.concatenate([y_c, y_b])
    group = np.concatenate([np.ones(y_c.size), np.zeros(y_b.size)])
    x = np.concatenate([x_c, x_b])
    design = np.column_stack([np.ones(y.size), group, x])
    return y, design, group


def ancova_fit(candidate: Sequence[float], baseline: Sequence[float], cand_cov: Sequence[float],
               base_cov: Sequence[float]) -> AncovaFit:
    """Analysis of covariance of two groups of positive values with one positive covariate, on log scale.

    Method: ordinary least squares of log y on [1, candidate indicator, log x]. The indicator's coefficient
    equals (mean log y_c - mean log y_b) - slope (mean log x_c - mean log x_b) with the pooled
    within-group slope, the textbook adjusted difference; its standard error is s sqrt([(X'X)^-1]_11)
    with s^2 = RSS / (n - 3). When the covariate tracks what moves y (here: how fast the machine ran
    during a repeat), the residual spread is what is left of the noise, and the adjusted difference
    does not move when the machine's speed differs between the groups. Needs >= 2 values per side and
    some variation of the covariate within a group. Reference: Snedecor & Cochran, Statistical Methods,
    8th ed., 1989, ch. 18 (covariance, adjusted means and their standard errors).
    """
    y, design, group = _ancova_design(candidate, baseline, cand_cov, base_cov)
    inv = np.linalg.inv(design.T @ design)
    coef = inv @ design.T @ y
    df = y.size - 3
    resid = y - design @ coef
    s2 = float(resid @ resid) / df if df > 0 else math.nan
    x = design[:, 2]
    in_c = group == 1
    return AncovaFit(effect=float(coef[1]), se=math.sqrt(s2 * inv[1, 1]) if df > 0 else math.nan, df=df,
                     slope=float(coef[2]), unadjusted=float(y[in_c].mean() - y[~in_c].mean()),
                     covariate_shift=float(x[in_c].mean() - x[~in_c].mean()),
                     residual_sd=math.sqrt(s2) if df > 0 else math.nan)


def ancova_permutation_p(candidate: Sequence[float], baseline: Sequence[float], cand_cov: Sequence[float],
                         base_cov: Sequence[float], *, num_permutations: int = 10_000, seed: int = 0) -> float:
    """Two-sided permutation p-value of "no group effect" in :func:`ancova_fit`'s model.

    Method (Freedman & Lane): fit the reduced model log y ~ 1 + log x, permute its residuals across all
    values, add them back to the reduced fit and refit the full model; the statistic is the indicator's
    t ratio, so each permutation re-estimates the residual variance. p = (1 + #{|t*| >= |t|}) / (B + 1)
    over B random permutations. Permuting reduced-model residuals instead of the raw values keeps the
    covariate's link to y intact, so a covariate that differs between the groups (the machine was slower
    one night) does not by itself make the groups look different. Approximately exact; Anderson &
    Legendre (1999) found its false-alarm rate at the level in small samples. References: Freedman &
    Lane, J. Bus. Econ. Stat. 1(4), 1983, 292-298; Anderson & Legendre, J. Stat. Comput. Simul. 62, 1999,
    271-303; Winkler et al., NeuroImage 92, 2014, 381-397 (Table 2).
    """
    if num_permutations < 1:
        raise ValueError(f"num_permutations={num_permutations}: must be >= 1")
    y, design, _ = _ancova_design(candidate, baseline, cand_cov, base_cov)
    n, df = y.size, y.size - 3
    if df < 1:
        raise ValueError(f"{n} values: the permutation test needs at least 4")
    reduced = design[:, [0, 2]]
    resid0 = y - reduced @ np.linalg.lstsq(reduced, y, rcond=None)[0]
    inv = np.linalg.inv(design.T @ design)
    c = (inv @ design.T)[1]                                # effect = c . y
    hat_resid = np.eye(n) - design @ inv @ design.T         # residual maker of the full model
    rng = np.random.default_rng(seed)

    def t_ratio(r: np.ndarray) -> np.ndarray:
        # The reduced fit lies in the full model's column space: it adds nothing to effect or residuals.
        e = r @ hat_resid
        rss = np.einsum("ij,ij->i", e, e)
        return (r @ c) / np.sqrt(np.maximum(rss, 1e-300) / df * inv[1, 1])

    observed = abs(float(t_ratio(resid0[None, :])[0]))
    extreme = 0
    for size in _chunks(num_permutations):
        perms = rng.permuted(np.tile(np.arange(n), (size, 1)), axis=1)
        extreme += int(np.count_nonzero(np.abs(t_ratio(resid0[perms])) >= observed * (1 - 1e-12)))
    return float((1 + extreme) / (num_permutations + 1))
