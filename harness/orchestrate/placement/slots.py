"""Slots (pure): how a machine is cut into slots, one GPU and a disjoint set of the cores near it each, and the
pool from which a job claims the slots it runs on. The machine's facts come in as a Machine
(harness/orchestrate/placement/machine.py probes them); nothing here reads the system."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.matrix.job import cpu_list
from harness.catalogue import col

Requested = int | Literal["auto"]
"""`--slots N|auto` and `[run] slots`."""


class SlotError(ValueError):
    """A slot request this machine cannot hold; the message is one line naming the flag."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    """One GPU this process's CUDA sees, as NVML knows it."""

    index: int
    """NVML's index (recorded as gpu_index; never used to find the GPU again)."""
    uuid: str
    """What a slot's CUDA_VISIBLE_DEVICES names: the same GPU whatever CUDA_DEVICE_ORDER says."""
    pci_bus_id: str | None = None
    cpus: tuple[int, ...] | None = None
    """NVML's CPU affinity (the cores nearest the GPU, ideal placement); None where NVML does not say."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Machine:
    cpus: tuple[int, ...]
    """The cores this process may use (its affinity: taskset, cgroups, SLURM), sorted."""
    siblings: tuple[tuple[int, ...], ...] = ()
    """Logical CPUs of one physical core each (hyperthreads), over `cpus`; empty = every CPU its own core."""
    gpus: tuple[Gpu, ...] = ()
    """The visible GPUs in CUDA order; empty on a machine without GPUs (or a CPU run)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Slot:
    index: int
    cpus: tuple[int, ...]
    gpu: Gpu | None = None


def parse_slots(text: str) -> Requested:
    """`--slots` text: "auto" or a whole number >= 1 (argparse turns the ValueError into one line, exit 2)."""
    if text == "auto":
        return "auto"
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{text!r}: give a number of slots >= 1, or auto")
    return int(text)


def plan_slots(machine: Machine, requested: int, *, what: str | None = None) -> tuple[Slot, ...]:
    """`requested` slots of this machine. One slot is the whole machine (every core, every GPU, nothing
    pinned: a run without slots). More: one GPU each (where the machine has GPUs), and disjoint cores: each
    GPU's share of the cores NVML says are near it (the GPUs near one set share it out), else an even split
    of the usable cores. Whole physical cores go to one slot (hyperthread siblings stay together) while
    there are at least as many cores as slots. SlotError when the machine cannot hold them, its line led by
    `what` (where the request came from; default `--slots N`)."""
    if requested == 1:
        return (Slot(index=0, cpus=machine.cpus),)
    gpus = machine.gpus
    what = what or f"--slots {requested}"
    if gpus and requested > len(gpus):
        raise SlotError(f"{what}: this machine holds at most {len(gpus)} slots "
                        f"({len(gpus)} visible GPUs, one per slot)")
    if requested > len(machine.cpus):
        raise SlotError(f"{what}: this machine holds at most {len(machine.cpus)} slots "
                        f"({len(machine.cpus)} usable cores, at least one per slot)")
    shares = _near_shares(machine, gpus[:requested]) if gpus else None
    if shares is None:
        shares = _split(machine.cpus, _cores(machine, machine.cpus), requested)
    return tuple(Slot(index=i, cpus=shares[i], gpu=gpus[i] if gpus else None) for i in range(requested))


def _cores(machine: Machine, cpus: tuple[int, ...]) -> list[tuple[int, ...]]:
    """`cpus` grouped by physical core, in order of each core's lowest CPU."""
    wanted, seen, groups = set(cpus), set(), []
    for group in machine.siblings:
        mine = tuple(sorted(wanted.intersection(group)))
        if mine and not seen.intersection(mine):
            groups.append(mine)
            seen.update(mine)
    groups += [(cpu,) for cpu in cpus if cpu not in seen]
    return sorted(groups)


def _split(cpus: tuple[int, ...], cores: list[tuple[int, ...]], n: int) -> list[tuple[int, ...]]:
    """`cpus` in n disjoint, even, contiguous shares: by whole physical core when there are enough of them."""
    units = cores if len(cores) >= n else [(cpu,) for cpu in sorted(cpus)]
    size, extra = divmod(len(units), n)
    shares, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        shares.append(tuple(sorted(cpu for unit in units[start:end] for cpu in unit)))
        start = end
    return shares


