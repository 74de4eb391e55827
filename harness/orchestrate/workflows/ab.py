"""A/B of two interpreters (two venvs, two library versions) or two checkouts (the baseline's code and
tonight's) on one machine: every (cell, repeat) runs under both, back to back, the order within each
pair drawn at random (seeded), into two run folders OUT/a and OUT/b; the report compares B (candidate)
with A (baseline). Interleaving puts slow drift of the machine (thermals, other load) on both sides
alike instead of on whichever side ran later.

`run_interleaved` is the scheduling core, also used by benchmarks/detector.py for its pools.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import harness
from harness.orchestrate.session import capabilities, compile_cache, derive, job, runfolder, worktrees
from harness.orchestrate.placement import lanes
from harness.orchestrate.workflows import rerun
from harness.orchestrate.placement.machine import probe_machine
from harness.orchestrate.placement.packing import Packing, solo_packing
from harness.results import store
from harness.matrix.cells import Cell
from harness.matrix.job import FAULT_ENV
from harness.matrix.sections import Matrix
from harness.catalogue import col

AB_FILE = "ab.json"
SIDES = ("a", "b")

_ENV_SNIPPET = ("import json, harness; from harness.results.env import collect_env, env_key; e = collect_env(); "
                "e['env_key'] = env_key(e); print(harness.__file__); print(json.dumps(e, default=str))")


class AbInputError(ValueError):
    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True, slots=True, kw_only=True)
class Side:
    """One arm of an interleaved schedule: a run folder and the job context that runs its cells."""

    name: str
    ctx: job.JobContext
    cells: dict[str, Cell]
    jobs: list[tuple[str, int]]


def checkout_root() -> Path:
    """The checkout this nvbench runs from: the folder holding its harness/ package."""
    return Path(harness.__file__).resolve().parents[1]


def collect_env_under(python: str, *, checkout: Path | None = None, timeout_s: float = 120.0) -> dict[str, Any]:
    """The environment fingerprint as `python` sees it (its torch, its DALI) running `checkout`'s harness
    (None: this one), with its env_key."""
    env = dict(os.environ)
    root = checkout or checkout_root()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(root), env.get("PYTHONPATH"))))
    env["PYTHONSAFEPATH"] = "1"  # as job._child_env: the working directory must not shadow the checkout
    try:
        done = subprocess.run([python, "-c", _ENV_SNIPPET], capture_output=True, text=True, env=env,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise AbInputError([f"{python}: cannot run it: {exc}"]) from exc
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        where = f" from {checkout}" if checkout else ""
        raise AbInputError([f"{python}: cannot import nvbench's harness{where} and its dependencies: {tail}"])
    *_, imported, fingerprint = done.stdout.strip().splitlines()
    if Path(imported).resolve().parents[1] != root.resolve():  # Python < 3.11 ignores PYTHONSAFEPATH
        raise AbInputError([f"{python}: imports nvbench's harness from {Path(imported).parent}, not from {root} "
                            f"(run it from another directory, or with Python >= 3.11)"])
    return json.loads(fingerprint)


def resolve_checkout(path: str) -> Path:
    """A folder holding an nvbench checkout (its harness/ package), e.g. a git worktree of the baseline's commit."""
    root = Path(path).expanduser().absolute()
    if not (root / "harness" / "__init__.py").is_file():
        raise AbInputError([f"{path}: not an nvbench checkout (no harness/__init__.py)"])
    return root


def precompile(python: str, root: Path) -> None:
    """Byte-compile `root`'s harness once, under the side's own interpreter (its cache tag), before its first
    process: every cell, probe and fingerprint of a checkout nvbench made (a bisect's or a confirmation's
    worktree, a copy) otherwise compiles the package from source where PYTHONDONTWRITEBYTECODE is set, about
    0.7 s of each process's start here. A file that does not compile is left to fail in its cell, as before."""
    subprocess.run([python, "-m", "compileall", "-q", str(root / "harness")], capture_output=True, check=False,
                   timeout=300)


@dataclass(frozen=True, slots=True, kw_only=True)
class Base:
    """`nvbench ab --base REV`'s side A: the commit whose code it runs (a worktree made under the A/B folder) and
    side B's checkout, the repository both come from, as ab.json records them."""

    repo: Path
    rev: str
    commit: str
    merge_base: bool
    """The commit is the merge-base of HEAD and REV (the default), not REV itself (--base-exact)."""
    dirty: tuple[str, ...]
    """Side B's tracked files with uncommitted changes: B runs them as they are."""

    def record(self, worktree: Path) -> dict[str, Any]:
        return {"rev": self.rev, "commit": self.commit, "merge_base": self.merge_base, "worktree": str(worktree),
                "repository": str(self.repo), "b_dirty": list(self.dirty)}


