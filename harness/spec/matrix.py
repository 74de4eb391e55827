"""Matrix TOML -> frozen, validated dataclasses. The only module that sees raw dicts.

Every knob is a dataclass field declared with `knob()`, which carries its one-line doc and bounds;
docs/matrix.md is generated from these declarations (`python -m harness.spec.matrix --markdown`).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import itertools
import math
import re
import sys
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = 1
"""Version of the matrix file format; every file states it as top-level `version`."""

WARMUP_CHUNK = 10
"""Auto warmup judges steadiness every this many steps."""
WARMUP_TOLERANCE = 0.02
"""Auto warmup is over when a chunk's median step time is within this fraction of the previous chunk's."""

IMAGENET_TRAIN_IMAGES = 1_281_167
"""Images in ImageNet-1k's training split: the epoch of the reference timeline for synthetic data."""

AXES = ("backend", "memory_format", "precision", "world_size", "grad_accum", "compile")
BACKENDS = ("dali-gpu", "dali-cpu", "pytorch", "synthetic")
COMPILE_MODES = ("eager", "inductor", "cudagraph")
"""How the training step runs: eager PyTorch (the default), under torch.compile (inductor), or captured
whole as one CUDA graph and replayed (cudagraph)."""
MEMORY_FORMATS = ("nchw", "nhwc")
PRECISIONS = ("fp32", "fp16", "bf16")
MODEL_NAMES = ("resnet18", "resnet34", "resnet50", "resnet101", "resnext101-32x4d", "se-resnext101-32x4d",
               "efficientnet-b0", "efficientnet-b4")
"""The model registry's names (harness.models builds them; a test keeps the two equal). Listed here so
that validation knows them without importing torch."""
MODEL_OUTPUT_STRIDE = 32
"""Every registered model shrinks its input 32x before the classifier (the ResNet stages)."""
DIGITS_CLASSES = 10
"""The digits dataset has ten classes (0-9)."""
INT64_MAX = 2**63 - 1
"""Integers are stored as Parquet int64."""
AXIS_CHOICES: dict[str, tuple[str, ...] | None] = {
    "backend": BACKENDS,
    "memory_format": MEMORY_FORMATS,
    "precision": PRECISIONS,
    "world_size": None,  # positive integers
    "grad_accum": None,
    "compile": COMPILE_MODES,
}


class MatrixError(Exception):
    """Every problem found in one matrix file, one line each."""

    def __init__(self, problems: list[str]):
        self.problems = [_one_line(p) for p in problems]
        super().__init__("\n".join(self.problems))


_MAX_LINE = 300


