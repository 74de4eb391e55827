"""How a finished job ended, as a row's status and reason: from its exit, the errors its ranks wrote, torchrun's
failure summary in its log, and the stacks its ranks dumped when a timeout killed them."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from harness.orchestrate.placement.launch import Outcome, rdzv_join_timeout_s
from harness.results import store

# torchrun's failure summary (ChildFailedError) gives each failed worker's global rank and exit code.
_TORCHRUN_FAILURE = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", re.M)
# torchrun's agent when the nodes it waits for do not all join within the join timeout (launch.RDZV_JOIN_SHARE).
_RDZV_TIMEOUT = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"
# A faulthandler dump (the worker writes one per rank on SIGTERM): frames innermost first.
_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def _killed_by(code: int) -> str:
    return f"killed by {_signal_name(code)}" + (" (the kernel OOM killer sends this)" if code == signal.SIGKILL else "")


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _log_tail(log_path: Path, lines: int = 1) -> str:
    text = _read(log_path).strip().splitlines()
    return " | ".join(t.strip() for t in text[-lines:])


def _where(dump: str) -> str | None:
    """'in FUNC (harness/FILE:LINE)' at the innermost nvbench frame of a faulthandler dump; None if none.

    The thread running nvbench code is the one that matters, the main thread first (an instrument's thread,
    started through threading.py, sleeps between its reads and says nothing of where the rank was); frames of
    torch.distributed above it mean the rank was waiting for its peers, not stuck itself.
    """
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump)
    for block in sorted(blocks, key=lambda b: "/threading.py" in b):  # stable: the dump's order otherwise
        frames = _FRAME.findall(block)
        for i, (file, line, func) in enumerate(frames):
            if "/harness/" in file:
                waiting = any("torch/distributed/" in f for f, _, _ in frames[:i])
                here = f"{func} ({file[file.rindex('/harness/') + 1:]}:{line})"
                return f"waiting for its peers in {here}" if waiting else f"in {here}"
    return None


def timeout_reason(work: Path, timeout_s: float) -> str:
    return f"no exit within timeout_s = {timeout_s:g} s; the cell's processes were killed" + where_killed(work)


def where_killed(work: Path) -> str:
    """`; at the kill: rank 0 in step (harness/cell/loop.py:88)`: where each rank was, from the stacks it dumped
    (empty where none said)."""
    stacks = {int(p.stem.removeprefix("stack-rank")): _where(_read(p)) for p in work.glob("stack-rank*.txt")}
    wheres = [f"rank {rank} {where}" for rank, where in sorted(stacks.items()) if where]
    return f"; at the kill: {', '.join(wheres)}" if wheres else ""


def classify(outcome: Outcome, work: Path, log_path: Path, timeout_s: float) -> tuple[str, str]:
    """(status, reason) of a finished job from its exit and the files its ranks left.

    In a torchrun group one rank's failure makes the others fail too (a collective loses its peer, torchrun
    stops the rest with SIGTERM), so the cause is chosen in order: a rank's own exception; a rank killed by
    a signal torchrun did not send, or exited without writing its error (both from torchrun's log); an
    error torch.distributed raised on a surviving rank.
    """
    if outcome.timed_out:
        return "timeout", timeout_reason(work, timeout_s)
    if outcome.returncode == 0 and (work / "result.json").exists():
        return "ok", ""
    errors = sorted((store.read_json(p) for p in work.glob("error-rank*.json")),
                    key=lambda e: (bool(e.get("in_collective")), e.get("time", 0.0), e["rank"]))
    if errors and not errors[0].get("in_collective"):
        return "failed", f"{_rank(errors[0])}: {errors[0]['type']}: {errors[0]['message']}"
    log = _read(log_path)
    if _RDZV_TIMEOUT in log:  # no rank ever started: an agent waited at the rendezvous for a node that never came
        return "failed", (f"the c10d rendezvous did not complete within {rdzv_join_timeout_s(timeout_s)} s: a node "
                          "never joined (torchrun's RendezvousTimeoutError; its agent's log names the endpoint)")
    exits = {int(r): int(c) for r, c in _TORCHRUN_FAILURE.findall(log)}
    for rank, code in sorted(exits.items()):
        if code < 0 and code != -signal.SIGTERM:
            return "crashed", f"rank {rank} {_killed_by(-code)}"
    reported = {e["rank"] for e in errors}
    for rank, code in sorted(exits.items()):
        if code > 0 and rank not in reported:
            return "crashed", f"rank {rank} exited with status {code} without a result"
    if errors:
        err = errors[0]
        return "failed", (f"{_rank(err)}: {err['type']}: {err['message']} (raised by torch.distributed: "
                          "a peer rank or node probably failed first; see its log)")
    code = outcome.returncode
    if code is not None and code < 0:
        return "crashed", _killed_by(-code)
    tail = _log_tail(log_path)
    return "crashed", f"exited with status {code} without a result" + (f": {tail}" if tail else "")


def _rank(error: dict) -> str:
    """`rank 1`, and under SLURM the node it ran on (`rank 1 on gpu18`): a group wider than one node."""
    return f"rank {error['rank']}" + (f" on {error['node']}" if error.get("node") else "")
