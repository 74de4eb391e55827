"""The columns of cells/*.parquet: one row per (cell, repeat), each column with its type, unit and meaning."""

from __future__ import annotations

from harness.catalogue.axes import AXES_RECORD
from harness.catalogue.columns import B, F, I, LI, S, TS, Column, per_repeat

MIN_INTERFERENCE_S = 0.05
"""Least CPU time (foreign_cpu_s, steal_s) taken from a window for it to be taken under interference: five of the
kernel's 10 ms ticks. A 0.3 s window on one core is 30 ticks, where one tick read early or late at either end is
a 3 % share: without this floor, a kworker's blip or two ticks of steal flagged quiet windows of tiny cells."""
INTERFERENCE_THRESHOLD = 0.10
"""A window is taken under interference when other processes used more than this share of its cores' time
(foreign_cpu_frac) or the hypervisor stole more than it (steal_frac). Quiet windows on the 2-core machine read a
few per cent at most; a neighbour busy on the cores reads tens of per cent (docs/performance.md, "Interference")."""

RERUN_INTERFERENCE, RERUN_TRANSIENT = "interference", "start transient"
"""The values of `rerun_cause`: a superseded row was run again because its window was taken under interference
or because it opened in a start transient (each spends a re-run budget of its own)."""
RERUN_NODE_LOST = "node lost"
"""`rerun_cause` of a row whose SLURM job ended NODE_FAIL, superseded when `nvbench run --resume` ran the job again
(the node, not the cell, failed)."""

ID_HASH_LEN = 10
"""Hex digits of the hash that ends a cell id (harness.matrix.cells.Cell.cell_id), after its label and `_`."""


def label_from_id(cell_id: str) -> str:
    """The label of a cell written before its label was data (a row before schema version 9, a verdict before
    version 15, a night summary before cache version 7): its id, the hash dropped. Only those migrations call
    this; everything else reads the label where it was written (Cell.label, the `cell_label` columns)."""
    head, tail = cell_id[:-ID_HASH_LEN - 1], cell_id[-ID_HASH_LEN:]
    is_hash = len(cell_id) > ID_HASH_LEN + 1 and cell_id[-ID_HASH_LEN - 1] == "_" \
        and all(c in "0123456789abcdef" for c in tail)
    return head if is_hash else cell_id


def row_label(row) -> str:
    """What a row's cell is called: its `cell_label`, or its id where the row recorded none (made in memory)."""
    return row.get("cell_label") or row["cell_id"]