def resolve_base(rev: str, *, exact: bool, checkout: Path, recorded: str | None = None) -> Base:
    """Side A's commit for `--base REV` in the repository of `checkout` (side B's code): the merge-base of HEAD and
    REV, or REV itself when `exact`; `recorded` (a resumed A/B's commit) stands for either. AbInputError, one line,
    where the checkout is in no git repository or REV names no commit there."""
    repo = worktrees.repository(checkout)
    if repo is None:
        raise AbInputError([f"--base {rev}: {checkout} is not in a git repository (side A's code is a commit of it)"])
    sha = recorded or worktrees.commit_of(repo, rev)
    if sha is None:
        raise AbInputError([f"--base {rev}: no such commit in {repo}"])
    if not (exact or recorded):
        sha = worktrees.merge_base(repo, "HEAD", sha)
        if sha is None:
            raise AbInputError([f"--base {rev}: no common ancestor with HEAD in {repo} (--base-exact runs {rev} "
                                "itself)"])
    return Base(repo=repo, rev=rev, commit=sha, merge_base=not exact, dirty=tuple(worktrees.changed_files(repo)))


def resolve_python(python: str) -> str:
    found = shutil.which(python)
    if found is None:
        raise AbInputError([f"{python}: no such interpreter (give a path or a name on PATH)"])
    return str(Path(found).absolute())


# ---------------------------------------------------------------------------------------------
# the interleaved schedule


def side_for(run_dir: Path, *, caps: capabilities.Capabilities, env: dict[str, Any], env_key: str,
             python: str | None = None, checkout: Path | None = None, notify: Callable[[str], None] = print) -> Side:
    """A side over an existing run folder: its pending jobs, run under `python` (None: this interpreter)
    from `checkout` (None: this checkout)."""
    run_id, jobs, cells = runfolder.load_plan(run_dir)
    ctx = job.JobContext(run_dir=run_dir, run_id=run_id, caps=caps, env=env, env_key=env_key,
                         fault_spec=os.environ.get(FAULT_ENV), notify=notify,
                         fire_drill_pct=runfolder.plan_fire_drill(run_dir), python=python, checkout=checkout)
    return Side(name=run_dir.name, ctx=ctx, cells=cells, jobs=runfolder.pending(run_dir, jobs))


def interleaved_rounds(sides: Sequence[Side], *, seed: int) -> list[list[tuple[Side, str, int]]]:
    """Round k: the k-th pending job of every side that has one, the sides in a fresh random order each round
    (seeded: the same sides and seed give the same order)."""
    rng = random.Random(seed)
    rounds = []
    for k in range(max((len(s.jobs) for s in sides), default=0)):
        round_ = [s for s in sides if k < len(s.jobs)]
        rng.shuffle(round_)
        rounds.append([(side, *side.jobs[k]) for side in round_])
    return rounds


def run_interleaved(sides: Sequence[Side], *, seed: int,
                    on_done: Callable[[str, dict[str, Any]], None] | None = None,
                    packing: Packing | None = None, max_reruns: int = 0,
                    waits: rerun.WaitBudget | None = None) -> list[tuple[str, str, int]]:
    """Run the interleaved rounds (interleaved_rounds): each round's jobs one after another on the same slots, so
    the sides of a pair meet the same GPU and cores (rows record the slot: the analysis can block on it); with
    slots, as many rounds at once as they hold (`packing`; None: one job at a time on the whole machine).

    Returns (side, cell_id, repeat) in the order started. Each side's manifest gets a session entry and its
    twin columns are derived at the end, as `nvbench run` does; a side whose jobs are all done is skipped.
    A job whose window was taken under interference (once the neighbour has left) or opens in a start transient
    runs again on its slot, up to `max_reruns` per cell
    and side (harness.orchestrate.workflows.rerun): it appears once more in the order, still beside its pair.
    """
    order: list[tuple[str, str, int]] = []
    sessions = {side.name: _open_session(side) for side in sides}
    for side in sides:  # each side compiles into its own run folder's cache, before any timed pair
        compile_cache.warm_compile_caches(side.jobs, side.cells, side.ctx)
    reruns = rerun.Reruns.of([side.ctx.run_dir for side in sides], max_reruns, waits=waits)
    chains = [[lanes.Link(cell=side.cells[cid], repeat=repeat, ctx=side.ctx, tag=side.name)
               for side, cid, repeat in round_] for round_ in interleaved_rounds(sides, seed=seed)]
    try:
        lanes.run_chains(chains, packing or solo_packing(probe_machine("cpu")),
                         on_start=lambda link: order.append((link.tag, link.cell.cell_id, link.repeat)),
                         on_done=(lambda link, row: on_done(link.tag, row)) if on_done else None,
                         again=lambda link, row: _again(link, row, reruns))
    except rerun.MachineBusy:  # the rows so far stand; the order run so far is kept; the session ends here
        _end_sides(sides, sessions)
        raise
    _end_sides(sides, sessions)
    return order


