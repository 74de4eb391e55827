"""Terminal rendering for `nvbench run`: the progress bar, one line per finished cell, the final table."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

STATUS_STYLE = {"ok": "green", "skipped": "dim", "failed": "red", "timeout": "red", "crashed": "red"}


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None or value != value else format(value, spec)


class RunProgress:
    """A rich progress bar (cells done/total, ETA, current cell) plus a line per finished cell."""

    def __init__(self, console: Console, total: int):
        self.console = console
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                 console=console, transient=True)
        self.task = self.progress.add_task("starting", total=total)

    def __enter__(self) -> "RunProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def start(self, index: int, total: int, key: str) -> None:
        self.progress.update(self.task, description=key)

    def done(self, row: dict[str, Any]) -> None:
        status = row["status"]
        detail = (f"{_fmt(row.get('throughput_img_per_s'), '.1f')} img/s  top1 {_fmt(row.get('top1'), '.3f')}"
                  if status == "ok" else escape(row["reason"]))  # reasons quote logs: '[' is not markup
        self.console.print(f"[{STATUS_STYLE[status]}]{status:>8}[/] {row['cell_id']} r{row['repeat']}  {detail}",
                           highlight=False, soft_wrap=True)
        self.progress.advance(self.task)


def summary_table(rows: Iterable[dict[str, Any]]) -> Table:
    table = Table(title="nvbench results", show_lines=False)
    for name, justify in (("cell", "left"), ("rep", "right"), ("status", "left"), ("img/s", "right"),
                          ("±95%", "right"), ("top-1", "right"), ("data wait", "right"), ("reason", "left")):
        table.add_column(name, justify=justify, overflow="fold")
    for r in sorted(rows, key=lambda r: (r["cell_id"], r["repeat"])):
        tput, low, high = r.get("throughput_img_per_s"), r.get("throughput_ci_low_img_per_s"), \
            r.get("throughput_ci_high_img_per_s")
        half = (high - low) / 2 if None not in (low, high) and low == low else None
        table.add_row(r["cell_id"], str(r["repeat"]), f"[{STATUS_STYLE[r['status']]}]{r['status']}[/]",
                      _fmt(tput, ".1f"), _fmt(half, ".1f"), _fmt(r.get("top1"), ".3f"),
                      _fmt(r.get("exposed_data_wait_frac"), ".1%"), escape(r.get("reason") or ""))
    return table


def counts_line(rows: list[dict[str, Any]], run_dir: Path) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return f"{len(rows)} rows ({parts}); results in {run_dir}"
