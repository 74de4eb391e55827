"""Counted processes: a stated number of extra processes per cell (and side of an A/B) whose few steps after the
warm-up are counted, never timed (harness/cell/instruments/work.py), interleaved across the sides as the timed pairs are, after
the timed ones. Their rows go to RUN/counted/ (flagged `profile_tool`, never read as a timed repeat); their parts
are gathered into RUN/work.parquet (harness/results/work.py)."""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from harness.catalogue import col
from harness.matrix.cells import job_key
from harness.orchestrate.session import capabilities, job, runfolder
from harness.orchestrate.workflows.profile import ProfileSpec
from harness.results import store, work

AB_KEY = "work_repeats"
"""ab.json's record of the counted processes run: cells, repeats, steps, order."""
PLAN_FILE = "work-plan.json"
"""RUN/counted/work-plan.json: the counted processes a run asked for, so that `nvbench run --resume` runs the rest."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkPlan:
    repeats: int
    """Counted processes per cell (and side)."""
    steps: int
    """Counted steps per process, after the cell's ordinary warm-up."""

    def __post_init__(self) -> None:
        if self.repeats < 0 or self.steps < 1:
            raise ValueError(f"--work-repeats {self.repeats} --work-steps {self.steps}: need repeats >= 0, "
                             "steps >= 1")


def save_plan(run_dir: Path, plan: WorkPlan) -> None:
    store.write_json(Path(run_dir) / work.COUNTED_DIR / PLAN_FILE, dataclasses.asdict(plan))


def load_plan(run_dir: Path) -> WorkPlan | None:
    """The run's counted processes as planned (None: it asked for none)."""
    path = Path(run_dir) / work.COUNTED_DIR / PLAN_FILE
    return WorkPlan(**store.read_json(path)) if path.is_file() else None


def _context(side_dir: Path, plan: WorkPlan, *, caps: capabilities.Capabilities, env: dict[str, Any],
             python: str | None, checkout: Path | None, notify: Callable[[str], None]) -> tuple[job.JobContext, dict]:
    run_id, _, cells = runfolder.load_plan(side_dir)
    spec = ProfileSpec(tool="torch", steps=plan.steps, out_dir=side_dir / work.COUNTED_DIR, device=caps.device,
                       work=True)
    plain = {k: v for k, v in env.items() if k != col.env_key}
    ctx = job.JobContext(run_dir=spec.out_dir, run_id=run_id, caps=caps, env=plain, env_key=env[col.env_key],
                         fault_spec=None, notify=notify, profile=spec, fire_drill_pct=runfolder.plan_fire_drill(side_dir),
                         python=python, checkout=checkout)
    return ctx, cells


def _done(ctx: job.JobContext, cell_id: str, process: int) -> bool:
    """The counted job left its row (any status): a resumed run does not run it again."""
    return (ctx.run_dir / "cells" / f"{job_key(cell_id, process)}.parquet").exists()


def run_work_repeats(sides: Mapping[str, Path], cell_ids: Sequence[str], plan: WorkPlan, *,
                     caps: capabilities.Capabilities, envs: Mapping[str, dict[str, Any]],
                     pythons: Mapping[str, str | None] | None = None, seed: int = 0,
                     checkouts: Mapping[str, Path | None] | None = None,
                     executors: Mapping[str, Any] | None = None,
                     notify: Callable[[str], None] = print) -> list[tuple[str, str, int, str]]:
    """Run `plan.repeats` counted processes of each of `cell_ids` in each side's run folder (`sides`: name ->
    folder), round by round, the sides in a seeded random order within each (cell, process); gather each side's
    work.parquet. `executors`: where a side's counted jobs run (`nvbench run` passes its run's, so a cell wider
    than one node is counted across its SLURM nodes); this machine where none is named. Returns (side, cell_id,
    process, status) in the order run."""
    pythons, checkouts, executors = pythons or {}, checkouts or {}, executors or {}
    contexts = {name: _context(folder, plan, caps=caps, env=envs[name], python=pythons.get(name),
                               checkout=checkouts.get(name), notify=notify) for name, folder in sides.items()}
    rng = random.Random(seed)
    order = []
    for process in range(plan.repeats):
        for cid in sorted(cell_ids):
            round_ = list(sides)
            rng.shuffle(round_)
            for name in round_:
                ctx, cells = contexts[name]
                if _done(ctx, cid, process):
                    continue
                row = job.run_job(cells[cid], process, ctx, executor=executors.get(name))
                notify(f"{name.upper()} {row['status']:>8} {cid} counted p{process}"
                       + ("" if row["status"] == "ok" else f"  {row['reason']}"))
                order.append((name, cid, process, row["status"]))
    for name, folder in sides.items():
        ctx, _ = contexts[name]
        shutil.rmtree(ctx.run_dir / "work", ignore_errors=True)  # the jobs' own folders
        if any(o[0] == name for o in order) or not (folder / work.WORK_FILE).exists():  # else gathered already
            work.gather(folder, ctx.run_dir / work.PARTS_DIR)
    return order


def record_ab(out_dir: Path, cell_ids: Sequence[str], plan: WorkPlan, order: list) -> None:
    """The counted processes in ab.json (AB_KEY), appended to an earlier session's."""
    path = out_dir / "ab.json"
    if not path.exists():
        return
    meta = store.read_json(path)
    entry = meta.get(AB_KEY) or {"cells": [], "order": []}
    entry["cells"] = sorted(set(entry["cells"]) | set(cell_ids))
    entry |= {"repeats": plan.repeats, "steps": plan.steps}
    entry["order"] += [list(item) for item in order]
    meta[AB_KEY] = entry
    store.write_json(path, meta)
