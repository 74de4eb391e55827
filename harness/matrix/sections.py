"""The typed matrix: its constants, each section's frozen dataclass of knobs, the axes and excludes, and their
round trip through plain JSON. Parsed from TOML by harness.matrix.parse; documented by harness.matrix.reference."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.catalogue.axes import AXES
from harness.data.registry import BACKENDS as DATA_BACKENDS
from harness.matrix.executor import ExecutorConfig
from harness.models.registry import ENTRIES as MODEL_ENTRIES
from harness.matrix.knobs import FROZEN, Problem, knob
from harness.catalogue import col
from harness.matrix.judge import JudgeConfig

SCHEMA_VERSION = 1
"""Version of the matrix file format; every file states it as top-level `version`."""

WARMUP_CHUNK = 10
"""Auto warmup judges steadiness every this many steps."""
WARMUP_TOLERANCE = 0.02
"""Auto warmup is over when a chunk's median step time is within this fraction of the previous chunk's."""

IMAGENET_TRAIN_IMAGES = 1_281_167
"""Images in ImageNet-1k's training split: the epoch of the reference timeline for synthetic data."""

BACKENDS = tuple(DATA_BACKENDS)
"""The data backends' names (harness.data.registry, plain data: no torch)."""
COMPILE_MODES = ("eager", "inductor", "cudagraph")
"""How the training step runs: eager PyTorch (the default), under torch.compile (inductor), or captured
whole as one CUDA graph and replayed (cudagraph)."""
MEMORY_FORMATS = ("nchw", "nhwc")
PRECISIONS = ("fp32", "fp16", "bf16")
MODEL_NAMES = tuple(e.name for e in MODEL_ENTRIES)
"""The model registry's names (harness.models.registry, plain data: no torch; harness.models builds them)."""
MODEL_OUTPUT_STRIDE = 32
"""Every registered model shrinks its input 32x before the classifier (the ResNet stages)."""
DIGITS_CLASSES = 10
"""The digits dataset has ten classes (0-9)."""
AXIS_CHOICES: dict[str, tuple[str, ...] | None] = {
    "model": MODEL_NAMES,  # and the user's own models, 'package.module:builder' (harness.matrix.model_axis)
    "backend": BACKENDS,
    col.memory_format: MEMORY_FORMATS,
    "precision": PRECISIONS,
    col.world_size: None,  # positive integers
    col.grad_accum: None,
    "compile": COMPILE_MODES,
}


MAX_REPEATS = 1000
"""run.repeats and --repeats at most: the plan lists every (cell, repeat), and 2**31 of them filled memory."""


@dataclass(**FROZEN)
class BenchmarkConfig:
    name: str = knob("benchmark", "Name shown in reports.")
    model: str = knob("resnet50", "The model of every cell: a registry name (" + ", ".join(MODEL_NAMES) + "), or "
                      "your own as \"package.module:builder\" (docs/recipe.md). A registry model's defaults set the "
                      "keys of [benchmark] and [recipe] the file leaves out (`nvbench validate` lists them). Several "
                      "models: the `model` axis instead.")
    num_classes: int = knob(1000, "Classifier outputs; must cover the dataset's classes.", min=1)
    image_size: int = knob(224, "Side of the square training/validation crop in pixels.", min=8)
    batch_size: int = knob(256, "Images per process per micro-batch.", min=1)
    warmup_steps: int | Literal["auto"] = knob(
        20, "Optimizer steps run and recorded as warmup, excluded from statistics; \"auto\": warm up until the "
        f"steps are steady: after warmup_min_steps, in chunks of {WARMUP_CHUNK} steps, until the median step time "
        f"of the last chunk is within {WARMUP_TOLERANCE:.0%} of the chunk before and the steps have settled (no "
        "transient at the last chunk's start, no hiccup at its end), or warmup_max_steps. The row records the steps "
        "run (warmup_steps_used). Every window's start is checked for a transient: is_steady says.", min=0)
    warmup_min_steps: int = knob(10, "Auto warmup: steps run before steadiness is first judged.", min=1)
    warmup_max_steps: int = knob(200, "Auto warmup: the most warmup steps; the row says when they ran out.", min=1)
    measure_steps: int = knob(100, "Optimizer steps in the measured window.", min=2)
    val_steps: int = knob(0, "Validation batches per process after training; 0 = the whole val set.", min=0)
    # numpy seeds stop at 2**32 - 1 and each process adds its rank: half of that leaves room for any world.
    seed: int = knob(42, "Base seed; each process uses seed + rank, each data worker adds its id.", min=0,
                     max=2**31 - 1)
    timeout_s: float = knob(1800.0, "Wall-clock limit for one cell (all ranks); the cell is killed after it.", gt=0)


