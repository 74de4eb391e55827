"""A run's cost before it is paid: the estimate's arithmetic (pure), and a second run of a tiny matrix whose
estimate, from the first run's rows, comes within 25 % of what it took."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import ROOT, nvbench

from harness.models.registry import MODELS
from harness.orchestrate.cost import pricing as cost
from harness.orchestrate.session.capabilities import Capabilities
from harness.results import store
from harness.results.env import env_key
from harness.results.schema import cell_table
from harness.matrix.cells import expand
from harness.matrix.parse import load_matrix

from harness.orchestrate.cost.estimate import (
    CPU_SMOKE_FP16_EXTRA_S,
    CPU_SMOKE_JOB_S,
    DEFAULT_BETWEEN_JOBS_S,
    DEFAULT_JOB_S,
    DEFAULT_WARMUP_S,
    Past,
    PlannedJob,
    duration_text,
    estimate,
    in_sequence,
)


def job(cid: str, backend: str = "synthetic", compile: str = "eager", runs: bool = True) -> PlannedJob:
    return PlannedJob(cell_id=cid, backend=backend, compile=compile, runs=runs)


def test_without_a_past_every_job_takes_its_backends_stated_default():
    jobs = [job("a"), job("b", backend="pytorch"), job("c", runs=False)]
    got = estimate(jobs, Past())
    between = DEFAULT_BETWEEN_JOBS_S
    assert got.wall_s == pytest.approx(DEFAULT_JOB_S["synthetic"] + DEFAULT_JOB_S["pytorch"] + 3 * between)
    assert (got.jobs, got.from_past, got.warmups) == (2, 0, 0)
    assert "every job from the defaults per backend and compile mode" in got.text()
    assert got.text().startswith(f"estimated {duration_text(got.wall_s)} on this machine with 1 slot: 2 job(s)")


def test_a_cpu_smoke_takes_the_cpu_smokes_defaults_and_the_words_name_which_defaults_were_used():
    """README's main job is a CPU --smoke: an H100's full-window seconds put it at 16m12s, where it takes 4m10s."""
    cpu = {"device": "cpu", "smoke": True}
    jobs = [PlannedJob(cell_id="a", backend="pytorch", compile="eager", precision="fp32", **cpu),
            PlannedJob(cell_id="b", backend="synthetic", compile="eager", precision="fp16", **cpu)]
    got = estimate(jobs, Past(between_jobs_s=0.0))
    assert got.wall_s == pytest.approx(CPU_SMOKE_JOB_S["pytorch"] + CPU_SMOKE_JOB_S["synthetic"] + CPU_SMOKE_FP16_EXTRA_S)
    assert "defaults per backend and compile mode (a 2-core CPU's, --smoke; no past rows" in got.text()
    h100 = estimate([job("a")], Past(between_jobs_s=0.0))
    assert h100.wall_s == pytest.approx(DEFAULT_JOB_S["synthetic"]) and "(an H100's, full windows; no past" in h100.text()
    for elsewhere in ({"device": "cpu", "smoke": False}, {"device": "cuda", "smoke": True}):  # no defaults fit
        far = estimate([PlannedJob(cell_id="a", backend="synthetic", compile="eager", **elsewhere)], Past())
        assert "(a guess: an H100's full-window seconds, far off for these cells, and no rows here to scale; no past " \
            "rows" in far.text()
    mixed = in_sequence([got, estimate([job("c")], Past(job_s={"c": [1.0]}, runs=("r1",)))])
    assert mixed.defaults == ("a 2-core CPU's, --smoke",)
    assert mixed.to_plain()["defaults"] == ["a 2-core CPU's, --smoke"]


def test_readmes_main_job_is_estimated_from_the_cpu_smokes_defaults_on_a_cpu(tmp_path):
    dry = nvbench("run", "matrices/resnet50.toml", "--smoke", "--dry-run", "--reports", str(tmp_path),
                  env={"NVBENCH_CACHE": str(tmp_path / "cache"), "CUDA_VISIBLE_DEVICES": ""})
    assert dry.returncode == 0, dry.stderr
    line = " ".join(dry.stdout.split("estimated ", 1)[1].split())
    assert " job(s); every job from the defaults per backend and compile mode (a 2-core CPU's, --smoke;" in line


def test_past_rows_win_over_defaults_and_say_which_runs_they_came_from():
    past = Past(job_s={"a": [10.0, 30.0, 12.0]}, between_jobs_s=1.0, runs=("run-2", "run-1"))
    got = estimate([job("a"), job("a"), job("b")], past)
    assert got.wall_s == pytest.approx(12.0 + 1 + 12.0 + 1 + DEFAULT_JOB_S["synthetic"] + 1)  # the median, 12
    assert got.from_past == 2
    assert "2 from past rows (2 runs: run-2, run-1), 1 from the defaults" in got.text()


def test_an_inductor_cell_adds_one_compile_warm_up_before_its_repeats():
    jobs = [job("i", compile="inductor"), job("i", compile="inductor"), job("e")]
    assert estimate(jobs, Past(job_s={"i": [20.0], "e": [5.0]}, between_jobs_s=0.0)).wall_s == \
        pytest.approx(DEFAULT_WARMUP_S + 45.0)
    past = Past(job_s={"i": [20.0], "e": [5.0]}, warmup_s={"i": [60.0]}, between_jobs_s=0.0)
    got = estimate(jobs, past)
    assert got.wall_s == pytest.approx(60.0 + 45.0) and got.warmups == 1


def test_slots_run_jobs_side_by_side_in_plan_order():
    past = Past(job_s={"a": [10.0], "b": [4.0]}, between_jobs_s=0.0)
    jobs = [job("a"), job("b"), job("b"), job("b")]
    assert estimate(jobs, past, slots=1).wall_s == pytest.approx(22.0)
    # two slots: a on one; b, b, b on the other (each starts on the slot that frees first): 12 s
    assert estimate(jobs, past, slots=2).wall_s == pytest.approx(12.0)
    assert estimate(jobs, past, slots=8).wall_s == pytest.approx(10.0)
    with pytest.raises(ValueError, match="slots 0"):
        estimate(jobs, past, slots=0)


def test_estimates_in_sequence_add_up():
    one = estimate([job("a")], Past(job_s={"a": [10.0]}, between_jobs_s=0.0, runs=("r1",)))
    two = in_sequence([one, one])
    assert two.wall_s == pytest.approx(20.0) and two.jobs == 2 and two.runs == ("r1",)
    assert duration_text(12.4) == "12 s" and duration_text(185) == "3m05s" and duration_text(7620) == "2h07m"


def past_run(folder: Path, rows: list[dict], *, finished: bool = True) -> Path:
    """A run folder as the runner leaves it, of this environment (env {}): rows and a manifest whose last session
    finished, or not (an interrupted run)."""
    for k, row in enumerate(rows):
        store.write_table(folder / "cells" / f"{row['cell_id']}-r{k}.parquet", cell_table([row]))
    session = {"started_at": "2026-01-01T00:00:00+00:00"} | ({"finished_at": "2026-01-01T00:01:00+00:00"}
                                                             if finished else {})
    store.write_json(folder / "manifest.json", {"run_id": folder.name, "created_at": "2026-01-01T00:00:00+00:00",
                                                "environment": {}, "sessions": [session]})
    return folder


def resnet18_smoke_row(cid: str, **changes) -> dict:
    """A CPU --smoke job of resnet18 (24 px, batch 4, 1 + 3 steps): 1 s in its steps of 3 s."""
    return {"cell_id": cid, "repeat": 0, "status": "ok", "model": "resnet18", "image_size": 24, "images_per_step": 4,
            "warmup_steps_used": 1, "num_measure_steps": 3, "backend": "synthetic", "compile": "eager",
            "device": "cpu", "is_smoke": True, "window_s": 0.8, "warmup_window_s": 0.2, "duration_s": 3.0} | changes


def test_cells_without_rows_are_scaled_by_model_cost_from_other_cells_and_no_doubtful_row_is_learned_from(tmp_path):
    """README's main job (resnet50, --smoke) on a machine that ran only resnet18 (another matrix): the job
    keeps resnet18's time outside its steps and scales its steps' time by resnet50's FLOPs (2.25x at one image
    size); an interrupted run, an A/B's side, a drill, a fault and a shared GPU teach nothing."""
    cells = expand(load_matrix(str(ROOT / "matrices" / "resnet50.toml")), smoke=True,
                   only=["backend=synthetic", "precision=fp32", "world_size=1", "grad_accum=1", "memory_format=nchw"])
    (cell,) = cells
    past_run(tmp_path / "other", [resnet18_smoke_row("r18a"), resnet18_smoke_row("r18b")])
    doubtful = [resnet18_smoke_row("x", duration_s=60.0, window_s=50.0)]
    past_run(tmp_path / "stopped", doubtful, finished=False)
    past_run(tmp_path / "ab-1" / "b", doubtful)
    (tmp_path / "ab-1" / "ab.json").write_text("{}")
    interfered = ({"fire_drill_pct": 50.0}, {"injected_fault": "slow"}, {"gpu_shared": True})
    past_run(tmp_path / "noisy", [resnet18_smoke_row("y", duration_s=60.0, window_s=50.0, **bad) for bad in interfered])
    caps = Capabilities(device="cpu", gpu_count=0, cpu_count=2, device_name="cpu")
    got = cost.estimate_jobs({cell.cell_id: cell}, [(cell.cell_id, 0)], caps, roots=[tmp_path], key=env_key({}))
    ratio = MODELS["resnet50"].forward_flops / MODELS["resnet18"].forward_flops  # same image size and images
    assert got.from_scaled == 1 and got.scaled_runs == ("other",)
    assert got.wall_s == pytest.approx(2.0 + 1.0 * ratio + DEFAULT_BETWEEN_JOBS_S)
    assert "1 job(s); every job scaled by model cost from this machine's rows of other cells (run other)" in got.text()
    # an A/B's own estimate learns from past A/Bs, named by their folder
    assert cost.read_past([tmp_path], ["x"], env_key({}), ab_sides=True).runs == ("ab-1/b",)
    assert cost.read_past([tmp_path], ["x", "y"], env_key({})).runs == ()
    user = dataclasses.replace(cell, benchmark=dataclasses.replace(cell.benchmark, model="mynets:build"))
    unknown = cost.estimate_jobs({"u": user}, [("u", 0)], caps, roots=[tmp_path], key=env_key({}))
    assert unknown.from_scaled == 0 and "a 2-core CPU's, --smoke" in unknown.text()  # its cost is not known


