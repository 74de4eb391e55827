"""Where the level of a series of nights steps, each night with its repeats: a two-level model (each night's
own effect, its repeats' spread around it) tested at the best split of every segment, the choice of that split
paid for by simulating the best split under the fitted no-change model (a parametric bootstrap of the maximum).
Pure functions of floats; `harness.stats.changepoint` builds on it (the practical floor, drift)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special as _special

from harness.stats.core import Interval, as_array

DEFAULT_SIMULATIONS = 1999
"""Simulated series per test: p resolves to 1 / 2000 (its floor), at least twenty steps below any level it
is asked at (`simulations_for` raises it for smaller levels)."""
_CHUNK = 50
"""Simulated series per batch; a test stops early once its p-value is known to exceed alpha. A series with no
change (most of a history's) is known to after about twice alpha's share of B: with 1999 and alpha 0.05, some
200, so small batches spare it drawing and judging the rest of a larger one."""


@dataclass(frozen=True, slots=True)
class Nights:
    """A series of nights as the test sees it: each night's mean of its repeats and their count, and the
    within-night variance pooled over every night with two repeats or more."""

    means: np.ndarray
    counts: np.ndarray
    within_var: float
    """Pooled variance of a repeat around its night's mean; 0 when no night has two repeats."""
    within_df: int
    """Degrees of freedom of within_var: repeats minus nights (0: the nights' means are all there is)."""


def nights_of(nights: Sequence[float | Sequence[float]]) -> Nights:
    """Nights from their repeats: each item a sequence of one night's repeats, or a float (a night of one)."""
    if not len(nights):
        raise ValueError("nights: empty; need at least one night")
    groups = [np.atleast_1d(np.asarray(g, dtype=float)) for g in nights]
    counts = np.array([g.size for g in groups])
    if any(g.ndim != 1 for g in groups) or not counts.all() or not np.isfinite(values := np.concatenate(groups)).all():
        for i, g in enumerate(nights):  # the first bad night, named as as_array names it
            as_array([g] if np.ndim(g) == 0 else g, f"nights[{i}]")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    means = np.add.reduceat(values, starts) / counts  # every night at once: a year of them is one pass
    df = int(counts.sum() - counts.size)
    ss = float((((values - np.repeat(means, counts)) ** 2)).sum())
    return Nights(means=means, counts=counts, within_var=ss / df if df else 0.0, within_df=df)


def simulations_for(alpha: float) -> int:
    """Simulations whose p floor 1 / (B + 1) lies at least twenty times below alpha."""
    return max(DEFAULT_SIMULATIONS, math.ceil(20 / alpha) - 1)


@dataclass(frozen=True, slots=True)
class _Layout:
    """One segmentation of n nights and every split it allows: what the statistic needs besides the data."""

    bounds: tuple[tuple[int, int], ...]
    splits: np.ndarray
    """(K,) index of each candidate split's first night after it."""
    starts: np.ndarray
    """(K,) first night of the segment the split cuts: its left side is nights [starts, splits)."""
    ends: np.ndarray
    """(K,) end (exclusive) of that segment: its right side is nights [splits, ends)."""
    seg_of: np.ndarray
    """(K,) the segment each split cuts."""
    segment: np.ndarray
    """(G, n) membership of the current segments."""
    expected: np.ndarray
    """(K,) E[residual sum of squares] per unit of within_var, with the split made (tau = 0)."""
    expected_null: float
    inv_counts: np.ndarray
    balanced: bool
    """Every night has as many repeats."""


def _layout(counts: np.ndarray, cuts: Sequence[int], m: int) -> _Layout:
    n = counts.size
    inv = 1.0 / counts
    bounds = tuple(zip([0, *cuts], [*cuts, n]))
    segment = np.zeros((len(bounds), n), dtype=bool)
    for g, (a, b) in enumerate(bounds):
        segment[g, a:b] = True

    cum = _prefix(inv)

    def share(a, b):  # (n_g - 1) / n_g * sum 1/r_i: the repeats' part of E[SS_g] (arrays of segments too)
        return (b - a - 1) / (b - a) * (cum[b] - cum[a])

    base = float(sum(share(a, b) for a, b in bounds))
    seg_of = np.concatenate([np.full(max(0, b - a - 2 * m + 1), g, dtype=int) for g, (a, b) in enumerate(bounds)])
    splits = np.concatenate([np.arange(a + m, b - m + 1, dtype=int) for a, b in bounds])
    starts = np.array([a for a, _ in bounds], dtype=int)[seg_of]
    ends = np.array([b for _, b in bounds], dtype=int)[seg_of]
    expected = base - share(starts, ends) + share(starts, splits) + share(splits, ends)
    return _Layout(bounds=bounds, splits=splits, starts=starts, ends=ends, seg_of=seg_of,
                   segment=segment, expected=np.asarray(expected, dtype=float), expected_null=base, inv_counts=inv,
                   balanced=bool(np.all(counts == counts[0])))


def _prefix(values: np.ndarray) -> np.ndarray:
    """Cumulative sums along the last axis with a leading 0: the sum over [a, b) is out[..., b] - out[..., a]."""
    out = np.zeros((*values.shape[:-1], values.shape[-1] + 1))
    np.cumsum(values, axis=-1, out=out[..., 1:])
    return out


class _Sums:
    """Prefix sums of rows of means (centred: log throughput sits near 7, spare the subtraction) and of their
    squares, weighted (one weight per night, default 1), so that the weighted residual sum of squares of any run
    of nights [lo, hi) is three lookups: every split of a year of nights costs what one pass over it does."""

    __slots__ = ("s1", "s2", "cw")

    def __init__(self, means: np.ndarray, weights: np.ndarray | None = None):
        w = np.ones(means.shape[1]) if weights is None else weights
        centred = means - means.mean(axis=1, keepdims=True)
        self.s1, self.s2, self.cw = _prefix(centred * w), _prefix(centred ** 2 * w), _prefix(w)

    def residual_ss(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """(B, M): each row's residual sum of squares around its weighted mean within each [lo, hi)."""
        total = self.s1[:, hi] - self.s1[:, lo]
        return np.maximum(self.s2[:, hi] - self.s2[:, lo] - total ** 2 / (self.cw[hi] - self.cw[lo]), 0.0)


def _residual_ss(means: np.ndarray, lo: np.ndarray, hi: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Weighted sum of squares of each row of means around its weighted mean within each run of nights
    [lo, hi): (B, n) x (M,) -> (B, M) (weights: one per night, default 1)."""
    return _Sums(means, weights).residual_ss(lo, hi)


def _components(q: np.ndarray, q_repeats: np.ndarray, s2: np.ndarray, expected: np.ndarray | float, df: int,
                within_df: int) -> tuple[np.ndarray, np.ndarray]:
    """(tau^2, sigma^2) of the two-level model, given the nights' residual sum of squares around their
    segments' levels, unweighted (q) and weighted by their repeats (q_repeats), and the pooled within-night
    variance s2 on within_df degrees of freedom. tau^2 is the moment estimate (Searle, Casella & McCulloch,
    Variance Components, 1992, sec. 3.5); when the nights scatter no more than their repeats predict it is 0,
    and sigma^2 is then estimated from both sources pooled, as restricted maximum likelihood does on that
    boundary: every repeat independent around its segment's level."""
    tau2 = (q - s2 * expected) / df
    pooled = (s2 * within_df + q_repeats) / (within_df + df)
    at_zero = tau2 <= 0
    return np.where(at_zero, 0.0, tau2), np.where(at_zero, pooled, s2)


def _z(lay: _Layout, means: np.ndarray, s2: np.ndarray, within_df: int, eps: float) -> np.ndarray:
    """The standardized step of every candidate split (B, K): the difference of the two sides' weighted
    means over its standard error, each night weighted by 1 / (tau^2 + sigma^2 / r), the variance components
    those left once the split is made (_components)."""
    n, num_segments = means.shape[1], len(lay.bounds)
    counts = 1.0 / lay.inv_counts
    seg_lo, seg_hi = np.array([a for a, _ in lay.bounds]), np.array([b for _, b in lay.bounds])

    def residual(sums: _Sums) -> np.ndarray:  # (B, K): every segment, the split one cut in two
        q_seg = sums.residual_ss(seg_lo, seg_hi)
        return q_seg.sum(axis=1, keepdims=True) - q_seg[:, lay.seg_of] \
            + sums.residual_ss(lay.starts, lay.splits) + sums.residual_ss(lay.splits, lay.ends)

    plain = _Sums(means)  # one pass of prefix sums serves every segment and every split
    q = residual(plain)
    q_repeats = q * counts[0] if lay.balanced else residual(_Sums(means, counts))
    tau2, sigma2 = _components(q, q_repeats, s2[:, None], lay.expected[None, :], n - num_segments - 1, within_df)
    if lay.balanced:  # every night weighs the same: plain means, one variance
        var = tau2 + sigma2 * lay.inv_counts[0] + eps
        nl, nr = lay.splits - lay.starts, lay.ends - lay.splits
        sums = plain.s1  # centred: the common shift cancels in the difference of the two sides' means
        diff = (sums[:, lay.ends] - sums[:, lay.splits]) / nr - (sums[:, lay.splits] - sums[:, lay.starts]) / nl
        return diff / np.sqrt(var * (1.0 / nl + 1.0 / nr))
    # Nights of one repeat count share a weight: sums per count over each side, never per night.
    wl = wr = ml = mr = 0.0
    for r in np.unique(counts):
        has = (counts == r).astype(float)
        w = 1.0 / (tau2 + sigma2 / r + eps)  # (B, K)
        num, tot = _prefix(has), _prefix(means * has)
        wl = wl + w * (num[lay.splits] - num[lay.starts])
        wr = wr + w * (num[lay.ends] - num[lay.splits])
        ml = ml + w * (tot[:, lay.splits] - tot[:, lay.starts])
        mr = mr + w * (tot[:, lay.ends] - tot[:, lay.splits])
    return (mr / wr - ml / wl) / np.sqrt(1.0 / wl + 1.0 / wr)


def _fit(lay: _Layout, nights: Nights) -> tuple[float, float]:
    """(tau^2, sigma^2) of the segmentation itself, no split added."""
    means = nights.means[None, :]
    lo, hi = np.array([a for a, _ in lay.bounds]), np.array([b for _, b in lay.bounds])
    q = float(_residual_ss(means, lo, hi).sum())
    q_repeats = float(_residual_ss(means, lo, hi, nights.counts.astype(float)).sum())
    tau2, sigma2 = _components(np.array(q), np.array(q_repeats), np.array(nights.within_var), lay.expected_null,
                               nights.means.size - lay.segment.shape[0], nights.within_df)
    return float(tau2), float(sigma2)


def _eps(nights: Nights) -> float:
    """A variance far below any real one, so that a series without noise divides by it, not by 0."""
    return 1e-24 * (1.0 + float(np.max(nights.means ** 2)))


def _p_value(lay: _Layout, nights: Nights, observed: float, alpha: float, num_simulations: int,
             rng: np.random.Generator) -> float:
    """(1 + #{T* >= T}) / (1 + B), T* the largest |z| over every split of series simulated from the no-change
    model fitted to this segmentation (_fit: normal night effects of variance tau^2, normal repeats of variance
    sigma^2, each night's count of repeats kept; the pooled within-night variance drawn as its scaled
    chi-square). The statistic does not see the segments' levels, so they are simulated at 0. Stops early
    once the answer exceeds alpha."""
    tau2, sigma2 = _fit(lay, nights)
    sd = np.sqrt(tau2 + sigma2 * lay.inv_counts)
    limit = alpha * (num_simulations + 1) - 1
    exceed, done, eps = 0, 0, _eps(nights)
    while done < num_simulations:
        size = min(_CHUNK, num_simulations - done)
        means = rng.standard_normal((size, sd.size)) * sd
        df = nights.within_df
        s2 = sigma2 * rng.chisquare(df, size) / df if df else np.zeros(size)
        null = np.abs(_z(lay, means, s2, df, eps)).max(axis=1)
        exceed += int(np.count_nonzero(null >= observed * (1 - 1e-9)))
        done += size
        if exceed > limit:
            break
    return (1 + exceed) / (1 + done)


def split_test(nights: Nights, *, min_segment: int, alpha: float, num_simulations: int,
               seed: int = 0) -> list[tuple[int, float]]:
    """Binary segmentation: while the largest |z| over every split of every current segment has a p-value
    at most alpha, split there. Returns (index, p) of every split, sorted by index. The maximum is taken
    over segments too, so one test per divisive step, as Matteson & James's E-divisive does (JASA 109,
    2014, sec. 3), with their permutation null replaced by a parametric one that short series can reach
    (a permutation test of 8 nights cannot go below 2 / C(8, 4))."""
    if num_simulations < 1 or (num_simulations + 1) * alpha < 1:
        raise ValueError(f"num_simulations={num_simulations}: its p floor 1/{num_simulations + 1} lies above "
                         f"alpha={alpha}; at least {math.ceil(1 / alpha) - 1} are needed to ever reject")
    rng = np.random.default_rng(seed)
    found: list[tuple[int, float]] = []
    eps = _eps(nights)
    while True:
        lay = _layout(nights.counts, sorted(i for i, _ in found), min_segment)
        if lay.splits.size == 0:
            break
        z = np.abs(_z(lay, nights.means[None, :], np.array([nights.within_var]), nights.within_df, eps))[0]
        best = int(np.argmax(z))
        p = _p_value(lay, nights, float(z[best]), alpha, num_simulations, rng)
        if p > alpha:
            break
        found.append((int(lay.splits[best]), p))
    return sorted(found)


@dataclass(frozen=True, slots=True, kw_only=True)
class Levels:
    """The two-level model fitted to a segmentation: each segment's level and the step between neighbours."""

    levels: tuple[float, ...]
    """Weighted mean of each segment's nights (weights 1 / (tau^2 + sigma^2 / r))."""
    steps: tuple[Interval, ...]
    """levels[g + 1] - levels[g], t interval on nights - segments degrees of freedom."""
    tau2: float
    """Night-to-night variance beyond the repeats' (moment estimate, >= 0)."""


def fit_levels(nights: Nights, cuts: Sequence[int], *, confidence: float = 0.95) -> Levels:
    """Levels of the segments between `cuts` and the steps between them. Reference for the moment estimate of
    the night-to-night variance: Searle, Casella & McCulloch, Variance Components, 1992, sec. 3.5 (one-way
    classification, unbalanced: the unweighted sum of squares)."""
    lay = _layout(nights.counts, sorted(cuts), nights.means.size)
    tau2, sigma2 = _fit(lay, nights)
    w = 1.0 / (tau2 + sigma2 / nights.counts + _eps(nights))
    weight = lay.segment @ w
    levels = (lay.segment @ (w * nights.means)) / weight
    df = nights.means.size - len(lay.bounds)
    q = float(_special.stdtrit(df, (1 + confidence) / 2)) if df >= 1 else math.inf
    steps = []
    for g in range(len(levels) - 1):
        diff, se = float(levels[g + 1] - levels[g]), math.sqrt(1 / weight[g] + 1 / weight[g + 1])
        steps.append(Interval(estimate=diff, low=diff - q * se, high=diff + q * se, confidence=confidence,
                              method="two_level_t"))
    return Levels(levels=tuple(float(v) for v in levels), steps=tuple(steps), tau2=tau2)
