"""The columns of work.parquet: what a counted process's steps did, counted exactly, one row per (cell, process,
rank, phase, counter, key); the counters' names; its version history and writing: harness.results.work."""

from __future__ import annotations

from harness.catalogue.columns import F, I, S, Column, per_work

DEFAULT_WORK_REPEATS = 1
"""`nvbench ab --work-repeats`' default: counted processes per cell and side, whatever the verdict (0: none)."""
DEFAULT_WORK_STEPS = 3
"""--work-steps' default: steps each counted process counts, after the cell's ordinary warm-up."""

OP_CALLS = "op_calls"
"""Outermost aten ops called (what the model's code calls: torch.mm is aten::mm), key the op."""
HOST_SYNCS = "host_syncs"
"""Host-device synchronisations, key the op (aten::_local_scalar_dense behind .item()) or the CUDA runtime call."""
ALLOCATIONS = "allocations"
"""Allocations on the cell's device (the profiler's memory events), key the outermost aten op that made them."""
ALLOCATED_BYTES = "allocated_bytes"
"""Bytes of those allocations, keyed as `allocations`."""
COPIES = "copies"
"""Copies between host and device, key the direction (h2d, d2h, d2d); none on a CPU."""
COPIED_BYTES = "copied_bytes"
"""Bytes of those copies, keyed as `copies`."""
KERNEL_LAUNCHES = "kernel_launches"
"""Device kernels run (CUDA only), key the kernel, the phase that of its launch."""
COLLECTIVES = "collectives"
"""Collective calls (world size > 1), key the op (c10d::allreduce_, nccl:all_reduce, ...)."""
COLLECTIVE_BYTES = "collective_bytes"
"""Bytes of the collectives' tensors, keyed as `collectives`."""
GRAPH_BREAKS = "graph_breaks"
"""torch.compile's graph breaks over the process (phase `process`), key the reason's first line or "" (all)."""
RECOMPILATIONS = "recompilations"
"""torch.compile's recompilations: over the process (phase `process`) and during the counted steps (`window`)."""
GRAPHS = "graphs"
"""torch.compile's unique graphs over the process (phase `process`)."""
DEVICE_MALLOCS = "device_mallocs"
"""CUDA: the caching allocator's cudaMalloc calls during the counted steps (phase `window`)."""
ALLOC_RETRIES = "alloc_retries"
"""CUDA: the caching allocator's retries (a cudaMalloc failed, cache freed, tried again) during the counted steps."""
COUNTERS = (OP_CALLS, HOST_SYNCS, ALLOCATIONS, ALLOCATED_BYTES, COPIES, COPIED_BYTES, KERNEL_LAUNCHES, COLLECTIVES,
            COLLECTIVE_BYTES, GRAPH_BREAKS, RECOMPILATIONS, GRAPHS, DEVICE_MALLOCS, ALLOC_RETRIES)
"""Every counter work.parquet may hold: a closed set."""

PROCESS_PHASE = "process"
"""Phase of a counter taken over the whole counted process (torch.compile's), not per step."""
WINDOW_PHASE = "window"
"""Phase of a counter taken over the counted steps as a whole (recompilations in them; the allocator's)."""

WORK_COLUMNS: tuple[Column, ...] = (
    per_work("cell_id", S, "", "The cell counted."),
    per_work("process", I, "", "The counted process's number within its run, 0-based (apart from the timed repeats)."),
    per_work("rank", I, "", "The rank whose profiler counted the row."),
    per_work("device", S, "", "cpu or cuda: the device the counted process trained on."),
    per_work(
        "phase",
        S,
        "",
        "The step's range the work ran in: data, h2d, forward, backward, optimizer, or `other` (inside a step, "
        "outside them); `process` for a count over the whole process, `window` for one over the counted steps.",
    ),
    per_work("counter", S, "", "What is counted: op_calls, host_syncs, allocations, allocated_bytes, copies, "
                               "copied_bytes, kernel_launches, collectives, collective_bytes, graph_breaks, "
                               "recompilations, graphs, device_mallocs or alloc_retries."),
    per_work("key", S, "", "What the count is of: the aten op, the kernel, the copy's direction, the graph break's "
                           "reason; empty where the counter has none."),
    per_work("count", I, "", "Total over the counted steps (phase `process`: over the whole process); bytes for the "
                             "*_bytes counters. A (phase, counter, key) without a row counted zero."),
    per_work("steps", I, "step", "Steps the process counted."),
    per_work("per_step", F, "1/step", "count / steps; for phases `process` and `window`, equal to count."),
)
