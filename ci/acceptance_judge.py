"""The GPU acceptance's judgements: pure functions from the rows, verdicts and records a check's run wrote to
pass, fail or skip with its figures (ci/acceptance_checks.py runs the checks; tests/test_gpu_acceptance_judge.py
feeds these real CPU rows and verdicts shaped like a GPU's)."""

from __future__ import annotations

import importlib.util
import math
import statistics
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

PHASE_SUM_TOLERANCE = 0.01
"""Per-phase timing: a repeat's phases (data, forward, backward, optimizer, all-reduce) over its window must
add up to its step times within this fraction (h2d lies inside data and is not added again)."""
SUMMED_PHASES = ("phase_data_s", "phase_forward_s", "phase_backward_s", "phase_optimizer_s", "phase_allreduce_s")
DRILLED_PHASE = "optimizer"
"""Where a fire drill's extra work runs (harness/cell/loop.py: engine.optimizer_step(extra=drill))."""
COMPILE_CACHE_RATIO = 0.1
"""A repeat that read the warm-up's compile cache compiles in under this fraction of the warm-up's compile_s."""
EFFICIENCY_TARGET = 0.5
"""Issue 38's target for the mission's world-size-1 cells at the mission's window: reported beside the figure."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    status: str
    """pass, fail or skip."""
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _interval(verdict: Mapping[str, Any]) -> str:
    low, high = verdict.get("ci_low_pct"), verdict.get("ci_high_pct")
    return "" if low is None or high is None else f" [{low:+.1f}, {high:+.1f}]"


def _verdict_figures(v: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("cell_id", "verdict", "reason", "decided_by", "effect_pct", "ci_low_pct", "ci_high_pct", "p_value",
            "floor_pct", "repeats_needed", "num_baseline", "num_candidate", "phase", "attribution", "fire_drill_pct")
    return {k: v.get(k) for k in keys}


def _one_verdict(verdicts: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return verdicts[0] if len(verdicts) == 1 else None


def judge_aa(verdicts: Sequence[Mapping[str, Any]]) -> Judgement:
    """An A/A (the same cell on both sides, interleaved): `unchanged`, or `inconclusive` with its reason; any
    regression or improvement is a false alarm. `verdicts`: verdicts.parquet rows of the A/B's report."""
    v = _one_verdict(verdicts)
    if v is None:
        return Judgement(status="fail", detail=f"expected one judged cell, the report has {len(verdicts)}")
    figures = _verdict_figures(v)
    said = f"{v['verdict']}: {_pct(v.get('effect_pct'))}{_interval(v)} (floor +-{v.get('floor_pct')}%)"
    if v["verdict"] == "unchanged":
        return Judgement(status="pass", detail=said, figures=figures)
    if v["verdict"] == "inconclusive" and v.get("reason"):  # its reason says the repeats it needs (decide)
        return Judgement(status="pass", detail=f"{said}: {v['reason']}", figures=figures)
    why = "without a reason" if v["verdict"] == "inconclusive" else "a false alarm on identical sides"
    return Judgement(status="fail", detail=f"{said}: {why}", figures=figures)


def judge_drill(verdicts: Sequence[Mapping[str, Any]], phase: str = DRILLED_PHASE) -> Judgement:
    """A fire drill's A/B (side B slowed by a known share of each step): `regression`, naming the drilled phase."""
    v = _one_verdict(verdicts)
    if v is None:
        return Judgement(status="fail", detail=f"expected one judged cell, the report has {len(verdicts)}")
    figures = _verdict_figures(v)
    said = f"{v['verdict']}: {_pct(v.get('effect_pct'))}{_interval(v)}"
    if v["verdict"] != "regression":
        return Judgement(status="fail", detail=f"{said}: the drill went unseen ({v.get('reason') or 'no reason'})",
                         figures=figures)
    if v.get("phase") != phase:
        return Judgement(status="fail", detail=f"{said}: named phase {v.get('phase')!r}, not the drilled {phase!r}",
                         figures=figures)
    return Judgement(status="pass", detail=f"{said}; {v.get('attribution') or phase}", figures=figures)