@dataclass(**FROZEN)
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

    def problems(self) -> list[Problem]:
        """Rules across this section's fields, as 'key: message'."""
        out = []
        if self.nesterov and self.momentum == 0:
            out.append(Problem("recipe.nesterov", "Nesterov momentum needs recipe.momentum > 0"))
        if list(self.step_milestones) != sorted(set(self.step_milestones)):
            out.append(Problem("recipe.step_milestones", f"must be strictly increasing, got {list(self.step_milestones)}"))
        if self.lr_warmup_epochs >= self.epochs:
            out.append(Problem("recipe.lr_warmup_epochs", f"{self.lr_warmup_epochs} must be fewer than recipe.epochs "
                       f"({self.epochs})"))
        return out


@dataclass(**FROZEN)
class GenerateConfig:
    kind: Literal["shapes", "digits"] = knob(
        "shapes", "Generated dataset family (learnable classes); digits has 10 classes and needs scikit-learn "
        "(`pip install 'nvbench[digits]'`).")
    image_size: int = knob(256, "Side of generated JPEGs in pixels.", min=16)
    num_classes: int = knob(10, "Classes in the generated dataset.", min=2)
    train_per_class: int = knob(64, "Training images per class.", min=1)
    val_per_class: int = knob(16, "Validation images per class.", min=1)
    seed: int = knob(0, "Generator seed.", min=0)


@dataclass(**FROZEN)
class DataConfig:
    path: str = knob("", "ImageFolder root with train/ and val/ (e.g. ImageNet); empty = generate one.")
    cache_dir: str = knob("", "Where generated datasets are kept; empty = $NVBENCH_CACHE or ~/.cache/nvbench.")
    workers: int = knob(4, "DataLoader worker processes per process (pytorch backend).", min=0)
    prefetch_factor: int = knob(2, "Batches prefetched per DataLoader worker.", min=1)
    dali_threads: int = knob(4, "DALI CPU threads per process.", min=1)
    dali_prefetch_queue: int = knob(2, "DALI prefetch queue depth.", min=1)
    generate: GenerateConfig = field(default_factory=GenerateConfig,
                                     metadata={"doc": "Dataset generated when `path` is empty."})


@dataclass(**FROZEN)
class RunConfig:
    repeats: int = knob(1, f"Times every cell runs (1 to {MAX_REPEATS}: the plan holds every repeat).", min=1,
                        max=MAX_REPEATS)
    order: Literal["interleaved", "sequential"] = knob(
        "interleaved", "interleaved shuffles (cell, repeat) with shuffle_seed so drift does not look like a cell effect.")
    shuffle_seed: int = knob(0, "Seed of the interleaved order (recorded in the manifest).", min=0)
    device: Literal["auto", "cuda", "cpu"] = knob("auto", "Where cells train; auto = CUDA when available.")
    nvtx: bool = knob(True, "Emit NVTX ranges (cheap; see docs/performance.md).")
    threads_per_process: int = knob(0, "torch intra-op threads per CPU process; 0 = cores / processes (a "
                                    "slot's cores when the run packs jobs into slots).", min=0)
    slots: int | Literal["auto"] = knob(
        "auto", "Jobs at once on this machine (local executor): a slot is one GPU and a disjoint share of the "
        "cores near it (on a machine without GPUs, a share of the cores), one world-size-1 job each; a "
        "world-size-k job takes k slots. auto = one slot per visible GPU for the backends this machine's "
        "calibration (nvbench calibrate-slots) cleared, the rest alone; 1 without GPUs or without a "
        "calibration. A number packs every backend (rows then say `uncalibrated` where no calibration cleared "
        "it). `nvbench run --slots` wins; SLURM places jobs itself and ignores it (docs/distributed.md).",
        min=1)
    malloc: Literal["stable", "system"] = knob(
        "stable", "stable: cell processes start with GLIBC_TUNABLES that make glibc malloc keep freed memory "
        "(mmap_threshold 32 MiB, trim_threshold 4 GiB) instead of returning it and faulting it in again every "
        "step, by an amount that differs from process to process (on the CPU box: 5x fewer page faults, CPU "
        "steps 6-8% faster; docs/performance.md); system: the C library's defaults. Names you set in "
        "GLIBC_TUNABLES yourself are kept.")
    speed_probe: bool = knob(
        True, "Single-process CPU cells time a fixed reference computation (SHA-256 + numpy multiply-adds, "
        "~0.25 ms, after reading twice the last-level cache) between measured steps, outside step times and "
        "window, and record how fast the machine ran (speed_probe_s; harness/cell/instruments/probe.py); nvbench report "
        "compares at equal probe time unless --no-speed-adjust. Ignored on CUDA and in torchrun groups.")
    phase_timing: bool = knob(
        True, "Time each measured step's phases (data, h2d, forward, backward, optimizer) from the step's own "
        "ranges: CUDA events on GPU, host clocks on CPU (steps phase_<name>_s; a verdict names the phase that "
        "changed). Off: the phase columns are null.")


