"""`nvbench validate`'s check of the user's models: each built once, as a cell builds it, in a child process
(`python -m harness.models.check`) with a timeout, so that the validating process imports no torch and no user
code. One line per model that does not build, naming the matrix key."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import harness
from harness.models.user import is_import_path
from harness.orchestrate.placement.launch import run_process
from harness.matrix.sections import Matrix

CHECK_TIMEOUT_S = 120.0
"""How long the child may take to import torch and build every user model of one matrix."""


def user_model_problems(matrix: Matrix, models: set[str] | None = None, *,
                        timeout_s: float = CHECK_TIMEOUT_S) -> list[str]:
    """'key: problem' for each user model of `matrix` (those in `models`, when given) that fails to import or
    build; [] when every one builds or there is none."""
    users = [s for s in matrix.models if is_import_path(s.model) and (models is None or s.model in models)]
    if not users:
        return []
    key = {s.model: s.key for s in users}
    with tempfile.TemporaryDirectory(prefix="nvbench-model-check-") as tmp:
        out, log = Path(tmp) / "found.json", Path(tmp) / "check.log"
        argv = [sys.executable, "-m", "harness.models.check", "--num-classes", str(matrix.benchmark.num_classes),
                "--out", str(out)]
        argv += [arg for folder in users[0].search_dirs for arg in ("--search-dir", folder)]
        outcome = run_process(argv + list(key), log_path=log, timeout_s=timeout_s, env=_child_env())
        if outcome.timed_out:
            return [f"{key[m]}: {m!r}: building it took more than {timeout_s:g} s (nvbench validate's limit)"
                    for m in key]
        if outcome.returncode != 0 or not out.exists():
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-1:])
            return [f"{key[m]}: {m!r}: the build check exited with status {outcome.returncode} without a result"
                    + (f": {tail}" if tail else "") for m in key]
        found = json.loads(out.read_text())
    return [f"{key[m]}: {found[m]}" for m in key if found.get(m)]


def _child_env() -> dict[str, str]:
    """This process's environment with this nvbench first on the path: the child checks with the same code."""
    env = dict(os.environ)
    checkout = str(Path(harness.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (checkout, env.get("PYTHONPATH"))))
    return env