def phase_gaps(steps: Sequence[Mapping[str, Any]]) -> dict[Any, dict[str, float]]:
    """Per repeat (its `repeat`; an A/B's tagged by side, "a/0"; rank 0, measured steps): the window's summed
    phases over its summed step times, minus 1, and the worst single step's gap."""
    by_repeat: dict[Any, list[Mapping[str, Any]]] = {}
    for s in steps:
        if not s.get("is_warmup") and s.get("rank", 0) == 0 and s.get("step_time_s"):
            by_repeat.setdefault(s["repeat"], []).append(s)
    gaps = {}
    for repeat, rows in sorted(by_repeat.items()):
        phases = [sum(r.get(k) or 0.0 for k in SUMMED_PHASES) for r in rows]
        times = [r["step_time_s"] for r in rows]
        worst = max((abs(p / t - 1) for p, t in zip(phases, times)), default=math.nan)
        gaps[repeat] = {"window_gap": sum(phases) / sum(times) - 1, "worst_step_gap": worst, "steps": len(rows)}
    return gaps


def judge_phases(steps: Sequence[Mapping[str, Any]], tolerance: float = PHASE_SUM_TOLERANCE) -> Judgement:
    """Per-phase timing adds up: every repeat's phases sum to its steps' time within `tolerance`."""
    gaps = phase_gaps(steps)
    if not gaps:
        return Judgement(status="fail", detail="no measured step with a step time")
    off = {r: g for r, g in gaps.items() if not abs(g["window_gap"]) <= tolerance}
    worst = max(gaps.values(), key=lambda g: abs(g["window_gap"]))
    figures = {"tolerance": tolerance, "repeats": {str(r): g for r, g in gaps.items()}}
    if off:
        said = ", ".join(f"repeat {r} {100 * g['window_gap']:+.2f}%" for r, g in off.items())
        return Judgement(status="fail", detail=f"phases do not sum to the step within {tolerance:.0%}: {said}",
                         figures=figures)
    return Judgement(status="pass", detail=f"{len(gaps)} repeats: phases sum to the step within "
                     f"{100 * abs(worst['window_gap']):.2f}% (tolerance {tolerance:.0%}; worst single step "
                     f"{100 * max(g['worst_step_gap'] for g in gaps.values()):.2f}%)", figures=figures)


def judge_graphed(rows: Sequence[Mapping[str, Any]]) -> Judgement:
    """A cudagraph cell: ok, `phases_graphed`, its whole replay under forward and no backward or optimizer."""
    graphed = [r for r in rows if r.get("compile") == "cudagraph"]
    if not graphed:
        return Judgement(status="fail", detail="no cudagraph row")
    figures = {"rows": [{k: r.get(k) for k in ("status", "reason", "phases_graphed", "phase_forward_median_s",
                                                 "phase_backward_median_s", "phase_optimizer_median_s")}
                        for r in graphed]}
    bad = [r for r in graphed if r.get("status") != "ok" or not r.get("phases_graphed")
           or not (r.get("phase_forward_median_s") or 0) > 0
           or r.get("phase_backward_median_s") is not None or r.get("phase_optimizer_median_s") is not None]
    if bad:
        r = bad[0]
        said = r.get("reason") if r.get("status") != "ok" else (
            f"phases_graphed {r.get('phases_graphed')}, forward {r.get('phase_forward_median_s')}, backward "
            f"{r.get('phase_backward_median_s')}, optimizer {r.get('phase_optimizer_median_s')}")
        return Judgement(status="fail", detail=f"cudagraph {r.get('status')}: {said}", figures=figures)
    forward = statistics.median(r["phase_forward_median_s"] for r in graphed)
    return Judgement(status="pass", detail=f"phases_graphed; the replay under forward, {1e3 * forward:.2f} ms a step",
                     figures=figures)


