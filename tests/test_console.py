"""The summary `nvbench run` ends with, captured at the 80 columns of a plain terminal: one line per cell that
ran, skips grouped by reason, failures with their reason, the matrix efficiency slot, what to run next.
(The real CLI's summary, from a real run, is checked in tests/analysis/test_report.py.)"""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest
from rich.console import Console

from harness.console import RunProgress, print_summary, throughput_interval_pct

RUN = Path("reports/20261125-101010-resnet50-smoke-ab12")
GPU_REASON = "dali-gpu needs CUDA: this machine has no visible GPU (torch.cuda.is_available() is false)"


def smoke_like_rows() -> list[dict]:
    """The shape of `nvbench run matrices/resnet50.toml --smoke` on a CPU machine: 96 cells, most skipped with
    long reasons, one timed out."""
    rows = []
    for backend, fmt, precision, ws in itertools.product(("synthetic", "pytorch", "dali-cpu", "dali-gpu"),
                                                         ("nchw", "nhwc"), ("fp32", "fp16", "bf16"), (1, 2, 4, 8)):
        status, reason = "ok", ""
        if backend == "dali-gpu":
            status, reason = "skipped", GPU_REASON
        elif ws > 2:
            status, reason = "skipped", (f"world_size {ws} exceeds the 2 CPU cores of this machine (without CUDA "
                                         "each rank is a gloo process on its own core)")
        rows.append({"cell_id": f"{backend}_{fmt}_{precision}_ws{ws}_ga1_0123456789",
                     "cell_label": f"{backend}_{fmt}_{precision}_ws{ws}_ga1", "repeat": 0, "status": status,
                     "reason": reason, "throughput_img_per_s": 250.0 if status == "ok" else None,
                     "throughput_ci_low_img_per_s": 240.0, "throughput_ci_high_img_per_s": 260.0,
                     "top1": None if backend == "synthetic" else 0.125, "num_val_images": 4,  # one smoke batch
                     "exposed_data_wait_frac": 0.0375})
    rows[1] |= {"status": "timeout", "throughput_img_per_s": None,
                "reason": "no exit within 120 s: the process group was killed [logs/x.log]\nTraceback ..."}
    return rows


def summary(rows: list[dict], manifest: dict | None = None) -> list[str]:
    out = io.StringIO()
    print_summary(Console(file=out, width=80), rows, RUN, manifest or {})
    return out.getvalue().splitlines()


def test_the_summary_of_a_smoke_sized_run_fits_80_columns_with_one_line_per_cell_that_ran():
    lines = summary(smoke_like_rows())
    assert max(map(len, lines)) <= 80 and len(lines) < 60  # the old table: 886 lines at 80 columns
    assert lines[0] == "ran: 35 cells"
    ran = [line for line in lines if line.split() and line.split()[-1] == "ok"]
    assert len(ran) == 35 and all("_0123456789" not in line for line in ran)  # labels without the hash
    # a top-1 of 4 images is noise, not a result: said so, never printed as a number
    assert ran[0].split() == ["dali-cpu_nchw_bf16_ws1_ga1", "250.0", "±4.0%", "n/a:", "4", "img", "3.8%", "ok"]
    assert not any("0.125" in line for line in lines)
    assert "top-1 n/a: validated on fewer than 100 images, not a result" in lines
    validated = summary([r | {"num_val_images": 1000} for r in smoke_like_rows()])
    assert "0.125" in next(line for line in validated if line.startswith("dali-cpu_nchw_bf16_ws1_ga1"))
    assert [line.split()[0] for line in ran if line.startswith("synthetic")][:2] == \
        ["synthetic_nchw_bf16_ws1_ga1", "synthetic_nchw_bf16_ws2_ga1"]
    header = next(line for line in lines if line.startswith("cell"))
    assert header.split() == ["cell", "img/s", "±95%", "top-1", "data", "wait", "status"]


def words_whole(lines: list[str], text: str) -> bool:
    """`text` is in `lines` with every word whole: the lines joined at their breaks hold it, and no line ends
    in a cut ('…')."""
    joined = " ".join(line.strip() for line in lines)
    return " ".join(text.split()) in joined and not any(line.endswith("…") for line in lines)


