"""What the work diff reads and says, declared once: work.parquet's phases in step order and its counters (a
closed set), each counter's words, the verdict's words, and the gate rules a matrix's `[judge.work_gates]` may
name. Pure data: the matrix's parser and the analysis read it alike."""

from __future__ import annotations

from dataclasses import dataclass

from harness.catalogue import work

COUNTED_STEP_PHASES = ("data", "h2d", "forward", "backward", "optimizer", "other")
"""Where a counted step's work falls, in the order a step runs them (the timed phases of harness.catalogue.steps, but
all-reduce inside backward, whose hooks launch it, and `other` for work outside every range): a counter of one of
these is per counted step."""
PROCESS, WINDOW = work.PROCESS_PHASE, work.WINDOW_PHASE
"""Whole-process counters (graph breaks, recompilations, graphs) and counted-window counters (recompilations
during the counted steps, device mallocs, allocator retries): their value is a count, not a rate."""
WORK_PHASES = (*COUNTED_STEP_PHASES, PROCESS, WINDOW)
"""Every phase of work.parquet, in the order the diff names them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkCounter:
    """One counter of work.parquet and how the diff says it."""

    name: str
    one: str
    """Its noun for one ("host sync"); empty: the row's key is the noun (an aten op's calls: "+16 aten::mm")."""
    many: str
    """Its noun for several ("host syncs")."""
    bytes_of: str | None = None
    """A bytes counter: the counter whose items it sizes (its change is said beside theirs, never alone)."""
    key_is_noun: bool = False
    """The key says what moved in a word of its own (a copy's direction: "+1 h2d copy")."""


_WORDS: dict[str, dict[str, object]] = {
    work.OP_CALLS: {"one": "", "many": ""},
    work.HOST_SYNCS: {"one": "host sync", "many": "host syncs"},
    work.ALLOCATIONS: {"one": "allocation", "many": "allocations"},
    work.ALLOCATED_BYTES: {"one": "", "many": "", "bytes_of": work.ALLOCATIONS},
    work.COPIES: {"one": "copy", "many": "copies", "key_is_noun": True},
    work.COPIED_BYTES: {"one": "", "many": "", "bytes_of": work.COPIES},
    work.KERNEL_LAUNCHES: {"one": "kernel launch", "many": "kernel launches"},
    work.COLLECTIVES: {"one": "collective", "many": "collectives"},
    work.COLLECTIVE_BYTES: {"one": "", "many": "", "bytes_of": work.COLLECTIVES},
    work.GRAPH_BREAKS: {"one": "graph break", "many": "graph breaks"},
    work.RECOMPILATIONS: {"one": "recompilation", "many": "recompilations"},
    work.GRAPHS: {"one": "graph", "many": "graphs"},
    work.DEVICE_MALLOCS: {"one": "device malloc", "many": "device mallocs"},
    work.ALLOC_RETRIES: {"one": "allocator retry", "many": "allocator retries"},
}
"""Each counter's words, keyed by the name harness.catalogue.work declares (the one closed set)."""
COUNTERS: tuple[WorkCounter, ...] = tuple(WorkCounter(name=name, **_WORDS[name]) for name in work.COUNTERS)
"""Every counter work.parquet holds, in the order the diff lists them within a phase (work.COUNTERS'): a counter
without words is a KeyError at import, never a silent gap."""
COUNTER_BY_NAME = {c.name: c for c in COUNTERS}
BYTES_FOR = {c.bytes_of: c.name for c in COUNTERS if c.bytes_of}
"""A counted thing -> the counter of its bytes (allocations -> allocated_bytes)."""
AFTER_WARMUP = {("window", "recompilations"): "after warm-up"}
"""Words a (phase, counter) adds after its noun: a recompilation during the counted steps came after warm-up."""

WORK_SAME = "work: same"
WORK_CHANGED = "work changed: "
SAME_WHERE_EXACT = "work: same where exact"
NOT_COUNTED = "work: no work counted"
WORK_NOTE = "; "
"""What joins a cell's verdict reason and its work words (analysis.product.extras.attach_work), as the kernel diff's
operators are joined (catalogue.kernels.OPERATORS_NOTE)."""
SHOWN_ITEMS = 6
"""Changed (or varying) items a verdict line names; the rest are counted: `and 3 more`."""

NO_RISE, NONE = "no-rise", "none"
GATE_RULES = {
    NO_RISE: "B's per-step count of the counter in a phase may not exceed the baseline's (exact items only)",
    NONE: "B must count none of it (recompilations: none after warm-up, in the counted window)",
}
"""What `[judge.work_gates]` may say of a counter: counter = rule."""
NONE_PHASES = {"recompilations": (WINDOW,)}
"""Where a `none` gate looks for a counter, where not every phase: recompilations at warm-up are expected."""
