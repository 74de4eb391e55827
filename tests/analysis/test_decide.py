"""harness.analysis.judge.decide: the four answers, over hand-made evidence and samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.judge import compare, decide
from harness.analysis.judge.run import RunData
from harness.analysis.judge.decide import INCONCLUSIVE, REGRESSION, UNCHANGED, Evidence
from harness.analysis.judge.verdict import Thresholds


def ev(effect, low, high, *, significant=None, log_sd=0.03, name="throughput"):
    if significant is None:
        significant = high < 0 or low > 0
    return Evidence(name=name, effect_pct=effect, ci_low_pct=low, ci_high_pct=high, significant=significant,
                    log_sd=log_sd)


def call(*evidence, n=10, probe=None, floor=3.0, alpha=0.01):
    return decide.decide(list(evidence), floor_pct=floor, alpha=alpha, n_candidate=n, n_baseline=n, probe=probe)


def test_an_interval_inside_the_floor_is_unchanged():
    d = call(ev(-0.05, -0.5, 0.4))
    assert d.verdict == UNCHANGED and d.repeats_needed is None and "equivalence shown" in d.reason


def test_an_interval_that_straddles_the_floor_is_inconclusive_with_the_repeats_it_needs():
    d = call(ev(-10.0, -16.0, -2.0))  # a real slowdown (excludes 0) whose interval reaches inside the floor
    assert d.verdict == REGRESSION  # ... is a regression: the test rejects and the change is beyond the floor
    d = call(ev(-10.0, -21.0, +2.5, significant=False))
    assert d.verdict == INCONCLUSIVE and d.repeats_needed > 10
    assert f"needs ~{d.repeats_needed} repeats a side" in d.reason
    d = call(ev(-2.0, -3.5, -0.5))  # real, but it may be beyond the floor
    assert d.verdict == INCONCLUSIVE and "straddles the ±3% floor" in d.reason


def test_a_true_ten_percent_slowdown_is_never_unchanged_at_any_noise():
    rng = np.random.default_rng(0)
    seen = set()
    for noise in (0.01, 0.05, 0.10, 0.20):
        for _ in range(40):
            base = 100 * np.exp(rng.normal(0, noise, 5))
            cand = 90 * np.exp(rng.normal(0, noise, 5))
            rows = [_row(x, i) for i, x in enumerate(base)], [_row(x, i) for i, x in enumerate(cand)]
            (v,) = compare.compare_runs(_run(rows[1], "b"), _run(rows[0], "a"),
                                        Thresholds(num_resamples=500)).verdicts
            seen.add(v.verdict)
            assert v.verdict != UNCHANGED, (noise, v.reason)
    assert seen == {REGRESSION, INCONCLUSIVE}  # both branches were reached


def test_repeats_a_permutation_test_can_never_decide_are_inconclusive():
    assert decide.smallest_permutation_p(3, 3) == pytest.approx(0.1)
    assert decide.repeats_to_reach(0.01) == 5 and decide.repeats_to_reach(0.1) == 3
    d = call(ev(-60.0, -70.0, -50.0), n=3)  # the clearest change, at 3 + 3 repeats and the 0.01 level
    assert d.verdict == INCONCLUSIVE and "can never reach p <= 0.01 (its smallest p is 0.1)" in d.reason
    assert d.repeats_needed == 5
    assert decide.reach_problem(3, 0.01, what="--repeats 3").startswith("--repeats 3: a permutation test of 3 + 3")
    assert decide.reach_problem(5, 0.01, what="x") is None


def test_repeats_needed_follows_the_spread_and_the_distance_to_the_floor():
    wide = decide.repeats_needed([ev(-1.0, -9.0, 7.0, log_sd=0.08)], floor_pct=3.0, alpha=0.01, n_now=5)
    narrow = decide.repeats_needed([ev(-1.0, -3.2, 1.2, log_sd=0.02)], floor_pct=3.0, alpha=0.01, n_now=5)
    assert wide > narrow >= 6
    # n = 2 ((z_0.995 + z_0.8) s / (floor - |d|))^2 on log scale, the floor on the slowdown's side
    assert narrow == math.ceil(2 * (3.4166 * 0.02 / (-math.log(0.97) + math.log(0.99))) ** 2) == 23
    on_the_floor = decide.repeats_needed([ev(-3.0, -6.0, 0.0)], floor_pct=3.0, alpha=0.01, n_now=5)
    assert on_the_floor > decide.MAX_REPEATS_SHOWN and "more than 1000" in decide.needed_text(on_the_floor)


def test_a_probe_that_shifted_on_one_side_makes_the_adjusted_answer_inconclusive():
    base = np.exp(np.random.default_rng(1).normal(0, 0.01, 8)) * 1e-3
    shift, interval, p, balanced = decide.probe_balance(base * 1.2, base, floor_pct=3.0, alpha=0.01, confidence=0.99)
    assert shift == pytest.approx(20.0) and not balanced and interval[0] < 20 < interval[1]
    unadjusted = ev(-17.0, -19.0, -15.0)  # all of it the machine: 1 / 1.2 - 1 = -16.7 %
    probe = decide.ProbeBalance(shift_pct=shift, p_value=p, balanced=False,
                                net=decide.net_of_probe(unadjusted, shift, interval))
    d = call(ev(-0.3, -1.0, 0.5), probe=probe)  # the adjusted evidence alone would say unchanged
    assert d.verdict == INCONCLUSIVE and "machine speed differed between the sides: probe +20.0%" in d.reason
    drill = ev(-60.0, -65.0, -55.0)  # twice the work on top of the slower machine
    probe = decide.ProbeBalance(shift_pct=shift, p_value=p, balanced=False, net=decide.net_of_probe(drill, shift, interval))
    assert call(ev(-0.3, -1.0, 0.5), probe=probe).verdict == REGRESSION
    # a shift within the floor that the sides' own spread cannot explain is a difference too
    assert decide.probe_balance(base * 1.025, base, floor_pct=3.0, alpha=0.01, confidence=0.99)[3] is False
    assert decide.probe_balance(base[::-1], base, floor_pct=3.0, alpha=0.01, confidence=0.99)[3] is True


FLAKE_A, FLAKE_B = (72.6, 89.3, 88.2), (31.7, 19.1, 26.9)
"""The nightly fire drill judged `unchanged` once: three interleaved pairs of a +200 % drill."""


@pytest.mark.parametrize("disturb", [
    (1.0, 1.0), (1.0, 2.5), (2.5, 1.0), (1.0, 0.4), (0.4, 1.0), (1.0, 3.0),
], ids=["quiet", "b-hogged", "a-hogged", "b-fast-probe", "a-fast-probe", "b-probe-tracks"])
def test_the_nightly_flake_can_never_be_unchanged_however_the_sides_are_disturbed(disturb):
    rng = np.random.default_rng(0)
    probe_a = 1e-3 * disturb[0] * np.exp(rng.normal(0, 0.005, 3))
    probe_b = 1e-3 * disturb[1] * np.exp(rng.normal(0, 0.005, 3))
    if disturb == (1.0, 3.0):  # B's probe tracks B's throughput exactly: all of it looks like machine
        probe_b = 1e-3 * np.array([np.mean(FLAKE_A) / x for x in FLAKE_B])
    a = [_row(x, i, probe=p) for i, (x, p) in enumerate(zip(FLAKE_A, probe_a))]
    b = [_row(x, i, probe=p, drill=200.0) for i, (x, p) in enumerate(zip(FLAKE_B, probe_b))]
    for th in (Thresholds(min_repeats=3, fdr_q=0.1), Thresholds(min_repeats=3), Thresholds()):
        (v,) = compare.compare_runs(_run(b, "b"), _run(a, "a"), th).verdicts
        assert v.verdict in (REGRESSION, INCONCLUSIVE), (th, v.reason)
        if disturb[0] != disturb[1] and th.fdr_q == 0.1:  # the probe moved: the adjustment alone is not trusted
            assert "machine speed differed between the sides" in v.reason, v.reason
            assert abs(v.throughput.effect_pct) < 100  # what was judged, not the adjustment's extrapolation


def _row(x, i, *, probe=None, drill=0.0):
    row = {"cell_id": "synthetic_nchw_fp32_ws1_ga1_0123456789", "repeat": i, "status": "ok", "reason": "",
           "backend": "synthetic", "memory_format": "nchw", "precision": "fp32", "world_size": 1, "grad_accum": 1,
           "throughput_img_per_s": float(x), "env_key": "k", "is_smoke": False, "is_steady": True,
           "fire_drill_pct": drill}
    if probe is not None:
        row |= {"speed_probe_s": float(probe), "speed_probe_kind": "sha256/1"}
    return row


def _run(rows, run_id):
    return RunData(path=run_id, run_id=run_id, created_at="", environment={}, rows=tuple(rows))
