"""The local executor: each job one process (group) of this machine, started and waited on by the runner."""

from __future__ import annotations

import subprocess

from harness.orchestrate.executors import Ended, Launch
from harness.orchestrate.launch import kill_process, start_process, wait_process


class LocalExecutor:
    """Today's behaviour: one process (group) of this machine per job, one job at a time, the parent blocking on
    it with the cell's timeout; the process dies with the runner, so nothing of it survives to be adopted."""

    kind = "local"
    max_parallel = 1

    def __init__(self) -> None:
        self._running: dict[str, tuple[subprocess.Popen, Launch]] = {}

    def check(self) -> None:
        return None

    def submit(self, launch: Launch) -> str:
        self._running[launch.key] = (start_process(list(launch.argv), log_path=launch.log_path, env=launch.env),
                                     launch)
        return launch.key

    def state(self, handle: str) -> str:
        proc = self._running.get(handle)
        return "RUNNING" if proc and proc[0].poll() is None else "ENDED"

    def wait(self, handles: list[str]) -> dict[str, Ended]:
        handle = handles[0]  # one in flight: a blocking wait with the cell's timeout, no polling
        proc, launch = self._running.pop(handle)
        return {handle: Ended(outcome=wait_process(proc, launch.timeout_s))}

    def cancel(self, handles: list[str]) -> list[str]:
        for handle in handles:
            if handle in self._running:
                kill_process(self._running.pop(handle)[0])
        return []  # a local job dies with its runner; there is nothing to report as cancelled

    def record(self, handle: str) -> dict[str, str]:
        return {"executor": self.kind}

    def adopt(self, record: dict[str, str], launch: Launch) -> str | None:
        return None  # its process died with the runner that started it
