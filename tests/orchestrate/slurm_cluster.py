"""A real SLURM for the tests: munged, slurmctld and slurmd as root in a temporary folder, one node or two.

No systemd and no cgroups (proctrack/linuxproc, task/none), no accounting (the cluster the executor must
cope with: sacct fails), the default partition not named "debug" and a short MinJobAge, so finished jobs
leave squeue within seconds. Every daemon has its own socket, ports, state and log under the folder, and
`stop` ends exactly the processes `start` began, even after a failed start.

`nodes=2`: two nodes on this one machine, each a network namespace (a veth pair into a bridge, its own
address, its own /etc/hosts through /etc/netns) and a UTS namespace (its own hostname), running its own
`slurmd -N <node>` with its own spool, pid file and log (slurm.conf's %n); munged and slurmctld are shared
(munge's socket is a file; the controller listens on the bridge's address). `stop` also kills whatever still
runs inside a node's namespace, then deletes the namespaces, the bridge and the hosts files: `leftovers`
says what of it is still there.
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
NODE_IFNAME = "nvb0"
"""Every node's interface on the bridge has this name inside its namespace: GLOO_SOCKET_IFNAME for all nodes."""


def unavailable_reason(nodes: int = 1) -> str | None:
    """Why this machine cannot run the test SLURM (of `nodes` nodes); None when it can."""
    missing = [name for name in DAEMONS if not shutil.which(name) and not Path("/usr/sbin", name).exists()]
    if missing:
        return f"SLURM tests need slurm-wlm and munge (apt); missing: {', '.join(missing)}"
    if os.geteuid() != 0:
        return "SLURM tests start slurmctld and slurmd as root; this user is not root"
    if nodes > 1:
        if not shutil.which("ip") or not shutil.which("unshare"):
            return "a two-node test SLURM needs `ip` (iproute2) and `unshare` (util-linux)"
        probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        if probe.returncode != 0:
            return f"a two-node test SLURM needs network namespaces; `ip netns list`: {probe.stderr.strip()}"
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