@dataclass(**FROZEN)
class LaunchConfig:
    nnodes: int = knob(1, "Nodes in a torchrun group (world_size counts processes per node).", min=1)
    node_rank: int = knob(0, "This node's rank under the static rendezvous backend (c10d assigns ranks itself).", min=0)
    rdzv_endpoint: str = knob("", "host:port of the rendezvous for multi-node; empty = --standalone.")
    rdzv_id: str = knob("nvbench", "Rendezvous id shared by all nodes of a run; each job rendezvouses as "
                        "RDZV_ID-<cell id>-r<repeat>.")
    rdzv_backend: Literal["c10d", "static"] = knob("c10d", "torchrun rendezvous backend for multi-node.")



@dataclass(**FROZEN)
class SmokeConfig:
    """What `--smoke` shrinks every cell to."""

    image_size: int = knob(24, "Crop size under --smoke. Not 16: a ResNet's last stage then starts from a 1x1 "
                           "input, and on a CPU oneDNN's bf16 weight gradient of its stride-2 3x3 convolution came "
                           "out non-finite now and then (torch 2.13; docs/performance.md, the smoke run).", min=8)
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
    only: tuple[str, ...] = knob((), "`axis=value` filters every --smoke run applies, as --only does, before the "
                                 "command line's own: the slice of a large matrix a smoke run keeps (the same axis "
                                 "twice widens). Empty: every cell.")


@dataclass(**FROZEN)
class Axes:
    model: tuple[str, ...] = ("resnet50",)
    backend: tuple[str, ...] = ("synthetic",)
    memory_format: tuple[str, ...] = ("nchw",)
    precision: tuple[str, ...] = ("fp32",)
    world_size: tuple[int, ...] = (1,)
    grad_accum: tuple[int, ...] = (1,)
    compile: tuple[str, ...] = ("eager",)


@dataclass(**FROZEN)
class Exclude:
    """Cells whose axis values all match (a value list means any of them) are not run."""

    match: tuple[tuple[str, tuple[Any, ...]], ...]

    def matches(self, values: dict[str, Any]) -> bool:
        return all(values[axis] in allowed for axis, allowed in self.match)


@dataclass(**FROZEN)
class ModelSettings:
    """What one model on the axis trains with: the file's [benchmark] and [recipe] with the model's registry
    defaults in the keys the file leaves out (harness.matrix.model_axis)."""

    model: str
    key: str
    """Where the file names the model: "axes.model" or "benchmark.model" (the default's: the latter)."""
    benchmark: BenchmarkConfig
    recipe: RecipeConfig
    from_model: tuple[tuple[str, Any], ...] = ()
    """("section.key", value) for every value the model's defaults changed from the knob's own default."""
    search_dirs: tuple[str, ...] = ()
    """The user's model: the folders its module is looked for in, first to last (the matrix file's folder,
    then the working directory); () for a registry model."""


@dataclass(**FROZEN)
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
    models: tuple[ModelSettings, ...] = ()
    """One per value of the model axis, in its order."""
    judge: JudgeConfig = JudgeConfig()
    """[judge]: the practical floor per cell (harness.matrix.judge)."""


SECTIONS: dict[str, type] = {
    "benchmark": BenchmarkConfig, "recipe": RecipeConfig, "data": DataConfig,
    "run": RunConfig, "launch": LaunchConfig, "smoke": SmokeConfig,
    "executor": ExecutorConfig,
}
TOP_LEVEL = ("version", "axes", "exclude", "judge", *SECTIONS)


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