def _one_line(text: str) -> str:
    """`text` as one short printable line: a key or value from the file may hold newlines or be huge."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= _MAX_LINE else text[:_MAX_LINE - 3] + "..."


def knob(default: Any, doc: str, *, min: float | None = None, gt: float | None = None,
         max: float | None = None, lt: float | None = None, choices: tuple[str, ...] | None = None) -> Any:
    """A config field with its documentation, numeric bounds and allowed names (checked by the parser)."""
    meta = {"doc": doc, "min": min, "gt": gt, "max": max, "lt": lt, "choices": choices}
    if isinstance(default, (list, dict)):
        raise TypeError("mutable defaults are not allowed; use a tuple")
    return field(default=default, metadata=meta)


_FROZEN = dict(frozen=True, slots=True, kw_only=True)


@dataclass(**_FROZEN)
class BenchmarkConfig:
    name: str = knob("benchmark", "Name shown in reports.")
    model: str = knob("resnet50", "Model registry name (harness/models).", choices=MODEL_NAMES)
    num_classes: int = knob(1000, "Classifier outputs; must cover the dataset's classes.", min=1)
    image_size: int = knob(224, "Side of the square training/validation crop in pixels.", min=8)
    batch_size: int = knob(256, "Images per process per micro-batch.", min=1)
    warmup_steps: int | Literal["auto"] = knob(
        20, "Optimizer steps run and recorded as warmup, excluded from statistics; \"auto\": warm up until the "
        f"steps are steady: after warmup_min_steps, in chunks of {WARMUP_CHUNK} steps, until the median step time "
        f"of the last chunk is within {WARMUP_TOLERANCE:.0%} of the chunk before (or warmup_max_steps). The row "
        "records the steps run (warmup_steps_used).", min=0)
    warmup_min_steps: int = knob(10, "Auto warmup: steps run before steadiness is first judged.", min=1)
    warmup_max_steps: int = knob(200, "Auto warmup: the most warmup steps; the row says when they ran out.", min=1)
    measure_steps: int = knob(100, "Optimizer steps in the measured window.", min=2)
    val_steps: int = knob(0, "Validation batches per process after training; 0 = the whole val set.", min=0)
    # numpy seeds stop at 2**32 - 1 and each process adds its rank: half of that leaves room for any world.
    seed: int = knob(42, "Base seed; each process uses seed + rank, each data worker adds its id.", min=0,
                     max=2**31 - 1)
    timeout_s: float = knob(1800.0, "Wall-clock limit for one cell (all ranks); the cell is killed after it.", gt=0)


@dataclass(**_FROZEN)
class RecipeConfig:
    optimizer: Literal["sgd"] = knob("sgd", "Optimizer (the reference uses SGD with momentum).")
    lr_per_256: float = knob(0.256, "Learning rate per 256 images of global batch (linear scaling).", gt=0)
    momentum: float = knob(0.875, "SGD momentum.", min=0, lt=1)
    nesterov: bool = knob(False, "Use Nesterov momentum.")
    weight_decay: float = knob(3.0517578125e-05, "L2 weight decay.", min=0)
    bn_bias_weight_decay: bool = knob(False, "Also decay BN parameters and biases (the reference does not).")
    label_smoothing: float = knob(0.1, "Label smoothing of the training loss.", min=0, max=0.99)
    schedule: Literal["cosine", "linear", "step", "constant"] = knob(
        "cosine", "LR decay after the warmup epochs (the reference's policies, epoch-granular).")
    lr_timeline: Literal["reference", "compressed"] = knob(
        "reference", "reference: every step trains at the LR the reference run gives it at that point, epochs "
        "counted in `epoch_images` (a benchmark of a few hundred ImageNet steps trains at peak / "
        "lr_warmup_epochs throughout); compressed: warmup and decay squeezed into the cell's own warmup + "
        "measured steps, step by step (convergence matrices, which must say so).")
    epochs: int = knob(90, "Length of the reference run in epochs: the decay's span.", min=1)
    lr_warmup_epochs: int = knob(8, "Warmup epochs: lr = peak * (epoch + 1) / lr_warmup_epochs while warming "
                                 "up (compressed: the same share of the cell's steps).", min=0)
    epoch_images: int = knob(0, "Images in one epoch of the reference timeline; 0 = the training split's "
                             f"images ({IMAGENET_TRAIN_IMAGES:,} for synthetic data).", min=0)
    step_milestones: tuple[float, ...] = knob((1 / 3, 2 / 3, 8 / 9),
                                              "Fractions of training at which `step` multiplies LR by step_gamma.",
                                              gt=0, lt=1)
    step_gamma: float = knob(0.1, "LR multiplier at each step milestone.", gt=0, max=1)
    zero_init_residual: bool = knob(False, "Zero-init the last BN gamma of each residual branch.")
    init_loss_scale: float = knob(128.0, "Initial fp16 loss scale (the reference's static 128).", gt=0)
    dynamic_loss_scale: bool = knob(False, "fp16: let the scale grow (x2 after loss_scale_growth_interval "
                                    "clean steps); off = static, as the reference. An overflowing step is "
                                    "skipped and halves the scale either way.")
    loss_scale_growth_interval: int = knob(100, "fp16 steps without overflow before a dynamic scale doubles.",
                                           min=1)
    allow_tf32: bool = knob(True, "Allow TF32 for fp32 matmul/conv on Ampere and newer (recorded per row).")
    cudnn_benchmark: bool = knob(True, "Let cuDNN autotune convolution algorithms (during warmup).")

    def problems(self) -> list[str]:
        """Rules across this section's fields, as 'key: message'."""
        out = []
        if self.nesterov and self.momentum == 0:
            out.append("recipe.nesterov: Nesterov momentum needs recipe.momentum > 0")
        if list(self.step_milestones) != sorted(set(self.step_milestones)):
            out.append(f"recipe.step_milestones: must be strictly increasing, got {list(self.step_milestones)}")
        if self.lr_warmup_epochs >= self.epochs:
            out.append(f"recipe.lr_warmup_epochs: {self.lr_warmup_epochs} must be fewer than recipe.epochs "
                       f"({self.epochs})")
        return out