def test_skips_are_grouped_by_reason_and_failures_give_their_first_line():
    lines = summary(smoke_like_rows())
    start = lines.index("skipped: 60 cells, by reason (in full: --verbose)")
    end = lines.index("", start)
    groups = lines[start + 1:end]
    assert [g.split()[0] for g in groups if not g.startswith("      ")] == ["24", "18", "18"]  # most common first
    # a reason longer than the line wraps under its own start: every word whole, nothing over 80 columns
    assert groups[0].startswith("  24  dali-gpu needs CUDA: this machine has no visible GPU")
    assert groups[1] == "      (torch.cuda.is_available() is false)"
    assert max(map(len, groups)) <= 80 and words_whole(groups[:2], GPU_REASON)
    assert words_whole(groups[2:4], "world_size 4 exceeds the 2 CPU cores of this machine (without CUDA each rank is "
                                    "a gloo process on its own core)")
    failed = lines.index("failed: 1 cell (in full: --verbose)")
    assert lines[failed + 1:failed + 3] == [
        "  synthetic_nchw_fp32_ws2_ga1  r0 timeout: no exit within 120 s: the process",
        "    group was killed [logs/x.log]"]
    assert lines[-3:] == ["96 rows: 35 ok, 60 skipped, 1 timeout", f"results: {RUN}", f"next:    nvbench report {RUN}"]


def test_a_reason_wraps_at_words_and_a_path_longer_than_the_line_stays_whole():
    path = "/very/long/" + "x" * 90 + "/cell.log"
    rows = [{"cell_id": "pytorch_nchw_fp32_ws1_ga1_0123456789", "cell_label": "pytorch_nchw_fp32_ws1_ga1", "repeat": 0,
             "status": "failed",
             "reason": f"exit code 1: RuntimeError: the loader could not open {path} (see the log)",
             "throughput_img_per_s": None}]
    lines = summary(rows)
    failed = lines[lines.index("failed: 1 cell (in full: --verbose)") + 1:lines.index("1 rows: 1 failed") - 1]
    assert words_whole(failed, rows[0]["reason"]) and any(line.strip() == path for line in failed)
    assert all(len(line) <= 80 for line in failed if path not in line)


def test_the_summary_says_what_top1_dash_chance_and_fp16_on_a_cpu_mean():
    rows = [r | {"device": "cpu", "backend": r["cell_id"].split("_")[0], "precision": r["cell_id"].split("_")[2],
                 "num_classes": 10, "is_smoke": True, "num_val_images": 100} for r in smoke_like_rows()]
    lines = summary(rows)
    assert "top-1 -: not measured (synthetic data has random labels: nothing to learn)" in lines
    assert "top-1 by chance: 0.100 (1 / 10 classes); a --smoke cell's few steps leave it" in lines
    assert "fp16 on a CPU is slow: no fast fp16 kernels there; on a GPU fp16 is fast" in lines
    assert max(map(len, lines)) <= 80
    # a full run on a GPU: no smoke words, no fp16 note
    full = summary([r | {"device": "cuda", "is_smoke": False} for r in rows])
    assert "top-1 by chance: 0.100 (1 / 10 classes)" in full and not any("fp16 on a CPU" in line for line in full)


def test_matrix_efficiency_shows_where_the_manifest_records_it():
    rows = smoke_like_rows()[:2]
    assert not any("matrix efficiency" in line for line in summary(rows))
    assert "matrix efficiency 0.83 (measured window s / run wall s)" in summary(rows, {"matrix_efficiency": 0.8312})


def test_the_summary_names_the_largest_part_that_was_not_measuring_and_the_estimate_beside_what_it_took():
    """The next cut is obvious (the largest non-window part of the wall, with its share), and the cost known
    before the run is printed beside what the run took, with where the estimate came from."""
    rows = smoke_like_rows()[:2]
    breakdown = {"startup_s": 40.0, "build_s": 30.0, "window_s": 25.0, "val_s": 55.0, "rest_of_jobs_s": 10.0,
                 "between_jobs_s": 5.0}
    estimate = {"wall_s": 150.0, "slots": 1, "source": "2 job(s); every job from past rows (run r1)"}
    session = {"started_at": "2026-11-25T10:00:00+00:00", "finished_at": "2026-11-25T10:03:00+00:00",
               "estimate": estimate}
    lines = summary(rows, {"matrix_efficiency": 0.151, "wall_s": 165.0, "time_breakdown_s": breakdown,
                           "sessions": [session]})
    assert "matrix efficiency 0.15 (measured window s / run wall s)" in lines
    assert "largest other part: val_s 55.0 s, 33% of the wall (the next cut)" in lines
    assert ("took 3m00s; estimated 2m30s (+20 %) with 1 slot: 2 job(s); every job from past rows (run r1)"
            in " ".join(" ".join(lines).split())) and max(map(len, lines)) <= 80  # wrapped, not cut
    assert not any(line.startswith(("largest", "took")) for line in summary(rows, {"matrix_efficiency": 0.5}))


