"""Verdict logic on constructed results: regression/improvement/unchanged by interval and floor, BH across
cells, insufficient data, not comparable, failures, accuracy bands, fire drills and history screening."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.judge import compare
from harness.analysis.judge.evidence import holm_within, permutations_for
from harness.analysis.judge.findings import PHASE_NAMES
from harness.analysis.judge.repeats import noise_label
from harness.analysis.load.runs import RunInputError, load_run, resolve_pointer
from harness.analysis.judge.run import RunData
from harness.analysis.judge.screen import screen_history
from harness.catalogue.cells import label_from_id
from harness.analysis.judge.verdict import (
    DEFAULT_FLOOR_PCT,
    Note,
    FAILED,
    FAST_STEPS,
    IMPROVEMENT,
    INCONCLUSIVE,
    INSUFFICIENT,
    NO_BASELINE,
    NOT_COMPARABLE,
    REGRESSION,
    SKIPPED,
    SUSPECT_IMPROVEMENT,
    SUSPECT_REGRESSION,
    THROUGHPUT,
    UNCHANGED,
    Thresholds,
)

CELL = "synthetic_nchw_fp32_ws1_ga1_0123456789"
ENV = {"torch_version": "2.4.0", "python_version": "3.12.1", "hostname": "a"}


def rows(values, *, cell=CELL, env_key="k1", status="ok", reason="", is_smoke=False, steady=True, drill=0.0,
         top1=None, num_val=None, backend="synthetic"):
    out = []
    for i, value in enumerate(values):
        out.append({"cell_id": cell, "cell_label": label_from_id(cell), "repeat": i, "status": status, "reason": reason,
                    "backend": backend,
                    "memory_format": "nchw", "precision": "fp32", "world_size": 1, "grad_accum": 1,
                    "throughput_img_per_s": value if status == "ok" else None, "env_key": env_key,
                    "is_smoke": is_smoke, "is_steady": steady, "fire_drill_pct": drill, "top1": top1,
                    "num_val_images": num_val, "duration_s": 1.0})
    return out


def run(*row_lists, run_id="cand", env=ENV, created_at=""):
    return RunData(path=run_id, run_id=run_id, created_at=created_at, environment=env,
                   rows=tuple(r for rs in row_lists for r in rs))


BASE = [100.0, 101.0, 99.0, 100.5, 99.5]


def one(cand, base, th=None, **kw):
    (v,) = compare.compare_runs(run(cand), run(base, run_id="base"), th, **kw).verdicts
    return v


def test_clear_slowdown_is_a_regression_with_an_interval_below_zero():
    v = one(rows([x * 0.9 for x in BASE]), rows(BASE))
    assert v.verdict == REGRESSION and v.is_regression
    assert v.throughput.effect_pct == pytest.approx(-10.0, abs=1e-9)
    t = v.throughput
    assert t.ci_high_pct < 0 and t.ci_low_pct < t.effect_pct < t.ci_high_pct
    assert v.ci_level == pytest.approx(0.99) and v.p_value == pytest.approx(2 / 252)  # exact permutation
    assert (v.num_candidate, v.num_baseline) == (5, 5)
    assert v.method == "permutation + benjamini_hochberg; bootstrap_percentile interval"
    assert "slower beyond the 3% floor" in v.reason and v.reason.startswith("-10.0% [")
    assert v.noise == "quiet" and v.mdc_pct == pytest.approx(2.12, abs=0.01)  # CV 0.79 %, 5 + 5, alpha 0.01


def test_clear_speedup_is_an_improvement():
    v = one(rows([x * 1.1 for x in BASE]), rows(BASE))
    assert v.verdict == IMPROVEMENT and not v.is_regression and v.throughput.ci_low_pct > 0


def test_quiet_noise_is_unchanged_because_the_interval_lies_inside_the_floor():
    v = one(rows([100.5, 99.0, 101.0, 99.5, 100.0]), rows(BASE))
    assert v.verdict == UNCHANGED and -3 < v.throughput.ci_low_pct < 0 < v.throughput.ci_high_pct < 3
    assert "every interval lies inside the ±3% floor (equivalence shown)" in v.reason
    assert v.repeats_needed is None


def test_a_wide_interval_is_inconclusive_never_unchanged():
    # -60 % with an interval reaching past 0: absence of evidence, not evidence of absence
    v = one(rows([20.0, 90.0, 30.0, 100.0, 25.0]), rows(BASE))
    assert v.verdict == INCONCLUSIVE and v.throughput.effect_pct < -40 and v.throughput.p_value > 0.01
    assert "the test does not reject" in v.reason and f"needs ~{v.repeats_needed} repeats a side" in v.reason
    assert v.repeats_needed > 5


def test_a_certain_but_small_change_stays_within_the_floor():
    base = [100.0, 100.01, 99.99, 100.02, 99.98]
    v = one(rows([x * 0.99 for x in base]), rows(base))
    assert v.throughput.ci_high_pct < 0  # real...
    assert v.verdict == UNCHANGED and "inside the ±3% floor" in v.reason  # ...but not practical
    # the same -1 % with an interval that straddles the floor: real, but it may be beyond the floor
    noisy = [100.0, 101.5, 98.5, 102.0, 98.0]
    v = one(rows([x * 0.975 for x in noisy]), rows(noisy), Thresholds(fdr_q=0.05))
    assert v.verdict == INCONCLUSIVE and v.throughput.ci_low_pct < -3 < v.throughput.ci_high_pct
    assert one(rows([x * 0.99 for x in base]), rows(base), Thresholds(floor_pct=0.5)).verdict == REGRESSION


def test_too_few_repeats_is_inconclusive_with_the_repeats_it_needs():
    v = one(rows([90.0, 91.0]), rows(BASE))
    assert v.verdict == INCONCLUSIVE and v.repeats_needed >= 5
    assert "2 + 5 repeats usable" in v.reason and f"needs ~{v.repeats_needed} repeats a side" in v.reason
    assert v.throughput.effect_pct == pytest.approx(-9.5, abs=0.1)
    # 3 + 3 repeats allowed, but no permutation of 6 values can reach p <= 0.01: said, not guessed.
    v = one(rows([90.0, 91.0, 89.0]), rows(BASE[:3]), Thresholds(min_repeats=3))
    assert v.verdict == INCONCLUSIVE and "the test can never reach p <= 0.01 (its smallest p is 0.1)" in v.reason
    assert v.repeats_needed == 5  # what a permutation test needs to reach 0.01; the -10 % itself is clear
    v = one(rows([90.0] * 5), rows(BASE, steady=False), Thresholds(exclude_unsteady=True))
    assert v.verdict == INCONCLUSIVE and v.repeats_needed == 5 and "0 baseline repeats usable" in v.reason


def test_unsteady_repeats_can_be_left_out():
    steady = rows([90.0, 91.0, 89.0, 90.5, 89.5])
    cand = steady + [r | {"repeat": 5 + r["repeat"], "is_steady": False} for r in rows([50.0, 60.0])]
    v = one(cand, rows(BASE), Thresholds(exclude_unsteady=True))
    assert v.num_candidate == 5 and v.verdict == REGRESSION and "2 unsteady" in v.noise
    assert one(cand, rows(BASE)).num_candidate == 7


def test_different_environment_is_not_comparable_and_names_the_fields():
    cand = run(rows([x * 0.5 for x in BASE], env_key="k2"), env=ENV | {"torch_version": "2.5.0", "hostname": "b"})
    (v,) = compare.compare_runs(cand, run(rows(BASE), run_id="base")).verdicts
    assert v.verdict == NOT_COMPARABLE
    assert v.reason == "environment differs: torch_version: 2.4.0 -> 2.5.0"  # hostname is not a key field
    assert v.env_diff == "torch_version: 2.4.0 -> 2.5.0" and v.throughput.effect_pct is None
    # An A/B run compares environments on purpose: the verdict is given and the difference shown.
    (ab,) = compare.compare_runs(cand, run(rows(BASE), run_id="base"), require_same_env=False, mode="ab").verdicts
    assert ab.verdict == REGRESSION and ab.env_diff == "torch_version: 2.4.0 -> 2.5.0"


def test_smoke_results_are_never_compared_with_full_runs():
    v = one(rows(BASE, is_smoke=True), rows(BASE))
    assert v.verdict == NOT_COMPARABLE and "candidate is a --smoke run" in v.reason


def test_failed_skipped_and_missing_cells():
    failed = rows([1, 1, 1], status="failed", reason="rank 0: RuntimeError: boom")
    skipped = rows([1], cell="dali-gpu_nchw_fp32_ws1_ga1_aaaaaaaaaa", status="skipped", reason="no CUDA")
    new = rows(BASE, cell="pytorch_nchw_fp32_ws1_ga1_bbbbbbbbbb")
    gone = rows(BASE, cell="pytorch_nhwc_fp32_ws1_ga1_cccccccccc")
    comparison = compare.compare_runs(run(failed, skipped, new), run(rows(BASE), gone, run_id="base"))
    by = {v.cell_id: v for v in comparison.verdicts}
    assert by[CELL].verdict == FAILED and by[CELL].reason == "3 of 3 repeats failed: rank 0: RuntimeError: boom"
    assert by["dali-gpu_nchw_fp32_ws1_ga1_aaaaaaaaaa"].verdict == SKIPPED
    assert by["pytorch_nchw_fp32_ws1_ga1_bbbbbbbbbb"].verdict == NO_BASELINE
    assert comparison.notes == (Note("1 baseline cell(s) not in this run: pytorch_nhwc_fp32_ws1_ga1_cccccccccc",
                                     kind="missing_cells"),)
    assert comparison.counts() == {FAILED: 1, NO_BASELINE: 1, SKIPPED: 1}


def test_benjamini_hochberg_across_cells_sets_the_interval_level():
    rng = np.random.default_rng(0)
    cand, base = [], []
    for i in range(20):
        cell = f"synthetic_nchw_fp32_ws1_ga{i + 1}_{i:010d}"
        b = list(100 + rng.normal(0, 1, 6))
        c = [x * (0.8 if i == 0 else 1.0) for x in b[::-1]]  # cell 0: -20 %; the rest: the same values
        cand += rows(c, cell=cell)
        base += rows(b, cell=cell)
    # cell 1: marginally significant alone (p < 0.05) but not after BH across 20 cells
    b1 = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
    c1 = [x - 1.3 for x in b1]  # permutation p = 0.013 alone; BH needs <= 0.05 / 20 for a lone discovery
    cand = [r for r in cand if not r["cell_id"].startswith("synthetic_nchw_fp32_ws1_ga2_")]
    base = [r for r in base if not r["cell_id"].startswith("synthetic_nchw_fp32_ws1_ga2_")]
    cell1 = "synthetic_nchw_fp32_ws1_ga2_0000000001"
    cand += rows(c1, cell=cell1)
    base += rows(b1, cell=cell1)
    comparison = compare.compare_runs(run(cand), run(base, run_id="base"), Thresholds(floor_pct=0.5, fdr_q=0.05))
    by = {v.cell_id: v for v in comparison.verdicts}
    strong = by["synthetic_nchw_fp32_ws1_ga1_0000000000"]
    assert strong.verdict == REGRESSION and strong.ci_level == pytest.approx(1 - 1 * 0.05 / 20)
    weak = by[cell1]
    assert weak.p_value < 0.05 < weak.p_adjusted
    # The percentile bootstrap of 6 + 6 repeats is too narrow (its interval misses 0); the exact test holds.
    assert weak.verdict == INCONCLUSIVE and "the test does not reject" in weak.reason
    # the other 19 changed nothing, but at 1 % noise and 6 repeats their intervals do not fit a 0.5 % floor
    assert comparison.counts() == {REGRESSION: 1, INCONCLUSIVE: 19}


def test_accuracy_below_its_band_is_a_regression_even_when_throughput_is_unchanged():
    base = rows(BASE, top1=0.76, num_val=50_000, backend="pytorch")
    v = one(rows(BASE, top1=0.70, num_val=50_000, backend="pytorch"), base)
    assert v.verdict == UNCHANGED and v.accuracy_verdict == "below band" and v.is_regression
    assert v.top1_change == pytest.approx(-0.06) and v.top1_ci_high < 0
    assert one(rows(BASE, top1=0.755, num_val=50_000), base).accuracy_verdict == "within band"  # inside tolerance
    assert one(rows(BASE, top1=0.70, num_val=20), base).accuracy_verdict == "n/a"  # 20 images: noise, not judged
    assert one(rows(BASE), rows(BASE)).accuracy_verdict == "n/a"  # synthetic data has no accuracy


def test_a_fire_drill_is_flagged_in_its_verdict():
    v = one(rows([x * 0.9 for x in BASE], drill=10.0), rows(BASE))
    assert v.verdict == REGRESSION and v.fire_drill_pct == 10.0 and v.baseline_fire_drill_pct == 0.0
    assert v.reason.startswith("FIRE DRILL (candidate +10%, baseline +0% injected work): -10.0%")


def test_describe_only_without_baseline():
    comparison = compare.describe_only(run(rows(BASE)))
    (v,) = comparison.verdicts
    assert v.verdict == NO_BASELINE and comparison.mode == "none"
    assert v.throughput.candidate_value == pytest.approx(100.0)


# --- history ---------------------------------------------------------------------------------


def history(values, *, env_key="k1", drill_at=None):
    return [run(rows([v, v * 1.001, v * 0.999], env_key=env_key, drill=10.0 if i == drill_at else 0.0),
                run_id=f"past{i}", created_at=f"2026-01-{i + 1:02d}") for i, v in enumerate(values)]


PAST = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.9]


def screen(cand_value, past, th=None):
    comparison = screen_history(run(rows([cand_value] * 3)), past, th)
    (v,) = comparison.verdicts
    return v, comparison


def test_history_flags_a_suspect_with_median_and_mad():
    v, comparison = screen(90.0, history(PAST))
    assert v.verdict == SUSPECT_REGRESSION and comparison.suspects == (CELL,)
    med = float(np.median(PAST))
    assert v.history_median_img_per_s == pytest.approx(med)
    assert v.throughput.effect_pct == pytest.approx(100 * (90 / med - 1))
    assert v.robust_z < -3.5 and v.num_history_runs == 8 and "rerun this cell to confirm" in v.reason
    assert not v.is_regression  # a suspect is not a confirmed regression
    assert screen(112.0, history(PAST))[0].verdict == SUSPECT_IMPROVEMENT
    assert screen(99.6, history(PAST))[0].verdict == UNCHANGED


def test_history_uses_only_the_last_n_comparable_runs_and_never_drills():
    past = history([50.0] * 5 + PAST, drill_at=12)  # old level 50, then PAST; the newest is a drill
    v, _ = screen(90.0, past, Thresholds(history_runs=6, history_min_runs=5))
    assert v.num_history_runs == 6 and v.history_median_img_per_s > 99
    assert v.verdict == SUSPECT_REGRESSION


def test_history_with_too_few_or_incomparable_runs():
    assert screen(90.0, history(PAST[:3]))[0].verdict == INSUFFICIENT
    v, _ = screen(90.0, history(PAST, env_key="other"))
    assert v.verdict == NOT_COMPARABLE
    assert screen(90.0, [])[0].verdict == NO_BASELINE


# --- inputs ----------------------------------------------------------------------------------


def test_thresholds_report_every_problem_at_once():
    with pytest.raises(ValueError, match=r"floor_pct=-1: must be in \[0, 100\); fdr_q=2: must be strictly "
                                         r"between 0 and 1; min_repeats=1: a bootstrap needs at least 2"):
        Thresholds(floor_pct=-1, fdr_q=2, min_repeats=1)


def test_load_run_rejects_a_folder_that_is_not_a_run_and_follows_pointers(tmp_path):
    with pytest.raises(RunInputError, match="not an nvbench run folder"):
        load_run(tmp_path)
    pointer = tmp_path / "current.txt"
    pointer.write_text("# promoted 2026-01-01\n\nsome-run\n")
    assert resolve_pointer(pointer) == tmp_path / "some-run"
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(RunInputError, match="pointer file names no run folder"):
        resolve_pointer(tmp_path / "empty.txt")


def test_noise_labels():
    assert noise_label(0.005, 0) == "quiet"
    assert noise_label(0.02, 1) == "moderate, 1 unsteady"
    assert noise_label(0.2, 0) == "very noisy"
    assert math.isclose(DEFAULT_FLOOR_PCT, Thresholds().floor_pct)


# --- two metrics: throughput and the fast-step rate -----------------------------------------------


def with_fast(row_list, fast_values):
    return [r | {"fast_step_img_per_s": f} for r, f in zip(row_list, fast_values)]


def _repeats(rng, n, *, slow=0.0, tail=0.0):
    """Throughput that a shared machine makes noisy (8 %) and a fast-step rate it barely touches (1 %);
    `slow` slows every step (both metrics), `tail` only the slow steps (throughput alone)."""
    through = 100 * np.exp(rng.normal(-slow - tail, 0.08, n))
    fast = 120 * np.exp(rng.normal(-slow, 0.01, n))
    return list(through), list(fast)


def two(rng, n, th=None, **cand):
    (ct, cf), (bt, bf) = _repeats(rng, n, **cand), _repeats(rng, n)
    return one(with_fast(rows(ct), cf), with_fast(rows(bt), bf), th)


def test_fast_steps_find_a_slowdown_that_throughput_noise_hides():
    v = two(np.random.default_rng(3), 10, slow=0.05)
    assert v.verdict == REGRESSION and v.decided_by == FAST_STEPS
    assert v.decided_effect_pct == v.fast_step.effect_pct
    assert v.fast_step.effect_pct == pytest.approx(-5.0, abs=1.0) and v.fast_step.ci_high_pct < 0
    assert v.p_value == pytest.approx(2 * v.fast_step.p_value) and v.throughput.p_value > v.fast_step.p_value
    assert v.ci_level == pytest.approx(0.995)  # the 99 % level split between the two metrics
    assert "fast steps slower beyond the 3% floor" in v.reason and v.reason.startswith("throughput ")
    assert v.mdc_pct < 3  # the fast-step rate's reach, not throughput's (~15 % at 8 %)
    alone = two(np.random.default_rng(3), 10, Thresholds(fast_steps=False), slow=0.05)  # --no-fast-steps
    assert alone.verdict == INCONCLUSIVE and alone.fast_step is None and alone.decided_by == THROUGHPUT


def test_a_slowdown_of_a_few_steps_is_left_to_throughput():
    rng = np.random.default_rng(4)
    cand = with_fast(rows([x * 0.9 for x in BASE * 2]), [120.0 + 0.1 * i for i in range(10)])
    base = with_fast(rows(BASE * 2), [120.0 + 0.1 * i for i in range(10)][::-1])
    v = one(cand, base)
    assert v.verdict == REGRESSION and v.decided_by == THROUGHPUT and abs(v.fast_step.effect_pct) < 1e-9
    assert "throughput slower" in v.reason
    assert two(rng, 10).verdict == INCONCLUSIVE  # unchanged code: neither metric calls it, and throughput's
    # 8 % noise is too wide to show it inside the floor


def test_a_regression_of_one_metric_is_never_hidden_by_an_improvement_of_the_other():
    cand = with_fast(rows([x * 0.9 for x in BASE * 2]), [132.0 + 0.1 * i for i in range(10)])  # fast steps +10 %
    base = with_fast(rows(BASE * 2), [120.0 + 0.1 * i for i in range(10)])
    v = one(cand, base)
    assert v.verdict == REGRESSION and v.decided_by == THROUGHPUT and v.fast_step.effect_pct > 9


def test_fast_steps_need_repeats_enough_for_two_tests_and_a_value_in_every_row():
    rng = np.random.default_rng(5)
    (ct, cf), (bt, bf) = _repeats(rng, 5, slow=0.05), _repeats(rng, 5)
    v = one(with_fast(rows(ct), cf), with_fast(rows(bt), bf))  # 5 + 5: 2 x 2/252 > 0.01, out of reach
    assert v.fast_step is None and "fast steps not tested: at 5 + 5 repeats" in v.reason
    (ct, cf), (bt, bf) = _repeats(rng, 8), _repeats(rng, 8)
    older = with_fast(rows(bt), bf[:-1] + [None])  # a baseline row from before nvbench recorded the rate
    v = one(with_fast(rows(ct), cf), older)
    assert v.fast_step is None and "fast steps" not in v.reason and v.ci_level == pytest.approx(0.99)


@pytest.mark.parametrize(("p_values", "alpha", "expected"), [
    ([0.01], 0.01, [True]),
    ([0.004, 0.03], 0.05, [True, True]),  # 2 x 0.004 <= 0.05, then 0.03 <= 0.05
    ([0.03, 0.02], 0.05, [True, True]),
    ([0.02, 0.2], 0.05, [True, False]),
    ([0.03, 0.04], 0.05, [False, False]),  # 2 x 0.03 > 0.05: the step-down stops at once
    ([0.2, 0.01], 0.0, [False, False]),
])
def test_holm_within_a_cell(p_values, alpha, expected):
    assert holm_within(p_values, alpha) == expected


def test_a_cell_whose_repeats_ran_on_more_than_one_node_is_named_in_a_warning():
    def on(nodes, values, run_id):
        return run([r | {"nodes": n} for r, n in zip(rows(values), nodes)], run_id=run_id)

    one_node = compare.compare_runs(on(["n1"] * 5, BASE, "cand"), on(["n1"] * 5, BASE, "base"))
    assert not any(n.kind == "mixed_nodes" for n in one_node.notes)
    spread = compare.compare_runs(on(["n1", "n2", "n1", "n2", "n1"], BASE, "cand"), on(["n1"] * 5, BASE, "base"))
    (note,) = [str(n) for n in spread.notes if n.kind == "mixed_nodes"]
    assert note.startswith("warning: 1 cell(s)") and f"{CELL} (candidate on n1, n2; baseline on n1)" in note
    apart = compare.compare_runs(on(["n2"] * 5, BASE, "cand"), on(["n1"] * 5, BASE, "base"))
    assert any(f"{CELL} (candidate on n2; baseline on n1)" in str(n) for n in apart.notes)


def test_a_regression_names_the_phase_whose_time_changed_with_its_interval():
    rng = np.random.default_rng(4)

    def timed(values, optimizer_ms):
        out = []
        for r, value in zip(rows(values), values):
            step_s = 8.0 / value  # 8 images a step
            phases = {"data": 0.001, "forward": 0.010, "backward": 0.020,
                      "optimizer": optimizer_ms / 1e3 + rng.normal(0, 2e-4)}
            out.append(r | {f"phase_{k}_median_s": v for k, v in phases.items()} | {"step_time_median_s": step_s})
        return out

    base = timed(BASE, 5.0)
    slower = timed([x * 0.8 for x in BASE], 20.0)  # the optimizer took 15 ms more
    v = one(slower, base)
    assert v.verdict == REGRESSION and v.phase == "optimizer"
    assert v.phase_change_low_ms < 15.0 < v.phase_change_high_ms and v.phase_change_low_ms > 10
    assert v.attribution.startswith(f"optimizer {v.phase_change_ms:+.1f} ms [") and "ms per step" in v.attribution
    from harness.analysis.pages.wording import change_text
    assert change_text(v).endswith(v.attribution)  # console, summary.md, report and JUnit show it
    assert one(rows([x * 0.8 for x in BASE]), rows(BASE)).phase is None  # no phase times: no attribution


def test_a_wide_matrix_draws_enough_permutations_that_a_clear_change_can_reject():
    """36 cells at q = 0.01, two metrics each: with 10,000 random splits a cell's p is at least 2 / 10,001,
    above BH's first step (0.01 / 36), so nothing could ever reject; the comparison draws more."""
    from harness.stats import inference

    th = Thresholds()
    splits = permutations_for(th, 36, 2)
    assert splits >= 10 * 36 * 2 / th.level and permutations_for(th, 2, 2) == th.num_resamples
    cand, base = np.linspace(60, 61, 10), np.linspace(100, 101, 10)  # 10 vs 10, cleanly apart
    p = 2 * inference.permutation_p_value(cand, base, num_permutations=splits)
    assert p <= th.level / 36  # BH rejects it even as the only change among 36 cells


