"""The matrix's [executor] section: where each job runs, and the SLURM names and sbatch options it may hold."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from harness.matrix.knobs import FROZEN, knob

_SLURM_WORD = re.compile(r"[A-Za-z0-9_.,:+=@&|/-]*")
"""What a SLURM name (partition, account, qos, constraint expression) may hold: no spaces, quotes or newlines."""


@dataclass(**FROZEN)
class ExecutorConfig:
    """Where a job runs: `local` processes on this machine, or one SLURM job per (cell, repeat)."""

    kind: Literal["local", "slurm"] = knob(
        "local", "local: each job a process of this machine, one per slot ([run] slots); slurm: each job a SLURM "
        "batch job "
        "(sbatch, then srun of the same cell command). `nvbench run --executor` wins over this key.")
    partition: str = knob("", "SLURM partition (sbatch --partition); empty = the cluster's default.")
    account: str = knob("", "SLURM account (sbatch --account); empty = the user's default.")
    qos: str = knob("", "SLURM quality of service (sbatch --qos); empty = the default.")
    constraint: str = knob("", "SLURM node features (sbatch --constraint); empty = any node.")
    gpus_per_node: int = knob(0, "GPUs each node of a job asks for (sbatch --gpus-per-node); 0 = none (CPU cells).",
                              min=0)
    cpus_per_task: int = knob(0, "CPUs of the job's one task per node (sbatch --cpus-per-task); 0 = SLURM's default.",
                              min=0)
    exclusive: bool = knob(True, "Whole nodes per job (sbatch --exclusive): no neighbour shares the node while "
                           "a cell is measured.")
    max_parallel: int = knob(8, "SLURM jobs of this run in flight (pending or running) at once; the local "
                             "executor runs one per slot ([run] slots).", min=1)
    time_margin_s: float = knob(300.0, "Added to benchmark.timeout_s for the job's SLURM time limit (startup, "
                                "queueing of the step, the row's files); rounded up to whole minutes.", min=0)
    poll_s: float = knob(5.0, "Seconds between reads of the jobs' states (one squeue for all of them).", gt=0)
    extra_args: tuple[str, ...] = knob((), "More sbatch options, each one argument (e.g. [\"--reservation=rn50\"]).")

    def problems(self) -> list[str]:
        out = [f"executor.{name}: {getattr(self, name)!r} is not a SLURM name (letters, digits and _.,:+=@&|/- only)"
               for name in ("partition", "account", "qos", "constraint")
               if not _SLURM_WORD.fullmatch(getattr(self, name))]
        owned = ("--time", "-t", "--nodes", "-N", "--output", "-o", "--error", "-e", "--job-name", "-J", "--parsable",
                 "--wrap", "--chdir", "-D", "--ntasks-per-node", "--requeue", "--no-requeue")
        for arg in self.extra_args:
            if not arg.startswith("-") or "\n" in arg:
                out.append(f"executor.extra_args: {arg!r} is not an sbatch option (it must start with '-')")
            elif arg.split("=", 1)[0] in owned:
                out.append(f"executor.extra_args: {arg.split('=', 1)[0]} is set by nvbench from the cell "
                           "(time limit from benchmark.timeout_s, nodes from launch.nnodes, output into the run folder)")
        return out
