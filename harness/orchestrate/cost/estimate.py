"""What a run will cost before it is paid: its wall time on this machine from the planned jobs, what past runs
say about their cells (harness/orchestrate/cost/pricing.py reads them) and a slot count; pure, no I/O."""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

DEFAULT_JOB_S: Mapping[str, float] = {"synthetic": 17.0, "pytorch": 30.0, "dali-cpu": 30.0, "dali-gpu": 20.0}
"""Seconds of one eager job by data backend where no past row says better: one process of the mission's cell
at its window (20 warmup + 100 measured steps) on an H100 (docs/gpu-validation.md, main at 610fe19:
synthetic bf16 17.3 s, pytorch 30.3 s); the DALI backends were not measured there, so dali-cpu counts as
pytorch and dali-gpu between the two. A CPU's --smoke has its own (CPU_SMOKE_JOB_S); elsewhere (a CPU's
full-size cells, a GPU's --smoke) these are far off, and the estimate says so when it uses them."""
CPU_SMOKE_JOB_S: Mapping[str, float] = {"synthetic": 3.0, "pytorch": 4.0, "dali-cpu": 3.8}
"""Seconds of one job of README's main job, `nvbench run matrices/resnet50.toml --smoke`, on the 2-core CPU
machine by backend, fp32 and bf16 (medians of 4 jobs each: synthetic 3.0 and 2.8, pytorch 3.9 and 4.1,
dali-cpu 3.5 and 4.0; docs/performance.md, "The estimate of README's main job")."""
CPU_SMOKE_FP16_EXTRA_S = 9.5
"""What fp16 adds to such a job: a CPU has no fast fp16 kernels (medians 12.7-13.5 s against 2.8-4.1)."""
DEFAULT_COMPILE_S: Mapping[str, float] = {"eager": 0.0, "inductor": 10.0, "cudagraph": 2.0}
"""Seconds a job adds by compile mode: an inductor repeat that reads a warm cache (8.6 s on that H100), a
CUDA graph's capture."""
DEFAULT_WARMUP_S = 90.0
"""Seconds of an inductor cell's compile-cache warm-up with no past record: a cold compile (77.8 s on that
H100) and its process's start and build."""
DEFAULT_BETWEEN_JOBS_S = 0.5
"""The runner's own seconds per job (its row, the next job's folder) where no past run measured it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedJob:
    """A job as the estimate sees it."""

    cell_id: str
    backend: str
    compile: str
    runs: bool = True
    """False: this machine skips it (a row, nothing launched)."""
    device: str = "cuda"
    """Where it trains (the machine's device: capabilities.py)."""
    smoke: bool = False
    """A --smoke cell: tiny images and windows."""
    precision: str = "bf16"


H100_FULL = "an H100's, full windows"
CPU_SMOKE = "a 2-core CPU's, --smoke"
FAR_OFF = "a guess: an H100's full-window seconds, far off for these cells, and no rows here to scale"


def default_job_s(job: PlannedJob) -> tuple[float, str]:
    """Seconds of `job` with no past row, and which defaults they are (H100_FULL, CPU_SMOKE or FAR_OFF)."""
    compile_s = DEFAULT_COMPILE_S.get(job.compile, 0.0)
    if job.device == "cpu" and job.smoke and job.backend in CPU_SMOKE_JOB_S:
        fp16_s = CPU_SMOKE_FP16_EXTRA_S if job.precision == "fp16" else 0.0
        return CPU_SMOKE_JOB_S[job.backend] + fp16_s + compile_s, CPU_SMOKE
    seconds = DEFAULT_JOB_S.get(job.backend, max(DEFAULT_JOB_S.values())) + compile_s
    return seconds, H100_FULL if job.device == "cuda" and not job.smoke else FAR_OFF


@dataclass(frozen=True, slots=True, kw_only=True)
class Past:
    """What earlier runs on this machine say about the cells (harness/orchestrate/cost/pricing.py): per cell id, the
    seconds of its past jobs and of its compile-cache warm-ups; the runner's own seconds per job; the runs read."""

    job_s: Mapping[str, Sequence[float]] = field(default_factory=dict)
    warmup_s: Mapping[str, Sequence[float]] = field(default_factory=dict)
    between_jobs_s: float | None = None
    runs: Sequence[str] = ()
    scaled_s: Mapping[str, float] = field(default_factory=dict)
    """Cells without past jobs: one job's seconds from this machine's rows of other cells
    (harness.orchestrate.cost.scaled)."""
    scaled_runs: Sequence[str] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """A run's expected wall time and what it rests on."""

    wall_s: float
    slots: int
    jobs: int
    """Jobs that will launch a process (skipped ones are not counted)."""
    from_past: int
    """Of those, jobs whose cell has past rows."""
    warmups: int
    """Compile-cache warm-ups (one per inductor cell)."""
    runs: tuple[str, ...]
    """The past runs the figures came from."""
    defaults: tuple[str, ...]
    """Which defaults the jobs without past rows took (H100_FULL, CPU_SMOKE, FAR_OFF), each once."""
    from_scaled: int = 0
    """Jobs without past rows of their cell, scaled from this machine's rows of other cells."""
    scaled_runs: tuple[str, ...] = ()

    def to_plain(self) -> dict:
        return {"wall_s": round(self.wall_s, 1), "slots": self.slots, "jobs": self.jobs, "from_past": self.from_past,
                "warmups": self.warmups, "runs": list(self.runs), "defaults": list(self.defaults),
                "from_scaled": self.from_scaled, "scaled_runs": list(self.scaled_runs), "text": self.text(),
                "source": self.source_text()}

    def text(self) -> str:
        """One line: the time, the slots, and where the figures came from."""
        return f"estimated {duration_text(self.wall_s)} on this machine with {self.slots_text()}: {self.source_text()}"

    def slots_text(self) -> str:
        return f"{self.slots} slot{'s' if self.slots != 1 else ''}"

    def source_text(self) -> str:
        """The jobs and where their figures came from: past rows of their cells (which runs), rows of other cells
        scaled by model cost, or the stated defaults."""
        defaults = self.jobs - self.from_past - self.from_scaled
        scaled = f"scaled by model cost from this machine's rows of other cells ({_runs_text(self.scaled_runs)})"
        parts = [f"{n} {words}" for n, words in (
            (self.from_past, f"from past rows ({_runs_text(self.runs)})"), (self.from_scaled, scaled),
            (defaults, f"from the defaults per backend and compile mode ({self.defaults_text()})")) if n]
        if not self.jobs:
            source = "nothing to launch"
        elif self.from_past == self.jobs:
            source = f"every job from past rows ({_runs_text(self.runs)})"
        elif self.from_scaled == self.jobs:
            source = f"every job {scaled}"
        elif defaults == self.jobs:
            source = (f"every job from the defaults per backend and compile mode ({self.defaults_text()}; no past "
                      "rows on this machine)")
        else:
            source = ", ".join(parts)
        warm = f" and {self.warmups} compile warm-up(s)" if self.warmups else ""
        return f"{self.jobs} job(s){warm}; {source}"

    def defaults_text(self) -> str:
        return " and ".join(self.defaults)


def estimate(jobs: Sequence[PlannedJob], past: Past, slots: int = 1) -> Estimate:
    """The wall time of running `jobs` in their order on `slots` slots: every inductor cell's compile warm-up
    first, one at a time (compile_cache.py), then each job on the slot that frees first. A job takes the median
    of its cell's past jobs, else its defaults (default_job_s); each adds the runner's own time."""
    if slots < 1:
        raise ValueError(f"slots {slots}: at least one")
    between = past.between_jobs_s if past.between_jobs_s is not None else DEFAULT_BETWEEN_JOBS_S
    running = [j for j in jobs if j.runs]
    warm_cells = list(dict.fromkeys(j.cell_id for j in running if j.compile == "inductor"))
    warm_s = sum(_median(past.warmup_s.get(cid)) or DEFAULT_WARMUP_S for cid in warm_cells)
    lanes = [0.0] * slots
    from_past = from_scaled = 0
    defaults: dict[str, None] = {}
    for j in running:
        seconds = _median(past.job_s.get(j.cell_id))
        from_past += seconds is not None
        if seconds is None and j.cell_id in past.scaled_s:
            seconds, from_scaled = past.scaled_s[j.cell_id], from_scaled + 1
        if seconds is None:
            seconds, which = default_job_s(j)
            defaults.setdefault(which)
        heapq.heapreplace(lanes, lanes[0] + seconds + between)  # lanes is a heap: [0] frees first
    wall = warm_s + max(lanes) + between * (len(jobs) - len(running))  # a skipped job: its row alone
    return Estimate(wall_s=wall, slots=slots, jobs=len(running), from_past=from_past, warmups=len(warm_cells),
                    runs=tuple(past.runs), defaults=tuple(defaults), from_scaled=from_scaled,
                    scaled_runs=tuple(past.scaled_runs) if from_scaled else ())


def in_sequence(parts: Sequence[Estimate]) -> Estimate:
    """Estimates run one after the other (an A/B's two sides, a bisect's A/Bs): their times add up."""
    return Estimate(wall_s=sum(e.wall_s for e in parts), slots=max((e.slots for e in parts), default=1),
                    jobs=sum(e.jobs for e in parts), from_past=sum(e.from_past for e in parts),
                    warmups=sum(e.warmups for e in parts), runs=tuple(dict.fromkeys(r for e in parts for r in e.runs)),
                    defaults=tuple(dict.fromkeys(d for e in parts for d in e.defaults)),
                    from_scaled=sum(e.from_scaled for e in parts),
                    scaled_runs=tuple(dict.fromkeys(r for e in parts for r in e.scaled_runs)))


def _median(values: Sequence[float] | None) -> float | None:
    return statistics.median(values) if values else None


def _runs_text(runs: Sequence[str]) -> str:
    if not runs:
        return "no run named"
    shown = ", ".join(runs[:2])
    return f"run {shown}" if len(runs) == 1 else f"{len(runs)} runs: {shown}" + (", ..." if len(runs) > 2 else "")


def duration_text(seconds: float) -> str:
    """12 s, 3m05s, 2h07m."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