@dataclass(**_FROZEN)
class GenerateConfig:
    kind: Literal["shapes", "digits"] = knob(
        "shapes", "Generated dataset family (learnable classes); digits has 10 classes and needs scikit-learn "
        "(`pip install 'nvbench[digits]'`).")
    image_size: int = knob(256, "Side of generated JPEGs in pixels.", min=16)
    num_classes: int = knob(10, "Classes in the generated dataset.", min=2)
    train_per_class: int = knob(64, "Training images per class.", min=1)
    val_per_class: int = knob(16, "Validation images per class.", min=1)
    seed: int = knob(0, "Generator seed.", min=0)


@dataclass(**_FROZEN)
class DataConfig:
    path: str = knob("", "ImageFolder root with train/ and val/ (e.g. ImageNet); empty = generate one.")
    cache_dir: str = knob("", "Where generated datasets are kept; empty = $NVBENCH_CACHE or ~/.cache/nvbench.")
    workers: int = knob(4, "DataLoader worker processes per process (pytorch backend).", min=0)
    prefetch_factor: int = knob(2, "Batches prefetched per DataLoader worker.", min=1)
    dali_threads: int = knob(4, "DALI CPU threads per process.", min=1)
    dali_prefetch_queue: int = knob(2, "DALI prefetch queue depth.", min=1)
    generate: GenerateConfig = field(default_factory=GenerateConfig,
                                     metadata={"doc": "Dataset generated when `path` is empty."})


@dataclass(**_FROZEN)
class RunConfig:
    repeats: int = knob(1, "Times every cell runs.", min=1)
    order: Literal["interleaved", "sequential"] = knob(
        "interleaved", "interleaved shuffles (cell, repeat) with shuffle_seed so drift does not look like a cell effect.")
    shuffle_seed: int = knob(0, "Seed of the interleaved order (recorded in the manifest).", min=0)
    device: Literal["auto", "cuda", "cpu"] = knob("auto", "Where cells train; auto = CUDA when available.")
    nvtx: bool = knob(True, "Emit NVTX ranges (cheap; see docs/performance.md).")
    threads_per_process: int = knob(0, "torch intra-op threads per CPU process; 0 = cores / processes.", min=0)
    malloc: Literal["stable", "system"] = knob(
        "stable", "stable: cell processes start with GLIBC_TUNABLES that make glibc malloc keep freed memory "
        "(mmap_threshold 32 MiB, trim_threshold 4 GiB) instead of returning it and faulting it in again every "
        "step, by an amount that differs from process to process (on the CPU box: 5x fewer page faults, CPU "
        "steps 6-8% faster; docs/performance.md); system: the C library's defaults. Names you set in "
        "GLIBC_TUNABLES yourself are kept.")
    speed_probe: bool = knob(
        True, "Single-process CPU cells time a fixed reference computation (SHA-256 + numpy multiply-adds, "
        "~0.25 ms, after reading twice the last-level cache) between measured steps, outside step times and "
        "window, and record how fast the machine ran (speed_probe_s; harness/cell/probe.py); nvbench report "
        "compares at equal probe time unless --no-speed-adjust. Ignored on CUDA and in torchrun groups.")
    phase_timing: bool = knob(
        True, "Time each measured step's phases (data, h2d, forward, backward, optimizer) from the step's own "
        "ranges: CUDA events on GPU, host clocks on CPU (steps phase_<name>_s; a verdict names the phase that "
        "changed). Off: the phase columns are null.")


@dataclass(**_FROZEN)
class LaunchConfig:
    nnodes: int = knob(1, "Nodes in a torchrun group (world_size counts processes per node).", min=1)
    node_rank: int = knob(0, "This node's rank under the static rendezvous backend (c10d assigns ranks itself).", min=0)
    rdzv_endpoint: str = knob("", "host:port of the rendezvous for multi-node; empty = --standalone.")
    rdzv_id: str = knob("nvbench", "Rendezvous id shared by all nodes of a run; each job rendezvouses as "
                        "RDZV_ID-<cell id>-r<repeat>.")
    rdzv_backend: Literal["c10d", "static"] = knob("c10d", "torchrun rendezvous backend for multi-node.")


_SLURM_WORD = re.compile(r"[A-Za-z0-9_.,:+=@&|/-]*")
"""What a SLURM name (partition, account, qos, constraint expression) may hold: no spaces, quotes or newlines."""


