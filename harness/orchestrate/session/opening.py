"""The opening every run-like command shares (run, ab, calibrate-slots, profile, bisect): the matrix file loaded
and expanded, an output folder that holds nothing yet, the machine's environment. Bad input is an OpeningError with
every problem, before anything is written (the warning when the repeats can never decide is the commands'
common.reach_warning: validate says it too, without loading any of this)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from harness.catalogue import col
from harness.matrix.cells import Cell, expand
from harness.matrix.parse import MatrixError, load_matrix, with_repeats
from harness.matrix.sections import Matrix
from harness.orchestrate.session import runfolder
from harness.orchestrate.session.capabilities import Capabilities, probe_capabilities


class OpeningError(ValueError):
    """Bad input found while opening: one line a problem (the matrix file's, or a flag's)."""

    def __init__(self, problems: Sequence[str]):
        super().__init__("; ".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True, slots=True, kw_only=True)
class Opened:
    """A matrix file made ready to run: its typed matrix and the cells the filters kept."""

    matrix: Matrix
    cells: list[Cell]


@dataclass(frozen=True, slots=True, kw_only=True)
class Machine:
    """Where the jobs will run: the environment's fingerprint, its comparability key, the device's capabilities."""

    env: dict[str, Any]
    key: str
    caps: Capabilities


def open_matrix(path: str | Path, *, repeats: int | None = None, smoke: bool = False,
                only: Sequence[str] = ()) -> Opened:
    """The matrix file loaded (every problem at once), its repeats set by `repeats` when given, expanded into
    cells (`--smoke`, `--only`)."""
    try:
        matrix = with_repeats(load_matrix(path), repeats)
        return Opened(matrix=matrix, cells=expand(matrix, smoke=smoke, only=only))
    except MatrixError as exc:
        raise OpeningError(exc.problems) from None


def fresh_out(out: str | Path | None, *, reports: str | Path, name: str, hint: str = "") -> Path:
    """The output folder: `--out` when given (it must be empty or new: `hint` says what to do instead), else a
    new run id under `reports` named after `name`. Nothing is created here."""
    folder = Path(out) if out else Path(reports) / runfolder.new_run_id(name, datetime.now(timezone.utc))
    if folder.exists() and any(folder.iterdir()):
        raise OpeningError([f"--out {folder}: not empty{hint}"])
    return folder


def this_machine(device: str) -> Machine:
    """The environment fingerprinted (NVML, never CUDA) and the device this machine can run the cells on."""
    from harness.results.env import collect_env, env_key

    env = collect_env()
    return Machine(env=env, key=env_key(env), caps=probe_capabilities(device, env))


def machine_from_env(device: str, env: dict[str, Any]) -> Machine:
    """As this_machine, for an environment collected elsewhere (an A/B side's interpreter)."""
    return Machine(env=env, key=env[col.env_key], caps=probe_capabilities(
        device, {k: v for k, v in env.items() if k != col.env_key}))


def say(line: str | None) -> None:
    """Progress and warnings go to stderr (results go to stdout)."""
    if line:
        print(line, file=sys.stderr)