def _node_lines(names: list[str], addrs: list[str | None]) -> list[str]:
    """`slurmd -C`'s description of this machine (real CPUs and memory) for each node, without its UpTime line."""
    out = subprocess.run([_sbin("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("NodeName="))
    words = dict(w.split("=", 1) for w in line.split())
    memory = max(1, int(words.get("RealMemory", "1024")) - 512)  # slurmd drains a node that has less than this
    shape = (f"CPUs={words['CPUs']} Boards={words.get('Boards', 1)} SocketsPerBoard={words.get('SocketsPerBoard', 1)} "
             f"CoresPerSocket={words.get('CoresPerSocket', words['CPUs'])} "
             f"ThreadsPerCore={words.get('ThreadsPerCore', 1)} RealMemory={memory} State=UNKNOWN")
    return [f"NodeName={name}" + (f" NodeAddr={addr} NodeHostname={name}" if addr else "") + f" {shape}"
            for name, addr in zip(names, addrs)]


def _sbin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _quiet(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def _kill_and_wait(pid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@dataclass
class Network:
    """The namespaces, veth pairs and bridge of a multi-node cluster, named after this process (unique here)."""

    nodes: int
    tag: str = field(default_factory=lambda: f"nvb{os.getpid() % 100000}")
    subnet: str = field(default_factory=lambda: f"10.213.{20 + os.getpid() % 200}")

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @property
    def controller_addr(self) -> str:
        return f"{self.subnet}.1"

    def names(self) -> list[str]:
        return [f"node{i + 1}" for i in range(self.nodes)]

    def addr(self, node: str) -> str:
        return f"{self.subnet}.{10 + self.names().index(node) + 1}"

    def netns(self, node: str) -> str:
        return f"{self.tag}-{node}"

    def hosts_dir(self, node: str) -> Path:
        return Path("/etc/netns", self.netns(node))

    def create(self) -> None:
        def ip(*args: str) -> None:
            out = _quiet(["ip", *args])
            if out.returncode != 0:
                raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")

        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.controller_addr}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        hosts = "".join(f"{self.addr(n)} {n}\n" for n in self.names())
        for i, node in enumerate(self.names()):
            ns, outer = self.netns(node), f"{self.tag}v{i + 1}"
            ip("netns", "add", ns)
            ip("link", "add", outer, "type", "veth", "peer", "name", NODE_IFNAME, "netns", ns)
            ip("link", "set", outer, "master", self.bridge)
            ip("link", "set", outer, "up")
            ip("-n", ns, "addr", "add", f"{self.addr(node)}/24", "dev", NODE_IFNAME)
            ip("-n", ns, "link", "set", NODE_IFNAME, "up")
            ip("-n", ns, "link", "set", "lo", "up")
            # bound over /etc/hosts for the node's daemons and everything they start (run_in), as `ip netns exec` does
            self.hosts_dir(node).mkdir(parents=True, exist_ok=True)
            (self.hosts_dir(node) / "hosts").write_text(
                f"127.0.0.1 localhost\n{hosts}{self.controller_addr} {socket.gethostname().split('.')[0]}\n")

    def run_in(self, node: str, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
        """argv inside the node's network namespace, with a hostname (UTS namespace) and /etc/hosts (a mount
        namespace) of its own. Not `ip netns exec`: it mounts a fresh /sys, without the cgroup mounts slurmd needs."""
        hosts = self.hosts_dir(node) / "hosts"
        script = f'mount --bind {hosts} /etc/hosts && hostname {node} && exec "$@"'
        return subprocess.run(["nsenter", f"--net=/run/netns/{self.netns(node)}", "unshare", "--uts", "--mount",
                               "--propagation", "private", "sh", "-c", script, "sh", *argv],
                              env=env, capture_output=True, text=True, timeout=30)

    def pids(self, node: str) -> list[int]:
        out = _quiet(["ip", "netns", "pids", self.netns(node)])
        return [int(p) for p in out.stdout.split()] if out.returncode == 0 else []

    def kill_node(self, node: str) -> None:
        """Everything running on the node (its slurmd, slurmstepd and the job's processes) killed at once."""
        for pid in self.pids(node):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def destroy(self) -> None:
        for i, node in enumerate(self.names()):
            for _ in range(3):  # a process may start a child while its siblings die
                for pid in self.pids(node):
                    _kill_and_wait(pid)
            _quiet(["ip", "netns", "del", self.netns(node)])
            _quiet(["ip", "link", "del", f"{self.tag}v{i + 1}"])
            shutil.rmtree(self.hosts_dir(node), ignore_errors=True)
        _quiet(["ip", "link", "del", self.bridge])

    def leftovers(self) -> list[str]:
        names = set(_quiet(["ip", "netns", "list"]).stdout.split())
        left = [f"namespace {self.netns(n)}" for n in self.names() if self.netns(n) in names]
        left += [f"hosts {self.hosts_dir(n)}" for n in self.names() if self.hosts_dir(n).exists()]
        if _quiet(["ip", "link", "show", self.bridge]).returncode == 0:
            left.append(f"bridge {self.bridge}")
        return left


@dataclass
class SlurmCluster:
    root: Path
    partition: str = "batch"
    min_job_age_s: int = 2
    nodes: int = 1
    """1: this machine is the node (its hostname); 2 or more: one network namespace per node (Network)."""
    slurmd_timeout_s: int = 30
    """How long the controller waits for a silent slurmd before it marks its node DOWN (its jobs NODE_FAIL)."""
    env: dict[str, str] = field(default_factory=dict)
    """What a client needs: SLURM_CONF (every sbatch, squeue, ... reads it), and GLOO_SOCKET_IFNAME across nodes."""
    procs: list[subprocess.Popen] = field(default_factory=list)
    pidfiles: list[Path] = field(default_factory=list)
    network: Network | None = None

    def start(self, timeout_s: float = 60.0) -> "SlurmCluster":
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def node_names(self) -> list[str]:
        return self.network.names() if self.network else [socket.gethostname().split(".")[0]]

    def _start(self, timeout_s: float) -> None:
        r = self.root
        for sub in ("munge", "state", "spool", "log"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o700)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        munge_socket = r / "munge" / "munge.socket"
        if self.nodes > 1:
            self.network = Network(self.nodes)
            self.network.create()
        self.pidfiles += [r / "munge" / "munged.pid", r / "slurmctld.pid"]
        self.pidfiles += [r / f"slurmd-{n}.pid" for n in self.node_names()]
        for node in self.node_names():
            (r / "spool" / node).mkdir(exist_ok=True)
        subprocess.run([_sbin("munged"), "--force", f"--socket={munge_socket}", f"--key-file={key}",
                        f"--pid-file={r / 'munge' / 'munged.pid'}", f"--log-file={r / 'log' / 'munged.log'}",
                        f"--seed-file={r / 'munge' / 'munged.seed'}"], check=True, capture_output=True, timeout=30)
        ctld_port, slurmd_port = _free_ports(2)
        host = socket.gethostname().split(".")[0]
        ctld = f"{host}({self.network.controller_addr})" if self.network else host
        addrs = [self.network.addr(n) if self.network else None for n in self.node_names()]
        conf = r / "slurm.conf"
        conf.write_text("\n".join([
            "ClusterName=nvbenchtest", f"SlurmctldHost={ctld}", f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}", "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={munge_socket}",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool' / '%n'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={r / 'log' / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none", "SchedulerType=sched/backfill", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU", "ReturnToService=2", f"MinJobAge={self.min_job_age_s}",
            "KillWait=5", "InactiveLimit=0", "MpiDefault=none", "SlurmctldTimeout=30",
            f"SlurmdTimeout={self.slurmd_timeout_s}", "SchedulerParameters=sched_interval=1", "MessageTimeout=10",
            *_node_lines(self.node_names(), addrs),
            f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
            "",
        ]))
        self.env = {"SLURM_CONF": str(conf)}
        if self.network:
            self.env["GLOO_SOCKET_IFNAME"] = NODE_IFNAME  # the ranks' interface on every node
        env = os.environ | self.env
        subprocess.run([_sbin("slurmctld"), "-i"], env=env, check=True, capture_output=True, timeout=30)
        for node in self.node_names():
            self.start_slurmd(node)
        self._wait_idle(timeout_s)

    def start_slurmd(self, node: str) -> None:
        """The node's slurmd (again, after `kill_node`), in its namespaces where the cluster has several nodes."""
        env = os.environ | self.env
        if not self.network:
            subprocess.run([_sbin("slurmd")], env=env, check=True, capture_output=True, timeout=30)
            return
        out = self.network.run_in(node, [_sbin("slurmd"), "-N", node], env)
        if out.returncode != 0:
            raise RuntimeError(f"slurmd -N {node} did not start: {out.stderr.strip()}")

    def kill_node(self, node: str) -> None:
        """The node dies: its slurmd and every process of its jobs killed (several-node clusters only)."""
        assert self.network is not None, "kill_node needs a cluster of several nodes"
        self.network.kill_node(node)

    def sinfo_states(self) -> dict[str, str]:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=os.environ | self.env, capture_output=True,
                             text=True, timeout=30)
        return dict(ln.split()[:2] for ln in out.stdout.splitlines() if len(ln.split()) >= 2)

    def _wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.sinfo_states()
            if sorted(states) == sorted(self.node_names()) and all(s.rstrip("*") == "idle" for s in states.values()):
                return
            time.sleep(0.5)
        logs = "; ".join(f"{p.name}: {p.read_text(errors='replace')[-600:]}" for p in (self.root / "log").glob("*.log"))
        raise RuntimeError(f"the test SLURM's nodes are not idle after {timeout_s:g} s (sinfo: {states}); {logs}")

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        self._wait_idle(timeout_s)

    def stop(self) -> None:
        """End the daemons this cluster started (by their pid files), slurmd first, then the nodes' namespaces."""
        for pidfile in reversed(self.pidfiles):
            try:
                pid = int(pidfile.read_text().strip())
            except (OSError, ValueError):
                continue
            _kill_and_wait(pid)
        if self.network:
            self.network.destroy()

    def leftovers(self) -> list[str]:
        """What `stop` should have ended and has not: a daemon still alive, a namespace, a bridge, a hosts file."""
        left = []
        for pidfile in self.pidfiles:
            try:
                pid = int(pidfile.read_text().strip())
                os.kill(pid, 0)
                left.append(f"{pidfile.stem} (pid {pid})")
            except (OSError, ValueError):
                pass
        return left + (self.network.leftovers() if self.network else [])