def _end_sides(sides: Sequence[Side], sessions: dict[str, dict[str, Any]]) -> None:
    for side in sides:
        derive.derive_twin_columns(side.ctx.run_dir)
        _close_session(side, sessions[side.name])
        shutil.rmtree(side.ctx.run_dir / "work", ignore_errors=True)


def _again(link: lanes.Link, row: dict[str, Any], reruns: rerun.Reruns) -> lanes.Link | None:
    """The job once more, on the same slot, when its window was spoiled and the cell's re-run budget lasts (its
    row kept as superseded first; after interference, once the neighbour has left: rerun.again); else None. A
    re-run carries no injected fault."""
    if not rerun.again(link.ctx.run_dir, row, reruns, link.ctx.notify,
                       f"{link.tag.upper()} r{link.repeat} {link.cell.cell_id}"):
        return None
    return dataclasses.replace(link, ctx=dataclasses.replace(link.ctx, fault_spec=None))

def _open_session(side: Side) -> dict[str, Any]:
    manifest = store.read_json(side.ctx.run_dir / runfolder.MANIFEST)
    session = {col.started_at: datetime.now(timezone.utc).isoformat(), "pending_at_start": len(side.jobs)}
    manifest["sessions"].append(session)
    store.write_json(side.ctx.run_dir / runfolder.MANIFEST, manifest)
    return session


def _close_session(side: Side, session: dict[str, Any]) -> None:
    manifest = store.read_json(side.ctx.run_dir / runfolder.MANIFEST)
    session["finished_at"] = datetime.now(timezone.utc).isoformat()
    manifest["sessions"][-1] = session
    manifest["finished_at"] = session["finished_at"]
    store.write_json(side.ctx.run_dir / runfolder.MANIFEST, manifest)


# ---------------------------------------------------------------------------------------------
# nvbench ab


def create_ab(matrix: Matrix, cells: list[Cell], *, out_dir: Path, pythons: dict[str, str],
              envs: dict[str, dict[str, Any]], smoke: bool, only: list[str], seed: int,
              checkouts: dict[str, Path | None] | None = None, fire_drill_pct: float = 0.0, max_reruns: int = 0,
              labels: dict[str, str] | None = None, settings: dict[str, Any] | None = None,
              base: dict[str, Any] | None = None) -> dict[str, Path]:
    """OUT/a and OUT/b with the same plan (same cells, same job order) and OUT/ab.json; nothing runs yet.

    A fire drill (nvbench ab --fire-drill) slows side B only: B is the candidate, and the drill proves that
    a confirmation by A/B still rings. ab.json keeps `max_reruns` (re-runs of a start transient per cell and
    side, harness.orchestrate.workflows.rerun) for every session of the A/B, and the sides' `labels`; with `--base`,
    `base` (Base.record: side A's commit, its worktree, what of B was uncommitted)."""
    checkouts = checkouts or {}
    if (out_dir / AB_FILE).exists():
        raise AbInputError([f"{out_dir}: already holds an A/B run"])
    dirs = {}
    for name in SIDES:
        env = {k: v for k, v in envs[name].items() if k != col.env_key}
        dirs[name] = runfolder.create_run(matrix, cells, run_dir=out_dir / name, reports_root=out_dir, smoke=smoke,
                                          only=only, env=env, fire_drill_pct=fire_drill_pct if name == "b" else 0.0)
    store.write_json(out_dir / AB_FILE, {
        "created_at": datetime.now(timezone.utc).isoformat(), "matrix_source": matrix.source, "seed": seed,
        "python": pythons, "checkout": {n: str(checkouts[n]) if checkouts.get(n) else None for n in SIDES},
        col.env_key: {n: envs[n][col.env_key] for n in SIDES}, "order": [], "max_reruns": max_reruns,
        "labels": labels or {}, "settings": settings or {}, **({"base": base} if base else {})})
    return dirs


def run_ab(out_dir: Path, *, caps: capabilities.Capabilities, envs: dict[str, dict[str, Any]], pythons: dict[str, str],
           seed: int, checkouts: dict[str, Path | None] | None = None, notify: Callable[[str], None] = print,
           on_done: Callable[[str, dict[str, Any]], None] | None = None, packing: Packing | None = None,
           waits: rerun.WaitBudget | None = None) -> None:
    """Run both sides interleaved, re-running start transients as ab.json allows; the order actually run is
    appended to ab.json (also when the wait budget ends the session: rerun.MachineBusy)."""
    checkouts = checkouts or {}
    sides = [side_for(out_dir / name, caps=caps, env={k: v for k, v in envs[name].items() if k != col.env_key},
                      env_key=envs[name][col.env_key], python=pythons[name], checkout=checkouts.get(name),
                      notify=notify) for name in SIDES]
    max_reruns = int(store.read_json(out_dir / AB_FILE).get("max_reruns") or 0)
    mark_busy(out_dir, None)  # a resumed A/B starts again: what stopped it last time no longer holds
    order: list[tuple[str, str, int]] = []
    try:
        order = run_interleaved(sides, seed=seed, on_done=lambda side, row: (order.append(
            (side, row[col.cell_id], row["repeat"])), on_done and on_done(side, row)), packing=packing,
            max_reruns=max_reruns, waits=waits)
    finally:
        meta = store.read_json(out_dir / AB_FILE)
        meta["order"] += [list(item) for item in order]
        store.write_json(out_dir / AB_FILE, meta)