def judge_autotune(rows: Sequence[Mapping[str, Any]]) -> Judgement:
    """cuDNN's autotuning timed apart: every ok row has `autotune_s` > 0 and its cuDNN settings recorded."""
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        return Judgement(status="fail", detail="no ok row to read")
    figures = {"rows": [{k: r.get(k) for k in ("cell_id", "repeat", "autotune_s", "cudnn_benchmark",
                                                 "cudnn_benchmark_limit", "warmup_window_s")} for r in ok]}
    bad = [r for r in ok if not (r.get("autotune_s") or 0) > 0 or r.get("cudnn_benchmark") is None
           or r.get("cudnn_benchmark_limit") is None]
    if bad:
        r = bad[0]
        return Judgement(status="fail", detail=f"{len(bad)} of {len(ok)} rows: autotune_s {r.get('autotune_s')}, "
                         f"cudnn_benchmark {r.get('cudnn_benchmark')}, limit {r.get('cudnn_benchmark_limit')}",
                         figures=figures)
    times = sorted(r["autotune_s"] for r in ok)
    return Judgement(status="pass", detail=f"autotune_s {times[0]:.2f}-{times[-1]:.2f} s over {len(ok)} rows; "
                     f"cudnn_benchmark {ok[0]['cudnn_benchmark']}, limit {ok[0]['cudnn_benchmark_limit']}",
                     figures=figures)


def judge_compile_cache(records: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
                        ratio: float = COMPILE_CACHE_RATIO) -> Judgement:
    """An inductor cell: one ok warm-up that compiled, and every repeat's compile_s under `ratio` of it."""
    warm = [w for w in records if w.get("status") == "ok" and (w.get("compile_s") or 0) > 0]
    repeats = [r for r in rows if r.get("compile") == "inductor"]
    figures = {"warmup_compile_s": [w.get("compile_s") for w in records],
               "repeat_compile_s": [r.get("compile_s") for r in repeats], "ratio": ratio}
    if len(warm) != 1:
        return Judgement(status="fail", detail=f"expected one ok warm-up that compiled, found {len(warm)} "
                         f"of {len(records)} records", figures=figures)
    bar = warm[0]["compile_s"] * ratio
    ok = [r for r in repeats if r.get("status") == "ok"]
    if not ok or len(ok) != len(repeats):
        return Judgement(status="fail", detail=f"{len(ok)} of {len(repeats)} repeats ok", figures=figures)
    cold = [r for r in ok if not 0 < (r.get("compile_s") or 0) < bar]
    said = ", ".join(f"{r['compile_s']:.1f}" for r in ok)
    if cold:
        return Judgement(status="fail", detail=f"repeats compiled in {said} s: not all under {ratio:g} of the "
                         f"warm-up's {warm[0]['compile_s']:.1f} s (the cache was not read)", figures=figures)
    return Judgement(status="pass", detail=f"warm-up compiled in {warm[0]['compile_s']:.1f} s; its {len(ok)} "
                     f"repeats in {said} s (each under {bar:.1f})", figures=figures)


def judge_slice_cost(manifest: Mapping[str, Any], largest_cut: Callable[[Any], tuple[str, float] | None], *,
                     target: float | None = EFFICIENCY_TARGET) -> dict:
    """The slice's matrix efficiency and its largest non-window part (harness.analysis.judge.run.largest_cut), as
    figures and words; beside issue 38's target where `target` is given (the mission's window, not a smoke)."""
    efficiency, wall = manifest.get("matrix_efficiency"), manifest.get("wall_s")
    if not isinstance(efficiency, (int, float)):
        return {"text": "no matrix efficiency recorded"}
    cut = largest_cut(manifest.get("time_breakdown_s"))
    text = f"matrix efficiency {efficiency:.2f}"
    if target is not None:
        text += f" ({'meets' if efficiency >= target else 'below'} issue 38's {target})"
    figures: dict[str, Any] = {"matrix_efficiency": efficiency, "efficiency_target": target}
    if cut is not None and wall:
        text += f"; largest other part: {cut[0]} {cut[1]:.1f} s, {cut[1] / wall:.0%} of the wall"
        figures |= {"largest_other_part": cut[0], "largest_other_part_s": cut[1],
                    "largest_other_part_frac": cut[1] / wall}
    return figures | {"text": text}


