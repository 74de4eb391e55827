"""Slots end to end, with real cells: a CPU matrix run two jobs at once on disjoint cores (and resumed after kill
-9), a pretend multi-GPU node (ci/pretend_gpu) placing jobs by CUDA_VISIBLE_DEVICES with a world-size-2 job
holding two slots, an A/B whose pairs each keep one slot, and the calibration that decides what `auto` packs."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import ROOT, first_cell, kill_plan, nvbench, stop_and_check, wait_for

PRETEND = str(ROOT / "ci" / "pretend_gpu")
pytestmark = pytest.mark.cores(2)  # two slots, one core each


def usable_cores() -> int:
    """The cores this test may use (read when it runs: a pytest-xdist worker widens a lone test's share)."""
    return len(os.sched_getaffinity(0))


def rows_of(run_dir: Path) -> list[dict]:
    return pq.read_table(run_dir / "cells").to_pylist()  # pyarrow alone, no nvbench code


def span(row: dict) -> tuple:
    return row["started_at"], row["started_at"] + timedelta(seconds=row["duration_s"])


def overlap(a: dict, b: dict) -> bool:
    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def log_line(run_dir: Path, row: dict) -> list[str]:
    """The cell's own words on where it ran (one line per rank)."""
    return re.findall(r"^nvbench: rank \d+ on cores .*$", (run_dir / row["log_path"]).read_text(), re.MULTILINE)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> dict:
    """A cache of this test's own: no calibration of the machine leaks in, none of the test's leaks out."""
    env = {"NVBENCH_CACHE": str(tmp_path / "nvcache")}
    monkeypatch.setenv("NVBENCH_CACHE", env["NVBENCH_CACHE"])
    return env


def test_two_slots_run_a_cpu_matrix_side_by_side_on_disjoint_cores_and_resume_after_kill_9(tiny_matrix, tmp_path,
                                                                                           cache):
    if usable_cores() < 2:
        pytest.skip("two slots need two cores")
    # fp32 only: the tiny bf16 nchw cell's loss turns NaN in about one process of five, slots or not
    matrix = tiny_matrix('memory_format = ["nchw", "nhwc"]\ngrad_accum = [1, 2]')
    out = tmp_path / "run"
    cores = usable_cores()
    refused = nvbench("run", str(matrix), "--out", str(out), "--slots", str(cores + 1), env=cache)
    assert refused.returncode == 2 and not out.exists()
    assert refused.stderr.strip() == (f"error: --slots {cores + 1}: this machine holds at most {cores} slots "
                                      f"({cores} usable cores, at least one per slot)")

    runner = subprocess.Popen([sys.executable, "-m", "harness", "run", str(matrix), "--out", str(out),
                               "--no-progress", "--slots", "2"], cwd=ROOT, env={**os.environ, **cache},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while not (list((out / "cells").glob("*.parquet")) if (out / "cells").exists() else []):
        assert time.monotonic() < deadline and runner.poll() is None, "no row before the runner ended or 180 s"
        time.sleep(0.2)
    runner.send_signal(signal.SIGKILL)  # mid-run: the other slot's job in flight
    runner.wait()
    done_before = len(list((out / "cells").glob("*.parquet")))
    deadline = time.monotonic() + 10  # the in-flight cells die with their parent (PR_SET_PDEATHSIG)
    while subprocess.run(["pgrep", "-f", str(out / "work")], capture_output=True, check=False).stdout:
        assert time.monotonic() < deadline, "an in-flight cell outlived the killed runner"
        time.sleep(0.1)
    resumed = nvbench("run", "--resume", str(out), "--no-progress", "--slots", "2", env=cache)
    assert resumed.returncode == 0, resumed.stderr
    assert f"({4 - done_before} of 4 jobs to run)" in resumed.stderr
    assert "slots: 2 packed; synthetic packed uncalibrated" in resumed.stderr

    rows = rows_of(out)
    assert sorted((r["cell_id"], r["repeat"]) for r in rows) == sorted({(r["cell_id"], r["repeat"]) for r in rows})
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}
    assert {r["slot"] for r in rows} == {0, 1} and {r["num_slots"] for r in rows} == {1}
    assert {r["packing"] for r in rows} == {"uncalibrated"} and {r["gpu_index"] for r in rows} == {None}
    cores = {r["slot"]: set() for r in rows}
    for r in rows:
        cores[r["slot"]] |= {int(c) for c in r["cpu_affinity"].split(",") if c.isdigit()}
        # the pin reached the cell: it says it ran on its slot's cores
        assert log_line(out, r)[0].startswith(f"nvbench: rank 0 on cores {r['cpu_affinity']} (slot {r['slot']}, ")
    assert cores[0] and cores[1] and not cores[0] & cores[1]
    assert any(overlap(a, b) for a in rows for b in rows if a["slot"] != b["slot"])  # side by side, not in turn
    steps = pq.read_table(out / "steps").to_pylist()
    assert len({(s["cell_id"], s["repeat"], s["step"]) for s in steps}) == len(steps) == 4 * 4  # 1 + 3 steps each


@pytest.mark.slow
def test_a_stop_signal_with_a_job_on_each_slot_ends_both_and_the_run_resumes(tiny_matrix, tmp_path, cache, tagged):
    if usable_cores() < 2:
        pytest.skip("two slots need two cores")
    sig, _ = kill_plan("nvbench run --slots 2")
    out = tmp_path / "run"
    proc, tag = tagged([sys.executable, "-m", "harness", "run", str(tiny_matrix(repeats=3)), "--out", str(out),
                        "--no-progress", "--slots", "2"], env=cache)
    wait_for("a cell on each slot", lambda: len(first_cell(tag)) >= 2, timeout_s=120, proc=proc)
    code, err = stop_and_check(proc, tag, sig)  # no process of the run left within 10 s
    assert code == 130 and f"interrupted; finish with: nvbench run --resume {out}" in err, (sig, err)
    resumed = nvbench("run", "--resume", str(out), "--no-progress", "--slots", "2", env=cache)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(r["repeat"] for r in rows_of(out)) == [0, 1, 2]


def _pretend_env(cache: dict, gpus: int) -> dict:
    return {**cache, "PYTHONPATH": os.pathsep.join((PRETEND, str(ROOT))), "NVBENCH_PRETEND_GPUS": str(gpus)}


def _pretend_calibration_path(env: dict) -> Path:
    """Where packed runs on the pretend node look for its calibration (the env key is the pretend node's)."""
    code = ("from harness.results.env import collect_env, env_key; from harness.orchestrate.placement.packing import "
            "calibration_path; e = collect_env(); print(calibration_path(e, env_key(e)))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    return Path(out.stdout.strip())


@pytest.mark.slow
def test_on_a_pretend_two_gpu_node_auto_packs_what_the_calibration_cleared_one_gpu_per_job(tiny_matrix, tmp_path,
                                                                                          cache):
    if usable_cores() < 2:
        pytest.skip("two slots need two cores")
    from harness.orchestrate.placement.packing import write_calibration

    env = _pretend_env(cache, 2)
    write_calibration(_pretend_calibration_path(env), slots=2, created_at="2026-11-25", source="by hand",
                      backends={"synthetic": {"verdict": "unchanged", "change": "+0.2% [-0.9, +1.3]", "cleared": True},
                                "pytorch": {"verdict": "regression", "change": "-7.0% [-9.0, -5.0]",
                                            "cleared": False}})
    matrix = tiny_matrix('backend = ["synthetic", "pytorch"]\nworld_size = [1, 2]\nprecision = ["fp32", "bf16"]',
                         device="cuda",
                         extra='[[exclude]]\nbackend = "pytorch"\nworld_size = 2\n[[exclude]]\nbackend = "pytorch"\n'
                               'precision = "bf16"\n[[exclude]]\nworld_size = 2\nprecision = "bf16"\n')
    out = tmp_path / "run"
    proc = nvbench("run", str(matrix), "--out", str(out), "--no-progress", env=env)  # --slots auto, the default
    assert proc.returncode == 1, proc.stderr  # this torch cannot really train on CUDA: every cell fails
    assert "slots: 2; packed: synthetic (calibration " in proc.stderr
    assert "slots: pytorch runs solo: packing moved it, or could not be shown not to (regression -7.0%" in proc.stderr
    rows = {(r["backend"], r["world_size"], r["precision"]): r for r in rows_of(out)}
    assert len(rows) == 4 and {r["status"] for r in rows.values()} == {"failed"}
    uuids = {0: "GPU-00000000-pretend", 1: "GPU-00000001-pretend"}
    for key in (("synthetic", 1, "fp32"), ("synthetic", 1, "bf16")):
        r = rows[key]
        assert (r["num_slots"], r["packing"], r["gpu_index"]) == (1, "calibrated", r["slot"])
        assert r["cuda_visible_devices"] == uuids[r["slot"]]
        assert log_line(out, r)[0].endswith(f"CUDA_VISIBLE_DEVICES={uuids[r['slot']]}")
    assert {rows[k]["slot"] for k in (("synthetic", 1, "fp32"), ("synthetic", 1, "bf16"))} == {0, 1}
    wide = rows[("synthetic", 2, "fp32")]
    assert (wide["slot"], wide["num_slots"], wide["packing"]) == (0, 2, "calibrated")
    assert wide["cuda_visible_devices"] == f"{uuids[0]},{uuids[1]}"
    # every rank of the group that got as far as its first line sees both GPUs, on a line of its own (each is one
    # write: harness/cell/worker.py). This torch cannot train on CUDA: each rank says where it is, then fails,
    # and torchrun tears the group down when the first one fails, so the other rank, 0 or 1, may never get to
    # its line. The first to fail always wrote its own.
    ranks = log_line(out, wide)
    said = sorted(int(line.split()[2]) for line in ranks)
    assert said in ([0], [1], [0, 1]), ranks
    assert all(line.endswith(f"={uuids[0]},{uuids[1]}") for line in ranks), ranks
    solo = rows[("pytorch", 1, "fp32")]
    assert (solo["packing"], solo["num_slots"], solo["cuda_visible_devices"]) == ("solo", 2, None)
    for held_all in (wide, solo):  # a job holding every slot ran with nothing beside it
        assert not any(overlap(held_all, r) for r in rows.values() if r is not held_all)


@pytest.mark.slow
def test_an_ab_runs_each_pair_on_one_slot_and_pairs_side_by_side(tiny_matrix, tmp_path, cache):
    if usable_cores() < 2:
        pytest.skip("two slots need two cores")
    out = tmp_path / "ab"
    proc = nvbench("ab", str(tiny_matrix(repeats=2)), "--slots", "2", "--out", str(out), "--work-repeats", "0",
                   env=cache)
    assert proc.returncode == 0, proc.stderr
    a, b = ({r["repeat"]: r for r in rows_of(out / side)} for side in ("a", "b"))
    assert set(a) == set(b) == {0, 1}
    for repeat in (0, 1):  # the two sides of a pair met the same cores
        assert (a[repeat]["slot"], a[repeat]["cpu_affinity"]) == (b[repeat]["slot"], b[repeat]["cpu_affinity"])
        assert not overlap(a[repeat], b[repeat])  # one after the other
    assert a[0]["slot"] != a[1]["slot"]
    assert any(overlap(x, y) for x in (a[0], b[0]) for y in (a[1], b[1]))  # the pairs ran side by side


@pytest.mark.slow
@pytest.mark.documented("nvbench calibrate-slots matrices/resnet50.toml", bound_s=600)
def test_calibrate_slots_keeps_every_other_slot_busy_and_writes_its_verdict_per_backend(tiny_matrix, tmp_path,
                                                                                      cache, documented_run):
    if usable_cores() < 2:
        pytest.skip("two slots need two cores")
    out = tmp_path / "cal"
    proc = documented_run(["calibrate-slots", str(tiny_matrix(repeats=2)), "--slots", "2", "--out", str(out)],
                          env=cache)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((out / "calibration.json").read_text())
    # 2 + 2 pairs cannot show anything: inconclusive, so packing is not cleared, in the report's words
    bad = [(side, r["repeat"], r["status"], r["reason"]) for side in ("solo", "packed") for r in rows_of(out / side)
           if r["status"] != "ok"]
    assert record["backends"]["synthetic"]["verdict"] == "inconclusive", (bad, proc.stderr[-2000:])
    assert record["backends"]["synthetic"]["cleared"] is False
    assert "synthetic: inconclusive " in proc.stderr and "(runs solo under --slots auto)" in proc.stderr
    (machine_file,) = (Path(cache["NVBENCH_CACHE"]) / "slots").glob("*.json")
    assert json.loads(machine_file.read_text())["backends"] == record["backends"]
    assert f"calibration: {machine_file}" in proc.stderr
    solo, packed = rows_of(out / "solo"), rows_of(out / "packed")
    assert {r["packing"] for r in solo} == {"solo"} and {r["packing"] for r in packed} == {"uncalibrated"}
    assert {r["slot"] for r in solo} == {r["slot"] for r in packed} == {0, 1}  # the slot turns from pair to pair
    assert len(record["samples"]) == 2
    for sample in record["samples"]:  # the other slot was busy from before the measured job to its end
        others = [n for n in sample["neighbours"] if n["slot"] != sample["slot"]]
        assert others and min(n["started"] for n in others) <= sample["started"]
        assert max(n["ended"] for n in others) >= sample["ended"] - 1.0
        assert all(b["started"] <= a["ended"] + 1.0 for a, b in itertools.pairwise(others))  # no gap between them
    assert (out / "report" / "report.html").is_file()