@dataclass(**_FROZEN)
class ExecutorConfig:
    """Where a job runs: `local` processes on this machine, or one SLURM job per (cell, repeat)."""

    kind: Literal["local", "slurm"] = knob(
        "local", "local: each job a process of this machine, one at a time; slurm: each job a SLURM batch job "
        "(sbatch, then srun of the same cell command). `nvbench run --executor` wins over this key.")
    partition: str = knob("", "SLURM partition (sbatch --partition); empty = the cluster's default.")
    account: str = knob("", "SLURM account (sbatch --account); empty = the user's default.")
    qos: str = knob("", "SLURM quality of service (sbatch --qos); empty = the default.")
    constraint: str = knob("", "SLURM node features (sbatch --constraint); empty = any node.")
    gpus_per_node: int = knob(0, "GPUs each node of a job asks for (sbatch --gpus-per-node); 0 = none (CPU cells).",
                              min=0)
    cpus_per_task: int = knob(0, "CPUs of the job's one task per node (sbatch --cpus-per-task); 0 = SLURM's default.",
                              min=0)
    exclusive: bool = knob(True, "Whole nodes per job (sbatch --exclusive): no neighbour shares the node while "
                           "a cell is measured.")
    max_parallel: int = knob(8, "SLURM jobs of this run in flight (pending or running) at once; the local "
                             "executor runs one.", min=1)
    time_margin_s: float = knob(300.0, "Added to benchmark.timeout_s for the job's SLURM time limit (startup, "
                                "queueing of the step, the row's files); rounded up to whole minutes.", min=0)
    poll_s: float = knob(5.0, "Seconds between reads of the jobs' states (one squeue for all of them).", gt=0)
    extra_args: tuple[str, ...] = knob((), "More sbatch options, each one argument (e.g. [\"--reservation=rn50\"]).")

    def problems(self) -> list[str]:
        out = [f"executor.{name}: {getattr(self, name)!r} is not a SLURM name (letters, digits and _.,:+=@&|/- only)"
               for name in ("partition", "account", "qos", "constraint")
               if not _SLURM_WORD.fullmatch(getattr(self, name))]
        owned = ("--time", "-t", "--nodes", "-N", "--output", "-o", "--error", "-e", "--job-name", "-J", "--parsable",
                 "--wrap", "--chdir", "-D", "--ntasks-per-node", "--requeue", "--no-requeue")
        for arg in self.extra_args:
            if not arg.startswith("-") or "\n" in arg:
                out.append(f"executor.extra_args: {arg!r} is not an sbatch option (it must start with '-')")
            elif arg.split("=", 1)[0] in owned:
                out.append(f"executor.extra_args: {arg.split('=', 1)[0]} is set by nvbench from the cell "
                           "(time limit from benchmark.timeout_s, nodes from launch.nnodes, output into the run folder)")
        return out


@dataclass(**_FROZEN)
class SmokeConfig:
    """What `--smoke` shrinks every cell to."""

    image_size: int = knob(16, "Crop size under --smoke.", min=8)
    batch_size: int = knob(4, "Per-process batch under --smoke.", min=1)
    warmup_steps: int = knob(1, "Warmup steps under --smoke.", min=0)
    measure_steps: int = knob(3, "Measured steps under --smoke.", min=2)
    val_steps: int = knob(0, "Validation batches under --smoke; 0 = the whole val set, every class of it (the "
                          "default: a top-1 of one batch is noise, not a result).", min=0)
    num_classes: int = knob(10, "Classes under --smoke (the generated dataset's).", min=2)
    workers: int = knob(1, "DataLoader workers under --smoke.", min=0)
    timeout_s: float = knob(300.0, "Per-cell timeout under --smoke.", gt=0)
    dataset_image_size: int = knob(24, "Generated JPEG side under --smoke.", min=16)
    dataset_train_per_class: int = knob(8, "Generated training images per class under --smoke.", min=1)
    dataset_val_per_class: int = knob(10, "Generated validation images per class under --smoke (10 x 10 classes: "
                                      "the 100 images a top-1 needs to be shown as a number).", min=1)


@dataclass(**_FROZEN)
class Axes:
    backend: tuple[str, ...] = ("synthetic",)
    memory_format: tuple[str, ...] = ("nchw",)
    precision: tuple[str, ...] = ("fp32",)
    world_size: tuple[int, ...] = (1,)
    grad_accum: tuple[int, ...] = (1,)
    compile: tuple[str, ...] = ("eager",)


@dataclass(**_FROZEN)
class Exclude:
    """Cells whose axis values all match (a value list means any of them) are not run."""

    match: tuple[tuple[str, tuple[Any, ...]], ...]

    def matches(self, values: dict[str, Any]) -> bool:
        return all(values[axis] in allowed for axis, allowed in self.match)


