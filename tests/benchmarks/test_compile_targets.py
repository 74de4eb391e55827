"""benchmarks/compile_targets.py judges a run as issue 18 asks: each mode against its eager twin, the fastest
correct cell (ok, loss near the eager twin's), the run's matrix efficiency, and both targets."""

from __future__ import annotations

import importlib.util
import sys

from conftest import ROOT

spec = importlib.util.spec_from_file_location("compile_targets", ROOT / "benchmarks" / "compile_targets.py")
targets = importlib.util.module_from_spec(spec)
sys.modules["compile_targets"] = targets
spec.loader.exec_module(targets)


def row(backend, compile, img_per_s, loss=2.0, status="ok", precision="fp16", accum=1):
    return {"backend": backend, "precision": precision, "grad_accum": accum, "compile": compile, "status": status,
            "reason": "" if status == "ok" else "why", "throughput_img_per_s": img_per_s, "train_loss": loss,
            "compile_s": 0.0 if compile == "eager" else 30.0, "warmup_steps_used": 40}


def test_the_fastest_correct_cell_is_judged_against_its_eager_twin():
    rows = [row("synthetic", "eager", 4900), row("synthetic", "inductor", 5400),
            row("synthetic", "cudagraph", 6000, loss=2.5),  # fastest, but its loss is 25 % off: not correct
            row("dali-gpu", "eager", 4500), row("dali-gpu", "inductor", None, status="failed"),
            row("dali-gpu", "cudagraph", 5300)]
    result = targets.judge(rows, {"matrix_efficiency": 0.65, "time_breakdown_s": {}}, loss_tolerance=0.05)
    by = {g["backend"]: g for g in result["groups"]}
    assert by["synthetic"]["fastest_correct"] == "inductor" and round(by["synthetic"]["speedup"], 3) == 1.102
    assert not by["synthetic"]["modes"]["cudagraph"]["correct"]
    assert by["dali-gpu"]["fastest_correct"] == "cudagraph" and round(by["dali-gpu"]["speedup"], 3) == 1.178
    assert by["dali-gpu"]["modes"]["inductor"]["img_per_s"] is None
    assert result["best_speedup"] == by["dali-gpu"]["speedup"] and result["targets_met"]
    assert not targets.judge(rows, {"matrix_efficiency": 0.5}, loss_tolerance=0.05)["targets_met"]
    text = targets.markdown(result)
    assert "| dali-gpu | fp16 | 1 | 4500 | failed: why | 5300 (1.178x) | cudagraph |" in text
