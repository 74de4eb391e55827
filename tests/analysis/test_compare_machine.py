"""Comparing two runs when the machine is part of the answer: a machine that wandered (the speed probe's
adjustment) and the environment fields that can move a cell (comparability per cell). The rows are
test_compare's."""

from __future__ import annotations

import numpy as np
import pytest
from test_compare import BASE, one, rows, run, with_fast

from harness.analysis.judge import compare
from harness.analysis.judge.screen import screen_history
from harness.analysis.judge.verdict import (
    FAST_STEPS, IMPROVEMENT, INCONCLUSIVE, NOT_COMPARABLE, REGRESSION, SUSPECT_REGRESSION, THROUGHPUT, UNCHANGED,
    VERDICT_COLUMNS, CellVerdict, Thresholds)


ADJUST = Thresholds()  # speed_adjust is the default


def probed(values, probes, kind="sha256-256KiB+fma-3x64KiB/1", **kw):
    return [r | {"speed_probe_s": p, "speed_probe_kind": kind} for r, p in zip(rows(values, **kw), probes)]


def _machine(rng, n, slow):
    """Probe times and throughputs of a machine whose speed wanders (and is `slow` slower on average):
    throughput follows the probe with slope -1 in logs, plus 0.5 % of noise the probe does not see."""
    x = rng.normal(slow, 0.04, n)
    return 1e-3 * np.exp(x), 100 * np.exp(-x + rng.normal(0, 0.005, n))


def test_a_slower_machine_on_the_baseline_night_is_inconclusive_not_a_code_change():
    rng = np.random.default_rng(0)
    (pc, yc), (pb, yb) = _machine(rng, 8, 0.0), _machine(rng, 8, 0.08)  # baseline machine ~8 % slower
    plain = one(probed(yc, pc), probed(yb, pb), Thresholds(speed_adjust=False))  # --no-speed-adjust
    assert plain.verdict == IMPROVEMENT  # what drift looks like unadjusted
    assert plain.throughput.unadjusted_effect_pct is None
    v = one(probed(yc, pc), probed(yb, pb), ADJUST)
    # the adjustment sees no change, but it extrapolates across a probe shift beyond the floor: not trusted
    assert abs(v.throughput.effect_pct) < 1.5 and v.throughput.unadjusted_effect_pct > 5
    assert v.speed_probe_change_pct < -5 and v.throughput.speed_slope == pytest.approx(-1.0, abs=0.2)
    assert v.verdict == INCONCLUSIVE and v.method.startswith("speed-adjusted")
    assert "machine speed differed between the sides: probe -" in v.reason and "net of it" in v.reason


def test_a_machine_that_wandered_within_the_floor_is_adjusted_for():
    rng = np.random.default_rng(0)
    (pc, yc), (pb, yb) = _machine(rng, 8, 0.0), _machine(rng, 8, 0.015)  # ~1.5 %: within spread and floor
    v = one(probed(yc, pc), probed(yb, pb), ADJUST)
    assert v.verdict == UNCHANGED and abs(v.speed_probe_change_pct) < 3 and "adjusted for machine speed" in v.reason


def test_a_slowdown_in_the_code_is_a_regression_whatever_the_machine_did():
    rng = np.random.default_rng(4)
    (pc, yc), (pb, yb) = _machine(rng, 8, 0.3), _machine(rng, 8, 0.0)  # a hog beside the candidate: +35 % probe
    v = one(probed(yc * 0.5, pc), probed(yb, pb), ADJUST)  # and the code does twice the work
    assert v.verdict == REGRESSION and "beyond what the machine explains" in v.reason
    hog_alone = one(probed(yc, pc), probed(yb, pb), ADJUST)
    assert hog_alone.verdict == INCONCLUSIVE and "machine speed differed" in hog_alone.reason


