"""A real single-node SLURM for the tests: munged, slurmctld and slurmd as root in a temporary folder.

No systemd and no cgroups (proctrack/linuxproc, task/none), no accounting (the cluster the executor must
cope with: sacct fails), the default partition not named "debug" and a short MinJobAge, so finished jobs
leave squeue within seconds. Every daemon has its own socket, ports, state and log under the folder, and
`stop` ends exactly the processes `start` began, even after a failed start.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "srun", "sinfo")


def unavailable_reason() -> str | None:
    """Why this machine cannot run the test SLURM; None when it can."""
    missing = [name for name in DAEMONS if not shutil.which(name) and not Path("/usr/sbin", name).exists()]
    if missing:
        return f"SLURM tests need slurm-wlm and munge (apt); missing: {', '.join(missing)}"
    if os.geteuid() != 0:
        return "SLURM tests start slurmctld and slurmd as root; this user is not root"
    return None


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _node_line() -> str:
    """`slurmd -C`'s description of this machine (real CPUs and memory), without its UpTime line."""
    out = subprocess.run([_sbin("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("NodeName="))
    words = dict(w.split("=", 1) for w in line.split())
    memory = max(1, int(words.get("RealMemory", "1024")) - 512)  # slurmd drains a node that has less than this
    return (f"NodeName={socket.gethostname().split('.')[0]} CPUs={words['CPUs']} "
            f"Boards={words.get('Boards', 1)} SocketsPerBoard={words.get('SocketsPerBoard', 1)} "
            f"CoresPerSocket={words.get('CoresPerSocket', words['CPUs'])} "
            f"ThreadsPerCore={words.get('ThreadsPerCore', 1)} RealMemory={memory} State=UNKNOWN")


def _sbin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class SlurmCluster:
    root: Path
    partition: str = "batch"
    min_job_age_s: int = 2
    env: dict[str, str] = field(default_factory=dict)
    """What a client needs: SLURM_CONF (every sbatch, squeue, ... reads it)."""
    procs: list[subprocess.Popen] = field(default_factory=list)
    pidfiles: list[Path] = field(default_factory=list)

    def start(self, timeout_s: float = 60.0) -> "SlurmCluster":
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout_s: float) -> None:
        r = self.root
        for sub in ("munge", "state", "spool", "log"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o700)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        munge_socket = r / "munge" / "munge.socket"
        self.pidfiles += [r / "munge" / "munged.pid", r / "slurmctld.pid", r / "slurmd.pid"]
        subprocess.run([_sbin("munged"), "--force", f"--socket={munge_socket}", f"--key-file={key}",
                        f"--pid-file={r / 'munge' / 'munged.pid'}", f"--log-file={r / 'log' / 'munged.log'}",
                        f"--seed-file={r / 'munge' / 'munged.seed'}"], check=True, capture_output=True, timeout=30)
        ctld_port, slurmd_port = _free_ports(2)
        host = socket.gethostname().split(".")[0]
        conf = r / "slurm.conf"
        conf.write_text("\n".join([
            "ClusterName=nvbenchtest", f"SlurmctldHost={host}", f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}", "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={munge_socket}",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none", "SchedulerType=sched/backfill", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU", "ReturnToService=2", f"MinJobAge={self.min_job_age_s}",
            "KillWait=5", "InactiveLimit=0", "MpiDefault=none", "SlurmctldTimeout=30", "SlurmdTimeout=30",
            "SchedulerParameters=sched_interval=1", "MessageTimeout=10",
            _node_line(),
            f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
            "",
        ]))
        self.env = {"SLURM_CONF": str(conf)}
        env = os.environ | self.env
        subprocess.run([_sbin("slurmctld"), "-i"], env=env, check=True, capture_output=True, timeout=30)
        subprocess.run([_sbin("slurmd")], env=env, check=True, capture_output=True, timeout=30)
        self._wait_idle(timeout_s)

    def _wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=os.environ | self.env, capture_output=True,
                                 text=True, timeout=30)
            state = (out.stdout or out.stderr).strip()
            if out.returncode == 0 and state.rstrip("*") == "idle":
                return
            time.sleep(0.5)
        logs = "; ".join(f"{p.name}: {p.read_text(errors='replace')[-600:]}" for p in (self.root / "log").glob("*.log"))
        raise RuntimeError(f"the test SLURM's node is not idle after {timeout_s:g} s (sinfo: {state!r}); {logs}")

    def stop(self) -> None:
        """End the daemons this cluster started (by their pid files), slurmd first."""
        for pidfile in reversed(self.pidfiles):
            try:
                pid = int(pidfile.read_text().strip())
            except (OSError, ValueError):
                continue
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
                for _ in range(50):
                    try:
                        os.kill(pid, 0)
                    except ProcessLookupError:
                        break
                    time.sleep(0.1)
                else:
                    continue
                break
