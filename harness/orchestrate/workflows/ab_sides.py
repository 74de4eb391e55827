"""How an A/B names its two sides, alike wherever it is read: `A: <label> (<interpreter or checkout>)`, the label
being what tells the sides apart (the user's, else the environment fields that differ, else baseline/candidate)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.results.env import env_diff

LABEL_FIELDS = {"torch_version": "torch", "torch_git": "torch git", "python_version": "python",
                "dali_version": "DALI", "cuda_runtime": "CUDA", "cudnn_version": "cuDNN", "nccl_version": "NCCL",
                "driver_version": "driver", "nvbench_git_sha": "nvbench"}
"""Environment field -> its name in a label, in the order labels list them."""
MOST_FIELDS = 2
DEFAULT_LABELS = {"a": "baseline", "b": "candidate"}


def where(python: str, checkout: Path | str | None) -> str:
    """The interpreter, or the checkout when only it was given (the interpreter is then this one)."""
    if checkout and python == sys.executable:
        return str(checkout)
    return python + (f" in {checkout}" if checkout else "")


def labels(envs: Mapping[str, Mapping[str, Any]], given: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """Side -> label: `given` where set, else up to MOST_FIELDS environment fields that differ between the
    sides ('torch 2.13.0'; a git sha shortened to 10), else 'baseline' and 'candidate'."""
    diff = env_diff(envs["a"], envs["b"], fields=LABEL_FIELDS)[:MOST_FIELDS]
    out = {}
    for k, side in enumerate(("a", "b")):
        words = ", ".join(f"{LABEL_FIELDS[name]} {_value(name, values[k])}" for name, *values in diff)
        out[side] = (given or {}).get(side) or words or DEFAULT_LABELS[side]
    return out


def _value(name: str, value: Any) -> str:
    if value is None:
        return "(none)"
    return str(value)[:10] if name.endswith(("_sha", "_git")) else str(value)


def side_lines(names: Mapping[str, str], places: Mapping[str, str]) -> tuple[str, str]:
    """('A: <label> (<where>)', 'B: ...')."""
    return tuple(f"{side.upper()}: {names[side]} ({places[side]})" for side in ("a", "b"))  # type: ignore[return-value]
