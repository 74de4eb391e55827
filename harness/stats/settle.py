"""Where a series of step times settles, and whether a measured window opens before it has: the MSER truncation
rule (White 1997) and the start-transient check a cell runs on its warm-up + window step times."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.stats.core import MAD_TO_SIGMA, as_array

MSER_BATCH = 1
"""Steps per batch of the MSER rule. MSER-5 (White et al. 2000) smooths noise at the price of a truncation point
only ever at a multiple of 5 steps; the check below judges each step against the settled steps' noise itself, so
it batches nothing (benchmarks/transients.py, docs/performance.md: MSER-5 and MSER-1 flag the same windows)."""

TRANSIENT_Z = 4.0
"""A start transient must stand this many robust standard errors above the settled steps' median: its steps'
summed excess over that median, divided by the settled steps' robust standard deviation (robust_sd) times the
square root of their number (one step alone: more than 4 standard deviations)."""

RUN_Z = 1.0
"""The transient's steps are found among the window's leading run of steps each more than this many robust
standard deviations above the settled median."""

TRANSIENT_MIN_COST = 0.01
"""A start transient must also cost at least this fraction of the window's time beyond the settled median: a
slower first step that moves the window's throughput by less is no reason to distrust it."""

RELATIVE_SD_FLOOR = 1e-3
"""The settled steps' spread is taken as at least this fraction of their median: identical step times (a
captured graph on a quiet GPU) leave a MAD of zero, beside which any step would stand out."""

MIN_WINDOW_STEPS = 5
"""Fewer measured steps than this are not checked: no settled level to judge the first steps against."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StartTransient:
    """What the start-transient check saw in one window."""

    num_steps: int
    """Measured steps at the window's start that are still in a transient; 0: the window starts settled."""
    settle_index: int
    """Where the warm-up + window series settles by MSER: the number of its leading steps to drop."""
    low_ratio: float
    """The transient steps' smallest time over the window's median step time (NaN without a transient)."""
    high_ratio: float
    """Their largest time over the window's median (NaN without a transient)."""
    cost_frac: float
    """The transient steps' time beyond the settled median, as a fraction of the window's time."""
    reason: str
    """One clause a person can act on; '' when the window starts settled."""

    @property
    def found(self) -> bool:
        return self.num_steps > 0


def mser(values: Sequence[float], *, batch: int = MSER_BATCH, most: int | None = None) -> int:
    """Truncation point of a series by MSER-m: how many leading values to drop as its initial transient.

    Method: the values are cut into k = n // m batches of m (the remainder at the end left out) with means
    Z_j; for each d, MSER(d) = sum_{j >= d} (Z_j - mean(Z_d..))^2 / (k - d)^2, the squared standard error of
    the mean of what is kept, and the truncation is d* m at the d* that minimises it over the first half of
    the batches (d <= k // 2; beyond, the statistic rests on too few values to be trusted), or over the first
    `most` values (a series whose tail is what is judged: :func:`start_transient`). Dropping a
    value that stands far from the rest shrinks the sum of squares more than the shorter series widens
    the error; dropping noise does not pay. References: K. P. White, "An effective truncation heuristic
    for bias reduction in simulation output", Simulation 69(6), 1997, 323-334; K. P. White, M. J. Cobb,
    S. C. Spratt, "A comparison of five steady-state truncation heuristics for simulation", Proc. Winter
    Simulation Conference 2000, 755-760 (MSER-5); K. Hoad, S. Robinson, R. Davies, "Automating warm-up
    length estimation", J. Operational Research Society 61, 2010, 1389-1403 (MSER-5 recommended).
    """
    x = as_array(values, "values")
    if batch < 1:
        raise ValueError(f"batch={batch}: must be >= 1")
    k = x.size // batch
    if k < 2:
        return 0
    z = x[: k * batch].reshape(k, batch).mean(axis=1)
    kept = np.arange(k, 0, -1, dtype=float)  # batches kept after dropping d = 0, 1, ...
    sums, squares = np.cumsum(z[::-1])[::-1], np.cumsum((z * z)[::-1])[::-1]
    stat = np.maximum(squares - sums * sums / kept, 0.0) / (kept * kept)
    last = k // 2 if most is None else min(most // batch, k - 2)
    return int(np.argmin(stat[: last + 1])) * batch


def robust_sd(values: np.ndarray, *, local: bool = True) -> float:
    """Robust standard deviation of step times, at least RELATIVE_SD_FLOOR of their median. `local`: from the
    successive differences (scaled MAD of x[i+1] - x[i], over sqrt 2), the step-to-step noise, which slow waves of
    a shared machine's load do not inflate; else the scaled MAD about the median. On i.i.d. steps both estimate
    the same sigma; on this project's own windows the local one sees more of the real start transients at the
    same false-alarm rate (docs/performance.md). Reference: J. von Neumann, R. H. Kent, H. R. Bellinson, B. I.
    Hart, "The mean square successive difference", Ann. Math. Statist. 12(2), 1941, 153-162 (the variance from
    successive differences, insensitive to a slowly moving mean), made robust here with the MAD."""
    x = np.asarray(values, dtype=float)
    level = float(np.median(x))
    if local and x.size > 2:
        d = np.diff(x)
        sd = MAD_TO_SIGMA * float(np.median(np.abs(d - np.median(d)))) / np.sqrt(2.0)
    else:
        sd = MAD_TO_SIGMA * float(np.median(np.abs(x - level)))
    return max(sd, RELATIVE_SD_FLOOR * level)


