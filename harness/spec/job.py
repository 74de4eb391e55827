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
