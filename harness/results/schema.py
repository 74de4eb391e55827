"""The result schema: the cell and step tables as Arrow schemas, from the columns harness.catalogue declares, and
the version history.

Schema history (bump RESULT_SCHEMA_VERSION, and give store.RESULTS a step when a column is renamed or recomputed):
  1 (0.1.0): first release: cell summary rows (throughput with its interval, accuracy, loss, memory,
     data wait, twin efficiencies, NVML telemetry, MFU, profile and fire-drill flags) and per-rank
     step rows. Columns added later read as null from older files (store.read_table).
  2 (0.2.0): data wait as the GPU sees it: `exposed_data_wait_s/_frac` (CUDA events on the consumer stream
     around each fetch; on CPU the host figure) beside the host figure, renamed from `data_wait_s/_frac` to
     `host_data_wait_s/_frac`; `step_time_total_s`; the `compile` axis with `compile_s`; `startup_s`;
     `num_warmup_steps` renamed `warmup_steps_used` (auto warmup). Steps: `host_data_wait_s` (was `data_wait_s`),
     `exposed_data_wait_s`, `loss`, `lr`, `epoch`, `is_epoch_start`. Migrating version 1: the renamed
     columns carry over; the exposed wait of a CPU row is its host wait (the same measurement there), of a
     CUDA row null (never measured).
  3 (0.2.0): where a job ran: `nodes` (the node(s), comma-separated) and `slurm_job_id` (the SLURM executor's
     job; null for local processes); status `cancelled` (a SLURM job cancelled before its result). Migrating
     version 2: `nodes` is the row's `hostname` (every job then ran on the runner's own machine).
  4 (0.2.0): per-phase step timing: steps `phase_data_s`, `phase_h2d_s`, `phase_forward_s`,
     `phase_backward_s`, `phase_optimizer_s`, `phase_allreduce_s`; cells the medians `phase_<name>_median_s`
     and `phases_graphed`. Migrating version 3: the new columns read null (never measured).
  5 (0.2.0): slots, several jobs on one machine at once: `slot` (the first slot the job held), `num_slots`,
     `gpu_index` (its first GPU, NVML's index), `cuda_visible_devices`, `cpu_affinity` (its cores, a cpu list
     such as "0-21,88-109"), `packing` (solo, calibrated or uncalibrated), `gpu_shared` and `gpu_foreign_pids`
     (a process of no job of the run on the job's GPU during its window). A transient at the window's start:
     `start_transient_steps` (the window's first steps still in a start transient, harness.stats.settle;
     `is_steady` false and `steadiness` naming them when > 0); status `superseded` (an A/B repeat whose window
     opened in a transient and was run again; the row kept for the record, never compared). Where a process's
     time goes, cut further: `autotune_s` (the first training step of the cell's shapes on CUDA, timed apart
     from warmup and compile: cuDNN's autotuning; 0 on CPU) and the cuDNN knobs the cell ran with,
     `cudnn_benchmark` and `cudnn_benchmark_limit` (null on CPU). Migrating version 4: the new columns read
     null (jobs then ran one at a time, unpinned; never checked for a transient; autotuning never timed apart).
  6 (0.2.0): what else ran during the window (harness.host.meter): cells `foreign_cpu_frac`, `steal_frac`,
     `foreign_cpu_s`, `steal_s`, `num_involuntary_switches`, steps `foreign_cpu_frac`; a window above INTERFERENCE_THRESHOLD is not steady
     and its steadiness says why; a window too short to be tested for steadiness has `is_steady` null.
     Migrating version 5: the new columns read null (never measured).
  7 (0.2.0): data out of free text: cells `rerun_cause` (a superseded row's cause, `interference` or `start
     transient`: what a resumed A/B's re-run budgets read) and the start transient's size, `start_transient_low_x`
     and `start_transient_high_x` (its fastest and slowest step over the window's median: what the superseded
     row's reason is worded from). Migrating version 6: the new columns read null (a superseded row of version 6
     is classed by its interference columns).
  8 (0.2.0): typed, never joined: cells `gpu_foreign_pids` a list of integers (was the pids comma-joined in a
     string). Migrating version 7: the joined text split into its pids (empty text: no pid; null stays null).
  9 (0.2.0): cells `cell_label`, the cell's readable axis part as data (what every report and page names it by).
     Migrating version 8: an older row's label is its id without the id's hash (the one place that reads it so).
"""

