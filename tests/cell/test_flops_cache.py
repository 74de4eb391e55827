"""A cell's FLOPs per image are counted once per machine for a registry model (harness.cell.metrics.count_flops):
the run's own file first, then the machine's nvbench cache, keyed by torch and harness/models' source; a user's
model (an import path) is counted once per run and never kept in the machine's cache."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from harness.cell.instruments import flops
from harness.cell import metrics


def ctx(run_dir, model="resnet18"):
    bench = SimpleNamespace(model=model, num_classes=10, image_size=16)
    return SimpleNamespace(cell=SimpleNamespace(benchmark=bench, model_search_dirs=()),
                           flops_cache=str(run_dir / "flops.json"))


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """Every real count, recorded; the machine's cache under tmp_path."""
    calls = []
    monkeypatch.setenv("NVBENCH_CACHE", str(tmp_path / "machine"))

    def count(model, **kw):
        calls.append(model)
        return 1234.0

    monkeypatch.setattr(flops, "training_flops_per_image", count)
    return calls


def test_a_second_run_on_the_machine_reads_the_count_and_a_changed_model_source_counts_again(counted, tmp_path,
                                                                                           monkeypatch):
    assert metrics.count_flops(ctx(tmp_path / "run1")) == 1234.0
    assert metrics.count_flops(ctx(tmp_path / "run1")) == 1234.0  # the run's own file
    assert metrics.count_flops(ctx(tmp_path / "run2")) == 1234.0  # another run: the machine's cache
    assert counted == ["resnet18"]
    assert json.loads((tmp_path / "run2" / "flops.json").read_text()) == {"resnet18/10/16": 1234.0}
    (key,) = json.loads((tmp_path / "machine" / "flops.json").read_text())
    assert key.startswith("resnet18/10/16/torch ") and key.endswith(f"/models {metrics.models_digest()}")

    monkeypatch.setattr(metrics, "models_digest", lambda: "another-commit")  # harness/models changed
    assert metrics.count_flops(ctx(tmp_path / "run3")) == 1234.0
    assert counted == ["resnet18", "resnet18"]


def test_a_users_model_is_counted_in_each_run_and_a_torn_machine_file_is_counted_again(counted, tmp_path):
    user = "mymodels:build"
    metrics.count_flops(ctx(tmp_path / "run1", user))
    metrics.count_flops(ctx(tmp_path / "run2", user))
    assert counted == [user, user] and not (tmp_path / "machine" / "flops.json").exists()
    (tmp_path / "machine").mkdir()
    (tmp_path / "machine" / "flops.json").write_text("{not json")
    assert metrics.count_flops(ctx(tmp_path / "run3")) == 1234.0
    assert counted == [user, user, "resnet18"]
    assert len(json.loads((tmp_path / "machine" / "flops.json").read_text())) == 1  # written whole again
