"""A report folder read back as data: its comparison from verdicts.parquet (the verdicts, and in its metadata the
mode, what the candidate was compared with and the full thresholds) and the run folders it names, so that a step
after the report (the nightly's alarms) makes its formats anew from data, never by rewriting a written file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.analysis.judge.run import RunData
from harness.analysis.judge.verdict import Comparison, Thresholds
from harness.analysis.load import verdicts_file
from harness.analysis.load.runs import RunInputError, load_run
from harness.matrix.judge import FloorOverride, WorkGate
from harness.results import formats
from harness.catalogue import col


def thresholds_of(path: Path) -> Thresholds:
    """The Thresholds a verdicts.parquet was judged with, nested settings (work gates, floor overrides) included;
    a setting this nvbench does not know is left out."""
    raw = verdicts_file.read_thresholds(path, nested=True)
    known = set(Thresholds.__dataclass_fields__)
    given: dict[str, Any] = {k: v for k, v in raw.items() if k in known}
    given["work_gates"] = tuple(WorkGate(counter=g["counter"], rule=g["rule"]) for g in raw.get("work_gates") or ())
    given["floor_overrides"] = tuple(
        FloorOverride(match=tuple((axis, tuple(values)) for axis, values in o["match"]), floor_pct=o[col.floor_pct],
                      index=o.get("index", 0))
        for o in raw.get("floor_overrides") or ())
    return Thresholds(**given)


def _run_or_name(path: str | None, run_id: str) -> RunData:
    """The run folder a report compared, or where it is gone, its id alone (no rows: durations read 0)."""
    if path and Path(path).is_dir():
        try:
            return load_run(path)
        except RunInputError:
            pass
    return RunData(path=path or "", run_id=run_id, created_at="", environment={}, rows=())


def read_comparison(path: Path) -> Comparison:
    """The comparison a verdicts.parquet holds, its candidate run (and baseline) read from the folders it names.
    UnreadableFile when it is no verdicts table this nvbench reads."""
    verdicts = verdicts_file.read_verdicts(path)
    meta = formats.read_parquet_metadata(path, verdicts_file.VERDICTS)
    base, cand = verdicts_file.compared_runs(path)
    candidate = _run_or_name(cand, meta.get(b"nvbench.run_id", b"").decode())
    return Comparison(mode=meta.get(b"nvbench.mode", b"").decode(), candidate=candidate,
                      baseline_label=meta.get(b"nvbench.baseline", b"").decode(), baseline_environment=None,
                      thresholds=thresholds_of(path), verdicts=tuple(verdicts),
                      baseline=_run_or_name(base, Path(base).name) if base else None)