from __future__ import annotations

from typing import Any, Iterable

import pyarrow as pa

from harness.catalogue.cells import CELL_COLUMNS
from harness.catalogue.columns import B, F, I, LI, S, TS, Column
from harness.catalogue.steps import STEP_COLUMNS

RESULT_SCHEMA_VERSION = 9
METADATA_VERSION_KEY = b"nvbench.schema_version"
METADATA_KIND_KEY = b"nvbench.table"

SUPERSEDED = "superseded"
"""Status of an A/B repeat whose window opened in a start transient and ran again (harness.orchestrate.workflows.rerun):
the row is kept for the record and never compared (only `ok` rows are)."""
STATUSES = ("ok", "failed", "timeout", "crashed", "skipped", "cancelled", SUPERSEDED)
SUPERSEDED_STEPS = "steps-superseded"
"""Folder of a run beside steps/ that holds a superseded repeat's steps (`<cell>-r<k>-superseded<n>.parquet`), so
that a query over `steps/*.parquet` counts each repeat's measured steps once: those of the attempt kept."""


ARROW_TYPES = {S: pa.string(), F: pa.float64(), I: pa.int64(), B: pa.bool_(), TS: pa.timestamp("us", tz="UTC"),
               LI: pa.list_(pa.int64())}
"""The catalogue's named column types as Arrow types."""


def arrow_field(column: Column) -> pa.Field:
    """A catalogue column as an Arrow field, its unit and meaning in the field's metadata (what `nvbench` and any
    Parquet reader show as the column's description)."""
    return pa.field(column.name, ARROW_TYPES[column.type],
                    metadata={b"unit": column.unit.encode(), b"doc": column.doc.encode()})


def schema(columns: Iterable[Column], kind: str) -> pa.Schema:
    return pa.schema([arrow_field(c) for c in columns],
                     metadata={METADATA_VERSION_KEY: str(RESULT_SCHEMA_VERSION).encode(), METADATA_KIND_KEY: kind.encode()})


CELL_SCHEMA = schema(CELL_COLUMNS, "cells")
STEP_SCHEMA = schema(STEP_COLUMNS, "steps")


def cell_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows (dicts; missing columns become null) as a table of the cell schema; unknown keys are an error."""
    return _table(rows, CELL_SCHEMA)


def step_table(columns: dict[str, Any]) -> pa.Table:
    """Column arrays as a table of the step schema."""
    unknown = set(columns) - set(STEP_SCHEMA.names)
    if unknown:
        raise KeyError(f"not step columns: {sorted(unknown)}")
    n = len(next(iter(columns.values()))) if columns else 0
    arrays = [pa.array(columns[f.name], type=f.type) if f.name in columns else pa.nulls(n, f.type)
              for f in STEP_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=STEP_SCHEMA)


def _table(rows: list[dict[str, Any]], sch: pa.Schema) -> pa.Table:
    for row in rows:
        unknown = set(row) - set(sch.names)
        if unknown:
            raise KeyError(f"not {sch.metadata[METADATA_KIND_KEY].decode()} columns: {sorted(unknown)}")
    arrays = [pa.array([row.get(f.name) for row in rows], type=f.type) for f in sch]
    return pa.Table.from_arrays(arrays, schema=sch)


def markdown_reference() -> str:
    """Column tables for docs/results.md."""
    out = []
    from harness.catalogue.work import WORK_COLUMNS

    for title, cols in (("cells/*.parquet: one row per (cell, repeat)", CELL_COLUMNS),
                        ("steps/*.parquet: one row per step per rank", STEP_COLUMNS),
                        ("work.parquet: one row per (cell, process, rank, phase, counter, key) of a counted process",
                         WORK_COLUMNS)):
        out.append(f"### {title}\n\n| column | type | unit | meaning |\n|---|---|---|---|")
        out += [f"| `{c.name}` | {ARROW_TYPES[c.type]} | {c.unit} | {c.doc} |" for c in cols]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # python -m harness.results.schema  -> the column tables of docs/results.md
    print(markdown_reference())