DALI_BACKENDS = ("dali-gpu", "dali-cpu")
"""The data backends that read through DALI (harness/data/registry.py)."""
TWIN_AXES = ("memory_format", "precision", "grad_accum")
"""What a slice row's synthetic twin shares with it (gpu_acceptance.slice_rows keeps these axes beside its label)."""


def judge_dali_cells(rows: Sequence[Mapping[str, Any]], dali_missing: str | None) -> Judgement:
    """DALI's cells of the slice: skipped with the reason where DALI does not import; else each one that ran ok."""
    if dali_missing:
        return Judgement(status="skip", detail=dali_missing)
    dali = [r for r in rows if r.get("backend") in DALI_BACKENDS]
    figures = {"cells": [{k: r.get(k) for k in ("cell", "status", "throughput_img_per_s", "loader_efficiency")}
                         for r in dali]}
    if not dali:
        return Judgement(status="fail", detail="DALI imports, but no dali cell fit the slice's part of the budget "
                         "(raise --budget-s)", figures=figures)
    bad = [r for r in dali if r.get("status") != "ok"]
    if bad:
        return Judgement(status="fail", detail="; ".join(f"{r['cell']}: {r.get('status')}: {r.get('reason')}"
                                                          for r in bad), figures=figures)
    return Judgement(status="pass", detail=", ".join(f"{r['cell']} {r['throughput_img_per_s']:.0f} img/s"
                                                     for r in dali), figures=figures)


SLICE_CELL_S = {"synthetic": 25.0, "pytorch": 35.0, "dali-gpu": 35.0, "dali-cpu": 35.0}
"""A world-size-1 fp16 NHWC cell at the mission's window (30 + 100 steps, 10 validation batches), one process:
run 2 and 610fe19's H100 cells at the acceptance's 20 + 60 took 17-35 s, the real-data ones the longer."""
SLICE_EXTRA_S = {("grad_accum", "2"): 8.0, ("precision", "fp32"): 10.0, ("memory_format", "nchw"): 3.0}
"""What a cell's other axis values add to its seconds: ga 2 doubles a 6 s window, fp32 (TF32) runs at about
half fp16's img/s, NCHW a little slower (run 1's table)."""


def slice_rungs(dali: bool) -> list[tuple[dict[str, list[str]], float]]:
    """The world-size-1 slice of the mission matrix in growing parts, most telling first, each an `--only`
    cross product (axis -> values) with its estimated seconds: one synthetic cell, then a real-data backend at
    a time (DALI's GPU loader before the pytorch loader where DALI imports), then accumulation 2, bf16, NCHW and
    fp32: the last rung is the whole slice (48 cells with DALI, 24 without)."""
    backends = ["synthetic", "dali-gpu", "pytorch", "dali-cpu"] if dali else ["synthetic", "pytorch"]
    filters: dict[str, list[str]] = {"world_size": ["1"], "memory_format": ["nhwc"], "precision": ["fp16"],
                                     "grad_accum": ["1"], "backend": []}
    rungs = []
    for backend in backends:
        filters["backend"] = filters["backend"] + [backend]
        rungs.append({k: list(v) for k, v in filters.items()})
    for axis, values in (("grad_accum", ["1", "2"]), ("precision", ["fp16", "bf16"]),
                         ("memory_format", ["nhwc", "nchw"]), ("precision", ["fp16", "bf16", "fp32"])):
        filters[axis] = values
        rungs.append({k: list(v) for k, v in filters.items()})
    return [(rung, rung_seconds(rung)) for rung in rungs]


def rung_seconds(rung: dict[str, list[str]]) -> float:
    """The estimated seconds of every cell of an `--only` cross product."""
    total = 0.0
    for backend in rung["backend"]:
        for ga in rung["grad_accum"]:
            for precision in rung["precision"]:
                for fmt in rung["memory_format"]:
                    picks = (("grad_accum", ga), ("precision", precision), ("memory_format", fmt))
                    total += SLICE_CELL_S[backend] + sum(SLICE_EXTRA_S.get(p, 0.0) for p in picks)
    return total


