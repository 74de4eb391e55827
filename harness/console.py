"""Terminal output of `nvbench run`: the progress bar, a line per finished job, and the summary a run ends
with, made to fit the terminal (one line per cell that ran, skips grouped by reason, failures, what next)."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from harness.fit import shorten, wrap
from harness.results.accuracy import MIN_VAL_IMAGES, chance_text, too_few_images, top1_text, with_top1
from harness.results.schema import STATUSES, SUPERSEDED
from harness.stats.inference import mean_interval
from harness.catalogue import col
from harness.catalogue.cells import row_label
from harness.results.interference import row_interference

STATUS_STYLE = {"ok": "green", "skipped": "dim", "failed": "red", "timeout": "red", "crashed": "red", "cancelled": "red",
                SUPERSEDED: "yellow"}
BAD_STATUSES = tuple(s for s in STATUSES if s not in ("ok", "skipped", SUPERSEDED))


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None or value != value else format(value, spec)


class RunProgress:
    """A rich progress bar (cells done/total, ETA, the jobs running: the oldest, and how many more when slots
    run several) plus a line per finished cell (with its slot when the run packs jobs)."""

    def __init__(self, console: Console, total: int):
        self.console = console
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                 console=console, transient=True)
        self.task = self.progress.add_task("starting", total=total)
        self.running: list[str] = []

    def __enter__(self) -> "RunProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def start(self, index: int, total: int, key: str) -> None:
        self.running.append(key)
        self._describe()

    def _describe(self) -> None:
        more = f" +{len(self.running) - 1} running" if len(self.running) > 1 else ""
        self.progress.update(self.task, description=(self.running[0] + more) if self.running else "")

    def done(self, row: dict[str, Any]) -> None:
        status = row["status"]
        key = f"{row[col.cell_id]}-r{row['repeat']}"
        if key in self.running:
            self.running.remove(key)
            self._describe()
        where = f" s{row['slot']}" if row.get("packing") not in (None, "solo") else ""
        head = f" {row[col.cell_id]} r{row['repeat']}{where}  "
        detail = (f"{_fmt(row.get(col.throughput_img_per_s), '.1f')} img/s  top1 {top1_text([row])}"
                  if status == "ok" else _first_line(row["reason"]))
        # one line per job whatever the width: a long reason ends at a whole word here, and the summary (or
        # --verbose) shows it in full; soft_wrap: rich neither folds nor crops what is left
        self.console.print(Text.assemble((f"{status:>8}", STATUS_STYLE[status]), head,
                                         shorten(detail, self.console.width - 8 - len(head))),
                           highlight=False, soft_wrap=True)
        self.progress.advance(self.task)


def detail_table(rows: Iterable[dict[str, Any]]) -> Table:
    """Every (cell, repeat) row with its full id and reason: `nvbench run --verbose`."""
    table = Table(title="nvbench results", show_lines=False)
    for name, justify in (("cell", "left"), ("rep", "right"), ("status", "left"), ("img/s", "right"),
                          ("±95%", "right"), ("top-1", "right"), ("data wait", "right"), ("reason", "left")):
        table.add_column(name, justify=justify, overflow="fold")
    for r in sorted(rows, key=lambda r: (r[col.cell_id], r["repeat"])):
        tput, low, high = r.get(col.throughput_img_per_s), r.get(col.throughput_ci_low_img_per_s), \
            r.get(col.throughput_ci_high_img_per_s)
        half = (high - low) / 2 if None not in (low, high) and low == low else None
        table.add_row(r[col.cell_id], str(r["repeat"]), f"[{STATUS_STYLE[r['status']]}]{r['status']}[/]",
                      _fmt(tput, ".1f"), _fmt(half, ".1f"), top1_text([r]) + chance_text([r]),
                      _fmt(r.get(col.exposed_data_wait_frac), ".1%"), escape(r.get("reason") or ""))
    return table


# ---------------------------------------------------------------------------------------------
# the summary a run ends with


def _mean(values: Iterable[Any]) -> float | None:
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


def throughput_interval_pct(ok: Sequence[Mapping[str, Any]]) -> float | None:
    """Half-width of the 95 % interval of a cell's throughput, in % of it: one repeat, its window's interval
    (batch means over its steps); several, the t interval of their mean (what a rerun would move)."""
    values = [r[col.throughput_img_per_s] for r in ok if (r.get(col.throughput_img_per_s) or 0) > 0]
    if len(values) > 1:
        ci = mean_interval(values)
        return 100 * (ci.high - ci.low) / 2 / ci.estimate
    if len(values) == 1:
        low, high = ok[0].get(col.throughput_ci_low_img_per_s), ok[0].get(col.throughput_ci_high_img_per_s)
        if low is not None and high is not None and math.isfinite(low) and math.isfinite(high):
            return 100 * (high - low) / 2 / values[0]
    return None


def _by_cell(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    cells: dict[str, list[Mapping[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r[col.cell_id], r["repeat"])):
        cells.setdefault(r[col.cell_id], []).append(r)
    return cells


def ran_table(cells: Mapping[str, Sequence[Mapping[str, Any]]]) -> Table:
    """One line per cell with an ok repeat: its label, mean img/s with its interval, top-1, data wait, status."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    # the only column rich may narrow (it collapses wrappable ones first); a label has no space to wrap at,
    # so it is cut with an ellipsis instead
    table.add_column("cell", overflow="ellipsis", min_width=12)
    for name in ("img/s", "±95%", "top-1", "data wait"):
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    table.add_column("status", no_wrap=True, min_width=6)
    for cid, rows in cells.items():
        ok = [r for r in rows if r["status"] == "ok"]
        status = "ok" if len(ok) == len(rows) else f"ok {len(ok)}/{len(rows)}"
        table.add_row(row_label(rows[0]), _fmt(_mean(r.get(col.throughput_img_per_s) for r in ok), ".1f"),
                      _plus_minus(throughput_interval_pct(ok)),
                      top1_text(ok, short=True),
                      _fmt(_mean(r.get(col.exposed_data_wait_frac) for r in ok), ".1%"),
                      Text(status, style="green" if len(ok) == len(rows) else "yellow"))
    return table


