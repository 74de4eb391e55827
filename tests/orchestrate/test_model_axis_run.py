"""The user's own model end to end, as the real CLI runs it: `model = "mynets:build"` from a module beside the
matrix trains and validates on the CPU; a missing module and a builder that raises are one line each and exit 2
at `nvbench validate` (whose own process imports neither torch nor the user's code) and at `nvbench run` (nothing
written), and a model failing only in its cell a failed row with the reason; the report's heatmap lays the cells
out by model."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest
from conftest import ROOT, TINY, nvbench

from harness.models.flops import count_flops

MYNETS = """
    from torch import nn

    def build(num_classes):
        return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes))
"""
BROKEN = """
    def build(num_classes):
        raise ValueError(f"no net for {num_classes} classes")
"""
MISSING = "'nomod:build': cannot import module 'nomod' (ModuleNotFoundError: No module named 'nomod')"
RAISES = "'broken:build': build(num_classes=10) raised ValueError: no net for 10 classes"
IN_CELL = """
    import sys

    def build(num_classes):  # builds in nvbench's check; fails in a cell, as a model too big for the device would
        if "harness.cell.worker" in sys.modules:
            raise MemoryError("no room for this net")
        from torch import nn
        return nn.Linear(1, num_classes)
"""


def _matrix(folder, models: list[str]) -> str:
    text = TINY.format(axes=f'model = {json.dumps(models)}\nbackend = ["pytorch"]', repeats=1, timeout=120,
                       cache=folder / "cache", nvtx="false", device="cpu")
    return text.replace('model = "resnet18"\n', "")


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    """A folder with mynets.py and broken.py beside two matrices: the good model alone, and all three."""
    folder = tmp_path_factory.mktemp("nets")
    (folder / "mynets.py").write_text(textwrap.dedent(MYNETS))
    (folder / "broken.py").write_text(textwrap.dedent(BROKEN))
    (folder / "good.toml").write_text(_matrix(folder, ["mynets:build"]))
    (folder / "incell.py").write_text(textwrap.dedent(IN_CELL))
    (folder / "three.toml").write_text(_matrix(folder, ["mynets:build", "nomod:build", "broken:build"]))
    (folder / "two.toml").write_text(_matrix(folder, ["mynets:build", "incell:build"]))
    return folder


def test_validate_builds_the_users_models_in_a_child_and_names_each_failure_in_one_line(nets):
    # From the repository root: the modules are found beside the matrix, not in the working directory.
    probe = ("import sys; from harness.cli import main; code = main(['validate', *sys.argv[1:]]); "
             "print(sorted(m for m in ('torch', 'mynets', 'broken') if m in sys.modules)); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe, str(nets / "good.toml"), str(nets / "three.toml")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"{nets / 'good.toml'}: ok, 1 cells x 1 repeats", "[]"]
    assert done.stderr.splitlines() == [f"error: {nets / 'three.toml'}: axes.model: {MISSING}",
                                        f"error: {nets / 'three.toml'}: axes.model: {RAISES}"]


def test_run_refuses_a_model_that_does_not_import_as_validate_does_before_anything_is_written(nets, tmp_path):
    refused = nvbench("run", str(nets / "three.toml"), "--out", str(tmp_path / "run"), "--no-progress")
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"error: {nets / 'three.toml'}: axes.model: {MISSING}", f"error: {nets / 'three.toml'}: axes.model: {RAISES}"]
    assert not (tmp_path / "run").exists() and refused.stdout == ""


def test_a_user_model_trains_and_validates_and_one_failing_in_its_cell_is_a_failed_row_with_its_reason(nets, tmp_path):
    run = tmp_path / "run"
    done = nvbench("run", str(nets / "two.toml"), "--out", str(run), "--no-progress")
    assert done.returncode == 1, done.stdout + done.stderr  # the matrix completed, with failures
    rows = {r["model"]: r for r in pq.read_table(run / "cells").to_pylist()}
    ok = rows["mynets:build"]
    assert ok["status"] == "ok" and ok["cell_id"].startswith("mynets.build-2b46e979_pytorch_nchw_fp32_ws1_ga1_")
    assert ok["top1"] is not None and ok["num_val_images"] > 0  # validated on the generated dataset
    # the MFU column's FLOPs: the one counter, on the user's model as the cell built it
    assert ok["flops_per_image"] == count_flops("mynets:build", num_classes=10, image_size=16, training=True,
                                                builder=_from(nets))
    assert rows["incell:build"]["status"] == "failed" and rows["incell:build"]["reason"] == \
        "rank 0: UserModelError: 'incell:build': build(num_classes=10) raised MemoryError: no room for this net"

    report = nvbench("report", str(run), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "report" / "report.html").read_text()
    heatmap = page[page.index('class="heatmap"'):page.index('class="hm-panels"')]
    assert "rows: model." in heatmap
    grid = page[page.index('class="hm-panels"'):]
    for model in ("mynets:build", "incell:build"):
        assert f'<th scope="row">{model}</th>' in grid
    assert grid.count('class="tile hm-failed') == 1 and grid.count('class="tile hm-ran') == 1


def _from(folder):
    from harness.models.build import build_model

    return lambda model, num_classes: build_model(model, num_classes=num_classes, search_dirs=[folder])
