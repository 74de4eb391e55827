"""The adaptive A/B's look plan (harness.orchestrate.workflows.looks), as `nvbench ab` asks for it."""

from __future__ import annotations

import pytest

from harness.analysis.judge.verdict import Thresholds
from harness.orchestrate.workflows.looks import plan_looks


def test_looks_that_cannot_decide_are_dropped_and_the_level_is_split_over_the_rest():
    plan = plan_looks(5, 20, Thresholds(), knob="--max-repeats 20", asked=True)
    # 5 + 5 pairs' smallest p (2 / 252) is above 0.01 / 3: the A/B starts at 10 and splits 0.01 over 10 and 20
    assert plan.looks == [10, 20] and plan.thresholds.looks == 2 and plan.warning is None
    assert plan.note.endswith("so the A/B starts at 10 pairs a side (looks [10, 20])")
    assert plan_looks(10, None, Thresholds(), knob="--repeats 10", asked=True).note is None


def test_repeats_that_can_never_decide_are_bad_input_when_asked_and_a_warning_when_the_matrix_set_them():
    with pytest.raises(ValueError, match=r"^--repeats 3: "):
        plan_looks(3, None, Thresholds(), knob="--repeats 3", asked=True)
    plan = plan_looks(3, None, Thresholds(), knob="run.repeats = 3", asked=False)
    assert plan.looks == [3] and plan.warning.startswith("warning: run.repeats = 3: ")
    assert plan.warning.endswith(": every cell will be inconclusive")
