"""Axes x excludes -> cells with stable ids, and the (cell, repeat) schedule. Pure: imports no torch."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import random
from dataclasses import dataclass
from typing import Any, Iterable

from harness.models.user import is_import_path, model_token
from harness.catalogue.cells import ID_HASH_LEN
from harness.matrix.knobs import suggest
from harness.matrix.sections import (
    AXES,
    AXIS_CHOICES,
    BenchmarkConfig,
    DataConfig,
    LaunchConfig,
    Matrix,
    RecipeConfig,
    RunConfig,
    from_plain,
    to_plain,
)
from harness.matrix.parse import MatrixError, axis_filter_value, split_axis_filter

# Knobs that change how a cell is run or kept, not what it measures: left out of the cell id so that
# ids stay comparable across runs, machines and timeouts.
_ID_EXCLUDED = {"benchmark": {"name", "timeout_s"}, "data": {"cache_dir"},
                # speed_probe: what the probe takes is kept out of step times and window, so it is how a
                # cell is observed, not what it measures. phase_timing likewise (its marks cost what
                # benchmarks/overhead.py --no-phase-timing shows), and ids recorded before it existed stay valid.
                # slots: where a job runs on the machine, not what it measures (the calibration proves packing
                # moves no number, and solo and packed rows of one cell must meet under one id).
                "run": {"repeats", "order", "shuffle_seed", "device", "speed_probe", "phase_timing", "slots"},
                # Where a node sits in its rendezvous, not what the group measures: all nodes share one id.
                "launch": {"node_rank", "rdzv_endpoint", "rdzv_id", "rdzv_backend"}}
_ID_EXCLUDED_FIELDS = ("id_names_model", "model_search_dirs")

"""The cell's own fields left out of the hash: how its id reads and where its model is found."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    """One fully resolved configuration: what a worker process trains and measures."""

    backend: str
    memory_format: str
    precision: str
    world_size: int
    grad_accum: int
    benchmark: BenchmarkConfig
    recipe: RecipeConfig
    data: DataConfig
    run: RunConfig
    launch: LaunchConfig
    compile: str = "eager"
    is_smoke: bool = False
    id_names_model: bool = False
    """The id's readable part starts with the model: its matrix has several models (a user's model always
    starts it). Not in the hash: a single-model matrix keeps the ids it had before the model axis."""
    model_search_dirs: tuple[str, ...] = ()
    """Where the user's model module is looked for (harness.matrix.model_axis); where, not what: not in the id."""

    @property
    def model(self) -> str:
        """The model axis: benchmark.model, which the hash has always covered."""
        return self.benchmark.model

    @property
    def axes(self) -> dict[str, Any]:
        return {axis: getattr(self, axis) for axis in AXES}

    @property
    def label(self) -> str:
        """The readable axis part of the cell's id: unique within one matrix; what reports name the cell by."""
        a = self
        model = f"{model_token(a.model)}_" if a.id_names_model or is_import_path(a.model) else ""
        mode = "" if a.compile == "eager" else f"_{a.compile}"
        return f"{model}{a.backend}_{a.memory_format}_{a.precision}_ws{a.world_size}_ga{a.grad_accum}{mode}"

    @property
    def cell_id(self) -> str:
        """Readable axis prefix (label) + hash of every knob that affects the measurement."""
        plain = self.to_plain()
        for name in _ID_EXCLUDED_FIELDS:
            plain.pop(name)
        for section, names in _ID_EXCLUDED.items():
            for name in names:
                plain[section].pop(name, None)
        digest = hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()[:ID_HASH_LEN]
        return f"{self.label}_{digest}"

    @property
    def images_per_step(self) -> int:
        """Images one optimizer step consumes over all ranks and nodes."""
        return self.benchmark.batch_size * self.grad_accum * self.world_size * self.launch.nnodes

    def to_plain(self) -> dict[str, Any]:
        return to_plain(self)

    @classmethod
    def from_plain(cls, data: dict[str, Any]) -> "Cell":
        return from_plain(cls, data)


