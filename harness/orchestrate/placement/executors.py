"""The protocol between the runner and where its jobs run (this machine's processes, a cluster's scheduler).

The runner speaks only to the small protocol below (submit, state, wait, cancel), as
`concurrent.futures` executors do. An executor never decides what runs or in which order: the runner
submits jobs in plan order, at most `max_parallel` in flight; the local executor (harness/orchestrate/placement/local.py)
runs as many as the run's slots hold (harness/orchestrate/placement/slots.py), SLURM schedules its own
(harness/orchestrate/placement/slurm.py). Every executor starts the same argv,
the cell's `python -m harness.cell run JOB` (or its torchrun group), with output to the job's log in the run folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harness.orchestrate.placement.launch import Outcome


class ExecutorUnavailable(RuntimeError):
    """The executor cannot run jobs at all (sbatch missing, the controller down): one line for the user."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """One job as the runner hands it to an executor."""

    key: str
    """The job's key (<cell_id>-r<repeat>); unique in the run."""
    argv: tuple[str, ...]
    env: dict[str, str]
    log_path: Path
    work: Path
    """The job's folder in the run folder (job.json, the ranks' files)."""
    timeout_s: float
    nnodes: int = 1
    cpus: tuple[int, ...] | None = None
    """The cores the job's processes are pinned to (its slots'); None: wherever this process may run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ended:
    """A job that will not run any more, as the executor saw it end."""

    outcome: Outcome
    """What the classifier reads with the files the ranks left (exit status, or timed out)."""
    verdict: tuple[str, str] | None = None
    """(status, reason) the scheduler decided (SLURM's TIMEOUT, CANCELLED, ...), overriding the classifier."""
    nodes: str | None = None
    """The node(s) the job ran on, comma-separated."""
    job_id: str | None = None
    """The scheduler's job id (SLURM); None for local processes."""
    node_failed: bool = False
    """The scheduler ended the job because a node of it failed (SLURM's NODE_FAIL): not the cell's failure, so
    `nvbench run --resume` runs the job again."""
    lost_nodes: tuple[str, ...] = ()
    """Those of the job's nodes the scheduler held down when it ended the job for them (empty: not known)."""


class Executor(Protocol):
    kind: str
    max_parallel: int

    def check(self) -> None:
        """Raise ExecutorUnavailable when no job could run; called before the run folder is written."""

    def submit(self, launch: Launch) -> str:
        """Start or queue the job; return its handle (what `state`, `wait` and `cancel` take)."""

    def state(self, handle: str) -> str:
        """The job's state now, in the scheduler's words (PENDING, RUNNING, ...)."""

    def wait(self, handles: list[str]) -> dict[str, Ended]:
        """Block until at least one of `handles` has ended; return those that have."""

    def cancel(self, handles: list[str]) -> list[str]:
        """Stop these jobs; return the handles of those it cancelled."""

    def record(self, handle: str) -> dict[str, str]:
        """What the run folder keeps of an in-flight job, so that a later session can `adopt` it."""

    def adopt(self, record: dict[str, str], launch: Launch) -> str | None:
        """A handle for a job an earlier session submitted and recorded; None when it cannot be followed."""
