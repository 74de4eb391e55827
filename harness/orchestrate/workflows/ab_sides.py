"""How an A/B names its two sides, alike wherever it is read: `A: <label> (<interpreter>; code <checkout> @ <commit>)`,
the label being what tells the sides apart (the user's, else the environment fields that differ, else
baseline/candidate); and the warning when the code a side runs is not the checkout the user stands in."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.results.env import env_diff, short_commit

LABEL_FIELDS = {"torch_version": "torch", "torch_git": "torch git", "python_version": "python",
                "dali_version": "DALI", "cuda_runtime": "CUDA", "cudnn_version": "cuDNN", "nccl_version": "NCCL",
                "driver_version": "driver", "nvbench_git_sha": "nvbench"}
"""Environment field -> its name in a label, in the order labels list them."""
MOST_FIELDS = 2
DEFAULT_LABELS = {"a": "baseline", "b": "candidate"}


def where(python: str, code: Path | str, env: Mapping[str, Any]) -> str:
    """The interpreter and the code it runs: its checkout, commit (10 digits) and whether it was dirty, as the
    side's own fingerprint (collected under that interpreter and checkout) says."""
    sha = env.get("nvbench_git_sha")
    state = f"@ {short_commit(sha)}" + (", dirty" if env.get("nvbench_git_dirty") else "") if sha else "(not in git)"
    return f"{python}; code {code} {state}"


def enclosing_checkout(cwd: Path) -> Path | None:
    """The nvbench checkout `cwd` lies in (a folder with harness/__init__.py and pyproject.toml), if any."""
    for folder in (cwd, *cwd.parents):
        if (folder / "harness" / "__init__.py").is_file() and (folder / "pyproject.toml").is_file():
            return folder
    return None


def code_warning(cwd: Path, imported: Path, checkouts: Mapping[str, Path | None]) -> str | None:
    """One line when a side without its own checkout would run `imported` (the code this nvbench imports) while
    the user stands in another checkout, whose change would then never run; None otherwise."""
    here = enclosing_checkout(cwd.resolve())
    bare = [side for side in ("a", "b") if not checkouts.get(side)]
    if here is None or here == imported.resolve() or not bare:
        return None
    flags = " and ".join(f"--{side}-checkout" for side in bare)
    return (f"warning: you are in the checkout {here}, but this nvbench imports its code from {imported}: side(s) "
            f"{', '.join(s.upper() for s in bare)} will run {imported}'s code, not {here}'s; give {flags} {here} "
            f"to run it (or run {here}'s own nvbench: python -m harness from {here})")


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
    return short_commit(value) if name.endswith(("_sha", "_git")) else str(value)


def side_lines(names: Mapping[str, str], places: Mapping[str, str]) -> tuple[str, str]:
    """('A: <label> (<where>)', 'B: ...'): the header, the summary and the report name the sides with these."""
    return tuple(f"{side.upper()}: {names[side]} ({places[side]})" for side in ("a", "b"))  # type: ignore[return-value]