def test_a_real_slowdown_is_found_through_the_machine_noise():
    rng = np.random.default_rng(1)
    (pc, yc), (pb, yb) = _machine(rng, 8, 0.0), _machine(rng, 8, 0.0)
    v = one(probed(yc * 0.95, pc), probed(yb, pb), ADJUST)
    assert v.verdict == REGRESSION and v.throughput.ci_high_pct < 0 and v.method.startswith("speed-adjusted")
    assert v.throughput.effect_pct == pytest.approx(-5.0, abs=1.0)
    assert v.ci_level == pytest.approx(0.99) and v.p_value < 0.001


@pytest.mark.parametrize("change", [
    lambda c, b: (c[:-1] + [c[-1] | {"speed_probe_s": None}], b),  # one repeat without a probe
    lambda c, b: (c, [r | {"speed_probe_kind": "older/0"} for r in b]),  # the probe changed between runs
])
def test_no_adjustment_unless_every_repeat_has_the_same_probe(change):
    rng = np.random.default_rng(2)
    (pc, yc), (pb, yb) = _machine(rng, 6, 0.0), _machine(rng, 6, 0.0)
    cand, base = change(probed(yc, pc), probed(yb, pb))
    v = one(cand, base, ADJUST)
    assert v.method == "permutation + benjamini_hochberg; bootstrap_percentile interval"
    assert v.throughput.unadjusted_effect_pct is None and "adjusted" not in v.reason


# --- the verdict's structure and its row in verdicts.parquet ----------------------------------------


# --- comparability per cell: only the environment fields that can move the cell ---------------------


def _env(**changes):
    from harness.results.env import env_key

    env = {"device_kind": "cuda", "gpu_name": "H100", "driver_version": "580.1", "cuda_runtime": "13.0",
           "torch_version": "2.11.0", "dali_version": "2.4.0+cuda130", "python_version": "3.12.1"} | changes
    return env, env_key(env)


def _cells(env_and_key, factor=1.0, device="cuda"):
    _, key = env_and_key
    return [r | {"device": device} for backend in ("synthetic", "dali-gpu")
            for r in rows([x * factor for x in BASE], cell=f"{backend}_nchw_fp32_ws1_ga1_0123456789", env_key=key,
                          backend=backend)]


def test_the_dali_version_matters_to_dali_cells_only_and_an_unjudged_cell_shows_both_sides():
    old, new = _env(), _env(dali_version="2.5.0+cuda130")
    comparison = compare.compare_runs(run(_cells(new, 0.9), env=new[0]), run(_cells(old), run_id="base", env=old[0]))
    by = {v.backend: v for v in comparison.verdicts}
    assert by["synthetic"].verdict == REGRESSION and by["synthetic"].env_diff == ""
    dali = by["dali-gpu"]
    assert dali.verdict == NOT_COMPARABLE
    assert dali.reason == "environment differs: dali_version: 2.4.0+cuda130 -> 2.5.0+cuda130"
    assert dali.throughput.candidate_value == pytest.approx(90.0)  # both sides' figures, though unjudged
    assert dali.throughput.baseline_value == pytest.approx(100.0) and dali.throughput.effect_pct is None
    # the GPU stack matters to every GPU cell, and to no CPU cell
    gpu = _env(driver_version="590.2")
    (d, s) = compare.compare_runs(run(_cells(gpu), env=gpu[0]), run(_cells(old), run_id="base", env=old[0])).verdicts
    assert s.verdict == d.verdict == NOT_COMPARABLE
    assert s.reason == "environment differs: driver_version: 580.1 -> 590.2"
    (d, s) = compare.compare_runs(run(_cells(gpu, device="cpu"), env=gpu[0]),
                                  run(_cells(old, device="cpu"), run_id="base", env=old[0])).verdicts
    assert s.verdict == d.verdict == UNCHANGED


