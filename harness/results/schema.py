"""The result schema: every column of the cell and step tables, with its unit, and the version history.

Schema history (bump RESULT_SCHEMA_VERSION and teach store.migrate the step when columns change):
  1 (0.1.0): first release: cell summary rows (throughput with its interval, accuracy, loss, memory,
     data wait, twin efficiencies, NVML telemetry, MFU, profile and fire-drill flags) and per-rank
     step rows. Columns added later read as null from older files (store.migrate).
  2 (0.2.0): data wait as the GPU sees it: `exposed_data_wait_s/_frac` (CUDA events on the consumer stream
     around each fetch; on CPU the host figure) beside the host figure, renamed from `data_wait_s/_frac` to
     `host_data_wait_s/_frac`; `step_time_total_s`; the `compile` axis with `compile_s`; `startup_s`;
     `num_warmup_steps` renamed `warmup_steps_used` (auto warmup). Steps: `host_data_wait_s` (was `data_wait_s`),
     `exposed_data_wait_s`, `loss`, `lr`, `epoch`, `is_epoch_start`. Migrating version 1: the renamed
     columns carry over; the exposed wait of a CPU row is its host wait (the same measurement there), of a
     CUDA row null (never measured).
  3 (0.2.0): where a job ran: `nodes` (the node(s), comma-separated) and `slurm_job_id` (the SLURM executor's
     job; null for local processes); status `cancelled` (a SLURM job cancelled before its result). Migrating
     version 2: `nodes` is the row's `hostname` (every job then ran on the runner's own machine).
  4 (0.2.0): per-phase step timing: steps `phase_data_s`, `phase_h2d_s`, `phase_forward_s`,
     `phase_backward_s`, `phase_optimizer_s`, `phase_allreduce_s`; cells the medians `phase_<name>_median_s`
     and `phases_graphed`. Migrating version 3: the new columns read null (never measured).
  5 (0.2.0): slots, several jobs on one machine at once: `slot` (the first slot the job held), `num_slots`,
     `gpu_index` (its first GPU, NVML's index), `cuda_visible_devices`, `cpu_affinity` (its cores, a cpu list
     such as "0-21,88-109"), `packing` (solo, calibrated or uncalibrated), `gpu_shared` and `gpu_foreign_pids`
     (a process of no job of the run on the job's GPU during its window). A transient at the window's start:
     `start_transient_steps` (the window's first steps still in a start transient, harness.stats.settle;
     `is_steady` false and `steadiness` naming them when > 0); status `superseded` (an A/B repeat whose window
     opened in a transient and was run again; the row kept for the record, never compared). Where a process's
     time goes, cut further: `autotune_s` (the first training step of the cell's shapes on CUDA, timed apart
     from warmup and compile: cuDNN's autotuning; 0 on CPU) and the cuDNN knobs the cell ran with,
     `cudnn_benchmark` and `cudnn_benchmark_limit` (null on CPU). Migrating version 4: the new columns read
     null (jobs then ran one at a time, unpinned; never checked for a transient; autotuning never timed apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import pyarrow as pa

RESULT_SCHEMA_VERSION = 5
METADATA_VERSION_KEY = b"nvbench.schema_version"
METADATA_KIND_KEY = b"nvbench.table"

SUPERSEDED = "superseded"
"""Status of an A/B repeat whose window opened in a start transient and ran again (harness.orchestrate.rerun):
the row is kept for the record and never compared (only `ok` rows are)."""
STATUSES = ("ok", "failed", "timeout", "crashed", "skipped", "cancelled", SUPERSEDED)
SUPERSEDED_STEPS = "steps-superseded"
"""Folder of a run beside steps/ that holds a superseded repeat's steps (`<cell>-r<k>-superseded<n>.parquet`), so
that a query over `steps/*.parquet` counts each repeat's measured steps once: those of the attempt kept."""


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: pa.DataType
    unit: str
    doc: str


def _c(name: str, type_: pa.DataType, unit: str, doc: str) -> Column:
    return Column(name, type_, unit, doc)


S, F, I, B = pa.string(), pa.float64(), pa.int64(), pa.bool_()
TS = pa.timestamp("us", tz="UTC")

