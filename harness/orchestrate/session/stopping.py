"""How a command stops: SIGTERM and SIGHUP end it as Ctrl-C does (an orderly KeyboardInterrupt: cells killed,
state saved, exit 130), and the commands it starts itself (bisect's `nvbench ab`) die with it, even when it
is SIGKILLed."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from typing import Callable, Sequence

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_INTERRUPTED = 130
CHILD_GRACE_S = 10.0
"""After SIGTERM, how long a child command may take over its own orderly stop before SIGKILL."""
_PR_SET_PDEATHSIG = 1

try:  # loaded now: a preexec function must not load a library between fork and exec
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: a killed parent's children then live on
    _prctl = None


class Stopped(KeyboardInterrupt):
    """A stop signal arrived; every `except KeyboardInterrupt` that cleans up after Ctrl-C runs for it too."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_stopping = False


def _stop(signum: int, frame) -> None:
    global _stopping
    if _stopping:  # one orderly stop: a second signal (Ctrl-C reaches a child too) must not cut it short
        return
    _stopping = True
    raise Stopped(signum)


def run(command: Callable[[], int]) -> int:
    """Run a command with SIGINT, SIGTERM and SIGHUP raising Stopped (once), then put the handlers back (a
    caller in-process keeps its own; a signal after the command returned meets the default, its work done). A
    stop the command did not handle itself ends it with one line and exit 130 rather than a traceback."""
    global _stopping
    if threading.current_thread() is not threading.main_thread():  # signals only reach the main thread
        return command()
    previous = {sig: signal.signal(sig, _stop) for sig in STOP_SIGNALS}
    _stopping = False
    try:
        return command()
    except KeyboardInterrupt as exc:
        print(f"interrupted ({exc or 'SIGINT'})", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        # A signal from here on finds the work done: _stop must not raise while the handlers go back one by one (a
        # SIGHUP between putting back SIGTERM's and its own raised Stopped out of this block: a traceback, exit 1).
        _stopping = True
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _stopping = False


def die_with_me(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A preexec_fn: the child is sent `sig` when this process dies (PR_SET_PDEATHSIG, kept across exec), and
    exits at once if this process died before the request took effect. None where Linux cannot."""
    if _prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        _prctl(_PR_SET_PDEATHSIG, int(sig))
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def run_child(argv: Sequence[str], *, grace_s: float = CHILD_GRACE_S, **popen: object) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True) for a child that must not outlive this process: it
    is sent SIGTERM when this process dies, and when this one is stopped it gets SIGTERM and `grace_s` for its
    own orderly stop before SIGKILL."""
    with subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, preexec_fn=die_with_me(), **popen) as proc:  # noqa: PLW1509 (no threads here)
        try:
            out, err = proc.communicate()
        except BaseException:
            stop_child(proc, grace_s)
            raise
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def stop_child(proc: subprocess.Popen, grace_s: float = CHILD_GRACE_S) -> None:
    """SIGTERM, up to `grace_s` for the child to finish, then SIGKILL; reaped either way."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


class OneChild:
    """A command's children one at a time (a script's foreground commands): each dies with this process, and
    stop() ends the one running as Ctrl-C ends nvbench (SIGTERM, then its own orderly stop, however long)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def run(self, argv: Sequence[str], *, capture: bool = False, quiet: bool = False) -> tuple[int, str]:
        """argv's exit status (127 where it cannot start, said on stderr as a shell says it) and, with `capture`,
        its stdout and stderr together; `quiet` drops its stdout (its stderr is still said)."""
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            out = subprocess.PIPE if capture else subprocess.DEVNULL if quiet else None
            self.proc = subprocess.Popen(list(argv), stdout=out, text=True,
                                         stderr=subprocess.STDOUT if capture else None,
                                         preexec_fn=die_with_me())  # noqa: PLW1509 (no threads here)
        except OSError as exc:
            print(f"{argv[0]}: {exc.strerror}", file=sys.stderr, flush=True)
            return 127, ""
        out = self.proc.communicate()[0] if capture else ""
        rc, self.proc = self.proc.wait(), None
        return rc, out or ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()
        self.proc = None
