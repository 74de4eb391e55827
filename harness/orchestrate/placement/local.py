"""The local executor: each job one process (group) of this machine, as many at once as the runner submits (one
per slot it holds), each followed by a waiter thread that blocks on it and ends it at its timeout."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading

from harness.orchestrate.placement.executors import Ended, Launch
from harness.orchestrate.placement.launch import TERM_GRACE_S, Outcome, kill_process, signal_group, start_process


class LocalExecutor:
    """Processes of this machine. `submit` starts one (from the caller's thread: a cell asks to die with the
    thread that started it, PR_SET_PDEATHSIG, so that must be the runner's own, long-lived one) and hands it
    to a waiter thread: a blocking waitpid, with timers for the timeout's SIGTERM and the grace's SIGKILL.
    `wait` blocks on the queue the waiters feed; nothing polls. A job's process dies with the runner, so
    nothing of it survives to be adopted."""

    kind = "local"
    max_parallel = 1
    """Without slots the runner runs one job at a time; with them, its slot pool says how many."""

    def __init__(self) -> None:
        self._running: dict[str, subprocess.Popen] = {}
        self._ended: queue.SimpleQueue[tuple[str, Outcome]] = queue.SimpleQueue()
        self._arrived: dict[str, Ended] = {}

    def check(self) -> None:
        return None

    def submit(self, launch: Launch) -> str:
        if launch.key in self._running:
            raise ValueError(f"job {launch.key} is already in flight here: a job is followed by its key")
        proc = start_process(list(launch.argv), log_path=launch.log_path, env=launch.env, cpus=launch.cpus)
        self._running[launch.key] = proc
        threading.Thread(target=self._follow, args=(launch.key, proc, launch.timeout_s), daemon=True,
                         name=f"nvbench-wait-{launch.key}").start()
        return launch.key

    def _follow(self, handle: str, proc: subprocess.Popen, timeout_s: float) -> None:
        """The job's waiter: block until its process exits; at the timeout SIGTERM its group, SIGKILL after
        the grace; then SIGKILL what is left of the group (a DataLoader worker, a hung rank) and report."""
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            signal_group(proc.pid, signal.SIGTERM)
            kill.start()

        kill = threading.Timer(TERM_GRACE_S, signal_group, (proc.pid, signal.SIGKILL))
        term = threading.Timer(timeout_s, expire)
        kill.daemon = term.daemon = True
        term.start()
        try:
            code = proc.wait()
        finally:
            term.cancel()
            kill.cancel()
            signal_group(proc.pid, signal.SIGKILL)
        self._ended.put((handle, Outcome(None, True) if expired.is_set() else Outcome(code, False)))

    def state(self, handle: str) -> str:
        proc = self._running.get(handle)
        return "RUNNING" if proc and proc.poll() is None else "ENDED"

    def wait(self, handles: list[str]) -> dict[str, Ended]:
        """Block until one of `handles` has ended; return it and every other of them that has too."""
        while not any(h in self._arrived for h in handles):
            handle, outcome = self._ended.get()  # blocks; Ctrl-C interrupts it
            self._arrived[handle] = Ended(outcome=outcome)
        while not self._ended.empty():  # others that ended meanwhile, without waiting for more
            handle, outcome = self._ended.get_nowait()
            self._arrived[handle] = Ended(outcome=outcome)
        ready = {h: self._arrived.pop(h) for h in handles if h in self._arrived}
        for handle in ready:
            self._running.pop(handle, None)
        return ready

    def cancel(self, handles: list[str]) -> list[str]:
        for handle in handles:
            if handle in self._running:
                kill_process(self._running.pop(handle))
        return []  # a local job dies with its runner; there is nothing to report as cancelled

    def record(self, handle: str) -> dict[str, str]:
        return {"executor": self.kind}

    def adopt(self, record: dict[str, str], launch: Launch) -> str | None:
        return None  # its process died with the runner that started it
