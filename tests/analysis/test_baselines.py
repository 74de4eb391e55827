"""`nvbench baseline promote|show` and `nvbench ack` through the real CLI on hand-made run folders (real Parquet
and manifests, no cell runs): a run that breaks a rule of reports/baselines/README.md is refused with one line
per rule, exit 2, nothing written; a good one is pointed at with who, when, why and its commit; an ack needs an
open alarm. And the matrix's [judge] floors: a per-backend override judges its cells and the report says so;
an invalid override is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from conftest import TINY

from harness.analysis.nights import alarms, baselines
from harness.analysis.load.runs import resolve_pointer
from harness.results import store
from harness.results.schema import cell_table

SHA = "0123456789abcdef0123456789abcdef01234567"
ENV = {"nvbench_git_sha": SHA, "nvbench_git_dirty": False, "hostname": "ci"}
CELLS = {"synthetic": "resnet18-synthetic-nchw-fp32-ws1-ga1-eager",
         "pytorch": "resnet18-pytorch-nchw-fp32-ws1-ga1-eager"}


def run_folder(path, *, repeats=5, level=100.0, status="ok", smoke=False, drill=0.0, backends=("synthetic",),
               matrix_text=""):
    rows = [{"run_id": path.name, "cell_id": CELLS[b], "model": "resnet18", "backend": b, "memory_format": "nchw",
             "precision": "fp32", "world_size": 1, "grad_accum": 1, "compile": "eager", "repeat": r,
             "status": status if r == 0 else "ok", "reason": "", "is_smoke": smoke, "fire_drill_pct": drill,
             "throughput_img_per_s": level * (1 + 0.002 * ((r * 7 + i) % 5 - 2)), "env_key": "k"}
            for i, b in enumerate(backends) for r in range(repeats)]
    store.write_table(path / "cells" / "all.parquet", cell_table(rows))
    store.write_json(path / "manifest.json", {"run_id": path.name, "created_at": "2026-11-27T02:00:00+00:00",
                                              "environment": ENV, "matrix_text": matrix_text})
    return path


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_promote_refuses_a_smoke_run_a_failed_cell_and_a_fire_drill_one_line_each_and_writes_nothing(tmp_path):
    reports = tmp_path / "reports"
    bad = {"smoke": run_folder(reports / "smoke", smoke=True),
           "failed": run_folder(reports / "failed", status="crashed"),  # 5 repeats, one crashed: one rule
           "drill": run_folder(reports / "drill", drill=25.0),
           "few": run_folder(reports / "few", repeats=3)}
    words = {"smoke": "a --smoke run", "failed": "1 repeat(s) not ok (resnet18-synthetic-nchw-fp32-ws1-ga1-eager r0 "
             "crashed): every cell must be ok", "drill": "a fire drill (+25% injected work)",
             "few": "fewer than 5 repeats"}
    for name, path in bad.items():
        proc = cli("baseline", "promote", path, "--reason", "try", "--reports", reports)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and words[name] in lines[0], (name, proc.stderr)
    assert not (reports / "baselines").exists()  # nothing written


@pytest.mark.documented("nvbench baseline promote reports/<run_id> --reason TEXT", "nvbench baseline show",
                        bound_s=60)
def test_promote_points_at_the_run_with_who_when_why_and_its_commit_and_show_lists_the_history(tmp_path):
    reports = tmp_path / "reports"
    first, second = run_folder(reports / "night1"), run_folder(reports / "night4")
    for run, why in (("night1", "first baseline"), ("night4", "torch upgrade accepted")):
        proc = cli("baseline", "promote", f"reports/{run}", "--reason", why, cwd=tmp_path)  # as README types it
        assert proc.returncode == 0, proc.stderr
    pointer = (reports / "baselines" / "current").read_text()
    assert "torch upgrade accepted" in pointer and f"commit {SHA}" in pointer and pointer.endswith("../night4\n")
    assert resolve_pointer(reports / "baselines" / "current").resolve() == second.resolve()
    history = json.loads((reports / "baselines" / "promotions.json").read_text())["promotions"]
    assert [p["run_id"] for p in history] == ["night4", "night1"] and history[0]["previous"].endswith("night1")
    assert all(p["who"] and p["when"] and p["commit"] == SHA for p in history)
    shown = cli("baseline", "show", cwd=tmp_path)
    assert shown.returncode == 0 and "current baseline:" in shown.stdout and "night4" in shown.stdout.splitlines()[1]
    assert shown.stdout.index("torch upgrade accepted") < shown.stdout.index("first baseline")
    # a run of another environment than the nights' (the newest history night) is refused
    other = run_folder(reports / "elsewhere")
    (reports / "history").mkdir()
    (reports / "history" / "night1").symlink_to(first)
    rows = pq.read_table(other / "cells").to_pylist()
    store.write_table(other / "cells" / "all.parquet", cell_table([r | {"env_key": "other"} for r in rows]))
    proc = cli("baseline", "promote", other, "--reason", "x", "--reports", reports)
    assert proc.returncode == 2 and "its environment is not the nights' (newest night night1" in proc.stderr


@pytest.mark.documented("nvbench ack backend=dali-cpu --reason TEXT --expires 2027-06-30", bound_s=60)
def test_ack_records_the_open_alarm_of_the_matching_cells_and_refuses_what_matches_none(tmp_path):
    reports = tmp_path / "reports"
    change = alarms.MetricChange(cell_id=CELLS["synthetic"], metric="throughput", effect=-20, low=-22, high=-18, floor=3,
                           axes=(("backend", "synthetic"), ("precision", "fp32")))
    baselines.write_open(reports, [alarms.OpenAlarm(change=change, since="night2", nights=2, last="night3")])
    proc = cli("ack", "backend=pytorch", "--reason", "x", "--reports", reports)
    assert proc.returncode == 2 and "no open regression matches" in proc.stderr
    assert cli("ack", "backend=synthetic", "--reason", "x", "--expires", "2001-01-01", "--reports", reports
               ).returncode == 2
    proc = cli("ack", "backend=synthetic", "--reason", "new driver", "--expires", "2999-01-01", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (ack,) = baselines.read_acks(reports)
    assert (ack.change, ack.reason, ack.expires) == (change, "new driver", "2999-01-01") and ack.who


JUDGE = """
[judge]
floor_pct = 2
[[judge.override]]
backend = "pytorch"
floor_pct = 25
"""


def test_a_per_backend_floor_judges_its_cells_and_the_report_names_it(tmp_path):
    text = TINY.format(axes='backend = ["synthetic", "pytorch"]', repeats=5, timeout=60, cache=tmp_path, nvtx="false",
                       device="cpu") + JUDGE
    base = run_folder(tmp_path / "base", backends=("synthetic", "pytorch"), matrix_text=text)
    slow = run_folder(tmp_path / "slow", backends=("synthetic", "pytorch"), level=90.0, matrix_text=text)
    proc = cli("report", slow, "--baseline", base, "--out", tmp_path / "out", "--fdr", "0.05", "--no-fast-steps")
    assert proc.returncode == 0, proc.stderr
    rows = {r["backend"]: r for r in pq.read_table(tmp_path / "out" / "verdicts.parquet").to_pylist()}
    assert (rows["pytorch"]["floor_pct"], rows["pytorch"]["floor_source"]) == (25.0, "judge.override[0] backend=pytorch")
    assert (rows["synthetic"]["floor_pct"], rows["synthetic"]["floor_source"]) == (2.0, "judge.floor_pct")
    # -10 %: beyond the synthetic cell's 2 % floor, inside the pytorch cell's 25 % one
    assert rows["synthetic"]["verdict"] == "regression" and rows["pytorch"]["verdict"] == "unchanged"
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| floor |" in summary and "25% (judge.override\\[0\\] backend=pytorch)" in summary
    assert "judge.override[0] backend=pytorch" in (tmp_path / "out" / "report.html").read_text()
    proc = cli("report", slow, "--baseline", base, "--out", tmp_path / "out2", "--floor", "1")
    assert {r["floor_source"] for r in pq.read_table(tmp_path / "out2" / "verdicts.parquet").to_pylist()} == \
        {"--floor", "judge.override[0] backend=pytorch"}


@pytest.mark.parametrize("judge, problem", [
    ('[[judge.override]]\nbackend = "dali-cpu"\nfloor_pct = 6', "judge.override[0].backend: value 'dali-cpu' is not "
                                                               "on the axis (synthetic)"),
    ('[[judge.override]]\nbakend = "synthetic"\nfloor_pct = 6', "judge.override[0].bakend: unknown key (an axis or "
                                                                "floor_pct) (did you mean 'backend'?)"),
    ('[[judge.override]]\nbackend = "synthetic"\nfloor_pct = 100', "judge.override[0].floor_pct: must be in [0, 100)"),
    ('[[judge.override]]\nbackend = "synthetic"', "judge.override[0]: missing floor_pct"),
    ('[judge]\nflor_pct = 2', "judge.flor_pct: unknown key (did you mean 'floor_pct'?)"),
])
def test_an_invalid_judge_section_is_one_line_and_exit_2(tmp_path, judge, problem):
    path = tmp_path / "m.toml"
    path.write_text(TINY.format(axes='backend = ["synthetic"]', repeats=1, timeout=60, cache=tmp_path, nvtx="false",
                                device="cpu") + judge + "\n")
    proc = cli("validate", path)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {path}: {problem}"), proc.stderr