def _plus_minus(pct: float | None) -> str:
    return "-" if pct is None or not math.isfinite(pct) else f"±{pct:.1f}%"


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else "(no reason given)"


def _skip_lines(cells: Mapping[str, Sequence[Mapping[str, Any]]], width: int) -> list[Text]:
    """One group per reason, most common first; a reason longer than the line wraps under its own start."""
    reasons = Counter(_first_line(rows[0]["reason"]) for rows in cells.values())
    digits = len(str(max(reasons.values(), default=0)))
    return [Text(line) for reason, n in reasons.most_common()
            for line in wrap(reason, width, first=f"  {n:>{digits}}  ")]


def _failure_lines(cells: Mapping[str, Sequence[Mapping[str, Any]]], width: int) -> list[Text]:
    """A line per failed cell: its label, which repeats, the status (red), the first line of the reason,
    wrapped under the label."""
    lines = []
    for cid, rows in cells.items():
        bad = [r for r in rows if r["status"] in BAD_STATUSES]
        which = f"r{bad[0]['repeat']}" if len(bad) == 1 else f"{len(bad)} of {len(rows)} repeats"
        head, status = f"  {row_label(rows[0])}  ", f"{which} {bad[0]['status']}"
        wrapped = [Text(line) for line in wrap(f"{status}: {_first_line(bad[0]['reason'])}", width, first=head,
                                               indent="    ")]
        wrapped[0].stylize("red", len(head), len(head) + len(status))
        lines += wrapped
    return lines