def test_rows_whose_manifest_is_not_their_environment_are_judged_by_their_env_key():
    old, new = _env(), _env(dali_version="2.5.0+cuda130")
    resumed = [r | {"env_key": "elsewhere"} if r["repeat"] == 4 else r for r in _cells(new)]  # resumed elsewhere
    comparison = compare.compare_runs(run(resumed, env=new[0]), run(_cells(old), run_id="base", env=old[0]))
    synthetic = next(v for v in comparison.verdicts if v.backend == "synthetic")
    assert synthetic.verdict == NOT_COMPARABLE
    assert synthetic.reason == "environment differs: dali_version: 2.4.0+cuda130 -> 2.5.0+cuda130"


def test_history_counts_past_runs_that_differ_only_in_fields_the_cell_does_not_use():
    old, new = _env(), _env(dali_version="2.5.0+cuda130")
    past = [run(_cells(old, f), run_id=f"past{i}", env=old[0], created_at=f"2026-01-0{i + 1}")
            for i, f in enumerate((1.0, 1.01, 0.99, 1.005, 0.995))]
    by = {v.backend: v for v in screen_history(run(_cells(new, 0.8), env=new[0]), past).verdicts}
    assert by["synthetic"].verdict == SUSPECT_REGRESSION and by["synthetic"].num_history_runs == 5
    assert by["dali-gpu"].verdict == NOT_COMPARABLE and "dali_version" in by["dali-gpu"].reason


def test_a_verdict_holds_one_metric_verdict_per_metric_and_its_row_keeps_the_version_15_columns():
    rng = np.random.default_rng(1)
    (pc, yc), (pb, yb) = _machine(rng, 8, 0.0), _machine(rng, 8, 0.0)
    cand, base = with_fast(probed(yc * 0.95, pc), yc * 1.2), with_fast(probed(yb, pb), yb * 1.2)
    v = one(cand, base, ADJUST)
    assert v.fast_step is not None and v.throughput.speed_slope is not None  # both metrics, speed-adjusted
    assert v.metric(FAST_STEPS) is v.fast_step and v.metric(THROUGHPUT) is v.throughput
    row = v.to_row()
    assert tuple(row) == VERDICT_COLUMNS and len(row) == 83 and row["busy"] is False and row["operators"] is None
    # version 14: why, as data (the change figure leads the words exactly), and the floor's kind
    assert row["reason_code"] == "beyond_floor" and row["floor_kind"] == "default"
    assert row["reason"] == f"{row['reason_figure']}: {v.cause}" and "beyond the 3% floor" in v.cause
    assert (row["throughput_verdict"], row["fast_verdict"]) == (v.throughput.verdict, v.fast_step.verdict)
    assert (row["effect_pct"], row["throughput_p_value"], row["fast_effect_pct"], row["candidate_fast_img_per_s"]) \
        == (v.throughput.effect_pct, v.throughput.p_value, v.fast_step.effect_pct, v.fast_step.candidate_value)
    assert CellVerdict.from_row(row) == v
    untested = one(rows(BASE[:2]), rows(BASE))  # insufficient data: no fast-step rate, no change
    assert untested.fast_step is None and CellVerdict.from_row(untested.to_row()) == untested


def test_an_interleaved_ab_whose_software_moves_the_probe_is_judged_unadjusted_not_held():
    rng = np.random.default_rng(5)
    a = probed(100 * np.exp(rng.normal(0, 0.01, 10)), 1e-3 * np.exp(rng.normal(0, 0.005, 10)))
    b = probed(101 * np.exp(rng.normal(0, 0.01, 10)), 1.035e-3 * np.exp(rng.normal(0, 0.005, 10)))  # B's probe +3.5 %
    baseline = one(b, a)  # two nights: a machine that differed, so the cell is held on it
    assert "machine speed differed between the sides" in baseline.reason
    v = one(b, a, mode="ab", require_same_env=False)
    assert "machine speed differed" not in v.reason and "judged unadjusted" in v.reason
    assert v.throughput.unadjusted_effect_pct is None  # no adjustment was made
    assert v.verdict == UNCHANGED  # +1 % at 10 + 10 pairs, inside the 3 % floor
