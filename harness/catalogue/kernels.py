"""The columns of kernels.parquet: where a profiled repeat's step time goes, one row per (cell, repeat, rank,
phase, operator, kernel); its version history and writing: harness.results.kernels."""

from __future__ import annotations

from harness.catalogue.columns import B, F, I, S, Column, per_kernel

DEFAULT_KERNEL_REPEATS = 5
"""The profiled repeats' default (harness.orchestrate.workflows.kernel_repeats; --kernel-repeats): profiled
processes per cell and side when an A/B calls a change (or is asked with --kernels)."""
DEFAULT_KERNEL_STEPS = 10
"""--kernel-steps' default: steps each profiled process records: a short window, its warm-up as a timed repeat's."""
OPERATORS_NOTE = "; operators: "
"""What joins a changed cell's verdict reason and its kernel diff's top line (analysis.product.extras.attach_kernels):
bisect reads the operators back from a comparison's verdicts.parquet after it."""
DEFAULT_KERNEL_FLOOR_PCT = 1.0
"""The kernel diff's default floor (harness.analysis.judge.kernel_diff; --kernel-floor): below this share of the
baseline's step, no operator or kernel is called changed."""
DEFAULT_KERNEL_FDR = 0.05
"""The kernel diff's default --kernel-fdr: Benjamini-Hochberg's false discovery rate across a cell's tested items: of the operators and kernels called
changed, this share at most is expected false. With no true change it bounds the chance that an A/A calls any
item at all (BH controls the family-wise error under the global null): one A/A in twenty."""

KERNEL_COLUMNS: tuple[Column, ...] = (
    per_kernel("cell_id", S, "", "The cell profiled."),
    per_kernel("repeat", I, "", "The profiled repeat (its own numbering, apart from the timed repeats)."),
    per_kernel("rank", I, "", "The rank whose profiler recorded the row."),
    per_kernel("device", S, "", "cpu or cuda: what time_per_step_s measures (self CPU time, or device time)."),
    per_kernel(
        "phase",
        S,
        "",
        "The step's range the work ran in: data, h2d, forward, backward, optimizer (allreduce's "
        "kernels fall in backward, whose hooks launch them), or `other`.",
    ),
    per_kernel(
        "operator",
        S,
        "",
        "The outermost aten op the model or the engine called; `(outside aten ops)` for a "
        "phase's own time between ops; `(CUDA graph replay)` for a graph's replay.",
    ),
    per_kernel(
        "kernel",
        S,
        "",
        "What did the work: on CUDA the device kernel (via the launch's correlation id), on CPU "
        "an aten op by its own (self) time, e.g. aten::mkldnn_convolution under aten::conv2d.",
    ),
    per_kernel("graph_replay", B, "", "The row is a captured CUDA graph's replay, one item under its phase."),
    per_kernel("calls_per_step", F, "1/step", "Calls (kernel launches, op calls) per profiled step."),
    per_kernel("time_per_step_s", F, "s", "Time per profiled step: device time on CUDA, self CPU time on CPU."),
    per_kernel("profiled_steps", I, "step", "Steps the profiler recorded in this repeat."),
    per_kernel(
        "step_time_s", F, "s", "This repeat's mean wall time of a profiled step (the profiler's cost included)."
    ),
)
