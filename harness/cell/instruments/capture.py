"""A profiled cell's side of `nvbench profile`: the job's profile section turns the measured window into the
profiled steps, and an instrument records exactly them (cudaProfilerStart/Stop for nsys, torch.profiler)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from harness.matrix.cells import Cell
from harness.catalogue import col

KEY_AVERAGES_ROWS = 60
"""Rows of the key-averages table written beside a torch trace."""

def cell_for_job(cell: Cell, section: dict[str, Any] | None) -> Cell:
    """The cell as the worker runs it: the profiled steps are the measured window; one validation batch."""
    if not section:
        return cell
    bench = dataclasses.replace(cell.benchmark, measure_steps=int(section["steps"]), val_steps=1)
    return dataclasses.replace(cell, benchmark=bench)


def range_modes(cell: Cell, section: dict[str, Any] | None) -> tuple[bool, bool]:
    """(NVTX on, torch.profiler ranges on): nsys always gets NVTX, torch gets record_function ranges."""
    tool = section["tool"] if section else None
    return cell.run.nvtx or tool == "nsys", tool == "torch"


class NsysCapture:
    """cudaProfilerStart/Stop around the measured window, so `nsys --capture-range=cudaProfilerApi` records
    only the profiled steps."""

    def start(self) -> None:
        import torch.cuda.profiler

        torch.cuda.profiler.start()

    def stop(self) -> None:
        import torch.cuda.profiler

        torch.cuda.profiler.stop()


class TorchCapture:
    """torch.profiler over the measured window; on stop, a Chrome/Perfetto trace and a key-averages table."""

    def __init__(self, section: dict[str, Any], *, rank: int, is_cuda: bool) -> None:
        import torch.profiler

        activities = [torch.profiler.ProfilerActivity.CPU]
        if is_cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._sort_by = "self_device_time_total" if is_cuda else "self_cpu_time_total"
        stem = Path(section["dir"]) / f"{section['name']}-rank{rank}"
        self.trace_path = stem.with_name(stem.name + ".trace.json")
        self.table_path = stem.with_name(stem.name + ".key_averages.txt")
        self._section, self._rank, self._is_cuda = section, rank, is_cuda
        # a kernels repeat keeps no shapes: they cost time in every op and kernels.parquet does not use them
        self._profiler = torch.profiler.profile(activities=activities, record_shapes=not section.get("kernels"))

    def start(self) -> None:
        self._profiler.start()

    def stop(self) -> None:
        from harness.results import store

        self._profiler.stop()
        if self._section.get("kernels"):  # an A/B's profiled repeat: its rows, not a trace
            self._write_kernels()
            return
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        self._profiler.export_chrome_trace(str(self.trace_path))
        table = self._profiler.key_averages().table(sort_by=self._sort_by, row_limit=KEY_AVERAGES_ROWS)
        store.write_bytes(self.table_path, (table + "\n").encode())

    def _write_kernels(self) -> None:
        from harness.cell.instruments.kernels import kernel_rows
        from harness.results import kernels, store

        section = self._section
        # the job's own cell id and repeat, not the profiled cell's: a shorter window is another id
        cell_id, repeat = section[col.cell_id], int(section["repeat"])
        rows = kernel_rows(self._profiler.events(), cell_id=cell_id, repeat=repeat, rank=self._rank,
                           is_cuda=self._is_cuda, steps=int(section["steps"]))
        path = Path(section["dir"]) / kernels.PARTS_DIR / f"{section['name']}-rank{self._rank}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        store.write_table(path, kernels.kernels_table(rows))


class WorkCapture:
    """A counted process's window (section `work`): its work counted (harness.cell.instruments.work), written as its
    work.parquet part; no trace."""

    def __init__(self, section: dict[str, Any], *, rank: int, is_cuda: bool) -> None:
        from harness.cell.instruments.work import WorkCounter

        self._section, self._rank = section, rank
        self._counter = WorkCounter(is_cuda=is_cuda)

    def start(self) -> None:
        self._counter.start()

    def stop(self) -> None:
        from harness.cell.instruments.work import work_rows
        from harness.results import store, work

        self._counter.stop()
        section = self._section
        cell_id, process = section[col.cell_id], int(section["repeat"])
        rows = work_rows(self._counter.counts(), cell_id=cell_id, process=process, rank=self._rank,
                         device=self._counter.device, steps=int(section["steps"]))
        path = Path(section["dir"]) / work.PARTS_DIR / f"{section['name']}-rank{self._rank}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        store.write_table(path, work.work_table(rows))


def prepare(cell: Cell, section: dict[str, Any] | None) -> None:
    """Before the cell builds: a counted process that compiles keeps every compile's record (its recompilations)."""
    if section and section.get("work") and cell.compile == "inductor":
        from harness.cell.instruments.work import prepare_process

        prepare_process()


def capture(section: dict[str, Any] | None, *, rank: int,
            is_cuda: bool) -> NsysCapture | TorchCapture | WorkCapture | None:
    """The instrument that records the measured window for the job's profile section (None: not profiling)."""
    if not section:
        return None
    if section.get("work"):
        return WorkCapture(section, rank=rank, is_cuda=is_cuda)
    if section["tool"] == "nsys":  # a CPU cell is captured whole (no cudaProfilerApi without CUDA)
        return NsysCapture() if is_cuda else None
    return TorchCapture(section, rank=rank, is_cuda=is_cuda)
