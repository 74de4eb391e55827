"""The DALI backends on CPU: real DALI pipelines over real JPEGs written to tmp_path.

A "solid" dataset gives every image one flat colour that encodes its sample id, so a batch
says exactly which samples it holds (crops, resizes and flips keep a flat colour flat).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT
from PIL import Image

from harness.data import MEAN_255, STD_255, LoaderSpec, build_loader, unavailable_reason
from harness.data import dali as dali_backend

pytest.importorskip("nvidia.dali")

from harness.data.pytorch import IMAGE_EXTENSIONS, scan_image_folder  # noqa: E402

# Names whose sorted order is not their insertion order, nor a case-insensitive or numeric order.
CLASSES = ("ant", "Bee", "9", "10")
TRAIN_PER_CLASS = 4  # 16 train images
VAL_PER_CLASS = (3, 2, 2, 2)  # 9 val images: uneven shards at world size 2
ID_STEP = 9
"""Red level = ID_STEP * (id + 1): ids stay apart by more than JPEG's error on a flat colour."""
ID_TOLERANCE = 3.5


def _colour(sample_id: int) -> tuple[int, int, int]:
    red = ID_STEP * (sample_id + 1)
    return red, 255 - red, 60 + 50 * (sample_id % 3)


def _write_solid_split(split_dir: Path, counts: tuple[int, ...], first_id: int) -> dict[int, str]:
    """Flat-colour 40x48 JPEGs; returns sample id -> class directory name."""
    class_of: dict[int, str] = {}
    sample_id = first_id
    for name, count in zip(CLASSES, counts):
        (split_dir / name).mkdir(parents=True)
        for i in range(count):
            pixels = np.full((40, 48, 3), _colour(sample_id), dtype=np.uint8)
            Image.fromarray(pixels).save(split_dir / name / f"{i:03d}.jpg", quality=95)
            class_of[sample_id] = name
            sample_id += 1
    return class_of


@pytest.fixture(scope="module")
def solid(tmp_path_factory) -> tuple[Path, dict[int, str]]:
    root = tmp_path_factory.mktemp("solid")
    class_of = _write_solid_split(root / "train", (TRAIN_PER_CLASS,) * len(CLASSES), 0)
    class_of |= _write_solid_split(root / "val", VAL_PER_CLASS, len(class_of))
    return root, class_of


