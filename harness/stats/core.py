"""What every statistics module shares: the interval type and the checks each function runs on its input."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

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


def as_array(values: Sequence[float], name: str, *, positive: bool = False) -> np.ndarray:
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


def check_open_unit(value: float, name: str) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name}={value}: must be strictly between 0 and 1")


def check_same_length(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.size != b.size:
        raise ValueError(
            f"{name_a} ({a.size} values) and {name_b} ({b.size} values) must have the same length"
        )


def batch_sums(x: np.ndarray, num_batches: int) -> tuple[np.ndarray, np.ndarray]:
    """Contiguous, non-overlapping batches (sizes differ by at most one): per-batch sums and sizes."""
    sizes = np.full(num_batches, x.size // num_batches)
    sizes[: x.size % num_batches] += 1
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return np.add.reduceat(x, starts), sizes