@dataclass(**_FROZEN)
class Matrix:
    source: str
    source_text: str
    version: int
    benchmark: BenchmarkConfig
    recipe: RecipeConfig
    data: DataConfig
    axes: Axes
    excludes: tuple[Exclude, ...]
    run: RunConfig
    launch: LaunchConfig
    smoke: SmokeConfig
    executor: ExecutorConfig


SECTIONS: dict[str, type] = {
    "benchmark": BenchmarkConfig, "recipe": RecipeConfig, "data": DataConfig,
    "run": RunConfig, "launch": LaunchConfig, "smoke": SmokeConfig,
    "executor": ExecutorConfig,
}
TOP_LEVEL = ("version", "axes", "exclude", *SECTIONS)


# ---------------------------------------------------------------- parsing

def _suggest(key: str, known: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(t) for t in typing.get_args(tp))
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    return getattr(tp, "__name__", str(tp))


def _choice_problem(value: Any, choices: tuple[Any, ...]) -> str | None:
    if value in choices and isinstance(value, type(choices[0])):
        return None
    hint = _suggest(value, choices) if isinstance(value, str) else ""
    return f"unknown value {_show(value)}{hint}; choose from {', '.join(map(str, choices))}"


def _show(value: Any) -> str:
    """repr of a value from the file, cut short: a message line names it, it need not hold it all."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_value(value: Any, tp: Any, meta: dict[str, Any]) -> tuple[Any, str | None]:
    """Convert a TOML value to `tp`; return (converted, problem)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):  # e.g. int | Literal["auto"]: the first member that takes it
        problems = {}
        for member in typing.get_args(tp):
            conv, problem = _check_value(value, member, meta)
            if problem is None:
                return conv, None
            problems[typing.get_origin(member) or member] = problem
        if isinstance(value, int) and not isinstance(value, bool) and int in problems:
            return None, problems[int]  # a number out of range says which range
        if isinstance(value, str) and Literal in problems:
            return None, problems[Literal]  # a misspelt word gets its suggestion
        return None, f"must be {_type_name(tp)}, got {type(value).__name__} {_show(value)}"
    if origin is Literal:
        return value, _choice_problem(value, typing.get_args(tp))
    if origin is tuple:
        if not isinstance(value, list):
            return None, f"must be a {_type_name(tp)}, got {type(value).__name__}"
        items = []
        for item in value:
            conv, problem = _check_value(item, typing.get_args(tp)[0], meta)
            if problem:
                return None, f"item {_show(item)}: {problem}"
            items.append(conv)
        return tuple(items), None
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif tp is str:
        ok = isinstance(value, str)
    else:  # pragma: no cover - a declaration error, not user input
        raise TypeError(f"unsupported knob type {tp}")
    if not ok:
        return None, f"must be {_type_name(tp)}, got {type(value).__name__} {_show(value)}"
    if tp is str and meta.get("choices"):
        return value, _choice_problem(value, meta["choices"])
    return value, _bound_problem(value, meta) if tp in (int, float) else None


def _bound_problem(value: float, meta: dict[str, Any]) -> str | None:
    if not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if isinstance(value, int) and abs(value) > INT64_MAX:
        return f"must fit in 64 bits, got {_show(value)}"
    if meta.get("min") is not None and value < meta["min"]:
        return f"must be >= {meta['min']:g}, got {value!r}"
    if meta.get("gt") is not None and value <= meta["gt"]:
        return f"must be > {meta['gt']:g}, got {value!r}"
    if meta.get("max") is not None and value > meta["max"]:
        return f"must be <= {meta['max']:g}, got {value!r}"
    if meta.get("lt") is not None and value >= meta["lt"]:
        return f"must be < {meta['lt']:g}, got {value!r}"
    return None


def _parse_section(raw: Any, cls: type, where: str, problems: list[str]) -> Any:
    if not isinstance(raw, dict):
        problems.append(f"{where}: must be a table, got {type(raw).__name__}")
        return cls()
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            problems.append(f"{where}.{key}: unknown key{_suggest(key, fields)}")
            continue
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = _parse_section(value, tp, f"{where}.{key}", problems)
            continue
        conv, problem = _check_value(value, tp, dict(fields[key].metadata))
        if problem:
            problems.append(f"{where}.{key}: {problem}")
        else:
            kwargs[key] = conv
    return cls(**kwargs)


