"""What a slot calibration says per backend (from compare's own verdicts), and the report's words about rows that
packing may have touched."""

from __future__ import annotations

from test_compare import rows, run

from harness.analysis.judge import compare
from harness.analysis.pages.ci_formats import render_markdown
from harness.analysis.judge.packing import backend_verdicts
from harness.analysis.judge.verdict import Thresholds

SOLO = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
NO_ADJUST = Thresholds(speed_adjust=False)


def calibrate(packed: dict[str, list[float]], solo: dict[str, list[float]]):
    """compare's verdicts of packed against solo, one cell per backend, as `nvbench calibrate-slots` judges."""
    def side(values, run_id):
        return run(*[rows(v, cell=f"{b}_nchw_fp32_ws1_ga1_0123456789", backend=b) for b, v in values.items()],
                   run_id=run_id)

    return backend_verdicts(compare.compare_runs(side(packed, "packed"), side(solo, "solo"), NO_ADJUST,
                                                 require_same_env=False, mode="ab").verdicts)


def test_a_backend_is_cleared_only_when_packing_is_shown_inside_the_floor():
    got = calibrate({"synthetic": [100.1, 100.9, 99.2, 100.4, 99.6, 100.0],  # the same numbers: unchanged
                     "pytorch": [90.0, 91.0, 89.0, 90.5, 89.5, 90.2],  # 10 % slower when packed
                     "dali-cpu": [100.0, 80.0, 120.0, 95.0, 105.0, 99.0]},  # too noisy to tell
                    {b: SOLO for b in ("synthetic", "pytorch", "dali-cpu")})
    assert (got["synthetic"]["verdict"], got["synthetic"]["cleared"]) == ("unchanged", True)
    assert (got["pytorch"]["verdict"], got["pytorch"]["cleared"]) == ("regression", False)
    assert (got["dali-cpu"]["verdict"], got["dali-cpu"]["cleared"]) == ("inconclusive", False)
    low, high = (float(x) for x in got["synthetic"]["change"].split("[")[1].rstrip("]").split(","))
    assert -3 < low < 0 < high < 3  # the interval inside the floor, in the report's words
    assert got["pytorch"]["change"].startswith("-10.")
    (text,) = got["pytorch"]["cells"].values()
    assert text.startswith("regression -10.")


def test_one_moved_cell_keeps_its_backend_solo():
    a, b = "synthetic_a_0123456789", "synthetic_b_0123456789"
    slower = [90.0, 91.0, 89.0, 90.5, 89.5, 90.2]
    got = backend_verdicts(compare.compare_runs(
        run(rows(SOLO, cell=a), rows(slower, cell=b)), run(rows(SOLO, cell=a), rows(SOLO, cell=b), run_id="s"),
        NO_ADJUST, require_same_env=False).verdicts)
    assert got["synthetic"]["verdict"] == "regression" and not got["synthetic"]["cleared"]
    assert got["synthetic"]["change"].endswith("over 2 cells")


def test_the_report_names_rows_that_shared_their_gpu_or_ran_packed_uncalibrated():
    cand = rows(SOLO)
    cand[2] |= {"gpu_shared": True, "gpu_foreign_pids": [4242, 4243]}
    cand[3] |= {"packing": "uncalibrated"}
    comparison = compare.compare_runs(run(cand), run(rows(SOLO), run_id="base"), NO_ADJUST)
    shared, packed = comparison.notes[-2:]
    assert (shared.severity, shared.kind, packed.severity, packed.kind) == ("warning", "shared_gpu", "warning",
                                                                            "uncalibrated")
    shared, packed = str(shared), str(packed)
    assert shared.startswith("warning: 1 row(s) shared their GPU")
    assert "synthetic_nchw_fp32_ws1_ga1 r2 (pid 4242, 4243)" in shared  # the typed pids, joined where shown
    assert packed.startswith("warning: 1 row(s) ran packed beside other jobs with no slot calibration")
    assert "pid 4242" in render_markdown(comparison)
    alone = compare.describe_only(run(cand))
    assert any("shared their GPU" in str(n) for n in alone.notes)
    assert compare.compare_runs(run(rows(SOLO)), run(rows(SOLO), run_id="b"), NO_ADJUST).notes == ()
