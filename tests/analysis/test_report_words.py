"""The report's words and plots on constructed values: a cell's change text and a long window thinned for its
plot."""

from __future__ import annotations

import numpy as np

from harness.analysis.judge.verdict import CellVerdict, MetricVerdict
from harness.analysis.pages import charts, wording


def test_change_text_shows_the_fast_step_rate_and_marks_the_metric_that_decided():
    common = dict(cell_id="c", floor_pct=3.0, fdr_q=0.01, accuracy_tolerance=0.01)
    t = MetricVerdict(effect_pct=-1.0, ci_low_pct=-9.0, ci_high_pct=7.0)
    fast = dict(metrics={"throughput": t, "fast steps": MetricVerdict(effect_pct=-5.2, ci_low_pct=-6.9,
                                                                       ci_high_pct=-3.5)})
    regressed = CellVerdict(verdict="regression", reason="", decided_by="fast steps", **common, **fast)
    assert wording.change_text(regressed) == "-1.0% [-9.0, +7.0]; fast steps -5.2% [-6.9, -3.5]*"
    assert regressed.decided_effect_pct == -5.2
    same = CellVerdict(verdict="unchanged", reason="", decided_by="fast steps", **common, **fast)
    assert wording.change_text(same) == "-1.0% [-9.0, +7.0]; fast steps -5.2% [-6.9, -3.5]"  # nothing decided
    alone = CellVerdict(verdict="regression", reason="", decided_by="throughput", metrics={"throughput": t}, **common)
    assert wording.change_text(alone) == "-1.0% [-9.0, +7.0]" and alone.decided_effect_pct == -1.0


def test_a_long_window_is_thinned_to_its_fastest_and_slowest_steps_so_a_stall_stays_visible():
    steps = np.arange(10_000, dtype=float)
    times = 0.050 + 0.001 * np.sin(steps / 50)
    times[7_777] = 0.400  # one stall among 10,000 steps
    x, y = charts._thin(steps, times)
    assert len(x) <= charts.MAX_POINTS and np.all(np.diff(x) > 0)  # in step order
    assert 7_777 in x and y.max() == 0.400 and y.min() == times.min()
