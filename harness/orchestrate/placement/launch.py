"""How a cell's process(es) start and end, from the parent: a plain child for one process, a torchrun
group otherwise, both started through the cell's entry point (`python -m harness.cell`), which the parent
names and never imports.

The parent blocks in wait(timeout) — no polling — and on timeout terminates the whole process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harness.matrix.cells import Cell
from harness.matrix.job import CELL_MODULE

TERM_GRACE_S = 15.0
"""After SIGTERM, how long a cell may take to exit (torchrun closes its workers) before SIGKILL."""
RDZV_JOIN_SHARE = 0.5
"""torchrun's c10d join timeout across nodes, as a share of benchmark.timeout_s (torch's default is 600 s): a node
that never joins ends the cell with torch's RendezvousTimeoutError, named in its row, well before the cell's own
timeout (or SLURM's time limit) would end it as a hang."""


def rdzv_join_timeout_s(timeout_s: float) -> int:
    """The join timeout of a cell whose benchmark.timeout_s is `timeout_s`."""
    return max(1, int(timeout_s * RDZV_JOIN_SHARE))


@dataclass(frozen=True, slots=True)
class Outcome:
    returncode: int | None
    """Exit status (negative: killed by that signal); None when it timed out."""
    timed_out: bool


class Launcher(Protocol):
    def command(self, cell: Cell, job_path: Path, job_key: str = "") -> list[str]:
        """The argv that runs `cell` from its job file; `job_key` names the (cell, repeat)."""


class ProcessLauncher:
    """World size 1 on one node: one fresh Python process."""

    def command(self, cell: Cell, job_path: Path, job_key: str = "") -> list[str]:
        return [sys.executable, "-m", CELL_MODULE, "run", str(job_path)]


class TorchrunLauncher:
    """A torchrun (torch.distributed.run) group: --standalone on one node, a c10d/static rendezvous across nodes."""

    def command(self, cell: Cell, job_path: Path, job_key: str = "") -> list[str]:
        launch = cell.launch
        args = [sys.executable, "-m", CELL_MODULE, "exec", sys.executable, "-m", "torch.distributed.run",
                f"--nproc_per_node={cell.world_size}", "--max_restarts=0"]
        if launch.nnodes == 1:
            args.append("--standalone")
        elif launch.rdzv_backend == "static":  # node 0 serves the store at MASTER_ADDR:MASTER_PORT
            host, _, port = launch.rdzv_endpoint.rpartition(":")
            args += [f"--nnodes={launch.nnodes}", "--rdzv_backend=static", f"--node_rank={launch.node_rank}",
                     f"--master_addr={host}", f"--master_port={port}"]
        else:
            # One rendezvous per job: every node runs the same plan, so the job key names the same job on
            # all of them, and a late node of one job can never join the next job's group.
            run_id = f"{launch.rdzv_id}-{job_key}" if job_key else launch.rdzv_id
            args += [f"--nnodes={launch.nnodes}", "--rdzv_backend=c10d",
                     f"--rdzv_endpoint={launch.rdzv_endpoint}", f"--rdzv_id={run_id}",
                     f"--rdzv_conf=join_timeout={rdzv_join_timeout_s(cell.benchmark.timeout_s)}"]
        return args + ["-m", CELL_MODULE, "run", str(job_path)]


def launcher_for(cell: Cell) -> Launcher:
    if cell.world_size == 1 and cell.launch.nnodes == 1:
        return ProcessLauncher()
    return TorchrunLauncher()


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def run_process(argv: list[str], *, log_path: Path, timeout_s: float, env: dict[str, str] | None = None,
                cwd: Path | None = None) -> Outcome:
    """Run argv in its own process group with output to log_path; block until exit or timeout."""
    return wait_process(start_process(argv, log_path=log_path, env=env, cwd=cwd), timeout_s)


def start_process(argv: list[str], *, log_path: Path, env: dict[str, str] | None = None,
                  cwd: Path | None = None, cpus: tuple[int, ...] | None = None) -> subprocess.Popen:
    """Start argv in its own process group, its output appended to log_path; pinned to `cpus` when given.

    The pin is set on the new process at once, while it is still the interpreter starting up with one thread:
    every thread and process it makes later (torch's pool, DataLoader workers, torchrun's ranks) inherits it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env, cwd=cwd)
    if cpus:
        try:
            os.sched_setaffinity(proc.pid, cpus)
        except ProcessLookupError:  # already gone: its exit status says why
            pass
    return proc


def wait_process(proc: subprocess.Popen, timeout_s: float) -> Outcome:
    """Block until `proc` exits or `timeout_s` passes (then SIGTERM, a grace, SIGKILL to its whole group)."""
    try:
        return Outcome(proc.wait(timeout=timeout_s), False)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        return Outcome(None, True)
    except BaseException:  # the runner is interrupted: take the cell down with it
        kill_process(proc)
        raise
    finally:
        # Stragglers of a finished cell (a DataLoader worker, a hung rank) must not outlive it.
        signal_group(proc.pid, signal.SIGKILL)


def kill_process(proc: subprocess.Popen) -> None:
    """SIGKILL to `proc`'s whole process group, then reap it."""
    signal_group(proc.pid, signal.SIGKILL)
    proc.wait()