def test_the_phases_compare_reads_are_the_phases_cells_record():
    """Declared once (harness.catalogue.steps): the cell's clocks, the rows' columns and the comparison read the
    same phases."""
    from harness.catalogue import ALL_COLUMN_NAMES
    from harness.catalogue.steps import PHASE_MEDIAN_COLUMNS, PHASE_STEP_COLUMNS, STEP_PHASES
    from harness.cell.instruments.timing import PHASES

    assert PHASE_NAMES is STEP_PHASES and PHASES is STEP_PHASES
    assert set(PHASE_MEDIAN_COLUMNS.values()) | set(PHASE_STEP_COLUMNS.values()) <= set(ALL_COLUMN_NAMES)


def test_rows_taken_under_interference_are_left_out_and_the_verdict_says_the_machine_was_busy():
    quiet = rows(BASE * 2)
    busy = rows([x * 0.3 for x in BASE] + BASE)  # the first five ran beside a neighbour
    for r in busy[:5]:
        r["foreign_cpu_frac"] = 0.61
    for r in busy[5:] + quiet:
        r["foreign_cpu_frac"] = 0.01
    v = one(busy, quiet)
    assert v.num_candidate == 5 and v.verdict != REGRESSION  # the slow, spoiled repeats never count
    assert "the machine was busy: other processes used 61% of the cell's cores in repeat(s) 0, 1, 2, 3, 4 of " \
        "the candidate (left out)" in v.reason
    assert "busy" not in one(rows(BASE * 2), quiet).reason