def shrink_for_smoke(matrix: Matrix, bench: BenchmarkConfig | None = None) -> tuple[BenchmarkConfig, DataConfig]:
    """The benchmark (`bench`, or the matrix's) and data sections as --smoke runs them: tiny images, steps and
    generated dataset."""
    s = matrix.smoke
    bench = dataclasses.replace(
        bench or matrix.benchmark, image_size=s.image_size, batch_size=s.batch_size, warmup_steps=s.warmup_steps,
        measure_steps=s.measure_steps, val_steps=s.val_steps, num_classes=s.num_classes, timeout_s=s.timeout_s)
    generate = dataclasses.replace(
        matrix.data.generate, image_size=s.dataset_image_size, num_classes=s.num_classes,
        train_per_class=s.dataset_train_per_class, val_per_class=s.dataset_val_per_class)
    data = dataclasses.replace(matrix.data, path="", workers=min(matrix.data.workers, s.workers),
                               dali_threads=min(matrix.data.dali_threads, 2), generate=generate)
    return bench, data


def parse_only(filters: Iterable[str], source: str) -> dict[str, set[Any]]:
    """`--only axis=value` strings -> {axis: allowed values}; repeated axes widen, distinct axes narrow."""
    problems, allowed = [], {}
    for text in filters:
        pair = split_axis_filter(text)
        if pair is None:
            problems.append(f"--only {text!r}: expected axis=value, e.g. backend=synthetic")
            continue
        axis = pair[0]
        if axis not in AXIS_CHOICES:
            problems.append(f"--only {text!r}: unknown axis{suggest(axis, AXES)}")
            continue
        conv, problem = axis_filter_value(*pair)
        if problem:
            problems.append(f"--only {axis}: {problem}")
        else:
            allowed.setdefault(axis, set()).add(conv)
    if problems:
        raise MatrixError([f"{source}: {p}" for p in problems])
    return allowed


def expand(matrix: Matrix, *, smoke: bool = False, only: Iterable[str] = ()) -> list[Cell]:
    """Cartesian product of the axes minus excludes, in axis order; `only` filters by axis values, and under
    `smoke` so does smoke.only."""
    allowed = parse_only(only, matrix.source)
    filters = [allowed, parse_only(matrix.smoke.only, matrix.source)] if smoke else [allowed]
    models = {s.model: s for s in matrix.models}
    cells = []
    for values in itertools.product(*(getattr(matrix.axes, axis) for axis in AXES)):
        axes = dict(zip(AXES, values))
        if any(ex.matches(axes) for ex in matrix.excludes):
            continue
        if any(axes[axis] not in ok for keep in filters for axis, ok in keep.items()):
            continue
        settings = models[axes.pop("model")]
        bench, data = shrink_for_smoke(matrix, settings.benchmark) if smoke else (settings.benchmark, matrix.data)
        cells.append(Cell(**axes, benchmark=bench, recipe=settings.recipe, data=data, run=matrix.run,
                          launch=matrix.launch, is_smoke=smoke, id_names_model=len(matrix.models) > 1,
                          model_search_dirs=settings.search_dirs))
    if not cells:
        what = " and ".join(f"--only {a}={'|'.join(map(str, sorted(v, key=str)))}" for a, v in allowed.items())
        what += (" and " if what else "") + "smoke.only" if smoke and matrix.smoke.only else ""
        raise MatrixError([f"{matrix.source}: no cell left to run"
                           + (f" after {what}" if what else " (every cell is excluded)")])
    return cells


def schedule(cell_ids: list[str], repeats: int, order: str, seed: int) -> list[tuple[str, int]]:
    """The (cell id, repeat) list in run order; interleaved order is a seeded shuffle."""
    jobs = [(cid, r) for r in range(repeats) for cid in cell_ids]
    if order == "interleaved":
        random.Random(seed).shuffle(jobs)
    return jobs


def job_key(cell_id: str, repeat: int) -> str:
    """File stem of a (cell, repeat): cells/<key>.parquet, steps/<key>.parquet, logs/<key>.log."""
    return f"{cell_id}-r{repeat}"

