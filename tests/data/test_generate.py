"""The offline dataset generator: layout, manifest, caching and atomic publication."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.data import generate
from harness.data.generate import DatasetParams, class_names, ensure_dataset, make_dataset

TINY = dict(image_size=16, num_classes=3, train_per_class=4, val_per_class=2)


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("kind", ["shapes", "digits"])
def test_make_dataset_writes_an_image_folder(tmp_path, kind):
    out = make_dataset(tmp_path / "ds", kind=kind, **TINY)
    assert out == tmp_path / "ds"
    for split, per_class in (("train", 4), ("val", 2)):
        classes = sorted(d.name for d in (out / split).iterdir())
        assert classes == ["c000", "c001", "c002"]
        for name in classes:
            images = sorted((out / split / name).iterdir())
            assert len(images) == per_class
            with Image.open(images[0]) as img:
                assert img.format == "JPEG" and img.mode == "RGB" and img.size == (16, 16)
                img.load()
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["kind"] == kind and manifest["num_classes"] == 3 and manifest["image_size"] == 16
    assert manifest["num_train"] == 12 and manifest["num_val"] == 6
    assert manifest["classes"] == ["c000", "c001", "c002"]
    assert manifest["key"] == DatasetParams(kind=kind, **TINY).key()


def test_same_parameters_give_identical_bytes(tmp_path):
    a = make_dataset(tmp_path / "a", **TINY)
    b = make_dataset(tmp_path / "b", **TINY)
    c = make_dataset(tmp_path / "c", seed=1, **TINY)
    read = lambda root: [p.read_bytes() for p in _files(root / "train")]  # noqa: E731
    assert read(a) == read(b)
    assert read(a) != read(c)


@pytest.mark.parametrize("kind", ["shapes", "digits"])
def test_a_pool_of_processes_writes_the_same_bytes_as_one_process(tmp_path, kind, monkeypatch):
    pools = []

    class CountedPool(generate.ProcessPoolExecutor):
        def __init__(self, workers, **kwargs):
            pools.append(workers)
            super().__init__(workers, **kwargs)

    monkeypatch.setattr(generate, "ProcessPoolExecutor", CountedPool)
    one = make_dataset(tmp_path / "one", kind=kind, workers=1, **TINY)
    assert pools == []  # one process: no pool
    pool = make_dataset(tmp_path / "pool", kind=kind, workers=2, **TINY)  # spawned children render the classes
    assert pools == [2]
    files = _files(one)
    assert [p.relative_to(one) for p in files] == [p.relative_to(pool) for p in _files(pool)]
    assert [p.read_bytes() for p in files] == [p.read_bytes() for p in _files(pool)]
    # each class draws from its own generator: no two classes' first images alike
    firsts = [(one / "train" / name / "00000.jpg").read_bytes() for name in class_names(3)]
    assert len(set(firsts)) == 3


def test_a_large_dataset_renders_on_every_usable_core(tmp_path, monkeypatch):
    used = []
    monkeypatch.setattr(generate, "usable_cpu_count", lambda: 5)
    monkeypatch.setattr(generate, "_write_splits", lambda root, p, names, workers: used.append(workers))
    make_dataset(tmp_path / "small", **TINY)
    big = {**TINY, "train_per_class": generate.PARALLEL_MIN_IMAGES // 3}
    make_dataset(tmp_path / "big", **big)
    make_dataset(tmp_path / "two", image_size=16, num_classes=1, train_per_class=2000, val_per_class=1)
    assert used == [1, 5, 2]  # small: one process; large: the cores, at most one per class and split


def test_shapes_classes_differ_in_colour_and_images_vary(tmp_path):
    out = make_dataset(tmp_path / "ds", image_size=32, num_classes=10, train_per_class=3, val_per_class=1)
    means = []
    for name in class_names(10):
        pixels = [np.asarray(Image.open(p), dtype=np.float32) for p in sorted((out / "train" / name).iterdir())]
        assert not np.array_equal(pixels[0], pixels[1])
        means.append(np.mean([p.mean(axis=(0, 1)) for p in pixels], axis=0))
    # Two palettes of five textures: classes 0-4 and 5-9 have clearly different mean colours.
    assert np.linalg.norm(np.mean(means[:5], axis=0) - np.mean(means[5:], axis=0)) > 30


def test_ensure_dataset_names_by_parameters_and_generates_once(tmp_path, monkeypatch):
    said = []
    first = ensure_dataset(tmp_path, notify=said.append, **TINY)
    assert first.parent == tmp_path
    assert first.name == f"shapes-16px-3c-{DatasetParams(**TINY).key()}"
    stamp = (first / "dataset.json").stat().st_mtime_ns

    def must_not_run(*args, **kwargs):
        raise AssertionError("regenerated a dataset that was already complete")

    monkeypatch.setattr(generate, "make_dataset", must_not_run)
    assert ensure_dataset(tmp_path, notify=said.append, **TINY) == first
    assert (first / "dataset.json").stat().st_mtime_ns == stamp
    # the run's dataset line says which it did, and where
    assert said == [f"dataset: generating shapes 16px x 3 classes into {first}",
                    f"dataset: reusing shapes 16px x 3 classes in {first}"]
    monkeypatch.undo()
    other = ensure_dataset(tmp_path, **{**TINY, "seed": 3})
    assert other != first and (other / "dataset.json").exists()


def test_invalid_parameters_are_reported_together(tmp_path):
    with pytest.raises(ValueError, match="image_size: 4 is below.*quality: 100 outside"):
        make_dataset(tmp_path / "x", image_size=4, quality=100)
    with pytest.raises(ValueError, match="digits has 10 classes"):
        ensure_dataset(tmp_path, kind="digits", num_classes=11)
    with pytest.raises(TypeError):
        ensure_dataset(tmp_path, colour="red")
    assert list(tmp_path.iterdir()) == []


def test_failure_midway_leaves_nothing_visible(tmp_path, monkeypatch):
    calls = 0
    real = generate._render_shape

    def fail_on_third(*args):
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("disk full")
        return real(*args)

    monkeypatch.setattr(generate, "_render_shape", fail_on_third)
    with pytest.raises(RuntimeError, match="disk full"):
        make_dataset(tmp_path / "ds", **TINY)
    assert list(tmp_path.iterdir()) == []


def test_dataset_appears_only_when_complete(tmp_path, monkeypatch):
    # Watch the destination while the generator writes: it must not exist until the manifest is in.
    seen = []
    real = generate._write_splits

    def spy(root, *args):
        seen.append((root.name.startswith("."), (tmp_path / "ds").exists()))
        return real(root, *args)

    monkeypatch.setattr(generate, "_write_splits", spy)
    make_dataset(tmp_path / "ds", **TINY)
    assert seen == [(True, False)]
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_losing_the_race_keeps_the_winners_dataset(tmp_path, monkeypatch):
    out = tmp_path / "ds"
    winner = make_dataset(tmp_path / "winner", **TINY)
    real_rename = os.rename

    def rival_finishes_first(src, dst):
        real_rename(winner, dst)  # another process published the same dataset meanwhile
        real_rename(src, dst)  # ours then fails: the destination is a non-empty directory

    monkeypatch.setattr(generate.os, "rename", rival_finishes_first)
    marker = out / "train" / "c000" / "00000.jpg"
    assert make_dataset(out, **TINY) == out
    assert marker.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_existing_different_or_partial_dataset_is_an_error(tmp_path):
    out = make_dataset(tmp_path / "ds", **TINY)
    with pytest.raises(FileExistsError, match="holds a different dataset"):
        make_dataset(out, **{**TINY, "seed": 9})
    (tmp_path / "junk").mkdir()
    with pytest.raises(FileExistsError, match="has no dataset.json"):
        make_dataset(tmp_path / "junk", **TINY)


def test_digits_without_scikit_learn_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    import importlib.util

    from harness.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sklearn" else real(name, *a))
    with pytest.raises(ValueError, match=r"'digits' needs scikit-learn, which is not installed: pip install "
                                         r"'nvbench\[digits\]'"):
        make_dataset(tmp_path / "ds", kind="digits", **TINY)
    assert main(["data", "make", "--out", str(tmp_path / "cli"), "--kind", "digits"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: nvbench data make: invalid dataset parameters: kind: 'digits'")
    assert not any(tmp_path.iterdir())


@pytest.mark.documented("nvbench data prepare matrices/resnet50.toml", bound_s=120)
def test_data_prepare_makes_what_the_runner_then_reads_without_generating(tiny_matrix, tmp_path, monkeypatch,
                                                                          documented_run):
    from harness.data import generate
    from harness.orchestrate.session import job
    from harness.matrix.cells import expand
    from harness.matrix.parse import load_matrix

    matrix = tiny_matrix('backend = ["synthetic", "pytorch", "dali-cpu"]')
    proc = documented_run(["data", "prepare", str(matrix), "--only", "backend=synthetic"])
    assert proc.returncode == 0 and proc.stdout == "" and not (tmp_path / "cache").exists()  # synthetic: none
    proc = documented_run(["data", "prepare", str(matrix)])
    assert proc.returncode == 0, proc.stderr
    (root,) = map(Path, proc.stdout.split())  # both data backends read the one dataset
    assert (root / "dataset.json").is_file() and root.parent == tmp_path / "cache" / "datasets"
    monkeypatch.setattr(generate, "make_dataset", lambda *a, **k: pytest.fail("generated again"))
    ctx = job.JobContext.__new__(job.JobContext)
    ctx.data_roots, ctx.notify = {}, lambda line: None
    for cell in expand(load_matrix(matrix)):
        assert job._data_root(cell, ctx) == (None if cell.backend == "synthetic" else root)


def test_data_prepare_of_a_bad_matrix_exits_2_and_writes_nothing(tmp_path, capsys):
    from harness.cli import main

    bad = tmp_path / "bad.toml"
    bad.write_text('version = 1\n[benchmark]\nname = "x"\nmodel = "resnet5"\n[axes]\nbackend = ["pytorch"]\n')
    assert main(["data", "prepare", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and "model" in err[0]
    assert [p.name for p in tmp_path.iterdir()] == ["bad.toml"]


def test_data_prepare_refuses_a_cache_folder_that_is_not_a_whole_dataset(tiny_matrix, capsys):
    from harness.cli import main

    matrix = tiny_matrix('backend = ["pytorch"]')
    assert main(["data", "prepare", str(matrix)]) == 0
    root = Path(capsys.readouterr().out.strip())
    (root / "dataset.json").unlink()  # a generation that died half-way, or someone's own folder
    assert main(["data", "prepare", str(matrix)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: nvbench data prepare: {matrix}: {root} exists but has no dataset.json")


def test_a_cache_dir_under_home_is_the_homes(tiny_matrix, tmp_path, monkeypatch, capsys):
    from harness.cli import main

    matrix = tiny_matrix('backend = ["pytorch"]')
    matrix.write_text(matrix.read_text().replace(f'cache_dir = "{tmp_path / "cache"}"', 'cache_dir = "~/nvb-cache"'))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert main(["data", "prepare", str(matrix)]) == 0
    root = Path(capsys.readouterr().out.strip())
    assert root.is_absolute() and root.parent == tmp_path / "home" / "nvb-cache" / "datasets"
    assert not (tmp_path / "~").exists()