def start_transient(warmup_s: Sequence[float], window_s: Sequence[float], *, batch: int = MSER_BATCH,
                    z: float = TRANSIENT_Z, min_cost: float = TRANSIENT_MIN_COST, local: bool = True) -> StartTransient:
    """Whether a measured window opens in a transient: its first steps slower than where the series settles.

    Method: MSER-m (:func:`mser`) on the warm-up + window step times finds where the series settles, searched
    up to the middle of the window (so a long warm-up cannot put the window's start out of reach). When that
    point lies inside the window, its steps after it are the settled ones: their median M and robust spread
    s (:func:`robust_sd`, `local`: of successive differences). The candidates are the leading run of window
    steps (before the settling point) each above M + RUN_Z s: a transient makes the window's first steps slow,
    a slow step later is not one. The transient is the first k of them that maximise their summed excess over
    M divided by s sqrt(k) (the likelihood-ratio estimate of how long a raised mean lasted from the start),
    reported when that score exceeds z (a one-sided z test; one step alone must stand z s above M) and the
    k steps cost at least `min_cost` of the window's time: the window's throughput is then biased low by
    about that fraction, which no test on ranks
    of the window's values sees reliably when the transient holds a few of its first steps
    (:func:`harness.stats.window.steadiness`). A clean window is flagged only when its first steps are random
    spikes that large; detection and false alarms are measured in docs/performance.md
    (benchmarks/transients.py). An empty warm-up is allowed.
    """
    window = as_array(window_s, "window_s", positive=True)
    warmup = np.asarray(warmup_s, dtype=float)
    if warmup.size:
        warmup = as_array(warmup, "warmup_s", positive=True)
    if window.size < MIN_WINDOW_STEPS:
        return _settled(0)
    settle = mser(np.concatenate([warmup, window]), batch=batch, most=warmup.size + window.size // 2)
    head = settle - warmup.size  # window steps before the settling point
    if head <= 0:
        return _settled(settle)
    rest = window[head:]
    level = float(np.median(rest))
    spread = robust_sd(rest, local=local)
    slow = window[:head] > level + RUN_Z * spread
    run = int(np.argmin(slow)) if not slow.all() else head  # the leading run of slow steps
    if run == 0:
        return _settled(settle)
    scores = np.cumsum(window[:run] - level) / (spread * np.sqrt(np.arange(1, run + 1)))
    steps = int(np.argmax(scores)) + 1
    cost = float(np.sum(window[:steps] - level) / window.sum())
    if scores[steps - 1] <= z or cost < min_cost:
        return _settled(settle)
    median = float(np.median(window))
    low, high = float(window[:steps].min() / median), float(window[:steps].max() / median)
    what = transient_steps_text(steps, low, high)
    reason = (f"start transient: {what} the window's median ({100 * cost:.2g}% of the window's time beyond its "
              f"settled steps); lengthen the warm-up or use warmup_steps = \"auto\"")
    return StartTransient(num_steps=steps, settle_index=settle, low_ratio=low, high_ratio=high, cost_frac=cost,
                          reason=reason)


def transient_steps_text(steps: int, low: float, high: float) -> str:
    """'first step at 7.1x' or 'first 3 steps at 2.9-7.1x': a transient's steps and their size over the window's
    median, as the steadiness reason and an A/B's superseded row say it."""
    return f"first step at {high:.2g}x" if steps == 1 else f"first {steps} steps at {low:.2g}-{high:.2g}x"


def has_settled(step_times_s: Sequence[float], tail: int) -> bool:
    """Whether a series still running (an auto warm-up) has settled by its last `tail` steps: they open without
    a start transient (:func:`start_transient`, the steps before them as its warm-up) and their last step does
    not stand above their median by TRANSIENT_Z robust standard deviations, as a hiccup under way would
    (a window opened then starts in it)."""
    x = as_array(step_times_s, "step_times_s", positive=True)
    if tail < MIN_WINDOW_STEPS or x.size < tail:
        raise ValueError(f"tail={tail}: need {MIN_WINDOW_STEPS} <= tail <= {x.size} (the series' length)")
    last = x[-tail:]
    if start_transient(x[:-tail], last).found:
        return False
    level = float(np.median(last))
    spread = robust_sd(last)
    return bool(last[-1] <= level + TRANSIENT_Z * spread)


def _settled(settle: int) -> StartTransient:
    return StartTransient(num_steps=0, settle_index=settle, low_ratio=float("nan"), high_ratio=float("nan"),
                          cost_frac=0.0, reason="")
