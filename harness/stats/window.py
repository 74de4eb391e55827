"""Statistics of one measured window, from its step times: throughput with its within-run interval, the
fast-step rate, and whether the window was steady. What a cell computes about itself."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import special as _special  # light: scipy.stats costs ~1 s of every cell's start-up

from harness.stats.core import Interval, as_array, batch_sums, check_open_unit, check_same_length
from harness.stats.settle import StartTransient, start_transient


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

    is_steady: bool | None
    """None: the window was too short to judge (window_steadiness)."""
    """True when neither test rejects at alpha (and there were enough values to test)."""
    trend_p: float
    """Mann-Kendall p-value on the batch means; NaN when not testable."""
    change_p: float
    """Pettitt p-value on the batch means; NaN when not testable."""
    reason: str
    """One sentence a person can act on."""


# ---------------------------------------------------------------------------------------------
# throughput and within-run intervals


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
    is for, and why the comparison tests both (harness.analysis.judge.compare)."""
    t = as_array(step_times, "step_times", positive=True)
    if not (math.isfinite(images_per_step) and images_per_step > 0):
        raise ValueError(f"images_per_step must be a positive finite number, got {images_per_step!r}")
    return float(images_per_step / np.quantile(t, FAST_STEP_QUANTILE))


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
    times = as_array(step_times_s, "step_times_s", positive=True)
    if np.ndim(images_per_step) == 0:
        images = as_array([images_per_step], "images_per_step", positive=True)
        images = np.full(times.size, images[0])
    else:
        images = as_array(images_per_step, "images_per_step", positive=True)
        check_same_length(times, images, "step_times_s", "images_per_step")
    if num_batches < 2:
        raise ValueError(
            f"num_batches={num_batches}: need at least 2 batches to estimate a variance"
        )
    check_open_unit(confidence, "confidence")
    estimate = float(images.sum() / times.sum())
    if times.size < 2:
        return Interval(
            estimate=estimate, low=math.nan, high=math.nan, confidence=confidence,
            method="batch_means_t",
        )
    k = min(num_batches, times.size)
    t_b, _ = batch_sums(times, k)
    i_b, _ = batch_sums(images, k)
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
    x = as_array(values, "values")
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
    x = as_array(values, "values")
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
    not reliably flagged however large it is: :func:`window_steadiness` adds the start-transient check
    (harness.stats.settle) that sees it. Fewer than 3 values
    cannot be tested and are reported as not steady. References: see :func:`mann_kendall`,
    :func:`pettitt`; batch means as in :func:`batch_means_interval`; the "warn and say what to do"
    behaviour follows pyperf.
    """
    x = as_array(values, "values")
    check_open_unit(alpha, "alpha")
    if num_batches < 3:
        raise ValueError(f"num_batches={num_batches}: need at least 3 batches to test steadiness")
    if x.size < 3:
        return Steadiness(
            is_steady=False, trend_p=math.nan, change_p=math.nan,
            reason=f"only {x.size} value(s); need at least 3 to test for trend or level shift",
        )
    sums, sizes = batch_sums(x, min(num_batches, x.size))
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


MIN_JUDGED_STEPS = 6
"""Fewest measured steps whose steadiness can be judged: below it Mann-Kendall's smallest two-sided p (2 / n!)
is above 0.01, so no window could ever be found unsteady by the trend test (a --smoke window of 3 steps)."""


def window_steadiness(warmup_s: Sequence[float], window_s: Sequence[float], *,
                      alpha: float = 0.01) -> tuple[Steadiness, StartTransient]:
    """A measured window's steadiness as a cell records it: :func:`steadiness` of the window (trend, level
    shift) and the start-transient check of its warm-up + window (harness.stats.settle.start_transient,
    which sees the first steps' transient the rank tests miss). Steady when neither finds anything; the
    reason names the transient's steps first."""
    steady = steadiness(window_s, alpha=alpha)
    start = start_transient(warmup_s, window_s)
    if not start.found:
        if len(window_s) < MIN_JUDGED_STEPS:  # the rank tests cannot reject at any data: say so, not "steady"
            steady = replace(steady, is_steady=None, reason=(
                f"window of {len(window_s)} steps: too short to test for a trend or level shift (at least "
                f"{MIN_JUDGED_STEPS} needed); no start transient found"))
        return steady, start
    also = "" if steady.is_steady else f"; also {steady.reason}"
    return replace(steady, is_steady=False, reason=f"not steady: {start.reason}{also}"), start
