"""The acceptance A/B on the CPU machine: a checkout whose model runs one extra fixed-size matmul per block
against the checkout before it. The timed verdict calls a regression, which starts the profiled repeats; the
verdict line names aten::mm under forward, its change within 25 % of what the matmuls cost alone, and no other
(phase, operator) is called changed (a phase's own time outside aten ops is no operator: see the assertion)."""

from __future__ import annotations

import json
import shutil
import statistics
import time

import pyarrow.parquet as pq
import pytest

from conftest import ROOT, nvbench
from harness.analysis.verdict import IMPROVEMENT, REGRESSION
from harness.results.kernels import BETWEEN_OPS

SIZE = 320
"""The injected matmul: SIZE x SIZE by SIZE x SIZE, once per residual block. Small enough to stay in cache: at
576 (3.9 MB a call) the next block's convolution was called +1 ms slower too, a real side effect of the work."""
BLOCKS = 8
"""resnet18's residual blocks (2 + 2 + 2 + 2)."""
CALLS = 4
"""Calls of the injected matmul per block: one operator (aten::mm), 4 x 8 calls a step, ~25 ms on top of the tiny
cell's ~55 ms step. With one call a block (~6 ms, +11 %) CI's loaded machine (throughput CV ~15 % a repeat) left
the timed verdict inconclusive at 10 pairs a side; the profiled repeats it starts are what this test is about."""
KERNEL_REPEATS = 8
"""Profiled repeats a side. The default 5 decides a new operator at a process-to-process CV up to ~25 %; the
shared 2-core machine's load (5-10) gave ~35 %, where 5 left aten::mm at p 0.003, adjusted 0.067 (inconclusive)."""
FLOOR_PCT = 3.0
"""The diff's floor here (default 1 % of the step). The injected work slows the rest of B's step a little too, a
true effect and not the one under test: aten::conv2d came out +1.3 ms [+0.6, +2.1] (called, in one of four
fresh-clone suites) and +1.2 ms [-0.4, +2.8] (with 192 x 192 matmuls into a preallocated output: not the
matrices' cache footprint, then), about 2 % of the ~60 ms profiled step. At 3 % such a change is never called;
the injected aten::mm, ~21 ms, is seven times the floor."""
INJECTED = f"""        out = self.bn2(self.conv2(out))
        for _ in range({CALLS}):  # injected: one fixed-size matmul, {CALLS} calls per block
            torch.mm(_EXTRA, _EXTRA)
"""


def _matmuls_per_step_s(repeats: int = 30) -> float:
    """What the injected work costs alone: the mean of BLOCKS x CALLS matmuls on one thread (as the cells run), with no
    cell running beside it. Timed while the A/B ran (every 5 s), it came out 1.5-2x the in-cell figure three
    times: on a loaded 2-core machine the sampler always had a cell beside it, the cell only rarely the sampler.
    So it runs right after the A/B, whose last processes are the profiled repeats."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a = torch.ones(SIZE, SIZE)
        torch.mm(a, a)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(BLOCKS * CALLS):
                torch.mm(a, a)
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return statistics.fmean(times)


def _slower_checkout(tmp_path):
    other = tmp_path / "slower"
    shutil.copytree(ROOT / "harness", other / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    model = other / "harness" / "models" / "resnet.py"
    text = model.read_text()
    old = "        out = self.bn2(self.conv2(out))\n"
    assert text.count(old) == 1  # BasicBlock's, resnet18's block
    extra = f"\n_EXTRA = torch.ones({SIZE}, {SIZE})\n\n\nclass BasicBlock"
    text = text.replace(old, INJECTED).replace("\nclass BasicBlock", extra, 1)
    model.write_text(text)
    return other


@pytest.mark.slow
def test_an_extra_matmul_per_block_is_named_under_forward_at_its_cost(tiny_matrix, tmp_path):
    from harness.analysis.kernel_diff import diff_cell
    from harness.results.kernels import read_kernels

    matrix, out = tiny_matrix(repeats=5), tmp_path / "ab"
    # Up to 10 pairs while inconclusive, throughput alone, no machine-speed adjustment: under the shared machine's
    # load the timed verdict was inconclusive three times in four tries (5 + 5 pairs; at 10 + 10 the probe
    # unbalanced by 7 %; then the fast-step rate's test). What is tested here is the kernel diff the verdict starts.
    proc = nvbench("ab", str(matrix), "--b-checkout", str(_slower_checkout(tmp_path)), "--out", str(out),
                   "--max-repeats", "10", "--no-speed-adjust", "--no-fast-steps",
                   "--kernel-repeats", str(KERNEL_REPEATS), "--kernel-steps", "3", "--kernel-floor", str(FLOOR_PCT),
                   timeout=1200)
    alone_s = _matmuls_per_step_s()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    at = next((i for i, x in enumerate(lines) if x.startswith("regression:")), None)
    assert at is not None, proc.stdout + proc.stderr[-3000:]
    block = [lines[at]]
    for x in lines[at + 1:]:  # the verdict line goes on, wrapped to the terminal, on indented lines
        if not x.startswith(" "):
            break
        block.append(x.strip())
    verdict = " ".join(block)
    assert "operators: forward" in verdict and "aten::mm" in verdict, proc.stdout + proc.stderr[-3000:]
    # the profiled repeats ran apart: their rows under profile/, flagged, never among the timed ones
    for side in "ab":
        timed = pq.read_table(out / side / "cells").to_pylist()
        assert len(timed) >= 5 and all(r["profile_tool"] is None for r in timed)
        profiled = pq.read_table(out / side / "profile" / "cells").to_pylist()
        assert [r["profile_tool"] for r in profiled] == ["torch"] * KERNEL_REPEATS
    assert len(json.loads((out / "ab.json").read_text())["kernel_repeats"]["order"]) == 2 * KERNEL_REPEATS
    cell = pq.read_table(out / "a" / "cells").column("cell_id")[0].as_py()
    d = diff_cell(read_kernels(out / "a" / "kernels.parquet"), read_kernels(out / "b" / "kernels.parquet"), cell)
    called = {(o.phase, o.operator): o for o in d.operators if o.verdict in (REGRESSION, IMPROVEMENT)}
    seen = f"called: {[(k, o.text()) for k, o in called.items()]}; the matmuls alone {1e3 * alone_s:.2f} ms a step"
    # no other operator: a phase's own time between ops (BETWEEN_OPS) is no operator, and the extra work can move
    # it (on this shared machine B's optimizer Python time rose in every repeat; not the collector: it never ran)
    ops = [k for k in called if k[1] != BETWEEN_OPS]
    assert ops == [("forward", "aten::mm")], seen
    assert called[("forward", "aten::mm")].change_s == pytest.approx(alone_s, rel=0.25), seen
    assert (out / "report" / "kernels.md").exists() and "aten::mm" in (out / "report" / "summary.md").read_text()
