"""Pure statistics over sequences of floats: throughput, within-run intervals, steadiness and
run-to-run comparisons.

No torch, no I/O. Every function validates its input and raises ValueError naming the argument.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special as _special  # light: scipy.stats costs ~1 s of every cell's start-up

__all__ = [
    "Interval",
    "MannKendall",
    "Pettitt",
    "Steadiness",
    "ratio_of_sums_throughput",
    "FAST_STEP_QUANTILE",
    "fast_step_rate",
    "mean_t_interval",
    "batch_means_interval",
    "mann_kendall",
    "pettitt",
    "steadiness",
    "bootstrap_log_ratio",
    "to_percent",
    "benjamini_hochberg",
    "median_mad",
    "robust_z",
    "welch_t_test",
    "mann_whitney_p",
    "min_detectable_change",
    "permutation_p_value",
    "fcr_adjusted_confidence",
    "two_proportion_interval",
    "AncovaFit",
    "ancova_fit",
    "ancova_permutation_p",
]

MAD_TO_SIGMA = 1.4826
"""1 / Phi^-1(3/4): makes the MAD a consistent estimator of sigma for normal data."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Interval:
    """A point estimate with a two-sided confidence interval."""

    estimate: float
    """The point estimate, in the unit of the quantity (images/s, log ratio, ...)."""
    low: float
    """Lower bound; NaN when there is too little data to form an interval."""
    high: float
    """Upper bound; NaN when there is too little data, +inf when the data cannot bound it."""
    confidence: float
    """Nominal two-sided coverage, e.g. 0.95."""
    method: str
    """Stable identifier of the method: 't', 'batch_means_t' or 'bootstrap_percentile'."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MannKendall:
    """Result of the Mann-Kendall trend test."""

    s: int
    """Sum of signs over all ordered pairs; > 0 means values rise over time."""
    var_s: float
    """Variance of S under H0, tie-corrected."""
    z: float
    """Continuity-corrected standard normal score."""
    p: float
    """Two-sided p-value from the normal approximation."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pettitt:
    """Result of Pettitt's change-point test."""

    k: float
    """max_t |U_t|, the test statistic."""
    change_index: int
    """Number of values before the most probable change: the shift is between [:t] and [t:]."""
    p: float
    """Approximate two-sided p-value 2 exp(-6 K^2 / (n^3 + n^2)), capped at 1."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Steadiness:
    """Whether a measurement window shows neither a trend nor a level shift."""

    is_steady: bool
    """True when neither test rejects at alpha (and there were enough values to test)."""
    trend_p: float
    """Mann-Kendall p-value on the batch means; NaN when not testable."""
    change_p: float
    """Pettitt p-value on the batch means; NaN when not testable."""
    reason: str
    """One sentence a person can act on."""


# ---------------------------------------------------------------------------------------------
# validation


def _as_array(values: Sequence[float], name: str, *, positive: bool = False) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of floats, got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{name}: empty; need at least one value")
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}] is {x[bad[0]]}; values must be finite (no NaN or inf)")
    if positive:
        bad = np.flatnonzero(x <= 0)
        if bad.size:
            raise ValueError(f"{name}[{bad[0]}] = {x[bad[0]]}; values must be > 0")
    return x


def _check_open_unit(value: float, name: str) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name}={value}: must be strictly between 0 and 1")


def _check_same_length(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.size != b.size:
        raise ValueError(
            f"{name_a} ({a.size} values) and {name_b} ({b.size} values) must have the same length"
        )


def _batch_sums(x: np.ndarray, num_batches: int) -> tuple[np.ndarray, np.ndarray]:
    """Contiguous, non-overlapping batches (sizes differ by at most one): per-batch sums and sizes."""
    sizes = np.full(num_batches, x.size // num_batches)
    sizes[: x.size % num_batches] += 1
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return np.add.reduceat(x, starts), sizes


# ---------------------------------------------------------------------------------------------
# throughput and within-run intervals


def ratio_of_sums_throughput(images: Sequence[float], seconds: Sequence[float]) -> float:
    """Throughput as total work over total time: sum(images) / sum(seconds).

    Method: the ratio of sums, i.e. the work-weighted harmonic mean of per-step rates. The
    arithmetic mean of per-step rates images_i/seconds_i is *not* used: it weights every step
    equally regardless of how long it took, so fast steps count as much as slow ones and the result
    is biased upward (Jensen: E[1/T] >= 1/E[T]); it does not equal the images actually processed
    per wall-clock second. Reference: J. E. Smith, "Characterizing computer performance with a
    single number", CACM 31(10), 1988 (rates are summarised by the harmonic mean, i.e. total work
    over total time).
    """
    img = _as_array(images, "images", positive=True)
    sec = _as_array(seconds, "seconds", positive=True)
    _check_same_length(img, sec, "images", "seconds")
    return float(img.sum() / sec.sum())


FAST_STEP_QUANTILE = 0.1
"""Which step times count as the fast ones: the 10th percentile. Measured on the shared CPU box (five
detector collections, 300-step windows; docs/performance.md): repeat-to-repeat CV of images per step over
the minimum step time 1.8-2.6 %, over the 5th / 10th / 20th percentile 2.1-3.2 / 2.1-3.3 / 2.2-3.8 %, of
the ratio of sums 4.4-8.4 %. The 10th percentile is nearly as quiet as the minimum and rests on a
tenth of the window rather than on one lucky step."""


def fast_step_rate(step_times: Sequence[float], images_per_step: float) -> float:
    """Images per step over the FAST_STEP_QUANTILE quantile of the step times (numpy's linear method).

    Not a throughput: no run delivers it. It is the speed of the steps that interference left alone.
    Interference on a shared machine (other processes, a noisy neighbour's cache and memory traffic) only
    ever adds time to a step, so a slowdown of the code itself moves the fast steps as it moves all steps,
    while the tail the interference makes stays out. What it cannot see is a change that slows only a
    few steps (a periodic stall, a loader that falls behind now and then): that is what the ratio of sums
    is for, and why the comparison tests both (harness.compare)."""
    t = _as_array(step_times, "step_times", positive=True)
    if not (math.isfinite(images_per_step) and images_per_step > 0):
        raise ValueError(f"images_per_step must be a positive finite number, got {images_per_step!r}")
    return float(images_per_step / np.quantile(t, FAST_STEP_QUANTILE))


def mean_t_interval(values: Sequence[float], *, confidence: float = 0.95) -> Interval:
    """Student t confidence interval for the mean of i.i.d. values.

    Method: mean +/- t_{(1+c)/2, n-1} * s / sqrt(n), with s the sample standard deviation (ddof=1).
    Reference: Student, "The probable error of a mean", Biometrika 6(1), 1908; any introductory
    text, e.g. Snedecor & Cochran, Statistical Methods, 8th ed., 1989, sec. 2.7. With fewer than two
    values low/high are NaN.
    """
    x = _as_array(values, "values")
    _check_open_unit(confidence, "confidence")
    mean = float(x.mean())
    if x.size < 2:
        return Interval(
            estimate=mean, low=math.nan, high=math.nan, confidence=confidence, method="t"
        )
    half = _special.stdtrit(x.size - 1, (1 + confidence) / 2) * x.std(ddof=1) / math.sqrt(x.size)
    return Interval(
        estimate=mean, low=float(mean - half), high=float(mean + half), confidence=confidence,
        method="t",
    )


def batch_means_interval(
    step_times_s: Sequence[float],
    images_per_step: float | Sequence[float],
    *,
    num_batches: int = 10,
    confidence: float = 0.95,
) -> Interval:
    """Throughput (images/s) of one run with a within-run confidence interval, by batch means.

    Pass the steady steps only (warm-up excluded). Method: non-overlapping batch means. The steps
    are cut into ``num_batches`` contiguous batches (sizes differ by at most one; fewer steps than
    batches -> one step per batch). Per batch b, T_b = seconds and I_b = images. The estimate of
    seconds per image is R = sum T_b / sum I_b (so ``estimate`` equals
    :func:`ratio_of_sums_throughput`), with standard error
    SE = sqrt(sum (T_b - R I_b)^2 / (k (k-1))) / mean(I_b) (ratio estimator over batch totals). The
    t_{k-1} interval R +/- t SE is inverted into images/s; 1/x is decreasing, so the bounds swap,
    and an upper bound of +inf means the data cannot bound throughput from above. With equal batch
    sizes and a constant ``images_per_step`` this is exactly the textbook t-interval on the mean
    step time computed from the k batch means, divided into the images per step. Batching makes
    the batch means nearly independent even when consecutive step times are correlated.
    References: Law & Kelton, Simulation Modeling and Analysis, 3rd ed., 2000, sec. 9.5.3;
    Fishman, Discrete-Event Simulation, 2001, sec. 6.6 (batch means); Cochran, Sampling Techniques,
    3rd ed., 1977, sec. 6.4 (variance of a ratio estimator). Fewer than two steps: low/high NaN.
    """
    times = _as_array(step_times_s, "step_times_s", positive=True)
    if np.ndim(images_per_step) == 0:
        images = _as_array([images_per_step], "images_per_step", positive=True)
        images = np.full(times.size, images[0])
    else:
        images = _as_array(images_per_step, "images_per_step", positive=True)
        _check_same_length(times, images, "step_times_s", "images_per_step")
    if num_batches < 2:
        raise ValueError(
            f"num_batches={num_batches}: need at least 2 batches to estimate a variance"
        )
    _check_open_unit(confidence, "confidence")
    estimate = float(images.sum() / times.sum())
    if times.size < 2:
        return Interval(
            estimate=estimate, low=math.nan, high=math.nan, confidence=confidence,
            method="batch_means_t",
        )
    k = min(num_batches, times.size)
    t_b, _ = _batch_sums(times, k)
    i_b, _ = _batch_sums(images, k)
    r = t_b.sum() / i_b.sum()
    se = math.sqrt(np.sum((t_b - r * i_b) ** 2) / (k * (k - 1))) / i_b.mean()
    half = _special.stdtrit(k - 1, (1 + confidence) / 2) * se
    high = 1.0 / (r - half) if r - half > 0 else math.inf
    return Interval(
        estimate=estimate, low=float(1.0 / (r + half)), high=float(high), confidence=confidence,
        method="batch_means_t",
    )


def window_throughput_interval(
    step_times_s: Sequence[float],
    images_per_step: float,
    window_images: float,
    window_s: float,
    *,
    num_batches: int = 10,
    confidence: float = 0.95,
) -> Interval:
    """A measured window's throughput, window_images / window_s, with a within-run interval on the same clock.

    The point estimate is the window's wall clock (barrier- and sync-delimited); the step times come from
    another clock (CUDA events on a GPU) and cover a little less than the window (the fences). Their
    batch-means interval (:func:`batch_means_interval`) is therefore carried over as a relative
    uncertainty: low / estimate and high / estimate are those of the step-time interval, applied to the
    window's estimate. So the interval always brackets the reported figure and both are in wall-clock
    images per second. Fewer than two steps: low/high NaN.
    """
    steps = batch_means_interval(step_times_s, images_per_step, num_batches=num_batches, confidence=confidence)
    if not window_s > 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    estimate = float(window_images / window_s)
    scale = estimate / steps.estimate
    return Interval(estimate=estimate, low=steps.low * scale, high=steps.high * scale, confidence=confidence,
                    method="batch_means_t_on_window")


# ---------------------------------------------------------------------------------------------
# steadiness of a window


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks with ties given their average rank (scipy.stats.rankdata's 'average')."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def mann_kendall(values: Sequence[float]) -> MannKendall:
    """Mann-Kendall test for a monotonic trend, with the tie correction.

    Method: S = sum_{i<j} sign(x_j - x_i); under H0 (i.i.d.),
    Var(S) = [n(n-1)(2n+5) - sum_g t_g(t_g-1)(2t_g+5)] / 18 over groups of t_g tied values;
    Z = (S - sign(S)) / sqrt(Var(S)) (continuity correction); p = 2 (1 - Phi(|Z|)). If every value
    is tied, Var(S) = 0 and p = 1. O(n^2) pairs: meant for batch means, not millions of points.
    References: Mann, Econometrica 13, 1945; Kendall, Rank Correlation Methods, 4th ed., 1975;
    Gilbert, Statistical Methods for Environmental Pollution Monitoring, 1987, sec. 16.4.
    """
    x = _as_array(values, "values")
    if x.size < 2:
        raise ValueError(f"values: {x.size} value(s); the Mann-Kendall test needs at least 2")
    n = x.size
    s = 0
    for start in range(0, n - 1, 512):  # row blocks keep the pair matrix small
        rows = x[start : start + 512, None]
        signs = np.sign(x[None, :] - rows)
        later = np.arange(n)[None, :] > np.arange(start, start + rows.shape[0])[:, None]
        s += int(signs[later].sum())
    _, counts = np.unique(x, return_counts=True)
    ties = np.sum(counts * (counts - 1.0) * (2.0 * counts + 5.0))
    var_s = float((n * (n - 1.0) * (2.0 * n + 5.0) - ties) / 18.0)
    if var_s <= 0:
        return MannKendall(s=s, var_s=var_s, z=0.0, p=1.0)
    z = (s - np.sign(s)) / math.sqrt(var_s)
    return MannKendall(s=s, var_s=var_s, z=float(z), p=float(2.0 * _special.ndtr(-abs(z))))


def pettitt(values: Sequence[float]) -> Pettitt:
    """Pettitt's non-parametric test for a single change point (shift in level).

    Method: U_t = sum_{i<=t} sum_{j>t} sign(x_i - x_j) = 2 sum_{i<=t} r_i - t(n+1) with mid-ranks
    r_i (so ties are handled); K = max_{1<=t<n} |U_t|, the change point is the arg max t, and
    p ~= 2 exp(-6 K^2 / (n^3 + n^2)), capped at 1 (Pettitt's approximation, good for p <= 0.5).
    Reference: A. N. Pettitt, "A non-parametric approach to the change-point problem", Applied
    Statistics 28(2), 1979, 126-135 (its Table 1 example: K = 232, t = 17, p = 0.0146).
    """
    x = _as_array(values, "values")
    if x.size < 2:
        raise ValueError(f"values: {x.size} value(s); the Pettitt test needs at least 2")
    n = x.size
    u = np.cumsum(2.0 * _average_ranks(x) - (n + 1.0))[:-1]
    t = int(np.argmax(np.abs(u)))
    k = float(abs(u[t]))
    p = min(1.0, 2.0 * math.exp(-6.0 * k * k / (n**3 + n**2)))
    return Pettitt(k=k, change_index=t + 1, p=p)


def steadiness(
    values: Sequence[float], *, alpha: float = 0.01, num_batches: int = 30
) -> Steadiness:
    """Check that a measurement window has neither a trend nor a level shift.

    Method: the values (e.g. steady-state step times) are reduced to ``num_batches`` contiguous
    batch means (or used as they are when there are no more values than batches), which damps
    step-to-step autocorrelation and keeps tiny, practically irrelevant drifts from being
    "significant" in long windows. Then a Mann-Kendall trend test (:func:`mann_kendall`) and a
    Pettitt change-point test (:func:`pettitt`) are run on the batch means; the window is steady
    when both p-values are >= alpha (family-wise false-alarm rate <= 2 alpha by Bonferroni).
    Pettitt's p cannot fall below 0.066 with 10 points and reaches 0.01 with 20 only for a shift
    near the middle, hence 30 batches by default. Limitation: both tests use ranks of the batch
    means, so a transient confined to the first ~1/6 of the window (e.g. a too-short warm-up) is
    not reliably flagged however large it is; exclude warm-up generously, or pass
    num_batches=len(values) to test the raw values (then a slow first 10 % that stands clear of
    the noise is caught, at the price of sensitivity to autocorrelation and to tiny shifts). Fewer than 3 values
    cannot be tested and are reported as not steady. References: see :func:`mann_kendall`,
    :func:`pettitt`; batch means as in :func:`batch_means_interval`; the "warn and say what to do"
    behaviour follows pyperf.
    """
    x = _as_array(values, "values")
    _check_open_unit(alpha, "alpha")
    if num_batches < 3:
        raise ValueError(f"num_batches={num_batches}: need at least 3 batches to test steadiness")
    if x.size < 3:
        return Steadiness(
            is_steady=False, trend_p=math.nan, change_p=math.nan,
            reason=f"only {x.size} value(s); need at least 3 to test for trend or level shift",
        )
    sums, sizes = _batch_sums(x, min(num_batches, x.size))
    means = sums / sizes
    mk, pt = mann_kendall(means), pettitt(means)
    trend_ok, change_ok = mk.p >= alpha, pt.p >= alpha
    problems = []
    if not trend_ok:
        direction = "rise" if mk.s > 0 else "fall"
        problems.append(
            f"values {direction} over the window "
            f"(Mann-Kendall p={mk.p:.2g} on {means.size} batch means)"
        )
    if not change_ok:
        at = int(sizes[: pt.change_index].sum())
        problems.append(f"level shift near value {at} of {x.size} (Pettitt p={pt.p:.2g})")
    if problems:
        reason = (
            f"not steady at alpha={alpha:g}: " + "; ".join(problems)
            + "; lengthen the warm-up, shorten the window, or check clocks and thermals"
        )
    else:
        reason = (
            f"steady at alpha={alpha:g}: no trend (Mann-Kendall p={mk.p:.2g}) and no level shift "
            f"(Pettitt p={pt.p:.2g}) over {means.size} batch means"
        )
    return Steadiness(is_steady=trend_ok and change_ok, trend_p=mk.p, change_p=pt.p, reason=reason)


# ---------------------------------------------------------------------------------------------
# comparing runs


def to_percent(log_ratio: float) -> float:
    """Relative change in percent from a natural-log ratio: 100 (exp(x) - 1)."""
    return 100.0 * math.expm1(log_ratio)


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
    cand = _as_array(candidate, "candidate", positive=True)
    base = _as_array(baseline, "baseline", positive=True)
    _check_open_unit(confidence, "confidence")
    if num_resamples < 1:
        raise ValueError(f"num_resamples={num_resamples}: must be >= 1")
    estimate = float(math.log(cand.mean() / base.mean()))
    method = "bootstrap_percentile"
    if cand.size < 2 or base.size < 2:
        return Interval(
            estimate=estimate, low=math.nan, high=math.nan, confidence=confidence, method=method
        )
    rng = np.random.default_rng(seed)
    cand_means = cand[rng.integers(0, cand.size, (num_resamples, cand.size))].mean(axis=1)
    base_means = base[rng.integers(0, base.size, (num_resamples, base.size))].mean(axis=1)
    tails = [(1 - confidence) / 2, (1 + confidence) / 2]
    low, high = np.quantile(np.log(cand_means / base_means), tails)
    return Interval(
        estimate=estimate, low=float(low), high=float(high), confidence=confidence, method=method
    )


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
    p = _as_array(p_values, "p_values")
    if np.any((p < 0) | (p > 1)):
        i = int(np.flatnonzero((p < 0) | (p > 1))[0])
        raise ValueError(f"p_values[{i}] = {p[i]}; p-values must lie in [0, 1]")
    _check_open_unit(q, "q")
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
    x = _as_array(values, "values")
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


def welch_t_test(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of Welch's unequal-variance t test of equal means.

    Method: t = (mean_a - mean_b) / sqrt(s_a^2/n_a + s_b^2/n_b) with Welch-Satterthwaite degrees
    of freedom (scipy.stats.ttest_ind, equal_var=False). Reference: Welch, Biometrika 34, 1947.
    NaN when both samples are constant.
    """
    x, y = _as_array(a, "a"), _as_array(b, "b")
    for arr, name in ((x, "a"), (y, "b")):
        if arr.size < 2:
            raise ValueError(f"{name}: {arr.size} value(s); Welch's t test needs at least 2 per side")
    from scipy import stats as sps

    return float(sps.ttest_ind(x, y, equal_var=False).pvalue)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U (Wilcoxon rank-sum) test.

    Method: scipy.stats.mannwhitneyu, method='auto': exact null distribution for small samples
    without ties, otherwise the tie-corrected normal approximation with continuity correction.
    Reference: Mann & Whitney, Ann. Math. Statist. 18, 1947; Hollander & Wolfe, Nonparametric
    Statistical Methods, 1999, sec. 4.1.
    """
    x, y = _as_array(a, "a"), _as_array(b, "b")
    from scipy import stats as sps

    return float(sps.mannwhitneyu(x, y, alternative="two-sided", method="auto").pvalue)


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
    _check_open_unit(alpha, "alpha")
    _check_open_unit(power, "power")
    nu = n_a + n_b - 2
    factor = _special.stdtrit(nu, 1 - alpha / 2) + _special.stdtrit(nu, power)
    return float(factor * baseline_cv * math.sqrt(1 / n_a + 1 / n_b))


# ---------------------------------------------------------------------------------------------
# verdicts across many cells (used by harness.compare)


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
    _check_open_unit(q, "q")
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
    _check_open_unit(confidence, "confidence")
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
    max_exact: int = 20_000,
    num_permutations: int = 10_000,
    seed: int = 0,
) -> float:
    """Two-sided permutation test of "no change" for T = log(mean(candidate) / mean(baseline)).

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
    cand = _as_array(candidate, "candidate", positive=True)
    base = _as_array(baseline, "baseline", positive=True)
    if num_permutations < 1:
        raise ValueError(f"num_permutations={num_permutations}: must be >= 1")
    pooled = np.concatenate([cand, base])
    n, k = pooled.size, cand.size
    observed = abs(math.log(cand.mean() / base.mean()))
    if math.comb(n, k) <= max_exact:
        idx = np.array(list(itertools.combinations(range(n), k)), dtype=np.intp)
        in_cand = np.zeros((idx.shape[0], n), dtype=bool)
        np.put_along_axis(in_cand, idx, True, axis=1)
        extreme = _count_extreme(pooled, in_cand, observed)
        return float(extreme / idx.shape[0])
    rng = np.random.default_rng(seed)
    order = rng.permuted(np.tile(np.arange(n), (num_permutations, 1)), axis=1)
    in_cand = np.zeros((num_permutations, n), dtype=bool)
    np.put_along_axis(in_cand, order[:, :k], True, axis=1)
    extreme = _count_extreme(pooled, in_cand, observed)
    return float((1 + extreme) / (num_permutations + 1))


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
        _check_open_unit(confidence, "confidence")
        half = _special.stdtrit(self.df, (1 + confidence) / 2) * self.se
        return Interval(estimate=self.effect, low=float(self.effect - half), high=float(self.effect + half),
                        confidence=confidence, method="ancova_t")


def _ancova_design(candidate, baseline, cand_cov, base_cov) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y_c = np.log(_as_array(candidate, "candidate", positive=True))
    y_b = np.log(_as_array(baseline, "baseline", positive=True))
    x_c = np.log(_as_array(cand_cov, "cand_cov", positive=True))
    x_b = np.log(_as_array(base_cov, "base_cov", positive=True))
    _check_same_length(y_c, x_c, "candidate", "cand_cov")
    _check_same_length(y_b, x_b, "baseline", "base_cov")
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
    perms = rng.permuted(np.tile(np.arange(n), (num_permutations, 1)), axis=1)

    def t_ratio(r: np.ndarray) -> np.ndarray:
        # The reduced fit lies in the full model's column space: it adds nothing to effect or residuals.
        e = r @ hat_resid
        rss = np.einsum("ij,ij->i", e, e)
        return (r @ c) / np.sqrt(np.maximum(rss, 1e-300) / df * inv[1, 1])

    observed = abs(float(t_ratio(resid0[None, :])[0]))
    extreme = int(np.count_nonzero(np.abs(t_ratio(resid0[perms])) >= observed * (1 - 1e-12)))
    return float((1 + extreme) / (num_permutations + 1))
