"""The GPU acceptance's reports: gpu-acceptance.json (every check, its figures, the environment) and
gpu-acceptance.md (per claim: what it proved, with what figure; the slice's cells and where their time went)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from acceptance_checks import CLAIMS

def environment() -> dict[str, Any]:
    from harness.results.env import collect_env

    env = collect_env()
    keys = ("device_kind", "gpu_name", "gpu_count", "driver_version", "cuda_runtime", "cudnn_version",
            "torch_version", "dali_version", "python_version", "cpu_model", "cpu_count", "hostname",
            "nvbench_git_sha", "nvbench_git_dirty", "power_limit_w")
    return {k: env.get(k) for k in keys}


def write_report(out: Path, env: dict[str, Any], checks: list, started: str, wall_s: float,
                 budget_s: float) -> None:
    doc = {"started_at": started, "wall_s": round(wall_s, 1), "budget_s": budget_s, "environment": env,
           "result": "fail" if any(c.status == "fail" for c in checks) else "pass",
           "checks": [asdict(c) for c in checks]}
    (out / "gpu-acceptance.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    lines = [f"# nvbench GPU acceptance: {doc['result']}", "",
             f"Started {started}, {wall_s:.0f} s of a {budget_s:.0f} s budget. "
             f"Device: {env.get('gpu_name') or 'no GPU'} (x{env.get('gpu_count') or 0}), "
             f"driver {env.get('driver_version')}, CUDA {env.get('cuda_runtime')}, "
             f"cuDNN {env.get('cudnn_version')}, torch {env.get('torch_version')}, DALI {env.get('dali_version')}, "
             f"nvbench {str(env.get('nvbench_git_sha'))[:10]}{' (dirty)' if env.get('nvbench_git_dirty') else ''}.",
             "", "| check | what it proves | result | time | what it found |", "|---|---|---|---|---|"]
    lines += [f"| {c.name} | {CLAIMS.get(c.name, '')} | {c.status} | {c.duration_s:.0f} s | {c.detail} |"
              for c in checks]
    for c in checks:
        cells = c.figures.get("cells") if isinstance(c.figures, dict) else None
        if c.name.startswith("mission") and cells:
            lines += ["", f"## {c.name}", "", "| cell | status | img/s (95% CI) | loader eff. | exposed wait | "
                      "host wait | MFU % | W | img/J | top-1 | loss scale |", "|---|---|---|---|---|---|---|---|---|---|---|"]
            for r in cells:
                lines.append(
                    f"| {r['cell']} | {r['status']} | {_n(r['throughput_img_per_s'], '.0f')} "
                    f"({_n(r['throughput_ci_low_img_per_s'], '.0f')}-{_n(r['throughput_ci_high_img_per_s'], '.0f')}) | "
                    f"{_n(r['loader_efficiency'], '.3f')} | {_n(r['exposed_data_wait_frac'], '.3f')} | "
                    f"{_n(r['host_data_wait_frac'], '.3f')} | {_n(r['mfu_pct'], '.1f')} | {_n(r['power_avg_w'], '.0f')} | "
                    f"{_n(r['img_per_joule'], '.1f')} | {_n(r['top1'], '.3f')} | {_n(r['loss_scale'], '.0f')} |")
            lines += _time_table(c.figures)
    for c in checks:
        if c.name == "overhead" and c.figures.get("rounds"):
            lines += ["", "## overhead", "", f"`python {c.figures['command']}`", "",
                      "| round | harness img/s | bare img/s | harness / bare | order |", "|---|---|---|---|---|"]
            lines += [f"| {r['round']} | {r['harness_img_per_s']:.1f} | {r['bare_img_per_s']:.1f} | {r['ratio']:.3f} | "
                      f"{' then '.join(r['order'])} |" for r in c.figures["rounds"]]
    (out / "gpu-acceptance.md").write_text("\n".join(lines) + "\n")


def _time_table(figures: dict[str, Any]) -> list[str]:
    """Where each cell's seconds went (the runner's RUN_PARTS, the rest: the process's exit and the runner's own
    work), and the run's matrix efficiency: what to cut when the budget is tight."""
    from harness.orchestrate.session.derive import RUN_PARTS

    head = ["", "Where each cell's time went (s; rest = the process's exit and the runner's own work):", "",
            "| cell | total | startup | build | compile | warmup (steps) | window | validation | rest |",
            "|---|---|---|---|---|---|---|---|---|"]
    lines = []
    for r in figures["cells"]:
        if r["status"] != "ok" or r.get("duration_s") is None:
            continue
        rest = r["duration_s"] - sum(r.get(k) or 0.0 for k in RUN_PARTS)
        lines.append(f"| {r['cell']} | {r['duration_s']:.1f} | {_n(r.get('startup_s'), '.1f')} | "
                     f"{_n(r.get('build_s'), '.1f')} | {_n(r.get('compile_s'), '.1f')} | "
                     f"{_n(r.get('warmup_window_s'), '.1f')} ({_n(r.get('warmup_steps_used'), 'd')}) | "
                     f"{_n(r.get('window_s'), '.1f')} | {_n(r.get('val_s'), '.1f')} | {rest:.1f} |")
    if figures.get("matrix_efficiency") is not None:
        lines += ["", f"Matrix efficiency {figures['matrix_efficiency']:.3f} (windows over the run's "
                  f"{figures['wall_s']:.0f} s); time breakdown: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in figures["time_breakdown_s"].items()) + "."]
    return head + lines if lines else []


def _n(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)
