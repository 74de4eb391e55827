"""benchmarks/overhead.py compares like with like: its bare loop trains exactly what a cell process trains."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from harness.matrix.cells import expand
from harness.matrix.parse import load_matrix


@pytest.fixture(scope="module")
def overhead():
    spec = importlib.util.spec_from_file_location("overhead_bench", ROOT / "benchmarks" / "overhead.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _args(**over) -> argparse.Namespace:
    fields = dict(model="resnet18", image_size=32, batch_size=4, precision="fp16", memory_format="nhwc", steps=2,
                  warmup=1, device="cpu", speed_probe=True, phase_timing=True, rounds=1, seed=0, bare=True)
    return argparse.Namespace(**(fields | over))


def _what_trains(engine, images: torch.Tensor) -> dict:
    """Everything about an engine that decides the work of a step."""
    opt, scaler = engine.optimizer, engine.scaler
    groups = [(len(g["params"]), g["weight_decay"], g["lr"], g["momentum"], g["nesterov"]) for g in opt.param_groups]
    conv = next(m for m in engine.model.modules() if isinstance(m, torch.nn.Conv2d))
    return {
        "optimizer": type(opt), "fused": opt.defaults.get("fused"), "foreach": opt.defaults.get("foreach"),
        "groups": groups, "opts": engine.opts, "criterion": (type(engine._criterion),
                                                            engine._criterion.label_smoothing),
        "scaler": None if scaler is None else (scaler.get_scale(), scaler.get_growth_interval(),
                                               scaler.get_growth_factor(), scaler.get_backoff_factor()),
        "autocast": engine._autocast_dtype, "channels_last_weights": conv.weight.is_contiguous(
            memory_format=torch.channels_last),
        "batch": (tuple(images.shape), images.is_contiguous(memory_format=torch.channels_last), images.device),
    }


def _harness_side(matrix_path: Path):
    """The engine and batch of the cell that `nvbench run` would make of the same matrix, built as its worker does."""
    from harness.cell.build import rank_engine, rank_loader
    from harness.cell.context import Context
    from harness.cell.instruments.timing import make_ranges

    (cell,) = expand(load_matrix(matrix_path))
    ctx = Context(cell=cell, run_id="r", repeat=0, out_dir=Path("."), data_root=None, fault=None, rank=0,
                  local_rank=0, world_size=1, device=torch.device("cpu"), ranges=make_ranges(False))
    loader = rank_loader(ctx, "train")
    engine = rank_engine(ctx, dataset_images=loader.num_images)
    images, _ = next(iter(loader))
    return cell, engine, images


@pytest.mark.parametrize("precision, memory_format", [("fp16", "nhwc"), ("fp32", "nchw")])
def test_the_bare_loop_trains_what_the_harness_trains(overhead, tmp_path, one_torch_thread, precision,
                                                      memory_format):
    args = _args(precision=precision, memory_format=memory_format)
    matrix = tmp_path / "overhead.toml"
    matrix.write_text(overhead.overhead_matrix(args))  # what harness_run hands to `nvbench run`
    cell, engine, images, _ = overhead.build_bare(args)
    torch.set_num_threads(1)  # build_bare sets the cell's thread count; the fixture restores it
    h_cell, h_engine, h_images = _harness_side(matrix)
    assert cell == h_cell
    bare, harness = _what_trains(engine, images), _what_trains(h_engine, h_images)
    assert bare == harness
    assert bare["fused"] is True and len(bare["groups"]) == 2
    assert (bare["scaler"] is not None) == (precision == "fp16")


def test_the_bare_loop_runs_and_reports_a_rate(overhead, one_torch_thread):
    rate = overhead.bare_loop(_args(precision="bf16", steps=2))
    torch.set_num_threads(1)
    assert rate > 0


def test_json_holds_the_printed_figures_as_data(overhead, tmp_path, monkeypatch, capsys):
    rates = iter([100.0, 99.0, 100.0, 97.0, 100.0, 101.0])  # each round's bare rate, then harness's
    monkeypatch.setattr(overhead, "bare_run", lambda args: next(rates))
    monkeypatch.setattr(overhead, "harness_run", lambda args, workdir, index: next(rates))
    monkeypatch.setattr(overhead.random, "Random", lambda seed: type("R", (), {"shuffle": lambda self, x: x.reverse()})())
    path = tmp_path / "out" / "overhead.json"
    monkeypatch.setattr("sys.argv", ["overhead.py", "--rounds", "3", "--json", str(path)])
    overhead.main()
    got = json.loads(path.read_text())
    assert [r["ratio"] for r in got["rounds"]] == pytest.approx([0.99, 0.97, 1.01])
    assert got["rounds"][0] == {"round": 0, "harness_img_per_s": 99.0, "bare_img_per_s": 100.0,
                                "ratio": pytest.approx(0.99), "order": ["bare", "harness"]}
    assert (got["median_ratio"], got["min_ratio"], got["max_ratio"]) == pytest.approx((0.99, 0.97, 1.01))
    assert got["sd_ratio"] == pytest.approx(0.02)
    out = capsys.readouterr().out  # the lines for people stay as they were
    assert "round 0: harness      99.0 img/s   bare     100.0 img/s   ratio 0.990   (order: bare then harness)" in out
    assert "harness / bare: median 0.990, mean 0.990 ± 0.020 (sd), min 0.970, max 1.010 over 3 rounds" in out
    assert overhead.figures([])["median_ratio"] is None


def test_the_bare_side_is_never_handed_the_json_flag(overhead, monkeypatch, tmp_path):
    seen = {}

    def fake_run(argv, **kwargs):
        seen["argv"] = argv
        return type("P", (), {"returncode": 0, "stdout": json.dumps({"img_per_s": 5.0}), "stderr": ""})()

    monkeypatch.setattr(overhead.subprocess, "run", fake_run)
    assert overhead.bare_run(_args(bare=False, json=tmp_path / "x.json")) == 5.0
    assert not any(a.startswith("--json") for a in seen["argv"])  # the bare child writes no figures file