def _near_shares(machine: Machine, gpus: tuple[Gpu, ...]) -> list[tuple[int, ...]] | None:
    """Each GPU's share of the usable cores NVML places near it, the GPUs of one set splitting it; None
    (an even split instead) where NVML does not say for some GPU, the sets overlap without being equal,
    or a set has fewer cores than GPUs near it."""
    usable = set(machine.cpus)
    near = [tuple(sorted(usable.intersection(g.cpus))) if g.cpus else () for g in gpus]
    if not all(near):
        return None
    sets = sorted(set(near))
    if any(set(a) & set(b) for i, a in enumerate(sets) for b in sets[i + 1:]):
        return None
    shares: list[tuple[int, ...] | None] = [None] * len(gpus)
    for group in sets:
        members = [i for i, cpus in enumerate(near) if cpus == group]
        if len(group) < len(members):
            return None
        for i, share in zip(members, _split(group, _cores(machine, group), len(members))):
            shares[i] = share
    return shares  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# claiming slots


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    """The slots one job holds while it runs."""

    slots: tuple[Slot, ...]
    whole_machine: bool
    """The job runs as it would without slots: every core and GPU, nothing pinned (a 1-slot run, a job run
    solo, or one that needs more slots than the run has); it holds every slot, so nothing runs beside it."""
    cpus: tuple[int, ...]
    """Its slots' cores; the machine's usable cores for the whole machine."""

    @property
    def pinned_cpus(self) -> tuple[int, ...] | None:
        """The cores the job's processes are pinned to; None for the whole machine."""
        return None if self.whole_machine else self.cpus

    @property
    def cuda_visible_devices(self) -> str | None:
        """CUDA_VISIBLE_DEVICES for the job: its GPUs by UUID; None (inherited) for the whole machine or no GPU."""
        gpus = [slot.gpu.uuid for slot in self.slots if slot.gpu is not None]
        return None if self.whole_machine or not gpus else ",".join(gpus)

    def columns(self) -> dict[str, object]:
        """The row's slot columns (packing aside): the first slot held, how many, the first GPU's NVML index and
        the cores, as a cpu list."""
        first = self.slots[0]
        return {"slot": first.index, col.num_slots: len(self.slots),
                col.gpu_index: None if self.whole_machine or first.gpu is None else first.gpu.index,
                col.cpu_affinity: cpu_list(self.cpus)}


class SlotPool:
    """The run's slots, free or held. The caller asks for the next job in plan order only and waits while it
    cannot have its slots (no job overtakes a waiting one: plan order holds and nothing starves)."""

    def __init__(self, slots: tuple[Slot, ...], machine_cpus: tuple[int, ...] | None = None):
        if not slots:
            raise ValueError("a slot pool needs at least one slot")
        self.slots = slots
        self.machine_cpus = tuple(sorted(machine_cpus or {cpu for slot in slots for cpu in slot.cpus}))
        self._free = set(range(len(slots)))

    @property
    def size(self) -> int:
        return len(self.slots)

    def claim(self, need: int | None) -> Grant | None:
        """`need` slots (None: the whole machine, i.e. every slot), the lowest free ones; None while fewer are
        free. A need beyond the pool's size is the whole machine."""
        whole = need is None or need > len(self.slots) or len(self.slots) == 1
        indices = sorted(self._free)[: len(self.slots) if whole else need]
        if len(indices) < (len(self.slots) if whole else need):
            return None
        self._free.difference_update(indices)
        held = tuple(self.slots[i] for i in indices)
        cpus = self.machine_cpus if whole else tuple(sorted({cpu for slot in held for cpu in slot.cpus}))
        return Grant(slots=held, whole_machine=whole, cpus=cpus)

    def grant_of(self, index: int) -> Grant:
        """Slot `index` alone, pinned, outside the pool's bookkeeping (the calibration places each job itself)."""
        slot = self.slots[index]
        return Grant(slots=(slot,), whole_machine=len(self.slots) == 1, cpus=slot.cpus)

    def release(self, grant: Grant) -> None:
        self._free.update(slot.index for slot in grant.slots)
