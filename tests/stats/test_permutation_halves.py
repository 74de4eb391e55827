"""The permutation test's count by halves (meet in the middle on the split's sum) against the enumeration of
every split, ties included, and the 10 + 10 test a wide A/B asks for a thousand times."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from harness.stats import inference


def enumerated(pooled: np.ndarray, k: int, observed: float) -> int:
    idx = np.array(list(itertools.combinations(range(pooled.size), k)), dtype=np.intp)
    in_cand = np.zeros((idx.shape[0], pooled.size), dtype=bool)
    np.put_along_axis(in_cand, idx, True, axis=1)
    return inference._count_extreme(pooled, in_cand, observed)


@pytest.mark.parametrize("seed", range(12))
def test_counting_by_halves_is_the_enumeration(seed):
    rng = np.random.default_rng(seed)
    cand = rng.lognormal(0.03 * (seed % 3), 0.05, int(rng.integers(2, 10)))
    base = rng.lognormal(0.0, 0.05, int(rng.integers(2, 10)))
    if seed % 4 == 0:  # ties: values on a coarse grid, splits with the observed statistic exactly
        cand, base = np.round(cand, 2), np.round(base, 2)
    pooled, k = np.concatenate([cand, base]), cand.size
    observed = abs(math.log(cand.mean() / base.mean()))
    assert inference._count_by_halves(pooled, k, observed) == enumerated(pooled, k, observed)


def test_ten_a_side_is_exact_where_it_used_to_be_drawn():
    cand, base = [1.0 + i / 100 for i in range(10)], [2.0 + i / 100 for i in range(10)]
    assert inference.permutation_p_value(cand, base) == pytest.approx(2 / math.comb(20, 10))
    assert inference.permutation_p_value(cand, cand) == 1.0