def _parse_axis_value(axis: str, value: Any) -> tuple[Any, str | None]:
    choices = AXIS_CHOICES[axis]
    if choices is None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return None, f"must be a positive integer, got {_show(value)}"
        return (None, f"must fit in 64 bits, got {_show(value)}") if value > INT64_MAX else (value, None)
    problem = _choice_problem(value, choices)
    return (None, problem) if problem else (value, None)


def _parse_axes(raw: Any, where: str, problems: list[str]) -> Axes:
    if not isinstance(raw, dict):
        problems.append(f"{where}: must be a table, got {type(raw).__name__}")
        return Axes()
    kwargs = {}
    for axis, values in raw.items():
        if axis not in AXIS_CHOICES:
            problems.append(f"{where}.{axis}: unknown axis{_suggest(axis, AXES)}")
            continue
        if not isinstance(values, list):
            values = [values]
        if not values:
            problems.append(f"{where}.{axis}: empty list; give at least one value")
            continue
        parsed = []
        for value in values:
            conv, problem = _parse_axis_value(axis, value)
            if problem:
                problems.append(f"{where}.{axis}: {problem}")
            elif conv in parsed:
                problems.append(f"{where}.{axis}: duplicate value {conv!r}")
            else:
                parsed.append(conv)
        if parsed:  # else its problems are listed, and the default stands in for the rules that follow
            kwargs[axis] = tuple(parsed)
    return Axes(**kwargs)


def _parse_excludes(raw: Any, axes: Axes, where: str, problems: list[str]) -> tuple[Exclude, ...]:
    if not isinstance(raw, list):
        problems.append(f"{where}: must be an array of tables ([[exclude]]), got {type(raw).__name__}")
        return ()
    excludes = []
    for i, entry in enumerate(raw):
        here = f"{where}[{i}]"
        if not isinstance(entry, dict) or not entry:
            problems.append(f"{here}: must be a non-empty table of axis = value pairs")
            continue
        match = []
        for axis, values in entry.items():
            if axis not in AXIS_CHOICES:
                problems.append(f"{here}.{axis}: unknown axis{_suggest(axis, AXES)}")
                continue
            values = values if isinstance(values, list) else [values]
            allowed = []
            for value in values:
                conv, problem = _parse_axis_value(axis, value)
                if problem:
                    problems.append(f"{here}.{axis}: {problem}")
                elif conv not in getattr(axes, axis):
                    problems.append(f"{here}.{axis}: value {conv!r} is not on the axis "
                                    f"({', '.join(map(str, getattr(axes, axis)))})")
                else:
                    allowed.append(conv)
            match.append((axis, tuple(allowed)))
        excludes.append(Exclude(match=tuple(match)))
    return tuple(excludes)


def parse_matrix(raw: dict[str, Any], source: str, source_text: str = "", *,
                 check_paths: bool = True) -> Matrix:
    """Validate a decoded TOML document; raise MatrixError listing every problem."""
    if "version" not in raw and "benchmark" not in raw:
        raise MatrixError([f"{source}: not an nvbench matrix (no `version = {SCHEMA_VERSION}` and no "
                           "[benchmark] table)"])
    problems: list[str] = []
    for key in raw:
        if key not in TOP_LEVEL:
            problems.append(f"{key}: unknown section{_suggest(key, TOP_LEVEL)}")
    version = raw.get("version")
    if version is None:
        problems.append(f"version: missing; the file's first line should be `version = {SCHEMA_VERSION}`")
    elif type(version) is not int or version != SCHEMA_VERSION:
        problems.append(f"version: unsupported matrix version {_show(version)}; this nvbench reads {SCHEMA_VERSION}")
    if "benchmark" not in raw:
        problems.append("benchmark: missing table; a matrix names its model and sizes in [benchmark]")
    sections = {name: _parse_section(raw.get(name, {}), cls, name, problems) for name, cls in SECTIONS.items()}
    axes = _parse_axes(raw.get("axes", {}), "axes", problems)
    excludes = _parse_excludes(raw.get("exclude", []), axes, "exclude", problems)
    problems += sections["recipe"].problems()
    problems += sections["executor"].problems()
    problems += _cross_problems(sections, axes, excludes, check_paths=check_paths)
    if problems:
        raise MatrixError([f"{source}: {p}" for p in problems])
    return Matrix(source=source, source_text=source_text, version=version, axes=axes, excludes=excludes,
                  **sections)


