"""Offline, learnable JPEG ImageFolder datasets (train/<class>/*.jpg, val/<class>/*.jpg).

"shapes" classes are texture x colour palette, built to survive random-resized crops and flips;
"digits" are scikit-learn's bundled 8x8 handwritten digits, upscaled and colourised.
"""

from __future__ import annotations

import colorsys
import dataclasses
import functools
import hashlib
import importlib.util
import json
import math
import multiprocessing
import os
import shutil
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

import numpy as np
from PIL import Image

from harness.results.env import usable_cpu_count

GENERATOR_VERSION = 2
"""Bump when the images a given set of parameters produces change; it is part of the cache key. 2: each class
of each split draws from a generator of its own (so classes render in parallel, and alike at any worker count)."""

PARALLEL_MIN_IMAGES = 2000
"""Datasets of at least this many images render in a process pool over the usable cores: an image costs ~6 ms
at 256 px (the mission's 8,000 took ~50 s on one core); below it the pool's start-up is not worth it."""

TEXTURES = ("hstripes", "vstripes", "diagonal", "dots", "smooth")
"""Shape-class textures: each is unchanged in kind by a horizontal flip (diagonals pick a random sign)."""

Split = Literal["train", "val"]

DIGITS_NEEDS = "'digits' needs scikit-learn, which is not installed: pip install 'nvbench[digits]'"


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetParams:
    """Everything that determines a generated dataset's bytes."""

    image_size: int = 64
    """Side of the stored square JPEGs, in pixels."""
    num_classes: int = 10
    train_per_class: int = 200
    """Training images per class."""
    val_per_class: int = 50
    """Validation images per class."""
    seed: int = 0
    kind: Literal["shapes", "digits"] = "shapes"
    quality: int = 90
    """JPEG quality (PIL scale, 1..95)."""

    def __post_init__(self) -> None:
        problems = []
        if self.kind not in ("shapes", "digits"):
            problems.append(f"kind: {self.kind!r} is not 'shapes' or 'digits'")
        if self.image_size < 16:
            problems.append(f"image_size: {self.image_size} is below the minimum of 16")
        if self.num_classes < 1:
            problems.append(f"num_classes: {self.num_classes} must be >= 1")
        if self.kind == "digits" and self.num_classes > 10:
            problems.append(f"num_classes: digits has 10 classes, asked for {self.num_classes}")
        if self.kind == "digits" and importlib.util.find_spec("sklearn") is None:
            problems.append(f"kind: {DIGITS_NEEDS}")
        if self.train_per_class < 1 or self.val_per_class < 1:
            problems.append("train_per_class and val_per_class must be >= 1")
        if not 1 <= self.quality <= 95:
            problems.append(f"quality: {self.quality} outside 1..95")
        if problems:
            raise ValueError("invalid dataset parameters: " + "; ".join(problems))

    def key(self) -> str:
        """Short stable hash of the parameters and the generator version."""
        blob = json.dumps({**dataclasses.asdict(self), "generator_version": GENERATOR_VERSION},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def dirname(self) -> str:
        return f"{self.kind}-{self.image_size}px-{self.num_classes}c-{self.key()}"


def class_names(num_classes: int) -> list[str]:
    """Directory names that sort in label order."""
    width = max(3, len(str(num_classes - 1)))
    return [f"c{i:0{width}d}" for i in range(num_classes)]


# ---------------------------------------------------------------------------------------------
# "shapes": texture x palette


def _hsv(h: float, s: float, v: float) -> np.ndarray:
    return np.array(colorsys.hsv_to_rgb(h % 1.0, s, v), dtype=np.float32) * 255


def _soft(signal: np.ndarray, sharpness: float) -> np.ndarray:
    """Map a zero-centred periodic signal to a 0..1 mask with anti-aliased edges."""
    return np.clip(signal * sharpness + 0.5, 0.0, 1.0)


def _texture_mask(texture: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """A size x size float mask in 0..1 (1 = foreground colour) with random period and phase."""
    period = rng.uniform(0.13, 0.22) * size
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    xx += rng.uniform(0, period)
    yy += rng.uniform(0, period)
    k = 2 * math.pi / period
    if texture == "hstripes":
        return _soft(np.sin(k * yy), 1.5)
    if texture == "vstripes":
        return _soft(np.sin(k * xx), 1.5)
    if texture == "diagonal":
        sign = 1.0 if rng.random() < 0.5 else -1.0
        return _soft(np.sin(k * (xx + sign * yy) / math.sqrt(2)), 1.5)
    if texture == "dots":
        dx = np.mod(xx, period) - period / 2
        dy = np.mod(yy, period) - period / 2
        radius = rng.uniform(0.22, 0.32) * period
        return np.clip(radius - np.sqrt(dx * dx + dy * dy) + 0.5, 0.0, 1.0)
    if texture == "smooth":
        # No edges at all: a gentle blend of the two colours across the whole image.
        angle = rng.uniform(0, 2 * math.pi)
        ramp = (math.cos(angle) * xx + math.sin(angle) * yy) / size
        return np.clip(0.5 + (ramp - ramp.mean()) * rng.uniform(0.3, 1.0), 0.0, 1.0)
    raise ValueError(f"unknown texture {texture!r}")


def _palette_hues(palette: int, num_palettes: int) -> tuple[float, float]:
    """Foreground and background hue of a palette; palettes' hue pairs never overlap."""
    base = palette / num_palettes
    return base, base + 0.5 / num_palettes


def _render_shape(label: int, num_classes: int, size: int, rng: np.random.Generator) -> np.ndarray:
    num_palettes = math.ceil(num_classes / len(TEXTURES))
    texture = TEXTURES[label % len(TEXTURES)]
    fg_hue, bg_hue = _palette_hues(label // len(TEXTURES), num_palettes)
    jitter = 0.12 / num_palettes
    fg = _hsv(fg_hue + rng.uniform(-jitter, jitter), rng.uniform(0.55, 0.95), rng.uniform(0.75, 1.0))
    bg = _hsv(bg_hue + rng.uniform(-jitter, jitter), rng.uniform(0.35, 0.8), rng.uniform(0.25, 0.55))
    mask = _texture_mask(texture, size, rng)[..., None]
    img = mask * fg + (1 - mask) * bg
    # Uneven lighting: a random linear gradient across the image.
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size - 0.5
    gx, gy = rng.uniform(-0.35, 0.35, size=2)
    img *= (1 + gx * xx + gy * yy)[..., None]
    _draw_distractors(img, rng)
    img += rng.normal(0.0, rng.uniform(3, 10), size=img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def _draw_distractors(img: np.ndarray, rng: np.random.Generator) -> None:
    """Paint 0-2 small random-coloured discs or boxes over the texture (in place)."""
    size = img.shape[0]
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    for _ in range(int(rng.integers(0, 3))):
        cx, cy = rng.uniform(0, size, size=2)
        r = rng.uniform(0.04, 0.09) * size
        if rng.random() < 0.5:
            inside = (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r
        else:
            inside = (np.abs(xx - cx) <= r) & (np.abs(yy - cy) <= r)
        img[inside] = rng.uniform(0, 255, size=3)


# ---------------------------------------------------------------------------------------------
# "digits": scikit-learn's 8x8 digits


@functools.lru_cache(maxsize=4)
def _digit_pools(num_classes: int, seed: int) -> dict[Split, list[list[np.ndarray]]]:
    """Per split, per class, the base 8x8 digits (0..1 floats); train and val pools are disjoint."""
    from sklearn.datasets import load_digits  # bundled with scikit-learn: no download

    digits = load_digits()
    rng = np.random.default_rng([seed, 7])
    pools: dict[Split, list[list[np.ndarray]]] = {"train": [], "val": []}
    for label in range(num_classes):
        images = digits.images[digits.target == label] / 16.0
        order = rng.permutation(len(images))
        num_val = len(images) // 5
        pools["val"].append([images[i] for i in order[:num_val]])
        pools["train"].append([images[i] for i in order[num_val:]])
    return pools


def _render_digit(base: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    side = int(size * rng.uniform(0.8, 1.0))
    glyph = Image.fromarray((base * 255).astype(np.uint8)).resize((side, side), Image.Resampling.BICUBIC)
    glyph = glyph.rotate(rng.uniform(-8, 8), Image.Resampling.BILINEAR)
    canvas = np.zeros((size, size), dtype=np.float32)
    left, top = (int(rng.integers(0, size - side + 1)) for _ in range(2))
    canvas[top:top + side, left:left + side] = np.asarray(glyph, dtype=np.float32) / 255
    hue = rng.uniform(0, 1)
    fg = _hsv(hue, rng.uniform(0.4, 1.0), rng.uniform(0.7, 1.0))
    bg = _hsv(hue + rng.uniform(0.3, 0.7), rng.uniform(0.2, 0.8), rng.uniform(0.0, 0.45))
    img = canvas[..., None] * fg + (1 - canvas[..., None]) * bg
    img += rng.normal(0.0, rng.uniform(3, 12), size=img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# Writing


def _split_renderer(params: DatasetParams, split: Split) -> Callable[[int, int, np.random.Generator], np.ndarray]:
    """(label, index within class, rng) -> HWC uint8 image for one split."""
    if params.kind == "shapes":
        return lambda label, _, rng: _render_shape(label, params.num_classes, params.image_size, rng)
    pools = _digit_pools(params.num_classes, params.seed)[split]
    return lambda label, i, rng: _render_digit(pools[label][i % len(pools[label])], params.image_size, rng)


def _write_class(root: Path, params: DatasetParams, split: Split, label: int, name: str) -> None:
    """Render and write one class of one split; its images depend only on (seed, split, label)."""
    per_class = params.train_per_class if split == "train" else params.val_per_class
    render = _split_renderer(params, split)
    rng = np.random.default_rng([params.seed, 0 if split == "train" else 1, label])
    class_dir = root / split / name
    class_dir.mkdir(parents=True)
    for i in range(per_class):
        Image.fromarray(render(label, i, rng)).save(class_dir / f"{i:05d}.jpg", quality=params.quality)


def _write_splits(root: Path, params: DatasetParams, names: list[str], workers: int) -> None:
    """Every class of both splits, in `workers` processes (1: in this one)."""
    tasks = [(split, label, name) for split in ("train", "val") for label, name in enumerate(names)]
    if workers <= 1:
        for split, label, name in tasks:
            _write_class(root, params, split, label, name)
    else:
        # spawn, not fork: the caller may hold threads (a runner's, DALI's) that a forked child would inherit
        # mid-lock. The children import this module (numpy, PIL, the standard library), never torch.
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            # list(): waits for every class, and raises the first child's error here
            list(pool.map(_write_class, *zip(*[(root, params, *t) for t in tasks]), chunksize=1))


def _read_manifest(path: Path) -> dict | None:
    try:
        return json.loads((path / "dataset.json").read_text())
    except FileNotFoundError:
        return None


def _check_existing(out: Path, params: DatasetParams) -> bool:
    """True if `out` already holds this dataset; raises if it holds something else."""
    manifest = _read_manifest(out)
    if manifest is None:
        if out.exists():
            raise FileExistsError(f"{out} exists but has no dataset.json: not a complete dataset; remove it")
        return False
    if manifest.get("key") != params.key():
        raise FileExistsError(f"{out} holds a different dataset (key {manifest.get('key')}, "
                              f"wanted {params.key()}); choose another path or remove it")
    return True


def make_dataset(
    out: Path,
    *,
    image_size: int = 64,
    num_classes: int = 10,
    train_per_class: int = 200,
    val_per_class: int = 50,
    seed: int = 0,
    kind: Literal["shapes", "digits"] = "shapes",
    quality: int = 90,
    workers: int | None = None,
) -> Path:
    """Write the dataset (parameters as in DatasetParams) to `out` and return `out`.

    `workers` processes render it (None: the usable cores for a dataset of PARALLEL_MIN_IMAGES or more, else
    one); the bytes are the same at any count.

    Built in a hidden sibling directory and renamed into place, so readers never see a partial
    dataset. If `out` already holds the same dataset (another process won the race), it is kept.
    """
    p = DatasetParams(image_size=image_size, num_classes=num_classes, train_per_class=train_per_class,
                      val_per_class=val_per_class, seed=seed, kind=kind, quality=quality)
    out = Path(out)
    if _check_existing(out, p):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        names = class_names(p.num_classes)
        total = p.num_classes * (p.train_per_class + p.val_per_class)
        if workers is None:
            workers = usable_cpu_count() if total >= PARALLEL_MIN_IMAGES else 1
        _write_splits(tmp, p, names, min(workers, 2 * p.num_classes))
        manifest = {**dataclasses.asdict(p), "generator_version": GENERATOR_VERSION, "key": p.key(), "classes": names,
                    "num_train": p.num_classes * p.train_per_class, "num_val": p.num_classes * p.val_per_class}
        (tmp / "dataset.json").write_text(json.dumps(manifest, indent=2) + "\n")
        try:
            os.rename(tmp, out)  # atomic; fails if `out` appeared meanwhile and is non-empty
        except OSError:
            if not _check_existing(out, p):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def ensure_dataset(cache_root: Path, *, notify: Callable[[str], None] | None = None, **params) -> Path:
    """Return cache_root/<kind>-<size>px-<classes>c-<hash>, generating it only if it is missing; `notify` hears
    one line saying which it did, and where."""
    p = DatasetParams(**params)
    out = Path(cache_root) / p.dirname()
    ready = _read_manifest(out) is not None
    if notify is not None:
        what = f"{p.kind} {p.image_size}px x {p.num_classes} classes"
        notify(f"dataset: reusing {what} in {out}" if ready else f"dataset: generating {what} into {out}")
    return out if ready else make_dataset(out, **params)