def slice_part(rungs: Sequence[tuple[dict[str, list[str]], float]], left_s: float
               ) -> tuple[dict[str, list[str]] | None, float]:
    """The largest rung whose estimate fits `left_s`, and its estimate; (None, 0) when not even the first does."""
    fitting = [(rung, seconds) for rung, seconds in rungs if seconds <= left_s]
    return max(fitting, key=lambda r: r[1]) if fitting else (None, 0.0)


def rung_cells(rung: dict[str, list[str]]) -> int:
    return math.prod(len(v) for v in rung.values())


def only_flags(rung: dict[str, list[str]]) -> list[str]:
    return [flag for axis, values in rung.items() for v in values for flag in ("--only", f"{axis}={v}")]


def missing_module(names: Sequence[str], *, find: Callable[[str], Any] = importlib.util.find_spec) -> str | None:
    """Why a check cannot run here: the first of `names` that does not import (None: all do)."""
    for name in names:
        try:
            found = find(name) is not None
        except (ImportError, ValueError):  # a missing parent package (nvidia for nvidia.dali)
            found = False
        if not found:
            return f"needs {name}, which does not import here"
    return None


def judge_gpu_shared(rows: Sequence[Mapping[str, Any]], foreign_pid: int) -> Judgement:
    """A cell run beside a foreign CUDA process: its row says `gpu_shared`, with that process among the pids
    (where NVML names pids in this container; otherwise the count alone, harness/cell/instruments/telemetry.py)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    figures = {"foreign_pid": foreign_pid, "rows": [{k: r.get(k) for k in ("status", "gpu_shared", "gpu_foreign_pids")}
                                                    for r in rows]}
    if not ok:
        return Judgement(status="fail", detail="no ok row", figures=figures)
    if not all(r.get("gpu_shared") for r in ok):
        return Judgement(status="fail", detail="gpu_shared false beside a process holding the GPU", figures=figures)
    pids = {p for r in ok for p in r.get("gpu_foreign_pids") or ()}
    named = "its pid named" if foreign_pid in pids else f"pids {sorted(pids) or 'not named'} (NVML's view)"
    return Judgement(status="pass", detail=f"gpu_shared true beside pid {foreign_pid}; {named}", figures=figures)


def judge_cold_start(rows: Sequence[Mapping[str, Any]]) -> Judgement:
    """A cell without warm-up: every window opens in its start transient (`is_steady` false, first steps named)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    figures = {"rows": [{k: r.get(k) for k in ("is_steady", "start_transient_steps", "autotune_s")} for r in ok]}
    if not ok:
        return Judgement(status="fail", detail="no ok row", figures=figures)
    bad = [r for r in ok if r.get("is_steady") is not False or not (r.get("start_transient_steps") or 0) >= 1]
    if bad:
        return Judgement(status="fail", detail=f"a cold window read as settled: is_steady {bad[0].get('is_steady')}, "
                         f"start_transient_steps {bad[0].get('start_transient_steps')}", figures=figures)
    return Judgement(status="pass", detail="is_steady false, start_transient_steps "
                     + ", ".join(str(r["start_transient_steps"]) for r in ok), figures=figures)


def judge_convnets(rows: Sequence[Mapping[str, Any]], reference: Mapping[str, float | None]) -> Judgement:
    """The ConvNets family's cells: each ok with MFU filled; its img/s beside DLE's A100 figure (not a target)."""
    keys = ("model", "status", "throughput_img_per_s", "mfu_pct", "flops_per_image")
    figures = {"cells": [{k: r.get(k) for k in keys} | {"reference_img_per_s": reference.get(r.get("model"))}
                         for r in rows]}
    bad = [r for r in rows if r.get("status") != "ok" or r.get("mfu_pct") is None]
    if not rows or bad:
        return Judgement(status="fail", detail=f"{len(bad)} of {len(rows)} cells not ok or without MFU",
                         figures=figures)
    said = ", ".join(f"{r['model']} {r['throughput_img_per_s']:.0f} img/s (DLE A100 {reference.get(r['model'])})"
                     for r in rows)
    return Judgement(status="pass", detail=said, figures=figures)


