"""When a top-1 figure means something: a cell validated on fewer than MIN_VAL_IMAGES images (a smoke run
validates on one small batch) has a top-1 that is noise, not a result; everything that prints top-1 says
"n/a: N images" instead of a number, and the accuracy check does not judge it."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping
from harness.catalogue import col

MIN_VAL_IMAGES = 100
"""Fewer validation images than this: top-1's standard error is above 0.05 at any accuracy in (0.2, 0.8)."""


def meaningful(row: Mapping[str, Any]) -> bool:
    """The row's top-1 was measured on at least MIN_VAL_IMAGES images."""
    return row.get("top1") is not None and (row.get(col.num_val_images) or 0) >= MIN_VAL_IMAGES


def with_top1(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows that hold a finite top-1."""
    return [r for r in rows if r.get("top1") is not None and math.isfinite(r["top1"])]


def too_few_images(rows: Iterable[Mapping[str, Any]]) -> bool:
    """Rows with a top-1 that validated on fewer than MIN_VAL_IMAGES images: their top-1 is no result (n/a)."""
    rows = with_top1(rows)
    return bool(rows) and min(int(r.get(col.num_val_images) or 0) for r in rows) < MIN_VAL_IMAGES


def top1_text(rows: Iterable[Mapping[str, Any]], fmt: str = ".3f", *, short: bool = False) -> str:
    """The mean top-1 of `rows` (a cell's ok repeats, or one row), "n/a: N images" ("n/a: N img" when
    `short`, for an 80-column table) when they validated on too few images, "-" when none has a top-1."""
    rows = with_top1(rows)
    if not rows:
        return "-"
    images = min(int(r.get(col.num_val_images) or 0) for r in rows)
    if too_few_images(rows):
        return f"n/a: {images} img" if short else f"n/a: {images} images"
    return format(sum(r["top1"] for r in rows) / len(rows), fmt)


def chance_text(rows: Iterable[Mapping[str, Any]], fmt: str = ".3f") -> str:
    """" (chance 0.100)" beside the top-1 of a --smoke cell, whose few steps leave it near a guess (1 / classes);
    "" for a full run, a cell without a top-1 to show, or rows of differing class counts."""
    rows = [r for r in rows if meaningful(r) and r.get(col.is_smoke)]
    classes = {r.get(col.num_classes) for r in rows}
    if len(classes) != 1 or not all(classes):
        return ""
    return f" (chance {1 / classes.pop():{fmt}})"
