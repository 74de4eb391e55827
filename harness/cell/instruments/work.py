"""A counted window's work, counted exactly: op calls, host syncs, allocations, copies, kernel launches and
collectives per step phase, from torch.profiler's events (pure functions), and torch.compile's and the CUDA
allocator's counters around the window (harness.catalogue.work names the counters, results.work the table)."""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from harness.catalogue import col
from harness.catalogue.work import (ALLOC_RETRIES, ALLOCATED_BYTES, ALLOCATIONS, COLLECTIVE_BYTES, COLLECTIVES,
                                    COPIED_BYTES, COPIES, DEVICE_MALLOCS, GRAPH_BREAKS, GRAPHS, HOST_SYNCS,
                                    KERNEL_LAUNCHES, OP_CALLS, PROCESS_PHASE, RECOMPILATIONS, WINDOW_PHASE)
from harness.cell.instruments.kernels import _is_cpu, _is_op, _Phases
from harness.results.kernels import BETWEEN_OPS

SYNC_OPS = frozenset({
    "aten::_local_scalar_dense",  # .item(), bool(t), float(t), int(t): the value must reach the host
    "aten::nonzero",  # its output's size is data: also behind boolean-mask indexing
    "aten::masked_select",
    "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
})
"""aten ops that force a host-device sync on a GPU, counted as such on a CPU too. aten::nonzero_static is left out:
its size is given, which is why it exists. .tolist() of a CPU tensor calls no aten op (nothing to see on a CPU); of
a CUDA tensor it copies to the host, seen as the runtime's synchronize."""
VALUE_READS = frozenset({"aten::item", "aten::is_nonzero"})
"""aten ops that only read a value through a sync op: a call of one is counted as its host sync, not as an op call
too (the sync is the work; an .item() added shows as one host sync and nothing else)."""
CUDA_SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"})
"""CUDA runtime calls that block the host until the device is done (cudaMemcpy without Async is blocking)."""
COLLECTIVE_PREFIX = "c10d::"
"""A collective as the model's code (or DDP's hooks) calls it: c10d::allreduce_, c10d::broadcast_, ..."""
BACKEND_PREFIXES = ("nccl:", "gloo:")
"""The backend's own record of a collective (nccl:all_reduce), with its tensor's shape: where the bytes are."""
DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4, "long int": 8, "short int": 2,
               "signed char": 1, "unsigned char": 1, "bool": 1}
"""Bytes per element of the dtype names torch.profiler's record_shapes gives."""
COPY_DIRECTIONS = {"HtoD": "h2d", "DtoH": "d2h", "DtoD": "d2d", "PtoP": "d2d"}
"""A CUDA memcpy activity's name ("Memcpy HtoD (Pageable -> Device)") to the copy's direction."""
COUNTED_DEVICES = {"cpu": ("CPU", "MKLDNN", "IDEEP"), "cuda": ("CUDA",)}
"""Memory events counted as the cell's device's allocations (the profiler's own grouping)."""

Key = tuple[str, str, str]
"""(phase, counter, key) of one count."""


class MemoryEvent(NamedTuple):
    """One of the profiler's memory events: an allocation (bytes > 0) or a free (bytes < 0)."""

    time_us: float
    """On the function events' clock (microseconds from the trace's start)."""
    nbytes: int
    device: str
    """torch's DeviceType name without its prefix: CPU, CUDA, MKLDNN, ..."""
    thread: int


def memory_events(kineto_results: Any) -> list[MemoryEvent]:
    """The memory events of a finished torch.profiler (`prof.profiler.kineto_results`): prof.events() folds them
    into the ops' memory sums, allocations and frees together, so the count is lost there."""
    start = kineto_results.trace_start_ns()
    return [MemoryEvent((e.start_ns() - start) / 1000, e.nbytes(), str(e.device_type()).rpartition(".")[2],
                        e.start_thread_id())
            for e in kineto_results.events() if e.name() == "[memory]"]


def _ancestors(event: Any) -> Iterable[Any]:
    node = event.cpu_parent
    while node is not None:
        yield node
        node = node.cpu_parent


def _cpu_events(events: Sequence[Any], phases: _Phases) -> Iterable[tuple[str, Any]]:
    """(phase, event) of every synchronous CPU event inside a step."""
    for e in events:
        if _is_cpu(e) and not e.is_async and (phase := phases.at(e.time_range.start)) is not None:
            yield phase, e


