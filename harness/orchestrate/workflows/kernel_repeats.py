"""An A/B's profiled repeats: a stated number of extra processes per cell and side under torch.profiler over
a short window, interleaved A/B as the timed pairs are, after the timed ones. Each writes its rows into the
side's RUN/profile/ (row flagged `profile_tool`, never read as a timed repeat) and its kernels.parquet part;
the parts are gathered into RUN/kernels.parquet (harness/results/kernels.py)."""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.orchestrate.session import capabilities, job, runfolder
from harness.orchestrate.workflows.profile import PROFILE_DIR, ProfileSpec
from harness.results import kernels, store
from harness.matrix.cells import job_key
from harness.analysis.judge.verdict import IMPROVEMENT, REGRESSION
from harness.catalogue import col

AB_KEY = "kernel_repeats"
"""ab.json's record of the profiled repeats run: cells, repeats, steps, order."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KernelPlan:
    repeats: int
    """Profiled processes per cell and side."""
    steps: int
    """Profiled steps per process."""

    def __post_init__(self) -> None:
        if self.repeats < 0 or self.steps < 1:
            raise ValueError(f"--kernel-repeats {self.repeats} --kernel-steps {self.steps}: need repeats >= 0, "
                             "steps >= 1")

    def targets(self, comparison, *, asked: bool) -> tuple[list[str], str]:
        """The cells whose profiled repeats run, and why in words: every cell when `asked` (--kernels), else the
        cells whose change the comparison called (a regression or an improvement, accuracy's too); none when
        the plan runs no repeat."""
        if not self.repeats:
            return [], ""
        called = (REGRESSION, IMPROVEMENT)
        cells = [v.cell_id for v in comparison.verdicts if asked or v.verdict in called or v.is_regression]
        return cells, "asked with --kernels" if asked else "a change was called"


def _context(side_dir: Path, plan: KernelPlan, *, caps: capabilities.Capabilities, env: dict[str, Any],
             env_key: str, python: str | None, checkout: Path | None,
             notify: Callable[[str], None]) -> tuple[job.JobContext, dict]:
    run_id, _, cells = runfolder.load_plan(side_dir)
    spec = ProfileSpec(tool="torch", steps=plan.steps, out_dir=side_dir / PROFILE_DIR, device=caps.device, kernels=True)
    ctx = job.JobContext(run_dir=spec.out_dir, run_id=run_id, caps=caps, env=env, env_key=env_key, fault_spec=None,
                         notify=notify, profile=spec, fire_drill_pct=runfolder.plan_fire_drill(side_dir),
                         python=python, checkout=checkout)
    return ctx, cells


def _done(ctx: job.JobContext, cell_id: str, repeat: int) -> bool:
    """The profiled job left its row (any status): a resumed A/B does not run it again."""
    return (ctx.run_dir / "cells" / f"{job_key(cell_id, repeat)}.parquet").exists()


def run_kernel_repeats(out_dir: Path, cell_ids: Sequence[str], plan: KernelPlan, *, caps: capabilities.Capabilities,
                       envs: dict[str, dict[str, Any]], pythons: dict[str, str], seed: int,
                       checkouts: dict[str, Path | None] | None = None, notify: Callable[[str], None] = print,
                       sides: Sequence[str] = ("a", "b")) -> list[tuple[str, str, int, str]]:
    """Run `plan.repeats` profiled processes of each of `cell_ids` per side, round by round, the sides in a
    seeded random order within each (cell, repeat); gather each side's kernels.parquet. Returns (side,
    cell_id, repeat, status) in the order run, also appended to ab.json."""
    checkouts = checkouts or {}
    contexts = {}
    for name in sides:
        env = {k: v for k, v in envs[name].items() if k != col.env_key}
        contexts[name] = _context(out_dir / name, plan, caps=caps, env=env, env_key=envs[name][col.env_key],
                                  python=pythons[name], checkout=checkouts.get(name), notify=notify)
    rng = random.Random(seed)
    order = []
    for repeat in range(plan.repeats):
        for cid in sorted(cell_ids):
            round_ = list(sides)
            rng.shuffle(round_)
            for name in round_:
                ctx, cells = contexts[name]
                if _done(ctx, cid, repeat):
                    continue
                row = job.run_job(cells[cid], repeat, ctx)
                notify(f"{name.upper()} {row['status']:>8} {cid} profiled r{repeat}"
                       + ("" if row["status"] == "ok" else f"  {row['reason']}"))
                order.append((name, cid, repeat, row["status"]))
    for name in sides:
        ctx, _ = contexts[name]
        shutil.rmtree(ctx.run_dir / "work", ignore_errors=True)
        kernels.gather(out_dir / name, ctx.run_dir / kernels.PARTS_DIR)
    _record(out_dir, cell_ids, plan, order)
    return order


def _record(out_dir: Path, cell_ids: Sequence[str], plan: KernelPlan, order: list) -> None:
    path = out_dir / "ab.json"
    if not path.exists():  # two plain run folders (benchmarks, tests): nothing to record in
        return
    meta = store.read_json(path)
    entry = meta.get(AB_KEY) or {"cells": [], "order": []}
    entry["cells"] = sorted(set(entry["cells"]) | set(cell_ids))
    entry |= {"repeats": plan.repeats, "steps": plan.steps}
    entry["order"] += [list(item) for item in order]
    meta[AB_KEY] = entry
    store.write_json(path, meta)