CELL_COLUMNS: tuple[Column, ...] = (
    per_repeat("run_id", S, "", "Run this row belongs to (the reports/<run_id> folder)."),
    per_repeat("cell_id", S, "", "Stable id: axis values + hash of every knob that affects the measurement."),
    per_repeat("cell_label", S, "", "The cell's readable axis part (its id without the hash): what reports, pages and "
               "the console name the cell by. Before schema version 9: the id's part before its hash."),
    per_repeat("repeat", I, "", "Repeat index, 0-based."),
    per_repeat(
        "status",
        S,
        "",
        "ok, failed, timeout, crashed, skipped, cancelled (a SLURM job cancelled before its result) "
        "or superseded (an A/B repeat whose window opened in a start transient or was taken under interference, run "
        "again, or a job whose SLURM node was lost, run again on resume: kept, never compared).",
    ),
    per_repeat("reason", S, "", "Why the cell is not ok (empty when ok)."),
    per_repeat(
        "rerun_cause",
        S,
        "",
        "A superseded row's cause as data: `interference` or `start transient` (what spent which re-run budget of "
        "the A/B), or `node lost` (a SLURM job ended NODE_FAIL, run again by `nvbench run --resume`); null on every "
        "other row, and before schema version 7.",
    ),
    *(per_repeat(a.name, a.type, a.unit, f"Axis: {a.doc}") for a in AXES_RECORD),
    per_repeat("nnodes", I, "nodes", "Nodes in the torchrun group."),
    per_repeat("batch_size", I, "images", "Per-process micro-batch."),
    per_repeat("image_size", I, "px", "Crop side."),
    per_repeat("num_classes", I, "", "Classifier outputs."),
    per_repeat("images_per_step", I, "images", "Global images per optimizer step: batch x grad_accum x processes."),
    per_repeat("device", S, "", "cpu or cuda."),
    per_repeat("device_name", S, "", "GPU or CPU model the cell ran on."),
    per_repeat("is_smoke", B, "", "Run with --smoke (shrunk): not comparable with full runs."),
    per_repeat(
        "warmup_steps_used",
        I,
        "steps",
        "Optimizer steps run as warmup (recorded, excluded): benchmark.warmup_steps, "
        "or as many as `auto` needed to find the steps steady.",
    ),
    per_repeat("num_measure_steps", I, "steps", "Optimizer steps in the measured window."),
    per_repeat("images_measured", I, "images", "Images processed by all ranks in the measured window."),
    per_repeat(
        "window_s",
        F,
        "s",
        "Wall time of the measured window, bounded by device sync and barrier; less the speed probe's time (CPU).",
    ),
    per_repeat("warmup_window_s", F, "s", "Wall time of the warmup steps."),
    per_repeat("throughput_img_per_s", F, "images/s", "Global: images_measured / window_s (a ratio of sums)."),
    per_repeat(
        "throughput_ci_low_img_per_s",
        F,
        "images/s",
        "Lower bound of the within-run 95% interval: batch means "
        "of the step times, at their relative width around throughput_img_per_s (harness.stats.window.window_throughput_interval).",
    ),
    per_repeat(
        "throughput_ci_high_img_per_s", F, "images/s", "Upper bound of the within-run 95% interval (as the lower)."
    ),
    per_repeat("throughput_per_process_img_per_s", F, "images/s", "Global throughput / processes (per GPU on CUDA)."),
    per_repeat("step_time_mean_s", F, "s", "Mean measured step time (rank 0; CUDA events on GPU)."),
    per_repeat("step_time_median_s", F, "s", "Median measured step time (rank 0)."),
    per_repeat("step_time_cv", F, "", "Coefficient of variation of measured step times (rank 0)."),
    per_repeat(
        "step_time_total_s",
        F,
        "s",
        "Sum of the measured step times (rank 0): the step clock's share of window_s "
        "(the interval's clock; the rest is the fences).",
    ),
    per_repeat(
        "step_time_p10_s",
        F,
        "s",
        "10th percentile of measured step times (rank 0): the fast steps, which "
        "interference from other processes seldom reaches.",
    ),
    per_repeat(
        "fast_step_img_per_s",
        F,
        "images/s",
        "Global images per step / step_time_p10_s: the speed of the fast "
        "steps. The comparison's second metric (far less noisy than throughput on a shared machine; blind to "
        "a slowdown of a few steps).",
    ),
    per_repeat(
        "phase_data_median_s",
        F,
        "s",
        "Median over the measured steps (rank 0) of the time waiting for the step's batches (the data range; CUDA events on GPU: the stream's view).",
    ),
    per_repeat(
        "phase_h2d_median_s",
        F,
        "s",
        "Median over the measured steps (rank 0) of the time copying the batches to the device (real-data backends).",
    ),
    per_repeat(
        "phase_forward_median_s",
        F,
        "s",
        "Median over the measured steps (rank 0) of the time forward passes and loss (a captured CUDA graph's whole replay, with phases_graphed).",
    ),
    per_repeat(
        "phase_backward_median_s",
        F,
        "s",
        "Median over the measured steps (rank 0) of the time backward passes (with DDP, the all-reduce wait at its end excluded: phase allreduce).",
    ),
    per_repeat(
        "phase_optimizer_median_s",
        F,
        "s",
        "Median over the measured steps (rank 0) of the time the optimizer update (a fire drill's extra work included).",
    ),
    per_repeat(
        "phase_allreduce_median_s",
        F,
        "s",
        "Median over the measured steps (rank 0) of the time waiting at backward's end for the gradients' all-reduce, from the last gradient written to backward's return (world size > 1; null in one process).",
    ),
    per_repeat(
        "phases_graphed",
        B,
        "",
        "The step ran as one captured CUDA graph: its phases inside the graph are one, under forward.",
    ),
    per_repeat(
        "exposed_data_wait_s",
        F,
        "s",
        "Time the GPU's stream sat idle waiting for batches in the window (CUDA "
        "events around each fetch on the consumer stream; host time on CPU), mean over ranks: the data stall the "
        "throughput pays.",
    ),
    per_repeat("exposed_data_wait_frac", F, "", "exposed_data_wait_s / window_s."),
    per_repeat(
        "host_data_wait_s",
        F,
        "s",
        "Host time blocked in the loader's next() in the window, mean over ranks. On "
        "CUDA it overlaps GPU work already queued: an upper bound of the stall, not the stall.",
    ),
    per_repeat("host_data_wait_frac", F, "", "host_data_wait_s / window_s."),
    per_repeat(
        "is_steady",
        B,
        "",
        "No transient at the window's start (start_transient_steps 0) and no trend or level "
        "shift inside it (Mann-Kendall + Pettitt): harness.stats.window.window_steadiness.",
    ),
    per_repeat(
        "steadiness", S, "", "What the steadiness check saw; a start transient first, with its steps and their size."
    ),
    per_repeat(
        "start_transient_steps",
        I,
        "steps",
        "Measured steps at the window's start still in a transient (MSER-1 on the "
        "warm-up + window step times, each step beyond the settled steps' noise: harness.stats.settle); 0: the "
        "window starts settled; null before schema version 5.",
    ),
    per_repeat(
        "start_transient_low_x",
        F,
        "x",
        "The start transient's fastest step over the window's median step time (harness.stats.settle); null: no "
        "transient, or before schema version 7.",
    ),
    per_repeat(
        "start_transient_high_x",
        F,
        "x",
        "The start transient's slowest step over the window's median step time; null: no transient, or before "
        "schema version 7.",
    ),
    per_repeat(
        "foreign_cpu_frac",
        F,
        "fraction",
        "Share of the time of the cores this cell may use that processes "
        "other than the cell's own (its session: ranks, loader workers) used during the measured window, the "
        "hypervisor's steal included (/proc/stat less the session's own CPU time); above "
        "INTERFERENCE_THRESHOLD the window was taken under interference (is_steady false, and an A/B runs "
        "it again). Null before schema version 6 and where /proc is not there.",
    ),
    per_repeat(
        "foreign_cpu_s",
        F,
        "s",
        "CPU time processes other than the cell's own used on its cores during the window, steal included "
        "(foreign_cpu_frac's numerator): a share of a short window is a few clock ticks, and under "
        "MIN_INTERFERENCE_S it is never called interference.",
    ),
    per_repeat(
        "steal_s",
        F,
        "s",
        "CPU time a hypervisor gave another guest on those cores during the window (steal_frac's numerator).",
    ),
    per_repeat(
        "steal_frac",
        F,
        "fraction",
        "Share of those cores' time a hypervisor gave another guest during the "
        "window (/proc/stat steal; 0 on bare metal).",
    ),
    per_repeat(
        "num_involuntary_switches",
        I,
        "switches",
        "Involuntary context switches of the cell's process "
        "(all its threads, rank 0) during the window: how often the scheduler took a core away from it.",
    ),
    per_repeat("train_loss", F, "", "Mean training loss over the measured window (all ranks)."),
    per_repeat("val_loss", F, "", "Mean validation cross-entropy (all ranks)."),
    per_repeat("top1", F, "fraction", "Validation top-1 accuracy (all ranks); null for synthetic data."),
    per_repeat("top5", F, "fraction", "Validation top-5 accuracy (all ranks); null for synthetic data."),
    per_repeat("num_val_images", I, "images", "Validation images evaluated (all ranks)."),
    per_repeat("lr_final", F, "", "Learning rate after the last step."),
    per_repeat("loss_scale", F, "", "fp16 GradScaler scale at the end (a collapse means overflow); null otherwise."),
    per_repeat("tf32_allowed", B, "", "Whether TF32 matmul/conv was allowed (meaningful for fp32 on CUDA)."),
    per_repeat("mem_peak_bytes", I, "bytes", "Peak memory: device allocator peak on CUDA, process RSS peak on CPU."),
    per_repeat("mem_kind", S, "", "device or host_rss: what mem_peak_bytes measured."),
    per_repeat(
        "power_avg_w",
        F,
        "W",
        "Mean NVML board power in the measured window, summed over the cell's GPUs; null without NVML.",
    ),
    per_repeat("energy_j", F, "J", "GPU energy in the measured window (NVML counter), summed over the cell's GPUs."),
    per_repeat("img_per_joule", F, "images/J", "images_measured / energy_j."),
    per_repeat(
        "gpu_util_avg_pct", F, "%", "Mean NVML utilisation (time a kernel ran, not SM occupancy), mean over GPUs."
    ),
    per_repeat("sm_clock_avg_mhz", F, "MHz", "Mean SM clock in the measured window, mean over GPUs."),
    per_repeat("mem_clock_avg_mhz", F, "MHz", "Mean memory clock in the measured window, mean over GPUs."),
    per_repeat(
        "gpu_mem_used_peak_bytes", I, "bytes", "Peak device memory in use by all processes (NVML), highest GPU."
    ),
    per_repeat("is_throttled", B, "", "Some GPU reported a clock-event reason other than idle or application clocks."),
    per_repeat(
        "throttle_reasons", S, "", "Clock-event reasons seen on any GPU, comma-separated (benign ones included)."
    ),
    per_repeat(
        "num_telemetry_samples", I, "samples", "NVML polls in the measured window (fewest over GPUs); 0 without NVML."
    ),
    per_repeat(
        "flops_per_image",
        F,
        "FLOP",
        "Forward + backward FLOPs of one training image (FlopCounterMode, multiply-add = 2).",
    ),
    per_repeat("achieved_tflops", F, "TFLOP/s", "flops_per_image x throughput_img_per_s / 1e12, all processes."),
    per_repeat(
        "mfu_peak_tflops",
        F,
        "TFLOP/s",
        "Dense datasheet peak of one GPU at the cell's math precision (harness/cell/instruments/flops.py).",
    ),
    per_repeat(
        "mfu_pct",
        F,
        "%",
        "Model FLOPs utilisation: per-process achieved TFLOP/s / mfu_peak_tflops; null when the peak is unknown.",
    ),
    per_repeat(
        "loader_efficiency", F, "", "throughput / throughput of the synthetic twin (same other axes) in this run."
    ),
    per_repeat("scaling_efficiency", F, "", "per-process throughput / that of the world_size-1 twin in this run."),
    per_repeat(
        "startup_s",
        F,
        "s",
        "From the runner launching the cell's process to its first line of nvbench code: "
        "interpreter, imports, torchrun's rendezvous.",
    ),
    per_repeat("build_s", F, "s", "Model, engine and training loader setup inside the cell (rank 0)."),
    per_repeat(
        "autotune_s",
        F,
        "s",
        "CUDA: the first training step of the cell's shapes, run and undone before compile and "
        "warmup (rank 0): cuDNN's autotuning of each convolution (cudnn_benchmark), with its kernels' first loads; "
        "0 on CPU.",
    ),
    per_repeat(
        "compile_s",
        F,
        "s",
        "torch.compile's compilation or the CUDA graph's capture (rank 0), outside the measured "
        "window, before warmup; 0 for eager.",
    ),
    per_repeat("val_s", F, "s", "Wall time of validation."),
    per_repeat("started_at", TS, "UTC", "When the cell's process was launched."),
    per_repeat("duration_s", F, "s", "Launch to exit of the cell's process(es), build and validation included."),
    per_repeat("env_key", S, "", "Hash of the environment fields that must match for results to be comparable."),
    per_repeat(
        "hostname", S, "", "Host of the runner that planned the job and fingerprinted the environment (env_key)."
    ),
    per_repeat(
        "nodes",
        S,
        "",
        "Node(s) the job ran on, comma-separated: the runner's host for the local executor, the "
        "SLURM job's node list for the slurm executor; null for skipped rows.",
    ),
    per_repeat("slurm_job_id", S, "", "SLURM job id of the job (executor slurm); null for local processes."),
    per_repeat(
        "slot",
        I,
        "",
        "First slot the job held (local executor; harness/orchestrate/placement/slots.py): slot 0 of 1 is the "
        "whole machine; null where SLURM placed the job, and in skipped rows.",
    ),
    per_repeat(
        "num_slots",
        I,
        "slots",
        "Slots the job held: its world size when packed; every slot of the run when it ran alone on the whole machine.",
    ),
    per_repeat(
        "gpu_index",
        I,
        "",
        "NVML index of the job's first GPU when packed (CUDA_VISIBLE_DEVICES names it by UUID); "
        "null for the whole machine and on the CPU.",
    ),
    per_repeat("cuda_visible_devices", S, "", "CUDA_VISIBLE_DEVICES the job's processes started with (null: not set)."),
    per_repeat(
        "cpu_affinity",
        S,
        "",
        "Cores the job's processes were pinned to (its slots'), as a cpu list "
        '("0-21,88-109"); for the whole machine, the cores the runner may use.',
    ),
    per_repeat(
        "packing",
        S,
        "",
        "solo (no other job of the run beside it), calibrated (packed; this machine's slot "
        "calibration cleared its backend) or uncalibrated (packed with no calibration clearing it: --slots N).",
    ),
    per_repeat(
        "gpu_shared",
        B,
        "",
        "A process of no rank of this job held a context on one of its GPUs during the "
        "measured window (NVML compute processes): its numbers may carry that process's load. Null without NVML.",
    ),
    per_repeat("gpu_foreign_pids", LI, "", "The pids of those processes, ascending (as NVML reports them); empty: "
               "none, null without NVML. A comma-separated text before schema version 8."),
    per_repeat(
        "cudnn_benchmark",
        B,
        "",
        "torch.backends.cudnn.benchmark as the cell trained (recipe.cudnn_benchmark); null on CPU.",
    ),
    per_repeat(
        "cudnn_benchmark_limit",
        I,
        "algorithms",
        "torch.backends.cudnn.benchmark_limit as the cell trained: the "
        "algorithms cuDNN tries per convolution when it autotunes (0: all); null on CPU.",
    ),
    per_repeat(
        "glibc_tunables",
        S,
        "",
        "GLIBC_TUNABLES the cell's processes started with (run.malloc); empty: C library defaults.",
    ),
    per_repeat(
        "speed_probe_kind",
        S,
        "",
        "What the machine-speed probe computed (harness/cell/instruments/probe.py); null without a probe (CUDA, torchrun groups, run.speed_probe = false).",
    ),
    per_repeat(
        "speed_probe_s",
        F,
        "s",
        "Median time of the machine-speed probe between measured steps (rank 0): how fast the host ran; nvbench report compares at equal values (--no-speed-adjust: not).",
    ),
    per_repeat("speed_probe_count", I, "probes", "Probes run in the measured window."),
    per_repeat("speed_probe_every", I, "steps", "A probe ran after every this many measured steps."),
    per_repeat(
        "speed_probe_total_s",
        F,
        "s",
        "Time the probes took, flushes included, taken out of window_s (never in step times).",
    ),
    per_repeat("nvbench_version", S, "", "nvbench version."),
    per_repeat("git_sha", S, "", "git sha of the nvbench checkout (null outside git)."),
    per_repeat("injected_fault", S, "", "Test-only fault injected into this cell (NVBENCH_FAULT); null in real runs."),
    per_repeat(
        "fire_drill_pct",
        F,
        "%",
        "Fire drill (nvbench run --fire-drill): extra work in every measured step, in % "
        "of the step's own cost; 0 in real runs. A drill row is a calibration, never a result.",
    ),
    per_repeat(
        "profile_tool", S, "", "Profiler the cell ran under (nsys, torch): not a timed result. Null in timed runs."
    ),
    per_repeat("log_path", S, "", "The cell's stdout/stderr log, relative to the run folder."),
    per_repeat("config_json", S, "", "The fully resolved cell configuration as JSON."),
)