@pytest.mark.slow
def test_a_second_run_is_estimated_from_the_first(tiny_matrix, tmp_path):
    """The first run has no past: its estimate says it used the defaults. The second run (same matrix, same
    reports folder) is estimated from the first's rows and says so; its summary prints what it took beside the
    estimate, and --dry-run prints the estimate from past rows before anything runs. How close the estimate
    lands is a measurement, not a test (it once read 47.7 s for a run of 17.0 s on a loaded machine):
    benchmarks/estimate_scaling.py, docs/performance.md (issue 57)."""
    matrix = tiny_matrix(repeats=2)
    reports = tmp_path / "reports"
    first = nvbench("run", str(matrix), "--reports", str(reports), "--no-progress")
    assert first.returncode == 0, first.stderr
    assert "every job from the defaults per backend and compile mode" in " ".join(first.stderr.split())  # wrapped
    dry = nvbench("run", str(matrix), "--reports", str(reports), "--dry-run")
    assert dry.returncode == 0 and "every job from past rows (run " in dry.stdout.splitlines()[-2]
    second = nvbench("run", str(matrix), "--reports", str(reports), "--no-progress", "--out", str(tmp_path / "two"))
    assert second.returncode == 0, second.stderr
    session = json.loads((tmp_path / "two" / "manifest.json").read_text())["sessions"][-1]
    assert session["estimate"]["from_past"] == 2 and session["estimate"]["jobs"] == 2
    assert session["estimate"]["wall_s"] > 0
    words = " ".join(second.stdout.split())  # the summary's line, beside the run's other results
    assert "took " in words and "; estimated " in words
