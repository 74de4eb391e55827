"""The suite on every core (tests/conftest.py wires it in): pytest-xdist workers, each pinned to its own cores,
and turns for the tests that need more than a worker's share.

On the 2-core CI machine a serial suite kept about one core busy: most of its time is cell processes that train
on one thread while their test waits for them. Two workers, one core each, use both, and a worker's cells cannot
take its neighbour's core (a cell sizes its threads by the cores it may use, and a child inherits the mask).
A test that needs more cores than a worker holds (`@pytest.mark.cores(n)`: a run with two slots, a world-size-2
group) or the GPU (`gpu`, where a GPU is present) runs alone: it waits until no other worker is inside a test,
keeps the others out until it ends, and has every core the suite was given.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path

import pytest


def auto_workers(cores: int) -> int:
    """How many workers `-n auto` starts on a machine of `cores` cores: one a core up to three, then one per two
    cores (a 16-core GPU box: eight workers of two cores each, as the cells of a 2-core machine see them)."""
    return max(1, cores if cores < 4 else cores // 2)


def worker_cores(cores: list[int], worker: str, count: int) -> list[int] | None:
    """The cores pytest-xdist worker `worker` ("gw3") of `count` keeps to itself: an equal, disjoint share, or
    None (fewer cores than workers, or not a worker: it keeps them all, as without xdist)."""
    share = len(cores) // max(1, count)
    index = int(worker.removeprefix("gw")) if worker.removeprefix("gw").isdigit() else -1
    if share < 1 or not 0 <= index < count:
        return None
    return cores[index * share:(index + 1) * share]


def set_cores(cores: list[int]) -> None:
    """Every thread of this process onto `cores` (children inherit the mask)."""
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cores)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


class Turns:
    """A readers-writer lock between the workers' processes that lets a writer in, made of two flock(2) files.
    A test holds `room` shared, a test that runs alone holds it exclusive; every test first passes the `door`
    (held exclusive only while taking `room`), and a test waiting to run alone keeps the door shut while it
    waits, so no new test slips in ahead of it."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self._door = open(folder / "door", "a+")  # noqa: SIM115 (held for the session)
        self._room = open(folder / "room", "a+")  # noqa: SIM115
        self.alone: bool | None = None
        """None outside a test; else whether the test now inside runs alone."""

    def enter(self, alone: bool) -> None:
        self.leave()
        fcntl.flock(self._door, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(self._door, fcntl.LOCK_UN)
        self.alone = alone

    def leave(self) -> None:
        if self.alone is not None:
            fcntl.flock(self._room, fcntl.LOCK_UN)
            self.alone = None


LONE_MARKERS = ("cores", "world_size", "gpu")
"""The markers that can make a test run alone (Parallel.alone decides, by what this worker holds)."""


def turns_folder(config: pytest.Config) -> Path:
    """Where the workers' turns live: beside the workers' own temporary folders (pytest-xdist gives worker gwN
    `<the run's basetemp>/popen-gwN`), which pytest prunes with the run's, so no lock folder piles up in /tmp;
    without one, a folder named by the run's id."""
    basetemp = getattr(config.option, "basetemp", None)
    if basetemp:
        return Path(basetemp).parent / "nvbench-turns"
    return Path("/tmp") / f"nvbench-pytest-{config.workerinput['testrunuid']}"


class Parallel:
    """This worker's cores, the machine's, and its turns."""

    def __init__(self, config: pytest.Config, worker: str, count: int):
        self.all_cores = sorted(os.sched_getaffinity(0))
        self.mine = worker_cores(self.all_cores, worker, count) or self.all_cores
        self.gpu = Path("/dev/nvidiactl").exists()
        self.turns = Turns(turns_folder(config))
        set_cores(self.mine)

    def alone(self, item: pytest.Item) -> bool:
        cores = item.get_closest_marker("cores")
        # a torchrun group (`world_size`) is two ranks, each a process on a core of its own
        needs = cores.args[0] if cores else 2 if item.get_closest_marker("world_size") else 1
        return needs > len(self.mine) or (
            self.gpu and item.get_closest_marker("gpu") is not None)


KEY = pytest.StashKey[Parallel]()


def configure(config: pytest.Config) -> None:
    """In a pytest-xdist worker: take this worker's cores and open the turns."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker and count and count.isdigit() and hasattr(config, "workerinput") and hasattr(os, "sched_setaffinity"):
        config.stash[KEY] = Parallel(config, worker, int(count))


DURATIONS = Path(__file__).with_name("durations.json")
"""Each test file's seconds in a measured fresh-clone suite (`python tests/parallel.py JUNIT.xml` writes it)."""
GUESS_S = {"slow": 30.0, "other": 1.0}
"""A file the table does not know yet: by its marks."""


def order(items: list[pytest.Item]) -> None:
    """Files with a lone test first (nothing else is running yet to wait for), then the rest longest first, each
    file's tests in their own order. pytest-xdist's loadfile hands the next file to whichever worker runs dry, so
    longest-first (LPT) makes the two workers end within about the last file's length of each other; by marks
    alone (slow files first, in collection order) they ended minutes apart."""
    known = durations()

    def rank(item: pytest.Item) -> tuple[int, float]:
        marks = marks_by_file[item.path]
        seconds = known.get(relative(item.path), GUESS_S["slow" if "slow" in marks else "other"])
        return (0 if marks & set(LONE_MARKERS) else 1, -seconds)

    marks_by_file: dict[Path, set[str]] = {}
    for item in items:
        marks_by_file.setdefault(item.path, set()).update(m.name for m in item.iter_markers())
    items.sort(key=rank)  # stable: a file's tests keep their order


def relative(path: Path) -> str:
    """`tests/x/test_y.py`, as the table names a file of this checkout (any other path as it is)."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(DURATIONS.parent.parent).as_posix()
    except ValueError:
        return resolved.as_posix()


def durations() -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError):
        return {}


def measured(junit: Path) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown) from a junit.xml of the suite."""
    import xml.etree.ElementTree as ET

    seconds: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = "tests/" + "/".join(case.get("classname", "").split(".")[1:]) + ".py"
        seconds[path] = seconds.get(path, 0.0) + float(case.get("time") or 0.0)
    return {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Setup, call and teardown of `item` inside its turn; a lone test widens to every core for them."""
    par = item.config.stash.get(KEY, None)
    if par is None:
        yield
        return
    alone = par.alone(item)
    par.turns.enter(alone)
    if alone:
        set_cores(par.all_cores)
    try:
        yield
    finally:
        if alone:
            set_cores(par.mine)
        # Left after every test, even between two lone ones: a worker that has run its last queued test waits
        # for the controller, which may be waiting for the other worker, who would be waiting for this turn.
        par.turns.leave()


if __name__ == "__main__":  # python tests/parallel.py JUNIT.xml: the durations table from a measured suite
    # files the suite did not run (the e2e lane's alone, under the gate's -m "not slow") keep their last figure
    table = durations() | measured(Path(sys.argv[1]))
    DURATIONS.write_text(json.dumps(dict(sorted(table.items(), key=lambda kv: -kv[1])), indent=1) + "\n")