@pytest.fixture(autouse=True)
def _as_in_a_cell(tmp_path_factory, monkeypatch):
    """Each test starts as a cell process does: no codec folder chosen, and a cache of its own."""
    monkeypatch.delenv(dali_backend.CODEC_EXTENSIONS_ENV, raising=False)
    monkeypatch.setenv("NVBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    from harness.data.generate import make_dataset

    return make_dataset(tmp_path_factory.mktemp("gen") / "ds", image_size=32, num_classes=3,
                        train_per_class=6, val_per_class=3, seed=0)


def _spec(root: Path, split: str, **overrides) -> LoaderSpec:
    fields = dict(root=root, split=split, batch_size=4, image_size=24, num_classes=len(CLASSES),
                  memory_format="nchw", device="cpu", dali_threads=1, seed=7)
    return LoaderSpec(**(fields | overrides))


def _ids(images: torch.Tensor) -> list[int]:
    """Sample ids of a batch of flat-colour images (asserting each image is flat)."""
    red = images[:, 0] * STD_255[0] + MEAN_255[0]
    assert float((red.amax(dim=(1, 2)) - red.amin(dim=(1, 2))).max()) < 2 * ID_TOLERANCE
    ids = red.mean(dim=(1, 2)) / ID_STEP - 1
    assert torch.all((ids - ids.round()).abs() * ID_STEP < ID_TOLERANCE), red.mean(dim=(1, 2))
    return [int(i) for i in ids.round()]


def _epoch_ids(loader) -> list[int]:
    return [i for images, _ in loader for i in _ids(images)]


# ---------------------------------------------------------------------------------------------
# Availability: cheap, and says what to do


def test_unavailable_reason_dali_gpu_without_cuda():
    assert unavailable_reason("dali-gpu", "cpu") == (
        "dali-gpu needs a CUDA GPU; none is visible on this machine")
    assert unavailable_reason("dali-cpu", "cpu") is None


@pytest.mark.parametrize("missing", [None, ModuleNotFoundError("No module named 'nvidia'")])
def test_unavailable_reason_dali_missing(monkeypatch, missing):
    def fake_find_spec(name, *args):
        assert name == "nvidia.dali"
        if missing is not None:
            raise missing
        return None

    monkeypatch.setattr(dali_backend.importlib.util, "find_spec", fake_find_spec)
    hint = "nvidia-dali is not installed: pip install 'nvbench[dali]' (CUDA 12) or 'nvbench[dali-cuda13]'"
    assert unavailable_reason("dali-cpu", "cpu") == hint
    assert unavailable_reason("dali-cpu", "cuda") == hint
    assert unavailable_reason("dali-gpu", "cuda") == hint
    with pytest.raises(RuntimeError, match=r"pip install 'nvbench\[dali\]'"):
        dali_backend.build(_spec(Path("unused"), "train"), backend="dali-cpu")


def test_build_refuses_dali_gpu_on_cpu_device(solid):
    with pytest.raises(RuntimeError, match="dali-gpu needs a CUDA GPU"):
        build_loader("dali-gpu", _spec(solid[0], "train"))


def test_importing_and_checking_does_not_import_dali():
    code = ("import sys, harness.data as d; d.unavailable_reason('dali-cpu', 'cpu'); "
            "d.unavailable_reason('dali-gpu', 'cuda'); "
            "print(sorted(m for m in ('nvidia.dali', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_reads_the_same_files_as_the_pytorch_backend():
    assert {f.lstrip("*") for f in dali_backend.IMAGE_FILE_FILTERS} == set(IMAGE_EXTENSIONS)


# ---------------------------------------------------------------------------------------------
# What a batch looks like


@pytest.mark.parametrize("memory_format", ["nchw", "nhwc"])
@pytest.mark.parametrize("split", ["train", "val"])
def test_batch_shape_dtype_and_memory_format(generated, split, memory_format):
    loader = build_loader("dali-cpu", _spec(generated, split, num_classes=3, memory_format=memory_format))
    try:
        batches = list(loader)
    finally:
        loader.close()
    assert len(batches) == len(loader)
    for images, labels in batches:
        assert images.shape[1:] == (3, 24, 24) and images.dtype == torch.float32
        assert images.device.type == "cpu"
        assert labels.dtype == torch.int64 and labels.shape == (images.shape[0],)
        if memory_format == "nhwc":
            assert images.is_contiguous(memory_format=torch.channels_last)
            assert not images.is_contiguous()
        else:
            assert images.is_contiguous()
    sizes = [images.shape[0] for images, _ in batches]
    if split == "train":  # 18 images, batch 4: the partial last batch is dropped
        assert sizes == [4, 4, 4, 4]
    else:  # 9 images: all kept
        assert sizes == [4, 4, 1]


def test_normalisation_and_labels_follow_pytorch_folder_order(solid):
    root, class_of = solid
    _, classes = scan_image_folder(root / "val")
    assert classes != list(CLASSES)  # the sort matters for this dataset
    loader = build_loader("dali-cpu", _spec(root, "val", memory_format="nhwc"))
    seen = []
    for images, labels in loader:
        for image, label, sample_id in zip(images, labels, _ids(images)):
            expected = (torch.tensor(_colour(sample_id), dtype=torch.float32)
                        - torch.tensor(MEAN_255)) / torch.tensor(STD_255)
            torch.testing.assert_close(image.mean(dim=(1, 2)), expected, atol=0.05, rtol=0)
            assert int(label) == classes.index(class_of[sample_id])
            seen.append(sample_id)
    loader.close()
    assert sorted(seen) == list(range(16, 25))


# ---------------------------------------------------------------------------------------------
# Epochs and shards


def test_train_shards_are_disjoint_and_cover_every_sample_each_epoch(solid):
    root, _ = solid
    loaders = [build_loader("dali-cpu", _spec(root, "train", rank=r, world_size=2, seed=7 + r))
               for r in range(2)]
    try:
        for epoch in range(2):
            per_rank = []
            for loader in loaders:
                loader.set_epoch(epoch)
                per_rank.append(_epoch_ids(loader))
            assert [len(ids) for ids in per_rank] == [8, 8] == [4 * len(x) for x in loaders]
            assert not set(per_rank[0]) & set(per_rank[1])
            assert sorted(per_rank[0] + per_rank[1]) == list(range(16))
    finally:
        for loader in loaders:
            loader.close()


def test_val_shards_keep_every_sample_once(solid):
    root, _ = solid
    loaders = [build_loader("dali-cpu", _spec(root, "val", rank=r, world_size=2)) for r in range(2)]
    for epoch in range(2):
        per_rank = [[images.shape[0] for images, _ in loader] for loader in loaders]
        assert per_rank == [[4], [4, 1]]  # shards of 4 and 5; DALI's padding trimmed
        assert [len(loader) for loader in loaders] == [1, 2]
    ids = [i for loader in loaders for i in _epoch_ids(loader)]
    assert sorted(ids) == list(range(16, 25))
    for loader in loaders:
        loader.close()


def test_train_drops_the_partial_batch_and_reshuffles_each_epoch(solid):
    loader = build_loader("dali-cpu", _spec(solid[0], "train", batch_size=5))
    epochs = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        epochs.append(_epoch_ids(loader))
    loader.close()
    assert len(loader) == 3 and [len(ids) for ids in epochs] == [15, 15]
    assert all(len(set(ids)) == 15 for ids in epochs)
    assert epochs[0] != epochs[1]


def test_an_abandoned_epoch_is_finished_before_the_next(solid):
    loader = build_loader("dali-cpu", _spec(solid[0], "train", batch_size=8))
    abandoned = iter(loader)
    next(abandoned)  # take one of two batches, then walk away
    loader.set_epoch(1)
    assert sorted(_epoch_ids(loader)) == list(range(16))
    assert next(abandoned, None) is None  # a retired generator cannot steal the new epoch's batches
    loader.close()


def test_set_epoch_out_of_order_is_an_error(solid):
    loader = build_loader("dali-cpu", _spec(solid[0], "train"))
    loader.set_epoch(0)
    with pytest.raises(ValueError, match=r"set_epoch\(2\): the DALI reader's next epoch is 0"):
        loader.set_epoch(2)
    loader.close()


def test_same_seed_same_batches(solid):
    firsts = []
    for _ in range(2):
        loader = build_loader("dali-cpu", _spec(solid[0], "train"))
        firsts.append(next(iter(loader)))
        loader.close()
    torch.testing.assert_close(firsts[0], firsts[1], rtol=0, atol=0)


def test_handed_out_batches_survive_later_pipeline_runs(generated):
    # Prefetch depth 2 and four batches: DALI runs the pipeline again while we hold batch 0.
    loader = build_loader("dali-cpu", _spec(generated, "train", num_classes=3, dali_prefetch_queue=2))
    held, snapshots = [], []
    for images, labels in loader:
        held.append((images, labels))
        snapshots.append((images.clone(), labels.clone()))
    for (images, labels), (images_then, labels_then) in zip(held, snapshots):
        assert torch.equal(images, images_then) and torch.equal(labels, labels_then)
    assert len({images.data_ptr() for images, _ in held}) == len(held)
    loader.close()


def test_too_few_images_for_one_batch_says_what_to_change(solid):
    with pytest.raises(ValueError, match="lower batch_size or generate more images"):
        build_loader("dali-cpu", _spec(solid[0], "train", batch_size=9, world_size=2))


def test_more_class_directories_than_num_classes_is_an_error(solid):
    with pytest.raises(ValueError, match="4 class directories but num_classes is 3"):
        build_loader("dali-cpu", _spec(solid[0], "train", num_classes=3))


# ---------------------------------------------------------------------------------------------
# The endless training stream and the lifetime of zero-copy GPU batches


def test_an_endless_loader_runs_epoch_after_epoch_in_one_stream(solid):
    # 16 images in batches of 3: batches straddle epochs; nothing is padded or dropped at a boundary.
    loader = build_loader("dali-cpu", _spec(solid[0], "train", batch_size=3, endless=True))
    try:
        assert (loader.num_images, loader.samples_per_epoch) == (16, 16)
        stream = iter(loader)
        ids = [i for _ in range(16) for i in _ids(next(stream)[0])]  # 48 images, three epochs
        for epoch in range(3):
            assert sorted(ids[16 * epoch:16 * (epoch + 1)]) == list(range(16))
        assert ids[:16] != ids[16:32]
        with pytest.raises(ValueError, match="no set_epoch"):
            loader.set_epoch(1)
    finally:
        loader.close()


def _checksums(loader, num_batches: int, *, slow_cycles: int = 0) -> list[tuple[float, float, int]]:
    """Sums of each batch's images (read at once, and again after `slow_cycles` of GPU sleep) and labels,
    every reference dropped as soon as the work is queued (as autograd drops its input)."""
    sums = torch.zeros(num_batches, 3, dtype=torch.float64, device="cuda")
    stream = iter(loader)
    for i in range(num_batches):
        images, labels = next(stream)
        sums[i, 0] = images.double().sum()
        if slow_cycles:
            torch.cuda._sleep(slow_cycles)  # the consumer falls behind the pipeline
        sums[i, 1] = images.double().sum()
        sums[i, 2] = labels.sum()
        del images, labels
    torch.cuda.synchronize()
    return [(float(a), float(b), int(c)) for a, b, c in sums.tolist()]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("backend", ["dali-gpu", "dali-cpu"])
def test_a_slow_consumer_reads_every_zero_copy_batch_intact(generated, backend):
    spec = _spec(generated, "train", num_classes=3, device="cuda", endless=True, dali_prefetch_queue=2)
    reference = build_loader(backend, spec)
    expected = []
    stream = iter(reference)
    for _ in range(12):
        images, labels = next(stream)
        torch.cuda.synchronize()  # read each batch before the next is asked for: nothing can recycle it
        total = float(images.double().sum())
        expected.append((total, total, int(labels.sum())))
    reference.close()
    slow = build_loader(backend, spec)
    try:
        got = _checksums(slow, 12, slow_cycles=100_000_000)
    finally:
        slow.close()
    assert got == pytest.approx(expected, rel=1e-9)


# Cell logs: nvImageCodec's load errors for codecs nvbench never uses stay out


def _codec_extensions() -> Path:
    package = dali_backend._nvimgcodec_dir()
    if package is None or not any(dali_backend._is_unused(f.name) for f in (package / "extensions").iterdir()):
        pytest.skip("needs nvImageCodec's wheel with its JPEG 2000 and TIFF extensions")
    return package / "extensions"


def test_the_codec_view_leaves_out_unused_codecs_and_keeps_what_they_load_from(tmp_path):
    real = _codec_extensions()
    environ: dict[str, str] = {}
    view = Path(dali_backend.quiet_codec_extensions(environ, cache=tmp_path))
    assert environ == {dali_backend.CODEC_EXTENSIONS_ENV: str(view)} and view.is_relative_to(tmp_path)
    names = {f.name for f in view.iterdir()}
    assert names == {f.name for f in real.iterdir() if not dali_backend._is_unused(f.name)}
    assert not any("nvjpeg2k" in n or "nvtiff" in n for n in names) and any("nvjpeg_ext" in n for n in names)
    # an extension finds its library through $ORIGIN/../../<wheel>/lib: the mirror keeps those paths
    for sibling in real.parent.parent.iterdir():
        if sibling != real.parent:
            assert (view / ".." / ".." / sibling.name).resolve() == sibling.resolve()
    for entry in real.parent.iterdir():  # the library itself and its other files, beside the view
        if entry != real:
            assert (view / ".." / entry.name).resolve() == entry.resolve()
    assert dali_backend.quiet_codec_extensions({}, cache=tmp_path) == str(view)  # built once, reused
    mine = {dali_backend.CODEC_EXTENSIONS_ENV: "/opt/my/extensions"}
    assert dali_backend.quiet_codec_extensions(mine, cache=tmp_path) is None
    assert mine == {dali_backend.CODEC_EXTENSIONS_ENV: "/opt/my/extensions"}


def test_a_dali_loader_points_its_process_at_the_codec_view(solid):
    import os

    _codec_extensions()
    loader = build_loader("dali-cpu", _spec(solid[0], "train"))
    assert len(_epoch_ids(loader)) == len(CLASSES) * TRAIN_PER_CLASS  # JPEGs still decode through the view
    loader.close()
    view = Path(os.environ[dali_backend.CODEC_EXTENSIONS_ENV])
    assert view.is_dir() and not any(dali_backend._is_unused(f.name) for f in view.iterdir())


def _without_jpeg2000_and_tiff(tmp_path: Path) -> Path:
    """A site folder whose nvidia/ holds DALI and nvImageCodec but not the nvjpeg2k / nvtiff wheels, as DALI
    for CUDA 13 installed without them: hard links, so it costs no space (the libraries locate their
    neighbours from their own path, which a symlink would not change)."""
    import os
    import shutil

    nvidia = _codec_extensions().parent.parent
    site = tmp_path / "site"
    for entry in nvidia.iterdir():
        if entry.name in ("nvjpeg2k", "nvtiff"):
            continue
        try:
            if entry.is_dir():
                shutil.copytree(entry, site / "nvidia" / entry.name, copy_function=os.link, symlinks=True)
            else:
                (site / "nvidia").mkdir(parents=True, exist_ok=True)
                os.link(entry, site / "nvidia" / entry.name)
        except OSError as exc:
            pytest.skip(f"cannot hard-link the installed wheels here: {exc}")
    return site


@pytest.mark.slow
def test_a_cell_log_holds_no_codec_load_errors_where_jpeg2000_and_tiff_are_not_installed(tiny_matrix, tmp_path):
    import os

    from conftest import nvbench

    site = _without_jpeg2000_and_tiff(tmp_path)
    matrix = tiny_matrix('backend = ["dali-cpu"]')
    path = os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {"PYTHONPATH": path, "NVBENCH_CACHE": str(tmp_path / "cache")}
    logs = {}
    # the second run sets the variable itself, as a user may: then nvbench leaves it, and the noise is back
    for name, extra in (("quiet", {}), ("as-set", {"NVIMGCODEC_EXTENSIONS_PATH": str(site / "nvidia" / "nvimgcodec" /
                                                                                     "extensions")})):
        proc = nvbench("run", str(matrix), "--out", str(tmp_path / name), "--no-progress", env=env | extra)
        assert proc.returncode == 0, proc.stderr
        logs[name] = "".join(p.read_text() for p in (tmp_path / name / "logs").glob("*.log"))
    assert "nvjpeg2k" in logs["as-set"].lower() and "nvtiff" in logs["as-set"].lower()
    assert "nvjpeg2k" not in logs["quiet"].lower() and "nvtiff" not in logs["quiet"].lower(), logs["quiet"]