def ran_notes(ran: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """What the ran table's figures mean where a newcomer would ask: the interval, a top-1 of "-", "n/a" or
    near chance, and why fp16 crawls on a CPU."""
    ok = {cid: [r for r in rows if r["status"] == "ok"] for cid, rows in ran.items()}
    notes = ["±95%: one repeat, its window's interval; several, the interval of their mean"]
    if any(too_few_images(rows) for rows in ok.values()):
        notes.append(f"top-1 n/a: validated on fewer than {MIN_VAL_IMAGES} images, not a result")
    dashes = [cid for cid, rows in ok.items() if not with_top1(rows)]
    if dashes:
        synthetic = all(r.get("backend") == "synthetic" for cid in dashes for r in ok[cid])
        notes.append("top-1 -: not measured" + (" (synthetic data has random labels: nothing to learn)" if synthetic
                                                  else " (no validation result)"))
    numbers = [r for rows in ok.values() if with_top1(rows) and not too_few_images(rows) for r in rows]
    chances = sorted({r[col.num_classes] for r in numbers if r.get(col.num_classes)})
    if chances:
        smoke = "; a --smoke cell's few steps leave it near that" if any(r.get(col.is_smoke) for r in numbers) else ""
        notes.append("top-1 by chance: " + ", ".join(f"{1 / n:.3f} (1 / {n} classes)" for n in chances) + smoke)
    if any(r.get("precision") == "fp16" and r.get("device") == "cpu" for rows in ok.values() for r in rows):
        notes.append("fp16 on a CPU is slow: no fast fp16 kernels there; on a GPU fp16 is fast")
    return notes


def interference_lines(rows: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    """'taken under interference: 2 cells, 3 repeats' and a line per cell naming its repeats and how busy the
    machine was: a number taken beside another process's load says so (harness.results.interference)."""
    hit = [r for r in rows if r["status"] == "ok" and row_interference(r) is not None]
    if not hit:
        return []
    cells = _by_cell(hit)
    out = wrap(f"taken under interference: {_cells_word(len(cells))}, {len(hit)} repeat(s) (not steady; a report "
               "leaves them out)", width, indent="  ")
    for cid, members in sorted(cells.items()):
        shares = ", ".join(f"r{r['repeat']} {r.get(col.foreign_cpu_frac) or 0:.0%}" for r in members)
        out += wrap(f"{cid}: other processes on its cores: {shares}", width, indent="  ")
    return out


def counts_line(rows: list[dict[str, Any]]) -> str:
    counts = Counter(r["status"] for r in rows)
    return f"{len(rows)} rows: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def print_summary(console: Console, rows: list[dict[str, Any]], run_dir: Path, manifest: Mapping[str, Any]) -> None:
    """The end of `nvbench run`, at the console's width: what ran and how fast, what was skipped and why, what
    failed and why, the matrix efficiency where the manifest records it, the run folder and the next command.
    Paths are never broken (a copyable line may run past the width only when the path itself is that long)."""
    cells = _by_cell(rows)
    ran = {c: rs for c, rs in cells.items() if any(r["status"] == "ok" for r in rs)}
    skipped = {c: rs for c, rs in cells.items() if all(r["status"] == "skipped" for r in rs)}
    failed = {c: rs for c, rs in cells.items() if any(r["status"] in BAD_STATUSES for r in rs)}
    fit = {"no_wrap": True, "overflow": "ellipsis", "highlight": False}
    whole = {"soft_wrap": True, "highlight": False}  # wrapped at words already: a longer word (a path) stays whole
    if ran:
        console.print(Text(f"ran: {_cells_word(len(ran))}", style="bold"), **fit)
        console.print(ran_table(ran))
        for note in ran_notes(ran):
            for line in wrap(note, console.width, indent="  "):
                console.print(Text(line, style="dim"), **whole)
    for title, lines in ((f"skipped: {_cells_word(len(skipped))}, by reason", _skip_lines(skipped, console.width)),
                         (f"failed: {_cells_word(len(failed))}", _failure_lines(failed, console.width))):
        if lines:
            console.print()
            console.print(Text(f"{title} (in full: --verbose)", style="bold"), **fit)
            for line in lines:
                console.print(line, **whole)
    console.print()
    for line in interference_lines(rows, console.width):
        console.print(line, **whole)
    for line in slot_lines(rows):
        console.print(line, **fit)
    for line in cost_lines(manifest):  # wrapped, not cut: where an estimate came from is part of it
        console.print(line, highlight=False)
    console.print(counts_line(rows), **fit)
    console.print(f"results: {run_dir}", soft_wrap=True, highlight=False)
    console.print(f"next:    nvbench report {run_dir}", soft_wrap=True, highlight=False)


def slot_lines(rows: list[dict[str, Any]]) -> list[Text]:
    """How the run used the machine's slots, and the rows whose numbers packing may carry: packed with no
    calibration clearing their backend, or beside a foreign process on their GPU."""
    packed = [r for r in rows if r.get("packing") in ("calibrated", "uncalibrated")]
    lines = []
    if packed:
        slots = len({r["slot"] for r in packed})
        unproven = sum(r["packing"] == "uncalibrated" for r in packed)
        lines.append(Text(f"packed: {len(packed)} jobs on {slots} slots"
                          + (f"; {unproven} packed uncalibrated (packing = uncalibrated)" if unproven else "")))
    shared = [r for r in rows if r.get(col.gpu_shared)]
    if shared:
        names = ", ".join(f"{row_label(r)} r{r['repeat']}" for r in shared[:4])
        lines.append(Text(f"warning: {len(shared)} job(s) shared their GPU with a foreign process (gpu_shared): "
                          f"{names}{' ...' if len(shared) > 4 else ''}", style="yellow"))
    return lines


def cost_lines(manifest: Mapping[str, Any]) -> list[str]:
    """The run's matrix efficiency with the largest part of its wall time that was not measuring (the next cut),
    and its estimate beside what it took, where the manifest records them."""
    from harness.analysis.judge.run import largest_cut
    from harness.orchestrate.cost.pricing import took_line

    lines = []
    efficiency = manifest.get("matrix_efficiency")
    if isinstance(efficiency, (int, float)):
        lines.append(f"matrix efficiency {efficiency:.2f} (measured window s / run wall s)")
        cut, wall = largest_cut(manifest.get("time_breakdown_s")), manifest.get("wall_s")
        if cut is not None and isinstance(wall, (int, float)) and wall > 0:
            lines.append(f"largest other part: {cut[0]} {cut[1]:.1f} s, {cut[1] / wall:.0%} of the wall (the next cut)")
    took = took_line(manifest)
    return lines + ([took] if took else [])


def _cells_word(n: int) -> str:
    return f"{n} cell{'s' if n != 1 else ''}"