def judge_break(code: int | None, counts: Mapping[str, Any], what: str) -> Judgement:
    """A break check: the GPU test that guards the broken line fails on it (a pass means it guards nothing)."""
    figures = {"break": what, "exit_code": code, **{k: v for k, v in counts.items() if k != "not_passed"}}
    if code is None:
        return Judgement(status="fail", detail=f"timed out ({what})", figures=figures)
    if counts.get("failed"):
        return Judgement(status="pass", detail=f"{counts['failed']} test(s) failed on the break, as they must: {what}",
                         figures=figures)
    ran = counts.get("passed", 0)
    return Judgement(status="fail", detail=f"the break went unseen ({ran} passed, exit {code}): {what}",
                     figures=figures)


def junit_counts(path: Path, only: str | None = None) -> dict[str, int]:
    """passed/failed/errors/skipped of a junit file, optionally of test files whose name contains `only`."""
    counts = dict.fromkeys(("passed", "failed", "errors", "skipped"), 0)
    if not path.is_file():
        return counts
    failed_names = []
    for case in ET.parse(path).getroot().iter("testcase"):
        if only and only not in (case.get("classname") or ""):
            continue
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            counts["failed"] += 1
            failed_names.append(f"{case.get('classname')}::{case.get('name')}")
        elif "error" in kinds:
            counts["errors"] += 1
            failed_names.append(f"{case.get('classname')}::{case.get('name')}")
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    counts["not_passed"] = failed_names  # type: ignore[assignment]
    return counts


KERNEL_PHASES = ("forward", "backward", "optimizer")


def judge_kernels(sides: Mapping[str, Sequence[Mapping[str, Any]]], changed: Sequence[Mapping[str, Any]]) -> Judgement:
    """`nvbench ab --kernels` of a cell whose side B runs a fire drill (device sleep each step): both sides'
    kernels.parquet hold CUDA rows, with device kernels (not a graph's replay) under the forward, the backward and
    the optimizer; and the kernel diff of those rows (`changed`: its operators called changed, as data: cell,
    phase, operator, verdict, change_s) calls an operator of the drilled phase a regression: the drill's work."""
    figures: dict[str, Any] = {"changed": [dict(c) for c in changed]}
    for side in ("a", "b"):
        rows = list(sides.get(side) or ())
        if not rows:
            return Judgement(status="fail", detail=f"side {side}: no kernels.parquet rows", figures=figures)
        devices = sorted({str(r.get("device")) for r in rows})
        kernels = [r for r in rows if r.get("device") == "cuda" and r.get("kernel") and not r.get("graph_replay")]
        by_phase = {ph: sorted({r["kernel"] for r in kernels if r.get("phase") == ph}) for ph in KERNEL_PHASES}
        figures[side] = {"rows": len(rows), "devices": devices, "kernels": {ph: k[:5] for ph, k in by_phase.items()},
                         "graph_replays": sum(1 for r in rows if r.get("graph_replay"))}
        if devices != ["cuda"]:
            return Judgement(status="fail", detail=f"side {side}: rows of device {devices}, not cuda", figures=figures)
        if missing := [ph for ph, k in by_phase.items() if not k]:
            return Judgement(status="fail", detail=f"side {side}: no device kernel under {', '.join(missing)}",
                             figures=figures)
    called = [f"{c['phase']} {c['operator']} {1e3 * c['change_s']:+.2f} ms ({c['verdict']})" for c in changed]
    drill = [c for c in changed if c["phase"] == DRILLED_PHASE and c["verdict"] == "regression"]
    if not drill:
        return Judgement(status="fail", detail=f"the drill's device work not called changed: no {DRILLED_PHASE} "
                         f"operator called a regression ({'; '.join(called) or 'no operator called changed'})",
                         figures=figures)
    return Judgement(status="pass", detail=f"device kernels under every phase on both sides; called changed: "
                     f"{'; '.join(called)}", figures=figures)