BUSY_KEY = "stopped_busy"
"""ab.json's record of an A/B the wait budget ended (what it said, or absent): what bisect reads, never stdout."""


def mark_busy(out_dir: Path, said: str | None) -> None:
    """Record in ab.json that the machine kept this A/B busy (`said`: its summary line), or that it no longer does
    (None: a resumed A/B that starts again)."""
    meta = store.read_json(out_dir / AB_FILE)
    if said is None:
        meta.pop(BUSY_KEY, None)
    else:
        meta[BUSY_KEY] = said
    store.write_json(out_dir / AB_FILE, meta)


def stopped_busy(out_dir: Path) -> str | None:
    """What the A/B said when the machine kept it busy, or None (no ab.json, or it was not stopped so)."""
    path = Path(out_dir) / AB_FILE
    return store.read_json(path).get(BUSY_KEY) if path.is_file() else None


# ---------------------------------------------------------------------------------------------
# adaptive repeats: more interleaved pairs of the cells still inconclusive


def extend_plan(run_dir: Path, cell_ids: Sequence[str], repeats: int, *, seed: int) -> int:
    """Add the jobs that bring each of `cell_ids` to `repeats` repeats to the run's plan (and manifest);
    returns how many were added. The new jobs are shuffled (seeded) so that no cell always runs last."""
    plan = store.read_json(run_dir / runfolder.PLAN)
    have: dict[str, int] = {}
    for cid, repeat in plan["jobs"]:
        have[cid] = max(have.get(cid, -1), int(repeat))
    new = [[cid, r] for r in range(repeats) for cid in sorted(cell_ids) if r > have.get(cid, -1)]
    random.Random(seed).shuffle(new)
    new.sort(key=lambda job: job[1])  # repeat by repeat: every cell's k-th repeat before any (k+1)-th
    plan["jobs"] += new
    store.write_json(run_dir / runfolder.PLAN, plan)
    manifest = store.read_json(run_dir / runfolder.MANIFEST)
    manifest["num_jobs"] = len(plan["jobs"])
    store.write_json(run_dir / runfolder.MANIFEST, manifest)
    return len(new)


def run_adaptive(out_dir: Path, looks: Sequence[int], *, judge: Callable[[], Sequence[str]],
                 caps: capabilities.Capabilities, envs: dict[str, dict[str, Any]], pythons: dict[str, str], seed: int,
                 checkouts: dict[str, Path | None] | None = None, notify: Callable[[str], None] = print,
                 on_done: Callable[[str, dict[str, Any]], None] | None = None,
                 packing: Packing | None = None, waits: rerun.WaitBudget | None = None) -> list[dict[str, Any]]:
    """The looks of an adaptive A/B: run the first look's pairs, then, while `judge()` (the cells still
    inconclusive, judged at the design's split level) names any, extend those cells alone to the next
    look's pairs on both sides and run them interleaved. Returns one entry per look (pairs, cells run,
    cells left inconclusive), also kept in ab.json."""
    history: list[dict[str, Any]] = []
    run_ab(out_dir, caps=caps, envs=envs, pythons=pythons, seed=seed, checkouts=checkouts, notify=notify,
           on_done=on_done, packing=packing, waits=waits)
    for k, pairs in enumerate(looks):
        open_ = sorted(judge())
        history.append({"look": k + 1, "pairs": pairs, "inconclusive": open_})
        meta = store.read_json(out_dir / AB_FILE)
        meta["looks"] = history
        store.write_json(out_dir / AB_FILE, meta)
        if not open_ or k + 1 == len(looks):
            break
        notify(f"look {k + 1} of {len(looks)}: {len(open_)} cell(s) inconclusive at {pairs} pairs; "
               f"running them to {looks[k + 1]} pairs")
        for name in SIDES:
            extend_plan(out_dir / name, open_, looks[k + 1], seed=seed + k + 1)
        run_ab(out_dir, caps=caps, envs=envs, pythons=pythons, seed=seed + k + 1, checkouts=checkouts,
               notify=notify, on_done=on_done, packing=packing, waits=waits)
    return history
