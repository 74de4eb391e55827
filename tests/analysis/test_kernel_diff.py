"""The kernel diff's statistics on tables of known answer: a shifted operator is called, the correction across
items holds back a modest p-value among many, and the closure line adds up."""

from __future__ import annotations

import numpy as np
import pytest

from harness.analysis.judge.kernel_diff import REPLACED, diff_cell, top_line
from harness.analysis.judge.verdict import INCONCLUSIVE, REGRESSION, UNCHANGED
from harness.results.kernels import kernels_table

STEP_S = 0.100


def _rows(values: dict[tuple[str, str, str], list[float]]) -> list[dict]:
    """kernels rows of cell `c`: one per (item, repeat) with the given seconds per step."""
    return [{"cell_id": "c", "repeat": r, "rank": 0, "device": "cpu", "phase": phase, "operator": op, "kernel": k,
             "graph_replay": False, "calls_per_step": 1.0, "time_per_step_s": s, "profiled_steps": 10,
             "step_time_s": STEP_S} for (phase, op, k), seconds in values.items() for r, s in enumerate(seconds)]


def _noise(rng, mean: float, n: int = 5, sd: float = 2e-4) -> list[float]:
    return list(mean + rng.normal(0, sd, n))


def test_a_shifted_operator_is_called_and_nothing_else_and_the_closure_adds_up():
    rng = np.random.default_rng(1)
    base = {("forward", f"aten::op{i}", f"aten::op{i}"): _noise(rng, 0.005) for i in range(10)}
    cand = {key: _noise(rng, 0.005) for key in base}
    cand[("forward", "aten::op3", "aten::op3")] = _noise(rng, 0.008)  # +3 ms
    d = diff_cell(kernels_table(_rows(base)), kernels_table(_rows(cand)), "c", timed_step_change_s=0.0031)
    called = {(o.phase, o.operator): o for o in d.operators if o.verdict == REGRESSION}
    assert list(called) == [("forward", "aten::op3")]
    assert called[("forward", "aten::op3")].ci_low_s < 0.003 < called[("forward", "aten::op3")].ci_high_s
    assert all(o.verdict in (UNCHANGED, INCONCLUSIVE) for o in d.operators if o.operator != "aten::op3")
    line = top_line(d)
    assert line.startswith("forward ") and "aten::op3 +3.1" in line and "of +3.1 ms (timed step)" in line


def test_one_modest_change_among_fifty_items_is_held_back_by_the_correction():
    """p about 0.0005 alone would pass q = 0.01; Benjamini-Hochberg over fifty items asks for 0.0002."""
    rng = np.random.default_rng(7)
    base = {("backward", f"aten::op{i}", f"aten::op{i}"): _noise(rng, 0.01, sd=1e-3) for i in range(50)}
    cand = {key: _noise(rng, 0.01, sd=1e-3) for key in base}
    target = ("backward", "aten::op0", "aten::op0")
    base[target] = [0.0100, 0.0110, 0.0090, 0.0105, 0.0095]
    cand[target] = [0.0128, 0.0138, 0.0118, 0.0133, 0.0123]  # +2.8 ms; Welch p ~ 0.0005
    d = diff_cell(kernels_table(_rows(base)), kernels_table(_rows(cand)), "c", q=0.01)
    op = next(o for o in d.operators if o.operator == "aten::op0")
    assert 2e-4 < op.p_value < 0.01 and op.p_adjusted > 0.01
    assert op.verdict == INCONCLUSIVE and op.repeats_needed and op.repeats_needed > 5
    assert not [o for o in d.operators if o.verdict == REGRESSION]


def test_kernels_on_one_side_only_are_paired_as_replaced_under_their_operator():
    rng = np.random.default_rng(3)
    base = {("forward", "aten::conv2d", "aten::mkldnn_convolution"): _noise(rng, 0.02),
            ("forward", "aten::conv2d", "aten::empty"): _noise(rng, 0.0001, sd=1e-6)}
    cand = {("forward", "aten::conv2d", "aten::_slow_conv2d_forward"): _noise(rng, 0.03),
            ("forward", "aten::conv2d", "aten::empty"): _noise(rng, 0.0001, sd=1e-6),
            ("forward", "aten::conv2d", "aten::view"): _noise(rng, 0.0001, sd=1e-6)}
    d = diff_cell(kernels_table(_rows(base)), kernels_table(_rows(cand)), "c")
    swap = [k for k in d.kernels if k.presence == REPLACED]
    assert [(k.replaced, k.kernel, k.verdict) for k in swap] == [
        ("aten::mkldnn_convolution", "aten::_slow_conv2d_forward", REGRESSION)]
    assert swap[0].change_s == pytest.approx(0.01, abs=1e-3)
    assert [k.kernel for k in d.kernels if k.presence == "new"] == ["aten::view"]  # below the floor: not paired
    assert "aten::mkldnn_convolution replaced by aten::_slow_conv2d_forward" in top_line(d)


def test_an_items_word_is_decides_rule_in_seconds_against_the_floor(monkeypatch):
    """One verdict rule (issue 60): the kernel diff calls each tested item through decide.Evidence.call, with its
    change and interval in seconds, the floor's seconds and more time as worse; a rule changed there changes the
    kernel diff's words too."""
    from harness.analysis.judge import decide

    rng = np.random.default_rng(1)
    base = {("forward", f"aten::op{i}", f"aten::op{i}"): _noise(rng, 0.005) for i in range(4)}
    cand = {key: _noise(rng, 0.005) for key in base}
    cand[("forward", "aten::op1", "aten::op1")] = _noise(rng, 0.008)  # +3 ms
    seen = []
    real = decide.Evidence.call

    def spy(self, floor):
        seen.append((self.name, self.higher_is_better, floor, self.effect_pct))
        return real(self, floor)

    monkeypatch.setattr(decide.Evidence, "call", spy)
    d = diff_cell(kernels_table(_rows(base)), kernels_table(_rows(cand)), "c")
    tested = [o for o in [*d.operators, *d.kernels] if o.tested]
    assert len(seen) == len(tested) > 0 and {s[1] for s in seen} == {False} and {s[2] for s in seen} == {d.floor_s}
    op1 = next(s for s in seen if s[0] == "aten::op1")
    assert op1[3] == pytest.approx(0.003, abs=5e-4)  # seconds, not %
    monkeypatch.setattr(decide.Evidence, "call", lambda self, floor: UNCHANGED)
    again = diff_cell(kernels_table(_rows(base)), kernels_table(_rows(cand)), "c")
    assert {o.verdict for o in again.operators} == {UNCHANGED}
