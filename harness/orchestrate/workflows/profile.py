"""`nvbench profile`, the parent's side: one cell under Nsight Systems or torch.profiler, kept apart from
timed runs (harness/cell/instruments/capture.py is the cell's side: the instruments that record its window).

A profiled cell runs through the runner's own job path (job.run_job) with a `profile` section in its
job file; everything it writes goes under RUN/profile/ (traces, its row in profile/cells/, its log in
profile/logs/), never into the run's timed cells/ table, and its row carries `profile_tool`. Inside the
cell the measured window becomes the N profiled steps: nsys capture is gated to them by
cudaProfilerStart/Stop, torch.profiler records exactly them.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal

from harness.matrix.cells import Cell, job_key
from harness.catalogue import col

Tool = Literal["nsys", "torch"]
PROFILE_DIR = "profile"
INDEX = "profiles.json"
"""Index of the profiles in a profile folder; not manifest.json, so no reader takes the folder for a timed run."""
NSYS_TRACE = "cuda,nvtx,osrt,cudnn,cublas"
NSYS_TRACE_CPU = "nvtx,osrt"
"""A CPU cell: NVTX and the OS runtime calls; no CPU sampling and no context-switch trace (--sample=none
--cpuctxsw=none): on a virtual machine without perf events nsys 2022.4's agent otherwise spins without end."""
NSYS_TIMEOUT_S = 600
"""The importer and the SQLite export of one report (seconds)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProfileSpec:
    """One profiling request, as the runner needs it to launch the job."""

    tool: Tool
    """nsys (Nsight Systems timeline) or torch (torch.profiler trace and table)."""
    steps: int
    """Measured steps to capture; they replace the cell's measure_steps."""
    out_dir: Path
    """The profile folder (RUN/profile): traces, and a run-like layout for its row, steps and log."""
    nsys: str = "nsys"
    """The nsys executable."""
    device: str = "cuda"
    """The cell's device: nsys gates a CUDA cell's capture to the window (cudaProfilerApi); a CPU cell is
    captured whole, warmup and window told apart by their NVTX ranges."""
    kernels: bool = False
    """torch only: write the window's kernels.parquet rows (harness/cell/instruments/kernels.py) instead of a trace."""
    work: bool = False
    """torch only: count the window's work into work.parquet rows (harness/cell/instruments/work.py) instead of a trace."""

    def job_section(self, key: str, cell_id: str, repeat: int) -> dict[str, Any]:
        """The job file's `profile` section, read by the worker: the job's key (its files' stem) and, as data, the
        cell id and repeat (a counted process's number) its rows are written under."""
        section = {"tool": self.tool, "steps": self.steps, "dir": str(self.out_dir), "name": key, col.cell_id: cell_id,
                   "repeat": repeat}
        if self.work:
            return section | {"work": True}
        return section | {"kernels": True} if self.kernels else section

    def command(self, argv: list[str], key: str) -> list[str]:
        """The launcher's argv, under nsys when profiling with it (torch profiles from inside the cell)."""
        if self.tool != "nsys":
            return argv
        out = [f"--output={self.out_dir / key}", "--force-overwrite=true"]
        if self.device != "cuda":
            return [self.nsys, "profile", f"--trace={NSYS_TRACE_CPU}", "--sample=none", "--cpuctxsw=none",
                    *out, *argv]
        return [self.nsys, "profile", f"--trace={NSYS_TRACE}", "--capture-range=cudaProfilerApi",
                # stop: end the capture at cudaProfilerStop but let the cell finish and write its row
                # (the default, stop-shutdown, kills the application there).
                "--capture-range-end=stop", *out, *argv]

    def outputs(self, key: str, world_size: int) -> list[Path]:
        """Files the profiled job leaves in out_dir."""
        if self.tool == "nsys":
            return [self.out_dir / f"{key}.nsys-rep", self.out_dir / f"{key}.sqlite"]
        return [self.out_dir / f"{key}-rank{r}{suffix}" for r in range(world_size)
                for suffix in (".trace.json", ".key_averages.txt")]


def nsys_path() -> str | None:
    return shutil.which("nsys")


def select_cell(cells: list[Cell], wanted: str | None) -> Cell:
    """The cell named by `wanted` (its id, or a unique prefix of it), or the only cell left."""
    ids = [c.cell_id for c in cells]
    if wanted is None:
        if len(cells) == 1:
            return cells[0]
        raise ValueError(f"{len(cells)} cells match; pick one with --cell ID (or narrow with --only): "
                         + ", ".join(ids))
    hits = [c for c in cells if c.cell_id == wanted] or [c for c in cells if c.cell_id.startswith(wanted)]
    if len(hits) == 1:
        return hits[0]
    what = "matches several cells" if hits else "matches no cell"
    raise ValueError(f"--cell {wanted} {what}; cells: " + ", ".join(ids))


