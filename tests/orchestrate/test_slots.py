"""Slots without a cell: how a machine is cut (pure), the pool's order, what auto and a number choose with and
without a calibration, and the local executor following several real processes at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.orchestrate.placement import packing
from harness.orchestrate.placement.executors import Launch
from harness.orchestrate.placement.local import LocalExecutor
from harness.orchestrate.placement.slots import Gpu, Machine, SlotError, SlotPool, parse_slots, plan_slots
from harness.matrix.cells import expand
from harness.matrix.job import cpu_list, parse_cpu_list
from harness.matrix.parse import load_matrix

# A DGX-like node: 2 sockets of 22 cores with hyperthreads (cpu n and n + 88 are siblings), 4 GPUs per socket.
SOCKETS = [tuple(range(22)) + tuple(range(88, 110)), tuple(range(22, 44)) + tuple(range(110, 132))]
DGX = Machine(cpus=tuple(sorted(SOCKETS[0] + SOCKETS[1])),
              siblings=tuple((c, c + 88) for c in range(44)),
              gpus=tuple(Gpu(index=i, uuid=f"GPU-{i}", pci_bus_id=f"0000:{i:02x}:00.0", cpus=SOCKETS[i // 4])
                         for i in range(8)))


def test_cpu_lists_read_as_linux_writes_them():
    assert cpu_list(list(range(22)) + list(range(88, 110))) == "0-21,88-109"
    assert cpu_list([5, 3, 4, 9]) == "3-5,9" and cpu_list([]) == ""
    assert parse_cpu_list("0-3,8") == (0, 1, 2, 3, 8)
    with pytest.raises(ValueError, match="not a cpu list"):
        parse_cpu_list("0-x")


def test_gpu_slots_take_disjoint_whole_cores_near_their_gpu():
    slots = plan_slots(DGX, 8)
    assert [s.gpu.uuid for s in slots] == [f"GPU-{i}" for i in range(8)]
    seen: set[int] = set()
    for slot in slots:
        assert set(slot.cpus) <= set(SOCKETS[slot.gpu.index // 4])  # near its GPU
        assert not seen & set(slot.cpus)  # disjoint
        seen |= set(slot.cpus)
        assert all((c + 88 in slot.cpus) for c in slot.cpus if c < 88)  # hyperthread siblings stay together
    assert cpu_list(slots[0].cpus) == "0-5,88-93" and len(slots[3].cpus) == 10  # 22 cores over 4 GPUs: 6,6,5,5
    two = plan_slots(DGX, 2)  # GPUs 0 and 1 share socket 0 between them
    assert cpu_list(two[0].cpus) == "0-10,88-98" and cpu_list(two[1].cpus) == "11-21,99-109"


def test_without_nvml_affinity_the_usable_cores_are_split_evenly():
    machine = Machine(cpus=tuple(range(8)), gpus=(Gpu(index=3, uuid="GPU-a"), Gpu(index=1, uuid="GPU-b")))
    slots = plan_slots(machine, 2)
    assert [s.cpus for s in slots] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [s.gpu.index for s in slots] == [3, 1]  # CUDA order kept, NVML's index recorded
    cpu_only = plan_slots(Machine(cpus=(0, 1)), 2)
    assert [s.cpus for s in cpu_only] == [(0,), (1,)] and all(s.gpu is None for s in cpu_only)


def test_one_slot_is_the_whole_machine_and_too_many_are_refused_in_one_line():
    (whole,) = plan_slots(DGX, 1)
    assert whole.cpus == DGX.cpus and whole.gpu is None
    with pytest.raises(SlotError, match=r"^--slots 9: this machine holds at most 8 slots \(8 visible GPUs"):
        plan_slots(DGX, 9)
    with pytest.raises(SlotError, match=r"^--slots 3: this machine holds at most 2 slots \(2 usable cores"):
        plan_slots(Machine(cpus=(0, 1)), 3)
    assert parse_slots("auto") == "auto" and parse_slots("4") == 4
    with pytest.raises(ValueError, match="number of slots >= 1, or auto"):
        parse_slots("0")


def test_too_many_slots_name_where_they_were_asked(tiny_matrix):
    """More slots than this process's cores, from the matrix file or from `--slots`: one line that names the
    file and key, or the flag, exit 2, nothing written (a fuzzed `run.slots = 2` on a worker pinned to one core
    was named `--slots 2`)."""
    one = min(os.sched_getaffinity(0))
    path = tiny_matrix()
    path.write_text(path.read_text().replace("[run]\n", "[run]\nslots = 2\n"))
    reports = path.parent / "reports"

    def dry_run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--dry-run", "--reports",
                               str(reports), *extra], capture_output=True, text=True, timeout=120, check=False,
                              preexec_fn=lambda: os.sched_setaffinity(0, {one}))

    for proc, named in ((dry_run(), f"{path}: run.slots = 2"), (dry_run("--slots", "3"), "--slots 3")):
        assert proc.returncode == 2 and not reports.exists(), proc.stderr
        assert proc.stderr.splitlines() == [f"error: {named}: this machine holds at most 1 slots (1 usable cores, "
                                            "at least one per slot)"], proc.stderr


def test_the_pool_grants_in_order_and_a_wide_job_waits_for_its_slots():
    pool = SlotPool(plan_slots(DGX, 4), DGX.cpus)
    a, b = pool.claim(1), pool.claim(2)
    assert [s.index for s in a.slots] == [0] and [s.index for s in b.slots] == [1, 2]
    assert b.cuda_visible_devices == "GPU-1,GPU-2" and b.columns()["num_slots"] == 2
    assert pool.claim(2) is None  # one free: the two-slot job waits
    pool.release(a)
    wide = pool.claim(2)
    assert [s.index for s in wide.slots] == [0, 3]
    pool.release(b)
    pool.release(wide)
    whole = pool.claim(None)  # solo: every slot, nothing pinned
    assert whole.whole_machine and whole.pinned_cpus is None and whole.cuda_visible_devices is None
    assert whole.cpus == DGX.cpus and pool.claim(1) is None
    assert whole.columns() == {"slot": 0, "num_slots": 4, "gpu_index": None, "cpu_affinity": "0-43,88-131"}


def _cells(tiny_matrix, axes: str):
    return {c.backend + str(c.world_size): c for c in expand(load_matrix(tiny_matrix(axes)))}


def _calibration(tmp_path: Path, backends: dict, slots: int = 8) -> packing.Calibration:
    path = tmp_path / "cal.json"
    packing.write_calibration(path, slots=slots, created_at="then", backends=backends, source="x")
    return packing.read_calibration(path)


def test_auto_packs_only_what_the_calibration_cleared(tiny_matrix, tmp_path):
    cells = _cells(tiny_matrix, 'backend = ["synthetic", "pytorch"]\nworld_size = [1, 2]')
    how = "measure it with `nvbench calibrate-slots MATRIX`"
    chosen, lines = packing.decide("auto", DGX, calibration=None, backends=["synthetic"], how_to_calibrate=how)
    assert len(chosen.slots) == 1 and chosen.needs(cells["synthetic1"]) is None
    assert lines == [(f"slots: one job at a time: no slot calibration of this machine, so packing its 8 GPUs is not "
                      f"yet shown to leave the numbers alone ({how}; or --slots N to pack anyway)")]
    cal = _calibration(tmp_path, {
        "synthetic": {"verdict": "unchanged", "change": "+0.1% [-0.4, +0.6]", "cleared": True},
        "pytorch": {"verdict": "regression", "change": "-6.0% [-7.1, -4.9]", "cleared": False}})
    chosen, lines = packing.decide("auto", DGX, calibration=cal, backends=["synthetic", "pytorch"],
                                   how_to_calibrate=how)
    assert len(chosen.slots) == 8
    assert chosen.needs(cells["synthetic1"]) == 1 and chosen.needs(cells["synthetic2"]) == 2
    assert chosen.needs(cells["pytorch1"]) is None  # packing moved it: solo, and said so
    assert any(l.startswith("slots: pytorch runs solo: packing moved it") and "regression -6.0% [-7.1, -4.9]" in l
               for l in lines)
    grant = chosen.pool().claim(1)
    assert chosen.label(cells["synthetic1"], grant) == "calibrated"
    fewer = _calibration(tmp_path, cal.backends, slots=4)  # calibrated at 4 slots: 8 are not covered
    chosen, lines = packing.decide("auto", DGX, calibration=fewer, backends=["synthetic"], how_to_calibrate=how)
    assert chosen.needs(cells["synthetic1"]) is None and "measured 4 slots, not 8" in lines[-1]


def test_a_number_packs_every_backend_and_the_rows_say_which_were_uncalibrated(tiny_matrix, tmp_path):
    cells = _cells(tiny_matrix, 'backend = ["synthetic", "pytorch"]')
    cal = _calibration(tmp_path, {"synthetic": {"verdict": "unchanged", "cleared": True}})
    chosen, lines = packing.decide(4, DGX, calibration=cal, backends=["synthetic", "pytorch"], how_to_calibrate="x")
    grant = chosen.pool().claim(chosen.needs(cells["pytorch1"]))
    assert chosen.needs(cells["pytorch1"]) == 1 and chosen.label(cells["pytorch1"], grant) == "uncalibrated"
    assert chosen.label(cells["synthetic1"], grant) == "calibrated"
    assert lines[0].startswith("slots: 4 packed; pytorch packed uncalibrated")
    cpu_auto, lines = packing.decide("auto", Machine(cpus=(0, 1)), calibration=cal, backends=["synthetic"],
                                     how_to_calibrate="x")
    assert len(cpu_auto.slots) == 1 and lines == []  # without GPUs auto is one job at a time


def test_a_calibration_file_that_does_not_read_back_is_one_line(tmp_path):
    bad = tmp_path / "cal.json"
    bad.write_text(json.dumps({"version": 1, "slots": 2}))
    with pytest.raises(packing.CalibrationError, match=r"cal.json: not a slot calibration .*calibrate again"):
        packing.read_calibration(bad)
    assert packing.read_calibration(tmp_path / "none.json") is None


def _sleeper(tmp_path: Path, key: str, seconds: float, timeout_s: float = 60) -> Launch:
    return Launch(key=key, argv=(sys.executable, "-c", f"import time; time.sleep({seconds})"), env=None,
                  log_path=tmp_path / f"{key}.log", work=tmp_path, timeout_s=timeout_s, cpus=(0,))


def test_the_local_executor_follows_several_processes_each_to_its_own_end_or_timeout(tmp_path):
    executor = LocalExecutor()
    t0 = time.monotonic()
    # spaced by seconds, so a Python that takes a second to start on a loaded machine cannot reorder them
    for key, seconds, timeout in (("slow", 8.0, 60), ("fast", 0.2, 60), ("hung", 60.0, 4.0)):
        executor.submit(_sleeper(tmp_path, key, seconds, timeout))
    order = []
    while len(order) < 3:
        for handle, ended in executor.wait(["slow", "fast", "hung"]).items():
            order.append((handle, ended.outcome.timed_out, round(time.monotonic() - t0)))
    assert [h for h, _, _ in order] == ["fast", "hung", "slow"]  # each as it ends, not in submission order
    assert [t for _, t, _ in order] == [False, True, False]
    assert order[-1][2] < 12.2  # in parallel: ~8 s, where 0.2 + 4 + 8 in a row is at least 12.2
    # a job is followed by its key: a second in flight under the same one is refused, not mixed up with the first
    executor.submit(_sleeper(tmp_path, "twice", 2.0))
    with pytest.raises(ValueError, match="job twice is already in flight here"):
        executor.submit(_sleeper(tmp_path, "twice", 0.1))
    assert list(executor.wait(["twice"])) == ["twice"]
    executor.submit(_sleeper(tmp_path, "twice", 0.1))  # once it has ended, the key is free again
    assert list(executor.wait(["twice"])) == ["twice"]
