"""The suite's own parallelism (tests/parallel.py): how many workers, which cores each keeps, the order files are
handed out in, and the turns that let a test needing every core run alone, checked across real processes."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from types import SimpleNamespace

import parallel
import pytest
from parallel import Turns, auto_workers, order, worker_cores


def test_one_worker_a_core_on_small_machines_and_two_cores_a_worker_on_large_ones():
    assert [auto_workers(n) for n in (1, 2, 3, 4, 16)] == [1, 2, 3, 2, 8]


def test_each_worker_keeps_a_disjoint_share_of_the_cores():
    assert worker_cores([0, 1], "gw0", 2) == [0] and worker_cores([0, 1], "gw1", 2) == [1]
    assert worker_cores(list(range(16)), "gw3", 8) == [6, 7]
    assert worker_cores([0, 1], "gw2", 3) is None  # more workers than cores: it keeps them all
    assert worker_cores([0, 1], "master", 2) is None


def _item(path: str, *marks: str):
    return SimpleNamespace(path=Path(path), name=f"{path}:{marks}",
                           iter_markers=lambda: [SimpleNamespace(name=m) for m in marks])


def test_files_with_a_lone_test_go_first_then_files_with_a_slow_one_each_file_in_its_own_order(monkeypatch):
    import parallel

    monkeypatch.setattr(parallel, "durations", lambda: {})  # no table: by marks alone
    items = [_item("a.py"), _item("b.py"), _item("b.py", "slow"), _item("c.py", "parametrize"),
             _item("d.py", "cores"), _item("d.py"), _item("e.py", "slow")]
    order(items)
    assert [(i.path.name, i.name.split(":")[1]) for i in items] == [
        ("d.py", "('cores',)"), ("d.py", "()"), ("b.py", "()"), ("b.py", "('slow',)"), ("e.py", "('slow',)"),
        ("a.py", "()"), ("c.py", "('parametrize',)")]


def test_with_a_durations_table_the_longest_files_go_first_and_unknown_ones_by_their_marks(monkeypatch):
    import parallel

    table = {"tests/a.py": 5.0, "tests/b.py": 90.0, "tests/c.py": 40.0}
    monkeypatch.setattr(parallel, "durations", lambda: table)
    root = parallel.DURATIONS.parent
    items = [_item(root / "a.py"), _item(root / "b.py"), _item(root / "c.py"), _item(root / "new.py", "slow"),
             _item(root / "d.py", "world_size"), _item(root / "other.py")]
    order(items)
    # lone first; then b 90 s, c 40 s, a new slow file (guessed 30 s), a 5 s, an unknown quick one (1 s)
    assert [i.path.name for i in items] == ["d.py", "b.py", "c.py", "new.py", "a.py", "other.py"]


def test_the_durations_table_is_read_from_a_junit_file_per_test_file(tmp_path):
    import parallel

    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite>'
                     '<testcase classname="tests.orchestrate.test_ab" name="x" time="2.5"/>'
                     '<testcase classname="tests.orchestrate.test_ab" name="y" time="1.25"/>'
                     '<testcase classname="tests.test_cli" name="z" time="9"/></testsuite></testsuites>')
    assert parallel.measured(junit) == {"tests/test_cli.py": 9.0, "tests/orchestrate/test_ab.py": 3.8}


def _visit(folder: Path, alone: bool, hold_s: float, log, started=None, delay_s: float = 0.0) -> None:
    """Enter a turn (alone or not), stay `hold_s`, leave; log (what, event, monotonic time)."""
    time.sleep(delay_s)
    turns = Turns(folder)
    if started is not None:
        started.set()
    turns.enter(alone)
    log.put(("alone" if alone else "shared", "in", time.monotonic()))
    time.sleep(hold_s)
    log.put(("alone" if alone else "shared", "out", time.monotonic()))
    turns.leave()


def _events(log, count: int) -> list[tuple[str, str, float]]:
    return sorted((log.get(timeout=30) for _ in range(count)), key=lambda e: e[2])


def test_shared_turns_overlap(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    log = ctx.Queue()
    procs = [ctx.Process(target=_visit, args=(tmp_path, False, 1.0, log)) for _ in range(2)]
    for p in procs:
        p.start()
    events = _events(log, 4)
    for p in procs:
        p.join(timeout=30)
    assert [e[1] for e in events] == ["in", "in", "out", "out"]  # both inside at once


def test_a_lone_test_waits_for_the_test_inside_and_keeps_a_later_one_out_until_it_ends(tmp_path):
    """Shared test 1 is inside; the lone test arrives and waits; shared test 2 arrives after it and must not
    slip in ahead of it (that is what the door is for): 1 in, 1 out, lone in, lone out, 2 in."""
    ctx = multiprocessing.get_context("spawn")
    log = ctx.Queue()
    inside = ctx.Event()
    first = ctx.Process(target=_visit, args=(tmp_path, False, 4.0, log, inside))
    first.start()
    assert inside.wait(timeout=30)
    time.sleep(0.5)  # the first is in its turn
    lone = ctx.Process(target=_visit, args=(tmp_path, True, 1.0, log))
    lone.start()
    second = ctx.Process(target=_visit, args=(tmp_path, False, 0.1, log, None, 1.0))  # after the lone one
    second.start()
    events = _events(log, 6)
    for p in (first, lone, second):
        p.join(timeout=30)
    assert [(what, ev) for what, ev, _ in events] == [
        ("shared", "in"), ("shared", "out"), ("alone", "in"), ("alone", "out"), ("shared", "in"),
        ("shared", "out")], events


@pytest.mark.cores(2)
def test_a_lone_test_has_every_core_the_suite_was_given_and_the_others_keep_their_share(request):
    par = request.config.stash.get(parallel.KEY, None)
    if par is None:
        pytest.skip("not a pytest-xdist worker: nothing is pinned")
    assert sorted(os.sched_getaffinity(0)) == par.all_cores
    if len(par.mine) < 2:  # this worker's own share is smaller than the machine's: a shared test keeps to it
        assert par.alone(request.node)


def test_a_shared_test_keeps_to_its_workers_share(request):
    par = request.config.stash.get(parallel.KEY, None)
    if par is None:
        pytest.skip("not a pytest-xdist worker: nothing is pinned")
    assert sorted(os.sched_getaffinity(0)) == par.mine


def test_the_turns_live_beside_the_workers_temporary_folders_which_pytest_prunes(request, tmp_path_factory):
    """Not in /tmp, where a folder per run piled up (35 on this machine after a few days); both workers of a run
    meet in one folder."""
    workers = [SimpleNamespace(option=SimpleNamespace(basetemp=f"/t/pytest-7/popen-gw{i}"),
                               workerinput={"testrunuid": "u"}) for i in (0, 1)]
    assert {parallel.turns_folder(w) for w in workers} == {Path("/t/pytest-7/nvbench-turns")}
    alone = SimpleNamespace(option=SimpleNamespace(basetemp=None), workerinput={"testrunuid": "u"})
    assert parallel.turns_folder(alone) == Path("/tmp/nvbench-pytest-u")
    if request.config.stash.get(parallel.KEY, None) is not None:  # this run's own turns
        assert (tmp_path_factory.getbasetemp().parent / "nvbench-turns" / "room").is_file()
