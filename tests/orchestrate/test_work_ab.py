"""Counted processes end to end: `nvbench ab` of a tiny cell against a checkout whose optimizer phase calls .item()
on the loss once a step. Each side's work.parquet, read with pyarrow alone, differs by exactly that: one host sync
a step (aten::_local_scalar_dense) in optimizer, every other count equal; the counted processes are no timed
repeat (their rows under SIDE/counted/, flagged, and ab.json records them apart)."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from conftest import ROOT, nvbench

STEPS = 3


def _syncing_checkout(tmp_path):
    """harness/ with one .item() of the step's loss in the optimizer phase (a reference kept, no other op)."""
    other = tmp_path / "syncing"
    shutil.copytree(ROOT / "harness", other / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    engine = other / "harness" / "cell" / "engine.py"
    text = engine.read_text()
    keep = "        loss = self.micro_step(images, labels, sync_grads=sync_grads)\n"
    read = "            self.optimizer.zero_grad(set_to_none=True)\n"
    assert text.count(keep) == 1 and text.count(read) == 1
    text = text.replace(keep, keep + "        self._injected_loss = loss\n")
    text = text.replace(read, read + "            self._injected_loss.item()  # injected: a host sync a step\n")
    engine.write_text(text)
    return other


def _counts(path) -> dict[tuple, tuple[int, float]]:
    rows = pq.read_table(path).to_pylist()
    assert {r["process"] for r in rows} == {0} and {r["steps"] for r in rows} == {STEPS}
    return {(r["phase"], r["counter"], r["key"]): (r["count"], r["per_step"]) for r in rows}


def test_an_item_in_b_s_optimizer_is_one_more_host_sync_a_step_and_nothing_else(tiny_matrix, tmp_path,
                                                                               quiet_machine):
    matrix, out = tiny_matrix('backend = ["synthetic"]', repeats=1), tmp_path / "ab"  # one timed pair
    # the report is what is read: beside another job the A/B stopped busy before writing it, so its windows read a
    # constructed quiet machine (the counts, the subject, are exact either way: test_busy_ab's neighbour shows it)
    proc = nvbench("ab", str(matrix), "--b-checkout", str(_syncing_checkout(tmp_path)), "--out", str(out),
                   "--kernel-repeats", "0", "--work-steps", str(STEPS), timeout=900, env=quiet_machine)
    assert proc.returncode in (0, 1, 3), proc.stdout + proc.stderr
    a, b = _counts(out / "a" / "work.parquet"), _counts(out / "b" / "work.parquet")
    sync = ("optimizer", "host_syncs", "aten::_local_scalar_dense")
    assert b[sync] == (STEPS, 1.0) and sync not in a
    assert {k: v for k, v in b.items() if k != sync} == a
    assert a[("forward", "op_calls", "aten::conv2d")][1] == 20  # resnet18's convolutions, once each a step
    for side in "ab":  # the timed repeat (and any re-run of it) a side, one counted process apart from them
        timed = pq.read_table(out / side / "cells").to_pylist()
        assert {r["repeat"] for r in timed} == {0} and all(r["profile_tool"] is None for r in timed)
        counted = pq.read_table(out / side / "counted" / "cells").to_pylist()
        assert [(r["repeat"], r["status"], r["profile_tool"]) for r in counted] == [(0, "ok", "torch")]
    # the verdict line says it, and nothing else changed: the work diff read from both sides' tables
    shown = " ".join(proc.stdout.split())  # the console wraps the verdict line to the terminal
    assert "work changed: optimizer +1 host sync per step (aten::_local_scalar_dense)" in shown, proc.stdout
    (verdict,) = pq.read_table(out / "report" / "verdicts.parquet").to_pylist()
    assert verdict["work_changed"] is True and verdict["work_gate"] is None
    assert verdict["work"] == "work changed: optimizer +1 host sync per step (aten::_local_scalar_dense)"
    record = json.loads((out / "ab.json").read_text())["work_repeats"]
    assert record["repeats"] == 1 and record["steps"] == STEPS and sorted(o[0] for o in record["order"]) == ["a", "b"]


def test_beside_a_neighbour_that_stays_the_timing_is_undecided_and_the_work_diff_still_names_the_sync(tiny_matrix,
                                                                                                     tmp_path):
    """Issues 56 and 58 together: a busy loop on the cells' own cores for the whole A/B. The timed pair is spoiled
    and the wait budget spent, so the A/B ends undecided (exit 3, its busy line); its counted processes, never
    timed, still run and the work diff says exactly what B does more."""
    import subprocess
    import sys

    matrix, out = tiny_matrix('backend = ["synthetic"]', repeats=1), tmp_path / "ab"
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # on this test's cores, as the cells
    try:
        proc = nvbench("ab", str(matrix), "--b-checkout", str(_syncing_checkout(tmp_path)), "--out", str(out),
                       "--kernel-repeats", "0", "--work-steps", str(STEPS), "--busy-wait-s", "4", timeout=900)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("the machine was busy: ") and lines[0].endswith("; undecided"), proc.stdout
    (work,) = [line for line in lines if "work" in line]
    assert work.endswith(": work changed: optimizer +1 host sync per step (aten::_local_scalar_dense)"), work
    assert not (out / "report").exists()  # no timed verdict of any kind
    sync = ("optimizer", "host_syncs", "aten::_local_scalar_dense")
    a, b = _counts(out / "a" / "work.parquet"), _counts(out / "b" / "work.parquet")
    assert b[sync] == (STEPS, 1.0) and {k: v for k, v in b.items() if k != sync} == a


def test_a_run_counts_after_its_timed_jobs_and_a_resume_runs_no_counted_process_again(tiny_matrix, tmp_path):
    out = tmp_path / "run"
    proc = nvbench("run", str(tiny_matrix()), "--out", str(out), "--work-repeats", "1", "--no-progress")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counted = out / "counted" / "cells"
    (row,) = pq.read_table(counted).to_pylist()
    assert row["profile_tool"] == "torch" and row["num_measure_steps"] == STEPS
    first = (out / "work.parquet").stat().st_mtime_ns
    assert {r["process"] for r in pq.read_table(out / "work.parquet").to_pylist()} == {0}
    again = nvbench("run", "--resume", str(out), "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "counted p0" not in again.stderr and len(list(counted.glob("*.parquet"))) == 1
    assert (out / "work.parquet").stat().st_mtime_ns == first  # no part was new: nothing gathered again


@pytest.mark.slow
def test_a_nightly_gated_on_host_syncs_fails_on_an_item_from_one_counted_process_and_passes_an_a_a(tiny_matrix,
                                                                                                   tmp_path):
    """ci/nightly.sh for real, three nights of one tiny cell (3 timed repeats, one counted process): night 1 this
    checkout, promoted; night 2 the checkout with the .item() (its own ci/nightly.sh: every nvbench command and cell
    of the night runs its harness) fails on the matrix's gate whatever its timing says; night 3 this checkout again
    passes the gate. The matrix's floor of 95 % keeps timing from failing a night: only the gate can."""
    from test_nightly import night

    # floor 95 %: no timing this machine can produce is a regression, so each night's exit is the gate's alone (an
    # A/A night 3 read -5.7 % [-11.0, -0.2] at the tiny cell's own floor in CI once, and failed on its timing)
    matrix = tiny_matrix(extra='\n[judge]\nfloor_pct = 95\n\n[judge.work_gates]\nhost_syncs = "no-rise"\n')
    reports, knobs = tmp_path / "reports", {"NVBENCH_WORK_REPEATS": "1", "NVBENCH_CONFIRM": "sequential"}
    first = night(matrix, reports, "night1", **knobs)
    assert first.returncode == 0, first.stderr
    assert (reports / "night1" / "work.parquet").is_file()
    (reports / "baselines").mkdir()
    (reports / "baselines" / "current").write_text("../night1\n")

    syncing = _syncing_checkout(tmp_path)
    shutil.copytree(ROOT / "ci", syncing / "ci")  # its own nightly.sh, run from its own folder
    broken = night(matrix, reports, "night2", root=syncing, **knobs)
    gate = 'work gate host_syncs = "no-rise" broken: optimizer +1 host sync per step (aten::_local_scalar_dense)'
    assert broken.returncode == 1 and gate in broken.stderr, broken.stderr
    (verdict,) = pq.read_table(reports / "night2" / "report" / "verdicts.parquet").to_pylist()
    assert verdict["work_gate"] == gate

    same = night(matrix, reports, "night3", **knobs)
    # 0 (unchanged) or 3 (inconclusive: 3 + 3 repeats with the sides' probes apart, seen in a fresh clone): never 1
    assert same.returncode in (0, 3) and "WORK GATE" not in same.stderr, same.stderr
    (verdict,) = pq.read_table(reports / "night3" / "report" / "verdicts.parquet").to_pylist()
    assert verdict["work"] == "work: same" and verdict["work_gate"] is None
