"""A profiled window's events as kernels.parquet rows: each op's or kernel's time attributed to the step's
phase range it ran in and to the outermost aten op above it (harness/results/kernels.py has the columns)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any, Iterable, Sequence

from harness.cell.instruments.timing import DATA, FORWARD, BACKWARD, H2D, OPTIMIZER, STEP
from harness.results.kernels import BETWEEN_OPS, GRAPH_REPLAY, NO_OP, OTHER_PHASE
from harness.catalogue import col

RANGED_PHASES = (DATA, H2D, FORWARD, BACKWARD, OPTIMIZER)
"""Phases that open a record_function range (allreduce is timed from backward's hooks, not ranged)."""
GRAPH_LAUNCH = "cudaGraphLaunch"


class _Phases:
    """The step and phase ranges of the window, to find the phase a moment falls in (the innermost range
    that holds it: h2d lies inside data). Ranges are matched by time, not by parent links: on CUDA the
    autograd engine runs backward's ops on a thread of its own."""

    def __init__(self, events: Sequence[Any]) -> None:
        self.steps = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == STEP)
        ranges = sorted((e.time_range.start, e.time_range.end, e.name) for e in events if e.name in RANGED_PHASES)
        self._starts = [r[0] for r in ranges]
        self._ranges = ranges

    def at(self, t_us: float) -> str | None:
        """The phase at `t_us`; OTHER_PHASE inside a step but outside its phases; None outside every step."""
        i = bisect.bisect_right(self._starts, t_us)
        best = None
        for start, end, name in reversed(self._ranges[max(0, i - 4):i]):  # phases nest at most two deep
            if start <= t_us <= end and (best is None or start > best[0]):
                best = (start, name)
        if best is not None:
            return best[1]
        j = bisect.bisect_right(self.steps, (t_us, float("inf")))
        return OTHER_PHASE if j and self.steps[j - 1][0] <= t_us <= self.steps[j - 1][1] else None

    def mean_step_s(self) -> float:
        return sum(e - s for s, e in self.steps) / len(self.steps) / 1e6 if self.steps else float("nan")


def _is_op(event: Any) -> bool:
    return event.name.startswith("aten::")


def _outermost_op(event: Any) -> Any | None:
    """The outermost aten op on the CPU parent chain of `event` (itself included), or None."""
    found, node = None, event
    while node is not None:
        if _is_op(node):
            found = node
        node = node.cpu_parent
    return found


def _is_cpu(event: Any) -> bool:
    return str(event.device_type).endswith("CPU")


def cpu_items(events: Sequence[Any], phases: _Phases) -> Iterable[tuple[str, str, str, float]]:
    """(phase, operator, kernel, self seconds) per CPU event in a step: an aten op's self time under its
    outermost aten op; any other event's (a phase's own range, an autograd node, the step's own range in
    phase `other`) under BETWEEN_OPS. Self times do not overlap, so on one thread they add up to the step."""
    for e in events:
        if not _is_cpu(e) or e.is_async:
            continue
        phase = phases.at(e.time_range.start)
        if phase is None:
            continue
        top = _outermost_op(e)
        operator = top.name if top is not None else BETWEEN_OPS
        yield phase, operator, e.name, e.self_cpu_time_total / 1e6


def device_items(events: Sequence[Any], phases: _Phases) -> Iterable[tuple[str, str, str, float]]:
    """(phase, operator, kernel, device seconds) per device kernel, memcpy or memset: linked to the CPU op
    that launched it by the correlation id (torch.profiler's linked_correlation_id), its phase that of the
    launch. A kernel launched by cudaGraphLaunch is part of a graph's replay: one item GRAPH_REPLAY.
    Pending: written against torch 2.13's profiler, not yet run on a GPU."""
    by_id, launches = {}, defaultdict(list)
    for e in events:
        if not _is_cpu(e):
            continue
        if e.linked_correlation_id:  # a runtime call (cudaLaunchKernel, cudaGraphLaunch) of op e.linked...
            launches[e.linked_correlation_id].append(e)
        else:
            by_id[e.id] = e
    for k in events:
        if _is_cpu(k) or getattr(k, "is_user_annotation", False):  # a range's span on the GPU's timeline
            continue
        op = by_id.get(k.linked_correlation_id)
        runtime = launches.get(k.linked_correlation_id, [])
        when = op.time_range.start if op is not None else runtime[0].time_range.start if runtime else k.time_range.start
        phase = phases.at(when)
        if phase is None:
            continue
        seconds = (k.time_range.end - k.time_range.start) / 1e6
        if any(r.name == GRAPH_LAUNCH for r in runtime):
            yield phase, GRAPH_REPLAY, GRAPH_REPLAY, seconds
            continue
        top = _outermost_op(op) if op is not None else None
        yield phase, top.name if top is not None else NO_OP, k.name, seconds


def kernel_rows(events: Sequence[Any], *, cell_id: str, repeat: int, rank: int, is_cuda: bool,
                steps: int) -> list[dict[str, Any]]:
    """kernels.parquet rows of one profiled window (`events`: torch.profiler's FunctionEvents)."""
    phases = _Phases(events)
    items = device_items(events, phases) if is_cuda else cpu_items(events, phases)
    calls: dict[tuple[str, str, str], int] = defaultdict(int)
    total: dict[tuple[str, str, str], float] = defaultdict(float)
    for phase, operator, kernel, seconds in items:
        calls[(phase, operator, kernel)] += 1
        total[(phase, operator, kernel)] += seconds
    if is_cuda:  # a graph's replay counts once per launch, not once per kernel inside it
        for key in [k for k in calls if k[1] == GRAPH_REPLAY]:
            calls[key] = sum(1 for e in events if _is_cpu(e) and e.name == GRAPH_LAUNCH
                             and phases.at(e.time_range.start) == key[0])
    step_s = phases.mean_step_s()
    return [{col.cell_id: cell_id, "repeat": repeat, "rank": rank, "device": "cuda" if is_cuda else "cpu",
             "phase": phase, "operator": operator, "kernel": kernel, col.graph_replay: operator == GRAPH_REPLAY,
             col.calls_per_step: calls[key] / steps, col.time_per_step_s: total[key] / steps, col.profiled_steps: steps,
             col.step_time_s: step_s}
            for key in sorted(total) for phase, operator, kernel in [key]]