def _cross_problems(sections: dict[str, Any], axes: Axes, excludes: tuple[Exclude, ...], *,
                    check_paths: bool) -> list[str]:
    """Rules across sections: what the file alone says would fail once cells run."""
    bench, data, launch, smoke = sections["benchmark"], sections["data"], sections["launch"], sections["smoke"]
    gen, reads_data = data.generate, bool(set(axes.backend) - {"synthetic"})
    problems = []
    if data.path == "" and gen.num_classes > bench.num_classes:
        problems.append(f"benchmark.num_classes: {bench.num_classes} is fewer than data.generate.num_classes "
                        f"({gen.num_classes}); raise num_classes or generate fewer classes")
    if reads_data and gen.kind == "digits":
        problems += _digits_problems(gen)
    if check_paths and data.path and reads_data:
        problems += _dataset_path_problems(data.path)
    problems += _batch_problems(bench, smoke, data, _data_shards(axes, excludes), launch)
    problems += _warmup_problems(bench, sections["recipe"])
    if launch.nnodes > 1 and not launch.rdzv_endpoint and sections["executor"].kind != "slurm":
        problems.append("launch.rdzv_endpoint: required when launch.nnodes > 1 (host:port every node can reach), "
                        "unless executor.kind = \"slurm\" (the job's first node serves it)")
    if launch.node_rank >= launch.nnodes:
        problems.append(f"launch.node_rank: {launch.node_rank} must be < launch.nnodes ({launch.nnodes})")
    return problems


def _digits_problems(gen: GenerateConfig) -> list[str]:
    problems = []
    if gen.num_classes > DIGITS_CLASSES:
        problems.append(f"data.generate.num_classes: digits has {DIGITS_CLASSES} classes, asked for "
                        f"{gen.num_classes}")
    # A read of what is installed, not a change to it: validation stays pure.
    if importlib.util.find_spec("sklearn") is None:
        problems.append("data.generate.kind: 'digits' needs scikit-learn, which is not installed: "
                        "pip install 'nvbench[digits]', or use kind = 'shapes'")
    return problems


def _dataset_path_problems(path: str) -> list[str]:
    try:
        root = Path(path).expanduser()
    except RuntimeError:  # "~someone" for a user this machine does not know
        return [f"data.path: cannot expand {_show(path)}: no such user's home directory"]
    missing = [s for s in ("train", "val") if not (root / s).is_dir()]
    if missing:
        return [f"data.path: dataset {_show(str(root))} has no {' or '.join(s + '/' for s in missing)} "
                "directory (expected an ImageFolder root)"]
    return []


def _warmup_problems(bench: BenchmarkConfig, recipe: RecipeConfig) -> list[str]:
    if bench.warmup_min_steps > bench.warmup_max_steps:
        return [f"benchmark.warmup_min_steps: {bench.warmup_min_steps} is more than benchmark.warmup_max_steps "
                f"({bench.warmup_max_steps})"]
    if bench.warmup_steps == "auto" and recipe.lr_timeline == "compressed":
        return ["benchmark.warmup_steps: 'auto' leaves the cell's length open, which the compressed LR timeline "
                "is fitted to; give a number of steps, or use recipe.lr_timeline = 'reference'"]
    return []


def _data_shards(axes: Axes, excludes: tuple[Exclude, ...]) -> set[tuple[str, int]]:
    """(backend, world size) of every cell that reads a dataset, excludes applied."""
    pairs = set()
    for values in itertools.product(*(getattr(axes, axis) for axis in AXES)):
        cell = dict(zip(AXES, values))
        if cell["backend"] != "synthetic" and not any(ex.matches(cell) for ex in excludes):
            pairs.add((cell["backend"], cell["world_size"]))
    return pairs


