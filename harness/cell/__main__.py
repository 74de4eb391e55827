"""A cell's process: `python -m harness.cell run JOB` trains one rank; `exec CMD...` becomes CMD (torchrun's
agent). Either way the process first asks Linux to kill it with its parent, before anything slow (torch
takes seconds to import), so a killed runner leaves no process of its cells behind."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import signal
import sys
from pathlib import Path

from harness.matrix.job import PARENT_PID_ENV

_PARENT_AT_START = os.getppid()


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies; exit now if the parent is already gone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG; survives exec
    except (OSError, AttributeError):  # not Linux: the runner's process-group kill still covers timeouts
        return
    # A torchrun rank's parent is the agent (recorded as this module loaded); otherwise the runner names itself.
    expected = _PARENT_AT_START if "LOCAL_RANK" in os.environ else \
        int(os.environ.get(PARENT_PID_ENV, _PARENT_AT_START))
    if os.getppid() != expected:  # the parent died before prctl took effect
        os._exit(1)


def _profiled(job_path: str) -> bool:
    """Whether the job runs under a profiler (its job file's profile section): nsys collects its data as the
    process exits, so a profiled cell exits the ordinary way. A job file that cannot be read: the same."""
    try:
        return bool(json.loads(Path(job_path).read_text()).get("profile"))
    except (OSError, ValueError, AttributeError):
        return True


def _exit_now(code: int) -> None:
    """End the process without the interpreter's teardown. Everything the cell reports is written (atomically,
    fsynced) and its loaders and process group are closed; what is left is tearing down every module and running
    atexit hooks: 0.7-1.1 s a process on the 2-core CI machine under load, against 0.13-0.15 s this way
    (docs/performance.md). Whatever the cell's process leaves (a loader worker) dies with its process group,
    which the runner kills when the cell exits."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    die_with_parent()  # first, before torch loads
    if argv[:1] == ["exec"] and len(argv) > 1:
        os.execvp(argv[1], argv[1:])
    if argv[:1] == ["run"]:
        # Importing torch and building a cell leave ~300,000 long-lived objects: every full collection while
        # they pile up walks all of them and frees nothing (0.4-0.75 s a cell on CI's two cores). The
        # collector stays off until the cell is built; the worker then freezes what is alive and turns it on.
        gc.disable()
        from harness.cell.worker import main as run_worker

        code = run_worker(argv[1:])
        # The interpreter's exit would walk everything once more (about 0.9 s a cell there once
        # torch._dynamo is loaded) in a process whose row is already written: frozen, it is not walked.
        gc.freeze()
        if len(argv) > 1 and not _profiled(argv[1]):
            _exit_now(code)
        return code
    print("usage: python -m harness.cell (run JOB_JSON | exec CMD...)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