def host_counts(events: Sequence[Any], phases: _Phases, counts: Counter) -> None:
    """op_calls, host_syncs and collectives of the CPU events into `counts`. A sync or a collective inside
    another is the same one seen twice (.item()'s cudaStreamSynchronize inside aten::_local_scalar_dense); an
    outermost op that is a sync or a value read is counted as the sync alone."""
    for phase, e in _cpu_events(events, phases):
        up = list(_ancestors(e))
        if _is_op(e) and e.name not in SYNC_OPS | VALUE_READS and not any(_is_op(a) for a in up):
            counts[(phase, OP_CALLS, e.name)] += 1
        if e.name in SYNC_OPS | CUDA_SYNC_CALLS and not any(a.name in SYNC_OPS for a in up):
            counts[(phase, HOST_SYNCS, e.name)] += 1
        if e.name.startswith(COLLECTIVE_PREFIX) and not any(a.name.startswith(COLLECTIVE_PREFIX) for a in up):
            counts[(phase, COLLECTIVES, e.name)] += 1


def tensor_bytes(shapes: Sequence[Any], dtypes: Sequence[str]) -> int:
    """Bytes of the tensor inputs record_shapes saw (a dtype it names; lists of tensors have no dtype there)."""
    total = 0
    for shape, dtype in zip(shapes, dtypes):
        if dtype in DTYPE_BYTES and isinstance(shape, list) and all(isinstance(n, int) for n in shape):
            numel = 1
            for n in shape:
                numel *= n
            total += numel * DTYPE_BYTES[dtype]
    return total


def collective_bytes(events: Sequence[Any], counts: Counter) -> None:
    """Bytes of the backend's collectives over the whole window (phase `window`): the backend runs them on a
    thread of its own, whose timing is no step phase's."""
    for e in events:
        if e.name.startswith(BACKEND_PREFIXES):
            counts[(WINDOW_PHASE, COLLECTIVE_BYTES, e.name)] += tensor_bytes(e.input_shapes or [],
                                                                            getattr(e, "input_dtypes", None) or [])


class _TopOps:
    """The outermost aten ops of each thread, to find the one running at a moment."""

    def __init__(self, events: Sequence[Any]) -> None:
        by_thread = defaultdict(list)
        for e in events:
            if _is_cpu(e) and not e.is_async and _is_op(e) and not any(_is_op(a) for a in _ancestors(e)):
                by_thread[e.thread].append((e.time_range.start, e.time_range.end, e.name))
        self._ops = {t: sorted(ops) for t, ops in by_thread.items()}
        self._starts = {t: [o[0] for o in ops] for t, ops in self._ops.items()}

    def at(self, thread: int, t_us: float) -> str:
        i = bisect.bisect_right(self._starts.get(thread, []), t_us)
        if i and self._ops[thread][i - 1][1] >= t_us:
            return self._ops[thread][i - 1][2]
        return BETWEEN_OPS


def allocation_counts(events: Sequence[Any], memory: Sequence[MemoryEvent], phases: _Phases, device: str,
                      counts: Counter) -> None:
    """allocations and allocated_bytes of the cell's device into `counts` (frees, the negative events, left out),
    each under the outermost aten op on its thread at that moment."""
    ops = _TopOps(events)
    for m in memory:
        if m.nbytes <= 0 or m.device not in COUNTED_DEVICES[device] or (phase := phases.at(m.time_us)) is None:
            continue
        op = ops.at(m.thread, m.time_us)
        counts[(phase, ALLOCATIONS, op)] += 1
        counts[(phase, ALLOCATED_BYTES, op)] += m.nbytes


def _memcpy_bytes(event: Any) -> int:
    """A CUDA memcpy activity's bytes, from the metadata kineto gives it ("bytes": N). Pending: not yet run on a GPU."""
    found = re.search(r'"bytes"\s*:\s*(\d+)', getattr(event, "metadata_json", None) or "")
    return int(found.group(1)) if found else 0


def device_counts(events: Sequence[Any], phases: _Phases, counts: Counter) -> None:
    """kernel_launches, copies and copied_bytes of the device's activity, each in the phase of its launch (found by
    the launch's correlation id, as harness.cell.instruments.kernels does). Pending: written against torch 2.13's profiler, not
    yet run on a GPU."""
    launched_at = {}
    for e in events:
        if _is_cpu(e) and (e.linked_correlation_id or e.id) not in launched_at:
            launched_at[e.linked_correlation_id or e.id] = e.time_range.start
    for k in events:
        if _is_cpu(k) or getattr(k, "is_user_annotation", False):
            continue
        phase = phases.at(launched_at.get(k.linked_correlation_id, k.time_range.start))
        if phase is None or k.name.startswith("Memset"):
            continue
        if k.name.startswith("Memcpy"):
            direction = next((d for name, d in COPY_DIRECTIONS.items() if name in k.name), "d2d")
            counts[(phase, COPIES, direction)] += 1
            counts[(phase, COPIED_BYTES, direction)] += _memcpy_bytes(k)
        else:
            counts[(phase, KERNEL_LAUNCHES, k.name)] += 1


def window_counts(events: Sequence[Any], memory: Sequence[MemoryEvent], *, device: str) -> Counter:
    """Every per-step count of a counted window: (phase, counter, key) -> count over its steps."""
    phases, counts = _Phases(events), Counter()
    host_counts(events, phases, counts)
    allocation_counts(events, memory, phases, device, counts)
    collective_bytes(events, counts)
    if device == "cuda":
        device_counts(events, phases, counts)
    return counts