def test_several_repeats_show_their_mean_with_the_t_interval_and_a_partial_cell_both_ways():
    base = {"cell_id": "pytorch_nchw_fp32_ws1_ga1_0123456789", "cell_label": "pytorch_nchw_fp32_ws1_ga1", "reason": "", "top1": 0.5, "num_val_images": 500,
            "exposed_data_wait_frac": 0.1}
    rows = [base | {"repeat": i, "status": "ok", "throughput_img_per_s": x} for i, x in enumerate((98.0, 100.0, 102.0))]
    rows.append(base | {"repeat": 3, "status": "crashed", "reason": "killed by SIGKILL", "throughput_img_per_s": None})
    # mean 100, s = 2, t_{2, 0.975} = 4.303: 4.303 * 2 / sqrt(3) = 4.97 %
    assert throughput_interval_pct(rows[:3]) == pytest.approx(4.968, abs=1e-3)
    lines = summary(rows)
    assert lines[3].split() == ["pytorch_nchw_fp32_ws1_ga1", "100.0", "±5.0%", "0.500", "10.0%", "ok", "3/4"]
    assert "  pytorch_nchw_fp32_ws1_ga1  r3 crashed: killed by SIGKILL" in lines


def test_a_long_label_is_cut_and_the_numbers_stay_whole():
    row = {"cell_id": "synthetic_channels_last_bfloat16_ws1_ga1_compile-max-autotune_0123456789",
           "cell_label": "synthetic_channels_last_bfloat16_ws1_ga1_compile-max-autotune", "repeat": 0,
           "status": "ok", "reason": "", "throughput_img_per_s": 4899.1, "throughput_ci_low_img_per_s": 4890.0,
           "throughput_ci_high_img_per_s": 4910.0, "top1": None, "exposed_data_wait_frac": 0.0}
    lines = summary([row])
    assert max(map(len, lines)) <= 80
    assert lines[3].split()[1:] == ["4899.1", "±0.2%", "-", "0.0%", "ok"] and "…" in lines[3]


def test_each_finished_job_is_one_line_at_80_columns_ending_at_a_whole_word():
    out = io.StringIO()
    progress = RunProgress(Console(file=out, width=80), total=2)
    for row in smoke_like_rows()[-2:]:  # two skipped dali-gpu jobs with their long reason
        progress.done(row)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(len(line) <= 80 and line.endswith("…") for line in lines)
    assert lines[0].startswith(" skipped dali-gpu_nhwc_bf16_ws4_ga1_0123456789 r0  dali-gpu needs CUDA")
    shown = lines[0].split("  ", 2)[-1].removesuffix("…")
    assert GPU_REASON.startswith(shown) and GPU_REASON[len(shown)] == " "  # cut between two words, not inside one


def test_the_summary_names_the_cells_and_repeats_taken_under_interference():
    from harness.console import interference_lines

    rows = [{"status": "ok", "cell_id": "c1", "repeat": 0, "foreign_cpu_frac": 0.61},
            {"status": "ok", "cell_id": "c1", "repeat": 1, "foreign_cpu_frac": 0.01},
            {"status": "ok", "cell_id": "c2", "repeat": 0, "foreign_cpu_frac": 0.02}]
    lines = interference_lines(rows, 120)
    assert lines[0].startswith("taken under interference: 1 cell, 1 repeat(s)")
    assert lines[1:] == ["c1: other processes on its cores: r0 61%"]
    assert interference_lines(rows[1:], 120) == []  # a quiet run says nothing
    busy = smoke_like_rows()
    busy[0]["foreign_cpu_frac"] = 0.61
    text = summary(busy)
    assert "taken under interference: 1 cell, 1 repeat(s) (not steady; a report leaves them" in text
    assert all(len(line) <= 80 for line in text)
    assert not any("interference" in line for line in summary(smoke_like_rows()))