def judge_overhead(code: int | None, figures: Mapping[str, Any] | None, target: float, timeout: float) -> Judgement:
    """benchmarks/overhead.py's run (`code`: its exit, None when it timed out) from the figures its `--json` wrote
    (None: no file): the median of its rounds' ratios harness / bare must reach `target`."""
    median = (figures or {}).get("median_ratio")
    told = {"rounds": list((figures or {}).get("rounds") or ()), "median_ratio": median, "target": target}
    if code is None:
        return Judgement(status="fail", detail=f"timed out after {timeout:.0f} s", figures=told)
    said = f"harness / bare {'?' if median is None else f'{median:.3f}'} (target >= {target})"
    if code != 0 or median is None:
        return Judgement(status="fail", detail=said if code == 0 else f"exit {code}; {said}", figures=told)
    return Judgement(status="pass" if median >= target else "fail", detail=said, figures=told)


def failures_text(rows: list[dict[str, Any]]) -> str:
    """Failed cells grouped by what they said, most common first: one cause that failed 16 cells reads once."""
    by_reason: dict[str, list[str]] = {}
    for r in rows:
        by_reason.setdefault(f"{r['status']}: {r['reason']}", []).append(r["cell"])
    told = []
    for reason, cells in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        who = cells[0] if len(cells) == 1 else f"{len(cells)} cells ({', '.join(cells)})"
        told.append(f"{who}: {reason}")
    return "; ".join(told)


def _relative_half_width(row: dict[str, Any] | None) -> float | None:
    """Half the throughput interval's width over the throughput, or None where a side has no interval."""
    if not row or None in (row.get("throughput_ci_low_img_per_s"), row.get("throughput_ci_high_img_per_s")) \
            or not row.get("throughput_img_per_s"):
        return None
    return (row["throughput_ci_high_img_per_s"] - row["throughput_ci_low_img_per_s"]) / 2 / row["throughput_img_per_s"]


def judge_agreement(cells_: Sequence[Mapping[str, Any]], tolerance: float) -> Judgement:
    """Per real-data cell: exposed data-wait fraction vs 1 - loader efficiency (issue 15's GPU check).

    Each pair also carries the loader efficiency's own uncertainty (its cell's and its synthetic twin's
    throughput intervals, relative half-widths added in quadrature): a difference just past the tolerance
    with an uncertainty as large says "measure again", not "the two figures disagree". The verdict is the
    tolerance's alone."""
    twins = {tuple(r.get(k) for k in TWIN_AXES): r for r in cells_ if r.get("backend") == "synthetic"}
    pairs = []
    for r in cells_:
        if r["status"] == "ok" and r["loader_efficiency"] is not None:
            gap = r["exposed_data_wait_frac"] - (1 - r["loader_efficiency"])
            twin = twins.get(tuple(r.get(k) for k in TWIN_AXES))
            widths = [_relative_half_width(r), _relative_half_width(twin)]
            spread = None if None in widths else r["loader_efficiency"] * math.hypot(*widths)
            pairs.append({"cell": r["cell"], "exposed_frac": r["exposed_data_wait_frac"],
                          "one_minus_loader_efficiency": 1 - r["loader_efficiency"], "difference": gap,
                          "loader_efficiency_uncertainty": spread})
    if not pairs:
        return Judgement(status="skip", detail="no real-data cell with a synthetic twin ran")

    def said(p: dict[str, Any]) -> str:
        spread = p["loader_efficiency_uncertainty"]
        return f"{p['cell']} {p['difference']:+.3f}" + (f" (loader efficiency +-{spread:.3f})" if spread else "")

    off = [p for p in pairs if abs(p["difference"]) > tolerance]
    detail = (f"{len(off)} of {len(pairs)} cells differ by more than {tolerance}: "
              + ", ".join(said(p) for p in off)) if off else f"all {len(pairs)} real-data cells within {tolerance}"
    return Judgement(status="fail" if off else "pass", detail=detail,
                     figures={"tolerance": tolerance, "cells": pairs})