def compile_counts(counters: Mapping[str, Mapping[str, int]], recompiles: int, window_recompiles: int) -> Counter:
    """torch.compile's counters of the process (torch._dynamo.utils.counters, and the recompilations its
    compilation metrics record): graph breaks by the reason's first line and in all, unique graphs, recompilations
    over the process and in the window. Empty where nothing was compiled (an eager cell writes none)."""
    if not counters.get("frames", {}).get("total"):
        return Counter()
    counts = Counter({(PROCESS_PHASE, GRAPH_BREAKS, ""): 0})
    for reason, n in counters.get("graph_break", {}).items():
        counts[(PROCESS_PHASE, GRAPH_BREAKS, reason.strip().splitlines()[0] if reason.strip() else "")] += n
        counts[(PROCESS_PHASE, GRAPH_BREAKS, "")] += n
    counts[(PROCESS_PHASE, GRAPHS, "")] = counters.get("stats", {}).get("unique_graphs", 0)
    counts[(PROCESS_PHASE, RECOMPILATIONS, "")] = recompiles
    counts[(WINDOW_PHASE, RECOMPILATIONS, "")] = window_recompiles
    return counts


ALLOCATOR_STATS = {DEVICE_MALLOCS: "num_device_alloc", ALLOC_RETRIES: "num_alloc_retries"}
"""The CUDA caching allocator's counters (torch.cuda.memory_stats()) differenced across the window."""


def allocator_counts(before: Mapping[str, int], after: Mapping[str, int]) -> Counter:
    """device_mallocs and alloc_retries during the window (phase `window`). Pending: written against torch 2.13's
    memory_stats(), not yet run on a GPU."""
    return Counter({(WINDOW_PHASE, name, ""): after.get(stat, 0) - before.get(stat, 0)
                    for name, stat in ALLOCATOR_STATS.items()})


def work_rows(counts: Mapping[Key, int], *, cell_id: str, process: int, rank: int, device: str,
              steps: int) -> list[dict[str, Any]]:
    """work.parquet rows of one counted window, sorted by (phase, counter, key)."""
    whole = (PROCESS_PHASE, WINDOW_PHASE)
    return [{col.cell_id: cell_id, col.process: process, col.rank: rank, col.device: device, col.phase: phase,
             col.counter: counter, col.key: key, col.count: int(n), col.steps: steps,
             col.per_step: float(n) if phase in whole else n / steps}
            for (phase, counter, key), n in sorted(counts.items())]


class WorkCounter:
    """torch.profiler (memory and shapes on) over a window, with torch.compile's and the CUDA allocator's counters
    read at its start and end; `counts()` once it stopped."""

    def __init__(self, *, is_cuda: bool) -> None:
        import torch.profiler

        activities = [torch.profiler.ProfilerActivity.CPU]
        if is_cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.device = "cuda" if is_cuda else "cpu"
        self._profiler = torch.profiler.profile(activities=activities, profile_memory=True, record_shapes=True)
        self._recompiles_before, self._allocator_before = 0, {}

    def start(self) -> None:
        self._recompiles_before = _recompiles()
        self._allocator_before = _allocator_stats(self.device)
        self._profiler.start()

    def stop(self) -> None:
        self._profiler.stop()

    def counts(self) -> Counter:
        counts = window_counts(self._profiler.events(), memory_events(self._profiler.profiler.kineto_results),
                               device=self.device)
        recompiles = _recompiles()
        counts.update(compile_counts(_dynamo_counters(), recompiles, recompiles - self._recompiles_before))
        if self.device == "cuda":
            counts.update(allocator_counts(self._allocator_before, _allocator_stats(self.device)))
        return counts


def _dynamo_counters() -> dict[str, dict[str, int]]:
    import sys

    if "torch._dynamo" not in sys.modules:  # never imported: nothing was compiled
        return {}
    from torch._dynamo.utils import counters

    return {name: dict(c) for name, c in counters.items()}


def _recompiles() -> int:
    """Recompilations dynamo's compilation metrics record so far (prepare_process keeps all of them)."""
    import sys

    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import get_compilation_metrics

    return sum(1 for m in get_compilation_metrics() if m.recompile_reason)


def prepare_process() -> None:
    """Keep every compile's record in this process: dynamo keeps its last 64 only, and a longer count would
    be short. Called before the cell compiles."""
    from torch._dynamo.utils import set_compilation_metrics_limit

    set_compilation_metrics_limit(1_000_000)


def _allocator_stats(device: str) -> dict[str, int]:
    if device != "cuda":
        return {}
    import torch

    stats = torch.cuda.memory_stats()
    return {stat: int(stats.get(stat, 0)) for stat in ALLOCATOR_STATS.values()}