def _batch_problems(bench: BenchmarkConfig, smoke: SmokeConfig, data: DataConfig, shards: set[tuple[str, int]],
                    launch: LaunchConfig) -> list[str]:
    """Batches the model or the generated dataset cannot supply, as written and under --smoke (which always
    generates its dataset), for the cells that read data (`shards`: backend and world size)."""
    gen = data.generate
    shapes = [("benchmark", bench.batch_size, bench.image_size, gen.train_per_class * gen.num_classes, data.path == ""),
              ("smoke", smoke.batch_size, smoke.image_size, smoke.dataset_train_per_class * smoke.num_classes, True)]
    problems = []
    for where, batch, image, train_images, generated in shapes:
        if batch == 1 and image <= MODEL_OUTPUT_STRIDE:
            # BatchNorm in training needs more than one value per channel; one image shrunk to 1x1 has one.
            problems.append(f"{where}.batch_size: one image of {image} px leaves the model's last stage 1x1, "
                            f"which BatchNorm cannot train on; use batch_size >= 2 or image_size > "
                            f"{MODEL_OUTPUT_STRIDE}")
        # pytorch's sampler pads every rank's shard to the same length; DALI's training epoch floors it.
        short = [(images, world) for backend, ws in sorted(shards) for world in [ws * launch.nnodes]
                 for images in [train_images // world if backend.startswith("dali") else -(-train_images // world)]
                 if images < batch]
        if generated and short:
            per_rank, world = min(short)
            problems.append(f"{where}.batch_size: {batch} is more than the {per_rank} generated training images "
                            f"each of {world} process(es) reads; the loaders train on full batches only, so they "
                            "would yield none: generate more images or use a smaller batch")
    return problems


def _toml_position(message: str) -> tuple[str, str]:
    """tomllib's message split into (what, where): 'Invalid value', 'line 2, column 5'."""
    match = re.search(r" \(at (line \d+, column \d+|end of document)\)$", message)
    if not match:
        return message, ""
    where = match.group(1).replace("end of document", "the end of the file")
    return message[:match.start()], where


def _decode(path: Path, data: bytes) -> str:
    try:
        # utf-8-sig: a byte-order mark (some Windows editors write one) is not part of the TOML.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = len(data[data.rfind(b"\n", 0, exc.start) + 1:exc.start].decode("utf-8", "replace")) + 1
        raise MatrixError([f"{path}: not UTF-8 text at line {line}, column {column} (byte 0x{data[exc.start]:02x}); "
                           "a matrix file is UTF-8 TOML"]) from None


def load_matrix(path: str | Path, *, check_paths: bool = True) -> Matrix:
    """Read and validate a matrix file; every failure is a MatrixError naming the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MatrixError([f"{path}: matrix file not found"]) from None
    except OSError as exc:
        raise MatrixError([f"{path}: cannot read matrix file: {exc.strerror}"]) from None
    text = _decode(path, data)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        what, where = _toml_position(str(exc))
        raise MatrixError([f"{path}: malformed TOML" + (f" at {where}" if where else "") + f": {what}"]) from None
    return parse_matrix(raw, str(path), text, check_paths=check_paths)


def with_repeats(matrix: Matrix, repeats: int | None) -> Matrix:
    """`matrix` with run.repeats replaced (the `--repeats` flag); None leaves it as written."""
    if repeats is None:
        return matrix
    if repeats < 1:
        raise MatrixError([f"--repeats {repeats}: run.repeats must be >= 1"])
    return dataclasses.replace(matrix, run=dataclasses.replace(matrix.run, repeats=repeats))


# ---------------------------------------------------------------- round trip

def to_plain(obj: Any) -> Any:
    """A frozen config (nested) as JSON-ready dicts/lists."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [to_plain(v) for v in obj]
    return obj


def from_plain(cls: type, data: dict[str, Any]) -> Any:
    """Inverse of to_plain for the config dataclasses (trusted input written by nvbench)."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        tp, value = hints[f.name], data[f.name]
        if dataclasses.is_dataclass(tp):
            value = from_plain(tp, value)
        elif typing.get_origin(tp) is tuple or (isinstance(tp, types.GenericAlias) and tp.__origin__ is tuple):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**kwargs)


# ---------------------------------------------------------------- docs

def markdown_reference() -> str:
    """The knob tables of docs/matrix.md, generated from the declarations above."""
    out = []
    for name, cls in {**SECTIONS, "data.generate": GenerateConfig}.items():
        out.append(f"### `[{name}]`\n\n| key | type | default | meaning |\n|---|---|---|---|")
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                continue
            default = f.default
            shown = "[" + ", ".join(f"{v:.4g}" for v in default) + "]" if isinstance(default, tuple) else repr(default)
            shown = shown.replace("'", '"').replace("True", "true").replace("False", "false")
            choices = f.metadata.get("choices")
            kind = " | ".join(repr(c) for c in choices) if choices else _type_name(hints[f.name])
            out.append(f"| `{f.name}` | {kind} | `{shown}` | {f.metadata['doc']} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # python -m harness.spec.matrix --markdown
    if sys.argv[1:] == ["--markdown"]:
        print(markdown_reference())
