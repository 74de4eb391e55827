"""The contract between the parent and a cell's process: how it is started and what it is told.

The parent writes a job file (the resolved cell and where to put results) and starts
`python -m harness.cell run JOB_FILE`; both sides import these names and nothing of each other.
"""

from __future__ import annotations

CELL_MODULE = "harness.cell"
"""The cell's entry point: `python -m harness.cell run JOB` (one rank) or `exec CMD...` (a torchrun agent)."""
PARENT_PID_ENV = "NVBENCH_PARENT_PID"
"""Set by the runner to its own pid, so a cell can tell that its parent died before it could ask to die with it."""
FAULT_ENV = "NVBENCH_FAULT"
"""Test-only fault rules read by the runner, which hands each cell its matched fault in the job file."""
LAUNCHED_AT_ENV = "NVBENCH_LAUNCHED_AT"
"""Set by a SLURM job's script (epoch seconds) just before its srun: the cell's startup_s counts from there, not
from the submission (the time a job waits in the queue is no part of its startup)."""
SLURM_NODE_ENV = "SLURMD_NODENAME"
"""Set by SLURM in every task: the node a rank ran on, which its error record names (a cell wider than one node)."""


def cpu_list(cpus) -> str:
    """CPU ids as Linux writes a cpu list (taskset, /sys): sorted ranges, e.g. "0-21,88-109"."""
    ids = sorted({int(c) for c in cpus})
    ranges: list[list[int]] = []
    for cpu in ids:
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """The inverse of cpu_list ("0-3,8" -> (0, 1, 2, 3, 8)); ValueError naming the text when it is not one."""
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in text.strip().split(","))):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"{text!r}: not a cpu list (e.g. 0-21,88-109)")
        cpus.update(range(int(first), int(last if dash else first) + 1))
    return tuple(sorted(cpus))