def unsupported_reason(tool: str, device: str) -> str | None:
    """Why `tool` cannot profile a cell on `device` (None: it can; nsys and torch both profile CPU and CUDA)."""
    return None


def qdstrm_importer(nsys: str) -> Path | None:
    """The QdstrmImporter beside an nsys install (host-linux-x64/ next to its bin/), or None. Debian's
    nsight-systems-target writes only a .qdstrm where its importer is not found; the host package has it."""
    root = Path(shutil.which(nsys) or nsys).resolve().parents[1]
    for candidate in (root / "host-linux-x64" / "QdstrmImporter",
                      Path("/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter")):
        if candidate.is_file():
            return candidate
    return None


class TimelineError(RuntimeError):
    """nsys left no report, or the report could not be imported or exported."""


def finish_nsys(spec: ProfileSpec, key: str) -> tuple[Path, Path]:
    """(the .nsys-rep, its SQLite export) of a finished nsys job: the .qdstrm imported where nsys left only
    that, then `nsys export --type sqlite`."""
    import subprocess

    stem = spec.out_dir / key
    report, stream, sqlite = (stem.with_name(stem.name + s) for s in (".nsys-rep", ".qdstrm", ".sqlite"))

    def call(argv: list[str], what: str) -> None:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=NSYS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise TimelineError(f"{what} took more than {NSYS_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise TimelineError(f"{what} failed (exit {proc.returncode}): {tail[0]}")

    if not report.exists():
        if not stream.exists():
            raise TimelineError(f"nsys wrote neither {report.name} nor {stream.name}")
        importer = qdstrm_importer(spec.nsys)
        if importer is None:
            raise TimelineError(f"nsys left {stream.name} and no QdstrmImporter was found to turn it into a report")
        call([str(importer), "--input-file", str(stream)], "QdstrmImporter")
        if not report.exists():
            raise TimelineError(f"QdstrmImporter wrote no {report.name}")
    stream.unlink(missing_ok=True)
    call([spec.nsys, "export", "--type", "sqlite", "--force-overwrite=true", "--output", str(sqlite), str(report)],
         "nsys export --type sqlite")
    return report, sqlite


@dataclasses.dataclass(frozen=True, slots=True)
class ProfileResult:
    row: dict[str, Any]
    """The profiled job's row (profile/cells/<key>.parquet), flagged with profile_tool."""
    files: list[Path]
    """Traces and reports that exist."""
    log_path: Path


def profile_cell(cell: Cell, spec: ProfileSpec, *, run_id: str, caps, env: dict[str, Any], env_key: str,
                 matrix_source: str, notify: Callable[[str], None] = print) -> ProfileResult:
    """Run `cell` once under `spec` through job.run_job; record it in profile/profiles.json."""
    from harness.orchestrate.session import job
    from harness.results import store

    spec.out_dir.mkdir(parents=True, exist_ok=True)
    ctx = job.JobContext(run_dir=spec.out_dir, run_id=run_id, caps=caps, env=env, env_key=env_key,
                         fault_spec=None, notify=notify, profile=spec)
    started = datetime.now(timezone.utc)
    row = job.run_job(cell, 0, ctx)
    shutil.rmtree(spec.out_dir / "work", ignore_errors=True)  # run_job removed its own job folder
    key = job_key(cell.cell_id, 0)
    if spec.tool == "nsys" and row["status"] == "ok":
        try:
            finish_nsys(spec, key)
        except TimelineError as exc:
            row = {**row, "status": "failed", "reason": f"profile: {exc}"}
    files = [p for p in spec.outputs(key, cell.world_size * cell.launch.nnodes) if p.exists()]
    index_path = spec.out_dir / INDEX
    index = store.read_json(index_path) if index_path.exists() else {col.run_id: run_id, "profiles": []}
    index["profiles"].append({
        col.cell_id: cell.cell_id, "tool": spec.tool, "steps": spec.steps, "status": row["status"],
        "reason": row["reason"], col.started_at: started.isoformat(), "matrix_source": matrix_source,
        "command": sys.argv, "files": [str(p.relative_to(spec.out_dir)) for p in files],
        col.env_key: env_key, "environment": env,
    })
    store.write_json(index_path, index)
    return ProfileResult(row=row, files=files, log_path=spec.out_dir / (row.get(col.log_path) or ""))
