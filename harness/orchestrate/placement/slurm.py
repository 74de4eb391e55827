"""The SLURM executor: each (cell, repeat) one SLURM batch job, SLURM's own scheduling, SLURM's states as rows.

A job is a small bash script in the job's folder of the run folder (work/<key>/job.sbatch): it `srun`s
the cell's unchanged argv (one task per node; torchrun for world_size > 1; across nodes a c10d rendezvous
on the job's first node) and, when srun returns, writes srun's exit status to work/<key>/exit atomically.
The parent writes the row from those files, as locally, so the run folder on the shared filesystem stays
the one source of truth.

States are read with `squeue --states=all` (one call for every job in flight), then `scontrol show job`,
then `sacct` where the cluster keeps accounting; where it does not and the job has already left the
controller (a short MinJobAge), from the job's own files: the exit file, or the line slurmstepd writes into
the job's log when it ends a job (`*** JOB 12 ON node CANCELLED AT ... DUE TO TIME LIMIT ***`).
sbatch, squeue, scontrol, scancel and sacct are called directly rather than through submitit, which reads
states through sacct alone (docs/distributed.md says why).
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from harness.orchestrate.placement.executors import Ended, ExecutorUnavailable, Launch
from harness.orchestrate.placement.launch import Outcome
from harness.matrix.executor import ExecutorConfig
from harness.matrix.job import LAUNCHED_AT_ENV

ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
                    "REQUEUE_FED", "RESIZING", "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD"})
"""States of a job that has not ended: waited for, never a failure (a pending job may wait for hours)."""
SLURM_VERDICTS = {
    "TIMEOUT": "timeout", "CANCELLED": "cancelled", "NODE_FAIL": "crashed", "OUT_OF_MEMORY": "crashed",
    "PREEMPTED": "crashed", "BOOT_FAIL": "crashed", "DEADLINE": "crashed", "FAILED": "failed",
}
"""Row status of a job SLURM ended before it wrote its result."""
RDZV_PORT_BASE = 20000
"""A multi-node cell's rendezvous port on its first node: RDZV_PORT_BASE + job id % 20000."""
MARKER_GRACE_S = 15.0
"""How long a job that ended COMPLETED or FAILED may take to show its exit file (a shared filesystem's lag)."""
QUERY_PATIENCE_S = 180.0
"""How long squeue may keep failing (a controller restart) before the run stops, resumable."""
_STEPD_END = re.compile(r"\*\*\* JOB (\d+) ON \S+ CANCELLED AT \S+(?: DUE TO (TIME LIMIT|PREEMPTION|NODE FAILURE))?")
_STEPD_CAUSE = {None: "CANCELLED", "TIME LIMIT": "TIMEOUT", "PREEMPTION": "PREEMPTED", "NODE FAILURE": "NODE_FAIL"}


def time_limit_min(timeout_s: float, margin_s: float) -> int:
    """sbatch --time in whole minutes (SLURM's unit): the cell's timeout plus the margin, rounded up."""
    return max(1, math.ceil((timeout_s + margin_s) / 60.0))


def job_script(launch: Launch, *, cwd: Path) -> str:
    """The batch script: srun the cell's argv on every node, then record srun's exit status atomically."""
    argv = [shlex.quote(a) for a in launch.argv]
    lines = ["#!/bin/bash", f"# nvbench job {launch.key} (harness/orchestrate/placement/slurm.py); the row is written by "
             "the runner from this folder's files", "set -u", f"cd {shlex.quote(str(cwd))} || exit 1"]
    if launch.nnodes > 1:  # torchrun's c10d rendezvous on the job's first node, a port of this job's own
        lines += ['head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
                  f"port=$(({RDZV_PORT_BASE} + SLURM_JOB_ID % 20000))"]
        argv = ['"--rdzv_endpoint=${head}:${port}"' if a.startswith("--rdzv_endpoint=") else a for a in argv]
    work = shlex.quote(str(launch.work))
    lines += [f"export {LAUNCHED_AT_ENV}=$(date +%s.%N)  # the cell's startup_s counts from here, not the queue",f"srun --nodes={launch.nnodes} --ntasks={launch.nnodes} --ntasks-per-node=1 --kill-on-bad-exit=1 "
              + " ".join(argv), "rc=$?",
              f'printf "%s\\n" "$rc" > {work}/exit.tmp && mv {work}/exit.tmp {work}/exit', 'exit "$rc"', ""]
    return "\n".join(lines)


def sbatch_args(config: ExecutorConfig, launch: Launch, script: Path, *, cwd: Path) -> list[str]:
    args = ["sbatch", "--parsable", f"--job-name=nvbench-{launch.key}", f"--output={launch.log_path}",
            "--open-mode=append", f"--time={time_limit_min(launch.timeout_s, config.time_margin_s)}",
            f"--nodes={launch.nnodes}", "--ntasks-per-node=1", "--no-requeue", f"--chdir={cwd}"]
    for name in ("partition", "account", "qos", "constraint"):
        if getattr(config, name):
            args.append(f"--{name}={getattr(config, name)}")
    if config.gpus_per_node:
        args.append(f"--gpus-per-node={config.gpus_per_node}")
    if config.cpus_per_task:
        args.append(f"--cpus-per-task={config.cpus_per_task}")
    if config.exclusive:
        args.append("--exclusive")
    return args + list(config.extra_args) + [str(script)]