CELL_COLUMNS: tuple[Column, ...] = (
    _c("run_id", S, "", "Run this row belongs to (the reports/<run_id> folder)."),
    _c("cell_id", S, "", "Stable id: axis values + hash of every knob that affects the measurement."),
    _c("repeat", I, "", "Repeat index, 0-based."),
    _c("status", S, "", "ok, failed, timeout, crashed, skipped, cancelled (a SLURM job cancelled before its result) "
       "or superseded (an A/B repeat whose window opened in a start transient, run again: kept, never compared)."),
    _c("reason", S, "", "Why the cell is not ok (empty when ok)."),
    _c("backend", S, "", "Axis: data backend."),
    _c("memory_format", S, "", "Axis: nchw or nhwc (channels_last)."),
    _c("precision", S, "", "Axis: fp32, fp16 (autocast + GradScaler) or bf16 (autocast)."),
    _c("world_size", I, "processes", "Axis: processes per node (a torchrun group when > 1)."),
    _c("grad_accum", I, "micro-batches", "Axis: micro-batches per optimizer step."),
    _c("compile", S, "", "Axis: eager, inductor (the step under torch.compile) or cudagraph (the whole step captured "
       "as one CUDA graph and replayed); null in rows from before the axis (eager)."),
    _c("nnodes", I, "nodes", "Nodes in the torchrun group."),
    _c("model", S, "", "Axis: the model, a registry name or the user's own as its import path "
       "'package.module:builder'."),
    _c("batch_size", I, "images", "Per-process micro-batch."),
    _c("image_size", I, "px", "Crop side."),
    _c("num_classes", I, "", "Classifier outputs."),
    _c("images_per_step", I, "images", "Global images per optimizer step: batch x grad_accum x processes."),
    _c("device", S, "", "cpu or cuda."),
    _c("device_name", S, "", "GPU or CPU model the cell ran on."),
    _c("is_smoke", B, "", "Run with --smoke (shrunk): not comparable with full runs."),
    _c("warmup_steps_used", I, "steps", "Optimizer steps run as warmup (recorded, excluded): benchmark.warmup_steps, "
       "or as many as `auto` needed to find the steps steady."),
    _c("num_measure_steps", I, "steps", "Optimizer steps in the measured window."),
    _c("images_measured", I, "images", "Images processed by all ranks in the measured window."),
    _c("window_s", F, "s", "Wall time of the measured window, bounded by device sync and barrier; less the speed probe's time (CPU)."),
    _c("warmup_window_s", F, "s", "Wall time of the warmup steps."),
    _c("throughput_img_per_s", F, "images/s", "Global: images_measured / window_s (a ratio of sums)."),
    _c("throughput_ci_low_img_per_s", F, "images/s", "Lower bound of the within-run 95% interval: batch means "
       "of the step times, at their relative width around throughput_img_per_s (harness.stats.window.window_throughput_interval)."),
    _c("throughput_ci_high_img_per_s", F, "images/s", "Upper bound of the within-run 95% interval (as the lower)."),
    _c("throughput_per_process_img_per_s", F, "images/s", "Global throughput / processes (per GPU on CUDA)."),
    _c("step_time_mean_s", F, "s", "Mean measured step time (rank 0; CUDA events on GPU)."),
    _c("step_time_median_s", F, "s", "Median measured step time (rank 0)."),
    _c("step_time_cv", F, "", "Coefficient of variation of measured step times (rank 0)."),
    _c("step_time_total_s", F, "s", "Sum of the measured step times (rank 0): the step clock's share of window_s "
       "(the interval's clock; the rest is the fences)."),
    _c("step_time_p10_s", F, "s", "10th percentile of measured step times (rank 0): the fast steps, which "
       "interference from other processes seldom reaches."),
    _c("fast_step_img_per_s", F, "images/s", "Global images per step / step_time_p10_s: the speed of the fast "
       "steps. The comparison's second metric (far less noisy than throughput on a shared machine; blind to "
       "a slowdown of a few steps)."),
    _c("phase_data_median_s", F, "s", "Median over the measured steps (rank 0) of the time waiting for the step's batches (the data range; CUDA events on GPU: the stream's view)."),
    _c("phase_h2d_median_s", F, "s", "Median over the measured steps (rank 0) of the time copying the batches to the device (real-data backends)."),
    _c("phase_forward_median_s", F, "s", "Median over the measured steps (rank 0) of the time forward passes and loss (a captured CUDA graph's whole replay, with phases_graphed)."),
    _c("phase_backward_median_s", F, "s", "Median over the measured steps (rank 0) of the time backward passes (with DDP, the all-reduce wait at its end excluded: phase allreduce)."),
    _c("phase_optimizer_median_s", F, "s", "Median over the measured steps (rank 0) of the time the optimizer update (a fire drill's extra work included)."),
    _c("phase_allreduce_median_s", F, "s", "Median over the measured steps (rank 0) of the time waiting at backward's end for the gradients' all-reduce, from the last gradient written to backward's return (world size > 1; null in one process)."),
    _c("phases_graphed", B, "", "The step ran as one captured CUDA graph: its phases inside the graph are one, under forward."),
    _c("exposed_data_wait_s", F, "s", "Time the GPU's stream sat idle waiting for batches in the window (CUDA "
       "events around each fetch on the consumer stream; host time on CPU), mean over ranks: the data stall the "
       "throughput pays."),
    _c("exposed_data_wait_frac", F, "", "exposed_data_wait_s / window_s."),
    _c("host_data_wait_s", F, "s", "Host time blocked in the loader's next() in the window, mean over ranks. On "
       "CUDA it overlaps GPU work already queued: an upper bound of the stall, not the stall."),
    _c("host_data_wait_frac", F, "", "host_data_wait_s / window_s."),
    _c("is_steady", B, "", "No transient at the window's start (start_transient_steps 0) and no trend or level "
       "shift inside it (Mann-Kendall + Pettitt): harness.stats.window.window_steadiness."),
    _c("steadiness", S, "", "What the steadiness check saw; a start transient first, with its steps and their size."),
    _c("start_transient_steps", I, "steps", "Measured steps at the window's start still in a transient (MSER-1 on the "
       "warm-up + window step times, each step beyond the settled steps' noise: harness.stats.settle); 0: the "
       "window starts settled; null before schema version 5."),
    _c("train_loss", F, "", "Mean training loss over the measured window (all ranks)."),
    _c("val_loss", F, "", "Mean validation cross-entropy (all ranks)."),
    _c("top1", F, "fraction", "Validation top-1 accuracy (all ranks); null for synthetic data."),
    _c("top5", F, "fraction", "Validation top-5 accuracy (all ranks); null for synthetic data."),
    _c("num_val_images", I, "images", "Validation images evaluated (all ranks)."),
    _c("lr_final", F, "", "Learning rate after the last step."),
    _c("loss_scale", F, "", "fp16 GradScaler scale at the end (a collapse means overflow); null otherwise."),
    _c("tf32_allowed", B, "", "Whether TF32 matmul/conv was allowed (meaningful for fp32 on CUDA)."),
    _c("mem_peak_bytes", I, "bytes", "Peak memory: device allocator peak on CUDA, process RSS peak on CPU."),
    _c("mem_kind", S, "", "device or host_rss: what mem_peak_bytes measured."),
    _c("power_avg_w", F, "W", "Mean NVML board power in the measured window, summed over the cell's GPUs; null without NVML."),
    _c("energy_j", F, "J", "GPU energy in the measured window (NVML counter), summed over the cell's GPUs."),
    _c("img_per_joule", F, "images/J", "images_measured / energy_j."),
    _c("gpu_util_avg_pct", F, "%", "Mean NVML utilisation (time a kernel ran, not SM occupancy), mean over GPUs."),
    _c("sm_clock_avg_mhz", F, "MHz", "Mean SM clock in the measured window, mean over GPUs."),
    _c("mem_clock_avg_mhz", F, "MHz", "Mean memory clock in the measured window, mean over GPUs."),
    _c("gpu_mem_used_peak_bytes", I, "bytes", "Peak device memory in use by all processes (NVML), highest GPU."),
    _c("is_throttled", B, "", "Some GPU reported a clock-event reason other than idle or application clocks."),
    _c("throttle_reasons", S, "", "Clock-event reasons seen on any GPU, comma-separated (benign ones included)."),
    _c("num_telemetry_samples", I, "samples", "NVML polls in the measured window (fewest over GPUs); 0 without NVML."),
    _c("flops_per_image", F, "FLOP", "Forward + backward FLOPs of one training image (FlopCounterMode, multiply-add = 2)."),
    _c("achieved_tflops", F, "TFLOP/s", "flops_per_image x throughput_img_per_s / 1e12, all processes."),
    _c("mfu_peak_tflops", F, "TFLOP/s", "Dense datasheet peak of one GPU at the cell's math precision (harness/cell/flops.py)."),
    _c("mfu_pct", F, "%", "Model FLOPs utilisation: per-process achieved TFLOP/s / mfu_peak_tflops; null when the peak is unknown."),
    _c("loader_efficiency", F, "", "throughput / throughput of the synthetic twin (same other axes) in this run."),
    _c("scaling_efficiency", F, "", "per-process throughput / that of the world_size-1 twin in this run."),
    _c("startup_s", F, "s", "From the runner launching the cell's process to its first line of nvbench code: "
       "interpreter, imports, torchrun's rendezvous."),
    _c("build_s", F, "s", "Model, engine and training loader setup inside the cell (rank 0)."),
    _c("autotune_s", F, "s", "CUDA: the first training step of the cell's shapes, run and undone before compile and "
       "warmup (rank 0): cuDNN's autotuning of each convolution (cudnn_benchmark), with its kernels' first loads; "
       "0 on CPU."),
    _c("compile_s", F, "s", "torch.compile's compilation or the CUDA graph's capture (rank 0), outside the measured "
       "window, before warmup; 0 for eager."),
    _c("val_s", F, "s", "Wall time of validation."),
    _c("started_at", TS, "UTC", "When the cell's process was launched."),
    _c("duration_s", F, "s", "Launch to exit of the cell's process(es), build and validation included."),
    _c("env_key", S, "", "Hash of the environment fields that must match for results to be comparable."),
    _c("hostname", S, "", "Host of the runner that planned the job and fingerprinted the environment (env_key)."),
    _c("nodes", S, "", "Node(s) the job ran on, comma-separated: the runner's host for the local executor, the "
       "SLURM job's node list for the slurm executor; null for skipped rows."),
    _c("slurm_job_id", S, "", "SLURM job id of the job (executor slurm); null for local processes."),
    _c("slot", I, "", "First slot the job held (local executor; harness/orchestrate/slots.py): slot 0 of 1 is the "
       "whole machine; null where SLURM placed the job, and in skipped rows."),
    _c("num_slots", I, "slots", "Slots the job held: its world size when packed; every slot of the run when it ran "
       "alone on the whole machine."),
    _c("gpu_index", I, "", "NVML index of the job's first GPU when packed (CUDA_VISIBLE_DEVICES names it by UUID); "
       "null for the whole machine and on the CPU."),
    _c("cuda_visible_devices", S, "", "CUDA_VISIBLE_DEVICES the job's processes started with (null: not set)."),
    _c("cpu_affinity", S, "", "Cores the job's processes were pinned to (its slots'), as a cpu list "
       "(\"0-21,88-109\"); for the whole machine, the cores the runner may use."),
    _c("packing", S, "", "solo (no other job of the run beside it), calibrated (packed; this machine's slot "
       "calibration cleared its backend) or uncalibrated (packed with no calibration clearing it: --slots N)."),
    _c("gpu_shared", B, "", "A process of no rank of this job held a context on one of its GPUs during the "
       "measured window (NVML compute processes): its numbers may carry that process's load. Null without NVML."),
    _c("gpu_foreign_pids", S, "", "The pids of those processes, comma-separated (as NVML reports them)."),
    _c("cudnn_benchmark", B, "", "torch.backends.cudnn.benchmark as the cell trained (recipe.cudnn_benchmark); null on CPU."),
    _c("cudnn_benchmark_limit", I, "algorithms", "torch.backends.cudnn.benchmark_limit as the cell trained: the "
       "algorithms cuDNN tries per convolution when it autotunes (0: all); null on CPU."),
    _c("glibc_tunables", S, "", "GLIBC_TUNABLES the cell's processes started with (run.malloc); empty: C library defaults."),
    _c("speed_probe_kind", S, "", "What the machine-speed probe computed (harness/cell/probe.py); null without a probe (CUDA, torchrun groups, run.speed_probe = false)."),
    _c("speed_probe_s", F, "s", "Median time of the machine-speed probe between measured steps (rank 0): how fast the host ran; nvbench report compares at equal values (--no-speed-adjust: not)."),
    _c("speed_probe_count", I, "probes", "Probes run in the measured window."),
    _c("speed_probe_every", I, "steps", "A probe ran after every this many measured steps."),
    _c("speed_probe_total_s", F, "s", "Time the probes took, flushes included, taken out of window_s (never in step times)."),
    _c("nvbench_version", S, "", "nvbench version."),
    _c("git_sha", S, "", "git sha of the nvbench checkout (null outside git)."),
    _c("injected_fault", S, "", "Test-only fault injected into this cell (NVBENCH_FAULT); null in real runs."),
    _c("fire_drill_pct", F, "%", "Fire drill (nvbench run --fire-drill): extra work in every measured step, in % "
       "of the step's own cost; 0 in real runs. A drill row is a calibration, never a result."),
    _c("profile_tool", S, "", "Profiler the cell ran under (nsys, torch): not a timed result. Null in timed runs."),
    _c("log_path", S, "", "The cell's stdout/stderr log, relative to the run folder."),
    _c("config_json", S, "", "The fully resolved cell configuration as JSON."),
)

