"""Which jobs of a run share the machine: the slots `--slots` / `[run] slots` asks for, this machine's slot
calibration (per backend: did packing leave the numbers inside the floor?), and for each cell the slots it
takes and what its rows say about how it ran (`packing`: solo, calibrated or uncalibrated)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.orchestrate.placement.slots import Grant, Machine, Requested, Slot, SlotPool, plan_slots
from harness.results import store
from harness.matrix.cells import Cell

CALIBRATION_VERSION = 1
SOLO, CALIBRATED, UNCALIBRATED = "solo", "calibrated", "uncalibrated"
"""A row's `packing`: it ran with no other job of nvbench beside it; packed, its backend cleared by this machine's
calibration; packed with no calibration clearing its backend (none, a failed one, or one of fewer slots)."""


class CalibrationError(ValueError):
    """A calibration file that does not read back; one line naming it."""


def calibration_path(env: dict[str, Any], env_key: str) -> Path:
    """Where this machine's calibration lives: one file per host and environment fingerprint (a new driver,
    torch or GPU calibrates again) in the nvbench cache ($NVBENCH_CACHE, or ~/.cache/nvbench)/slots/."""
    root = Path(os.environ.get("NVBENCH_CACHE") or Path.home() / ".cache" / "nvbench").expanduser()
    host = str(env.get("hostname") or "unknown-host").replace(os.sep, "_")
    return root / "slots" / f"{host}-{env_key}.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """What `nvbench calibrate-slots` found on this machine."""

    path: Path
    slots: int
    """Slots busy in the packed side: a run of more slots than this is not covered."""
    created_at: str
    backends: dict[str, dict[str, Any]] = field(default_factory=dict)
    """backend -> {"verdict", "change", "cleared", "cells"}: unchanged (cleared) or what packing did instead."""

    def cleared(self, slots: int) -> frozenset[str]:
        """The backends packing leaves unmoved at `slots` slots (none beyond the slots calibrated)."""
        if slots > self.slots:
            return frozenset()
        return frozenset(name for name, b in self.backends.items() if b.get("cleared"))


def read_calibration(path: Path) -> Calibration | None:
    """The calibration at `path`; None when there is none."""
    if not path.is_file():
        return None
    try:
        data = store.read_json(path)
        if data.get("version") != CALIBRATION_VERSION:
            raise CalibrationError(f"{path}: calibration version {data.get('version')!r}, this nvbench reads "
                                   f"{CALIBRATION_VERSION}; calibrate again (nvbench calibrate-slots)")
        return Calibration(path=path, slots=int(data["slots"]), created_at=str(data["created_at"]),
                           backends=dict(data["backends"]))
    except (store.UnreadableFile, KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, CalibrationError):
            raise
        raise CalibrationError(f"{path}: not a slot calibration ({exc}); delete it or calibrate again") from None


def write_calibration(path: Path, *, slots: int, created_at: str, backends: dict[str, dict[str, Any]],
                      source: str) -> None:
    store.write_json(path, {"version": CALIBRATION_VERSION, "slots": slots, "created_at": created_at,
                            "source": source, "backends": backends})


@dataclass(frozen=True, slots=True, kw_only=True)
class Packing:
    """How a run places its jobs: its slots, and which backends may share the machine."""

    slots: tuple[Slot, ...]
    machine_cpus: tuple[int, ...]
    packed: frozenset[str] | None = None
    """Backends whose jobs run packed; None = every backend (an explicit slot count)."""
    cleared: frozenset[str] = frozenset()
    """Backends the machine's calibration cleared at this many slots."""

    def pool(self) -> SlotPool:
        return SlotPool(self.slots, self.machine_cpus)

    def needs(self, cell: Cell) -> int | None:
        """Slots the cell's job takes: its world size when it runs packed; None (the whole machine) when it runs
        solo: one slot in all, a backend packing would move, more ranks than slots, or more than one node."""
        if len(self.slots) == 1 or cell.launch.nnodes > 1:
            return None
        if self.packed is not None and cell.backend not in self.packed:
            return None
        return cell.world_size if cell.world_size <= len(self.slots) else None

    def label(self, cell: Cell, grant: Grant) -> str:
        if grant.whole_machine:
            return SOLO
        return CALIBRATED if cell.backend in self.cleared else UNCALIBRATED


def solo_packing(machine: Machine) -> Packing:
    """One job at a time on the whole machine: a run without slots."""
    return Packing(slots=plan_slots(machine, 1), machine_cpus=machine.cpus)


def decide(requested: Requested, machine: Machine, *, calibration: Calibration | None,
           backends: Iterable[str], how_to_calibrate: str, what: str | None = None) -> tuple[Packing, list[str]]:
    """The run's packing, and the lines that say what it chose (SlotError for more slots than the machine holds,
    led by `what`: where the number came from, as plan_slots takes it).

    `auto`: one slot per visible GPU (the machine as one slot without GPUs), packing only the backends the
    calibration cleared at that many slots, the rest solo; no calibration: one job at a time, and one line
    saying how to calibrate. A number: that many slots, every backend packed."""
    backends = sorted(set(backends))
    if requested != "auto":
        slots = plan_slots(machine, requested, what=what)
        cleared = calibration.cleared(len(slots)) if calibration else frozenset()
        packing = Packing(slots=slots, machine_cpus=machine.cpus, cleared=cleared)
        moved = [b for b in backends if b not in cleared]
        if len(slots) > 1 and moved:
            return packing, [(f"slots: {len(slots)} packed; {', '.join(moved)} packed uncalibrated (no calibration "
                              f"of this machine cleared it: rows say packing = uncalibrated; {how_to_calibrate})")]
        return packing, [f"slots: {len(slots)} packed, every backend calibrated"] if len(slots) > 1 else []
    if len(machine.gpus) <= 1:
        return solo_packing(machine), []
    if calibration is None:
        return solo_packing(machine), [(f"slots: one job at a time: no slot calibration of this machine, so packing "
                                        f"its {len(machine.gpus)} GPUs is not yet shown to leave the numbers "
                                        f"alone ({how_to_calibrate}; or --slots N to pack anyway)")]
    slots = plan_slots(machine, len(machine.gpus))
    cleared = calibration.cleared(len(slots))
    packing = Packing(slots=slots, machine_cpus=machine.cpus, packed=cleared, cleared=cleared)
    lines = [(f"slots: {len(slots)}; packed: {', '.join(b for b in backends if b in cleared) or 'none'} "
              f"(calibration {calibration.path})")]
    for backend in (b for b in backends if b not in cleared):
        lines.append(f"slots: {backend} runs solo: {_why_solo(calibration, backend, len(slots))}")
    return packing, lines


def _why_solo(calibration: Calibration, backend: str, slots: int) -> str:
    if slots > calibration.slots:
        return f"the calibration measured {calibration.slots} slots, not {slots}"
    found = calibration.backends.get(backend)
    if found is None:
        return "the calibration did not measure it"
    change = f" {found['change']}" if found.get("change") else ""
    return f"packing moved it, or could not be shown not to ({found['verdict']}{change})"
