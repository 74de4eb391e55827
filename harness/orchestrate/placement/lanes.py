"""Chains of jobs on slots: each chain (an A/B pair) runs its jobs one after another on the same slots, and as many
chains run at once as the slots hold, started in order (a chain waits for its slots; none overtakes it)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.orchestrate.session.job import JobContext, Placement, PreparedJob, finish_job, prepare_job
from harness.orchestrate.placement.local import LocalExecutor
from harness.orchestrate.placement.packing import Packing
from harness.matrix.cells import Cell


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """One job of a chain: a (cell, repeat) of the run folder `ctx` writes into; `tag` names it to the caller."""

    cell: Cell
    repeat: int
    ctx: JobContext
    tag: str


@dataclass(slots=True)
class _Running:
    links: deque
    placed: Placement
    link: Link | None = None
    prepared: PreparedJob | None = None


def run_chains(chains: Sequence[Sequence[Link]], packing: Packing, *,
               on_start: Callable[[Link], None] | None = None,
               on_done: Callable[[Link, dict[str, Any]], None] | None = None,
               again: Callable[[Link, dict[str, Any]], Link | None] | None = None) -> None:
    """Run every chain's jobs, each chain on one claim of slots (the most its cells need) for all its jobs; a
    job that cannot run (skipped) is its row at once and the chain goes on. `again(link, row)` may hand back a
    job to run next in the same chain, on the same slots (an A/B's re-run). Ctrl-C kills the jobs in flight."""
    pool, executor = packing.pool(), LocalExecutor()
    waiting = deque(deque(chain) for chain in chains if chain)
    running: dict[str, _Running] = {}

    def advance(run: _Running) -> None:
        """Start the chain's next job that runs; release its slots when it has none left."""
        while run.links:
            link = run.links.popleft()
            if on_start:
                on_start(link)
            prepared = prepare_job(link.cell, link.repeat, link.ctx, placed=run.placed)
            if isinstance(prepared, dict):
                if on_done:
                    on_done(link, prepared)
                continue
            run.link, run.prepared = link, prepared
            running[executor.submit(prepared.launch)] = run
            return
        pool.release(run.placed.grant)

    try:
        while waiting or running:
            while waiting:
                need = _need(packing, waiting[0])
                grant = pool.claim(need)
                if grant is None:
                    break
                links = waiting.popleft()
                advance(_Running(links=links, placed=Placement(grant=grant, packing=packing.label(links[0].cell,
                                                                                                  grant))))
            for handle, ended in (executor.wait(list(running)) if running else {}).items():
                run = running.pop(handle)
                row = finish_job(run.prepared, ended, run.link.ctx)
                if on_done:
                    on_done(run.link, row)
                if again and (repeat := again(run.link, row)) is not None:
                    run.links.appendleft(repeat)
                advance(run)
    except BaseException:
        executor.cancel(list(running))
        raise


def _need(packing: Packing, links: deque) -> int | None:
    """The slots a chain takes: the whole machine when any of its jobs runs solo, else the most any takes."""
    needs = [packing.needs(link.cell) for link in links]
    return None if None in needs else max(needs)