STEP_COLUMNS: tuple[Column, ...] = (
    _c("run_id", S, "", "Run id."),
    _c("cell_id", S, "", "Cell id."),
    _c("repeat", I, "", "Repeat index."),
    _c("rank", I, "", "Global rank of the process that measured the step."),
    _c("step", I, "", "Optimizer step index, warmup first, 0-based."),
    _c("is_warmup", B, "", "Warmup step: recorded, never counted in statistics."),
    _c("step_time_s", F, "s", "Step time: CUDA events on GPU (resolved after the window), perf_counter on CPU."),
    _c("host_data_wait_s", F, "s", "Host time blocked waiting for this step's batches."),
    _c("exposed_data_wait_s", F, "s", "Time the GPU's stream waited for this step's batches (CUDA events; host "
       "time on CPU)."),
    _c("loss", F, "", "This rank's training loss of the step (mean over its micro-batches; label-smoothed), "
       "kept on the device and read after the window."),
    _c("lr", F, "", "Learning rate the step's optimizer update used."),
    _c("epoch", I, "", "Data epoch of the step's first image (the training stream runs epochs back to back); "
       "null for synthetic data."),
    _c("is_epoch_start", B, "", "The step holds the first image of an epoch; null for synthetic data."),
    _c("images", I, "images", "Images this rank processed in the step."),
    _c("speed_probe_s", F, "s", "Machine-speed probe run right after this step, outside its time; null where none ran."),
    _c("phase_data_s", F, "s", "This step's time waiting for the step's batches (the data range; CUDA events on GPU: the stream's view); null where the step never entered it (warmup steps are not timed by phase)."),
    _c("phase_h2d_s", F, "s", "This step's time copying the batches to the device (real-data backends); null where the step never entered it (warmup steps are not timed by phase)."),
    _c("phase_forward_s", F, "s", "This step's time forward passes and loss (a captured CUDA graph's whole replay, with phases_graphed); null where the step never entered it (warmup steps are not timed by phase)."),
    _c("phase_backward_s", F, "s", "This step's time backward passes (with DDP the gradient all-reduce's wait is inside); null where the step never entered it (warmup steps are not timed by phase)."),
    _c("phase_optimizer_s", F, "s", "This step's time the optimizer update (a fire drill's extra work included); null where the step never entered it (warmup steps are not timed by phase)."),
    _c("phase_allreduce_s", F, "s", "This step's time waiting at backward's end for the gradients' all-reduce, from the last gradient written to backward's return (world size > 1; null in one process); null where the step never entered it (warmup steps are not timed by phase)."),
)