def _run(argv: list[str], timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ExecutorUnavailable(f"--executor slurm: {argv[0]} not found on PATH (SLURM's client commands)") from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]} did not answer within {timeout_s:g} s")


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "no output")


class SlurmExecutor:
    kind = "slurm"

    def __init__(self, config: ExecutorConfig, *, notify=print) -> None:
        self.config = config
        self.max_parallel = config.max_parallel
        self.notify = notify
        self._jobs: dict[str, Launch] = {}
        self._nodes: dict[str, str] = {}
        self._ended_at: dict[str, float] = {}
        self._query_failing_since: float | None = None

    # ------------------------------------------------------------ the protocol

    def check(self) -> None:
        if not shutil.which("sbatch"):
            raise ExecutorUnavailable("--executor slurm: sbatch not found on PATH; install SLURM's client commands "
                                      "or run with --executor local")
        ping = _run(["scontrol", "ping"], 60.0)
        if ping.returncode != 0 or "UP" not in ping.stdout:
            raise ExecutorUnavailable("--executor slurm: the SLURM controller does not answer (scontrol ping: "
                                      f"{_first_line(ping.stdout + ping.stderr)})")

    def submit(self, launch: Launch) -> str:
        cwd = Path.cwd()
        launch.log_path.parent.mkdir(parents=True, exist_ok=True)  # SLURM cannot open a log in a missing folder
        script = launch.work / "job.sbatch"
        script.write_text(job_script(launch, cwd=cwd))
        (launch.work / "exit").unlink(missing_ok=True)
        try:
            out = subprocess.run(sbatch_args(self.config, launch, script, cwd=cwd), capture_output=True, text=True,
                                 timeout=120, env=launch.env, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise ExecutorUnavailable("--executor slurm: sbatch not found on PATH") from None
        except subprocess.TimeoutExpired:
            raise ExecutorUnavailable("--executor slurm: sbatch did not answer within 120 s") from None
        job_id = out.stdout.strip().split(";")[0]
        if out.returncode != 0 or not job_id.isdigit():
            raise ExecutorUnavailable(f"--executor slurm: sbatch refused job {launch.key}: "
                                      f"{_first_line(out.stderr + out.stdout)}")
        self._jobs[job_id] = launch
        return job_id

    def state(self, handle: str) -> str:
        return self._states([handle])[handle][0]

    def wait(self, handles: list[str]) -> dict[str, Ended]:
        while True:
            ended = {}
            for job_id, (state, nodes) in self._states(handles).items():
                if nodes:
                    self._nodes[job_id] = nodes
                if state in ACTIVE:
                    continue
                done = self._ended(job_id, state)
                if done is not None:
                    ended[job_id] = done
            if ended:
                return ended
            time.sleep(self.config.poll_s)  # a blocking wait between two reads of the queue, not a spin

    def cancel(self, handles: list[str]) -> list[str]:
        if handles:
            _run(["scancel", *handles], 60.0)
        return list(handles)

    def record(self, handle: str) -> dict[str, str]:
        return {"executor": self.kind, "job_id": handle}

    def adopt(self, record: dict[str, str], launch: Launch) -> str | None:
        if record.get("executor") != self.kind:
            return None
        job_id = str(record.get("job_id") or "")
        if not job_id:  # the runner died between sbatch and writing the job id down: find it by its name
            out = _run(["squeue", "-h", f"--name=nvbench-{launch.key}", "-o", "%i"])
            job_id = _first_line(out.stdout) if out.returncode == 0 and out.stdout.strip() else ""
        if not job_id.isdigit():
            return None
        self._jobs[job_id] = launch
        return job_id

    # ------------------------------------------------------------ reading states

    def _states(self, handles: list[str]) -> dict[str, tuple[str, str]]:
        """(state, nodes) of each job: squeue for all, then per missing job scontrol, sacct, its files."""
        found = self._squeue(handles)
        for job_id in handles:
            if job_id not in found:
                found[job_id] = self._scontrol(job_id) or self._sacct(job_id) or (self._from_files(job_id), "")
        return found

    def _squeue(self, handles: list[str]) -> dict[str, tuple[str, str]]:
        out = _run(["squeue", "-h", "--states=all", f"--jobs={','.join(handles)}", "-o", "%i|%T|%N"])
        if out.returncode != 0 and "Invalid job id" not in out.stderr:
            now = time.monotonic()
            self._query_failing_since = self._query_failing_since or now
            if now - self._query_failing_since > QUERY_PATIENCE_S:
                raise ExecutorUnavailable(f"--executor slurm: squeue has failed for {QUERY_PATIENCE_S:g} s: "
                                          f"{_first_line(out.stderr)}")
            return {job_id: ("UNKNOWN_WAITING", "") for job_id in handles}  # ACTIVE-like: wait and ask again
        self._query_failing_since = None
        states = {}
        for line in out.stdout.splitlines():
            job_id, _, rest = line.strip().partition("|")
            state, _, nodes = rest.partition("|")
            if job_id in handles:
                states[job_id] = (state.split()[0] if state else "UNKNOWN", "" if nodes == "(null)" else nodes)
        return states

    def _scontrol(self, job_id: str) -> tuple[str, str] | None:
        out = _run(["scontrol", "show", "job", "-o", job_id])
        state = re.search(r"\bJobState=(\S+)", out.stdout)
        nodes = re.search(r"\bNodeList=(\S+)", out.stdout)
        if out.returncode != 0 or not state:
            return None
        return state.group(1), nodes.group(1) if nodes and nodes.group(1) != "(null)" else ""

    def _sacct(self, job_id: str) -> tuple[str, str] | None:
        """From accounting; None where the cluster keeps none ("Slurm accounting storage is disabled")."""
        if not shutil.which("sacct"):
            return None
        out = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,NodeList"])
        line = _first_line(out.stdout) if out.returncode == 0 and out.stdout.strip() else ""
        if not line:
            return None
        state, _, nodes = line.partition("|")
        return state.split()[0], "" if nodes in ("None assigned", "(null)") else nodes

    def _from_files(self, job_id: str) -> str:
        """The end of a job no longer in the controller and without accounting, from what it left."""
        launch = self._jobs[job_id]
        try:
            rc = int((launch.work / "exit").read_text().strip())
            return "COMPLETED" if rc == 0 else "FAILED"
        except (OSError, ValueError):
            pass
        try:
            log = launch.log_path.read_text(errors="replace")
        except OSError:
            log = ""
        for match in _STEPD_END.finditer(log):
            if match.group(1) == job_id:
                return _STEPD_CAUSE[match.group(2)]
        return "LOST"

    # ------------------------------------------------------------ an ended job

    def _ended(self, job_id: str, state: str) -> Ended | None:
        """The job's end, or None while a finished job's exit file has yet to appear."""
        launch = self._jobs[job_id]
        nodes = self._expand(self._nodes.get(job_id, ""))
        exit_code = self._exit_code(launch)
        if exit_code is None and state in ("COMPLETED", "FAILED"):
            first = self._ended_at.setdefault(job_id, time.monotonic())
            if time.monotonic() - first < MARKER_GRACE_S:
                return None
        if exit_code == 0 or (exit_code is not None and state in ("COMPLETED", "FAILED")):
            # srun's status: 0, or the cell's own exit status (128 + N when a signal N ended it)
            code = -(exit_code - 128) if exit_code > 128 else exit_code
            return Ended(outcome=Outcome(code, False), nodes=nodes, job_id=job_id)
        lost = self._down(nodes) if state == "NODE_FAIL" else ()
        status, reason = self._verdict(job_id, state, launch)
        if lost:
            reason += f": node {', '.join(lost)} down"
        return Ended(outcome=Outcome(exit_code, state == "TIMEOUT"), nodes=nodes, job_id=job_id,
                     verdict=(status, reason), node_failed=state == "NODE_FAIL", lost_nodes=lost)

    @staticmethod
    def _down(nodes: str | None) -> tuple[str, ...]:
        """Those of a job's nodes the controller holds down or not responding (what ended a NODE_FAIL job)."""
        if not nodes:
            return ()
        out = _run(["scontrol", "show", "node", "-o", nodes])
        down = []
        for line in out.stdout.splitlines() if out.returncode == 0 else ():
            name, state = re.search(r"\bNodeName=(\S+)", line), re.search(r"\bState=(\S+)", line)
            if name and state and re.search(r"DOWN|NOT_RESPONDING|FAIL", state.group(1)):
                down.append(name.group(1))
        return tuple(down)

    def _verdict(self, job_id: str, state: str, launch: Launch) -> tuple[str, str]:
        if state == "TIMEOUT":
            limit = time_limit_min(launch.timeout_s, self.config.time_margin_s)
            return "timeout", (f"SLURM job {job_id} TIMEOUT: past its time limit of {limit} min "
                               f"(benchmark.timeout_s {launch.timeout_s:g} s + executor.time_margin_s "
                               f"{self.config.time_margin_s:g} s)")
        if state == "LOST":
            return "crashed", (f"SLURM job {job_id} left the queue without a result, and the cluster keeps no "
                               "accounting to say how")
        status = SLURM_VERDICTS.get(state, "crashed")
        return status, f"SLURM job {job_id} {state} before the cell wrote its result"

    @staticmethod
    def _exit_code(launch: Launch) -> int | None:
        try:
            return int((launch.work / "exit").read_text().strip())
        except (OSError, ValueError):
            return None

    @staticmethod
    def _expand(nodes: str) -> str | None:
        if not nodes:
            return None
        if "[" not in nodes:
            return nodes
        out = _run(["scontrol", "show", "hostnames", nodes])
        return ",".join(out.stdout.split()) if out.returncode == 0 else nodes
