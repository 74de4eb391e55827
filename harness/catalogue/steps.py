"""The columns of steps/*.parquet: one row per measured or warm-up step per rank."""

from __future__ import annotations

from harness.catalogue.columns import B, F, I, S, Column, per_step

STEP_PHASES = ("data", "h2d", "forward", "backward", "optimizer", "allreduce")
"""The phases of a step whose time each measured step records (harness.cell.instruments.timing.PHASES: h2d inside
data, the others disjoint; allreduce the wait for DDP's gradients at backward's end), declared once."""
PHASE_STEP_COLUMNS = {name: f"phase_{name}_s" for name in STEP_PHASES}
"""Each phase's per-step column of steps/*.parquet."""
PHASE_MEDIAN_COLUMNS = {name: f"phase_{name}_median_s" for name in STEP_PHASES}
"""Each phase's median over the measured steps, a column of cells/*.parquet (harness.catalogue.cells)."""

STEP_COLUMNS: tuple[Column, ...] = (
    per_step("run_id", S, "", "Run id."),
    per_step("cell_id", S, "", "Cell id."),
    per_step("repeat", I, "", "Repeat index."),
    per_step("rank", I, "", "Global rank of the process that measured the step."),
    per_step("step", I, "", "Optimizer step index, warmup first, 0-based."),
    per_step("is_warmup", B, "", "Warmup step: recorded, never counted in statistics."),
    per_step("step_time_s", F, "s", "Step time: CUDA events on GPU (resolved after the window), perf_counter on CPU."),
    per_step("host_data_wait_s", F, "s", "Host time blocked waiting for this step's batches."),
    per_step(
        "exposed_data_wait_s",
        F,
        "s",
        "Time the GPU's stream waited for this step's batches (CUDA events; host time on CPU).",
    ),
    per_step(
        "loss",
        F,
        "",
        "This rank's training loss of the step (mean over its micro-batches; label-smoothed), "
        "kept on the device and read after the window.",
    ),
    per_step("lr", F, "", "Learning rate the step's optimizer update used."),
    per_step(
        "epoch",
        I,
        "",
        "Data epoch of the step's first image (the training stream runs epochs back to back); null for synthetic data.",
    ),
    per_step("is_epoch_start", B, "", "The step holds the first image of an epoch; null for synthetic data."),
    per_step("images", I, "images", "Images this rank processed in the step."),
    per_step(
        "foreign_cpu_frac",
        F,
        "fraction",
        "Share of the cell's cores' time other processes used while this "
        "step ran (the interference meter's samples around it, every 0.25 s); null for warm-up steps and before "
        "schema version 6.",
    ),
    per_step(
        "speed_probe_s", F, "s", "Machine-speed probe run right after this step, outside its time; null where none ran."
    ),
    per_step(
        "phase_data_s",
        F,
        "s",
        "This step's time waiting for the step's batches (the data range; CUDA events on GPU: the stream's view); null where the step never entered it (warmup steps are not timed by phase).",
    ),
    per_step(
        "phase_h2d_s",
        F,
        "s",
        "This step's time copying the batches to the device (real-data backends); null where the step never entered it (warmup steps are not timed by phase).",
    ),
    per_step(
        "phase_forward_s",
        F,
        "s",
        "This step's time forward passes and loss (a captured CUDA graph's whole replay, with phases_graphed); null where the step never entered it (warmup steps are not timed by phase).",
    ),
    per_step(
        "phase_backward_s",
        F,
        "s",
        "This step's time backward passes (with DDP the gradient all-reduce's wait is inside); null where the step never entered it (warmup steps are not timed by phase).",
    ),
    per_step(
        "phase_optimizer_s",
        F,
        "s",
        "This step's time the optimizer update (a fire drill's extra work included); null where the step never entered it (warmup steps are not timed by phase).",
    ),
    per_step(
        "phase_allreduce_s",
        F,
        "s",
        "This step's time waiting at backward's end for the gradients' all-reduce, from the last gradient written to backward's return (world size > 1; null in one process); null where the step never entered it (warmup steps are not timed by phase).",
    ),
)