def schema(columns: Iterable[Column], kind: str) -> pa.Schema:
    fields = [pa.field(c.name, c.type, metadata={b"unit": c.unit.encode(), b"doc": c.doc.encode()})
              for c in columns]
    return pa.schema(fields, metadata={METADATA_VERSION_KEY: str(RESULT_SCHEMA_VERSION).encode(),
                                       METADATA_KIND_KEY: kind.encode()})


CELL_SCHEMA = schema(CELL_COLUMNS, "cells")
STEP_SCHEMA = schema(STEP_COLUMNS, "steps")


def cell_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows (dicts; missing columns become null) as a table of the cell schema; unknown keys are an error."""
    return _table(rows, CELL_SCHEMA)


def step_table(columns: dict[str, Any]) -> pa.Table:
    """Column arrays as a table of the step schema."""
    unknown = set(columns) - set(STEP_SCHEMA.names)
    if unknown:
        raise KeyError(f"not step columns: {sorted(unknown)}")
    n = len(next(iter(columns.values()))) if columns else 0
    arrays = [pa.array(columns[f.name], type=f.type) if f.name in columns else pa.nulls(n, f.type)
              for f in STEP_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=STEP_SCHEMA)


def _table(rows: list[dict[str, Any]], sch: pa.Schema) -> pa.Table:
    for row in rows:
        unknown = set(row) - set(sch.names)
        if unknown:
            raise KeyError(f"not {sch.metadata[METADATA_KIND_KEY].decode()} columns: {sorted(unknown)}")
    arrays = [pa.array([row.get(f.name) for row in rows], type=f.type) for f in sch]
    return pa.Table.from_arrays(arrays, schema=sch)


def markdown_reference() -> str:
    """Column tables for docs/results.md."""
    out = []
    for title, cols in (("cells/*.parquet: one row per (cell, repeat)", CELL_COLUMNS),
                        ("steps/*.parquet: one row per step per rank", STEP_COLUMNS)):
        out.append(f"### {title}\n\n| column | type | unit | meaning |\n|---|---|---|---|")
        out += [f"| `{c.name}` | {c.type} | {c.unit} | {c.doc} |" for c in cols]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # python -m harness.results.schema  -> the column tables of docs/results.md
    print(markdown_reference())
