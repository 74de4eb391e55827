"""Matrix parsing: every bad input is one line naming file and key; valid files become frozen configs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.config import MatrixError, load_matrix, markdown_reference, parse_matrix
from harness.matrix import Cell, expand, parse_only, schedule

ROOT = Path(__file__).resolve().parents[1]


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(MatrixError) as info:
        parse_matrix(raw, "m.toml")
    return info.value.problems


def test_shipped_matrices_validate():
    for path in sorted((ROOT / "matrices").glob("*.toml")):
        matrix = load_matrix(path)
        assert expand(matrix)


def test_mission_matrix_has_the_whole_product():
    m = load_matrix(ROOT / "matrices" / "resnet50.toml")
    cells = expand(m)
    assert len(cells) == 4 * 2 * 3 * 2 * 2
    assert m.benchmark.model == "resnet50" and m.benchmark.batch_size == 256
    assert m.recipe.lr_per_256 == 0.256 and m.recipe.momentum == 0.875


def test_defaults_are_the_reference_recipe():
    m = parse_matrix({}, "m.toml")
    r = m.recipe
    assert (r.lr_per_256, r.momentum, r.weight_decay, r.label_smoothing, r.schedule) == \
        (0.256, 0.875, 3.0517578125e-05, 0.1, "cosine")
    assert r.bn_bias_weight_decay is False and r.loss_scale_growth_interval == 100
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.momentum = 0.9  # type: ignore[misc]


def test_unknown_keys_suggest_the_right_one():
    probs = problems_of({"axes": {"precison": ["fp16"]}, "benchmark": {"batchsize": 3}, "reciep": {}})
    assert "m.toml: axes.precison: unknown axis (did you mean 'precision'?)" in probs
    assert "m.toml: benchmark.batchsize: unknown key (did you mean 'batch_size'?)" in probs
    assert "m.toml: reciep: unknown section (did you mean 'recipe'?)" in probs


def test_all_problems_are_reported_together():
    probs = problems_of({
        "benchmark": {"batch_size": 0, "image_size": "big", "warmup_steps": -1, "timeout_s": True},
        "axes": {"backend": [], "precision": ["fp8"], "world_size": [0, 2], "memory_format": "nhcw"},
        "run": {"order": "random"},
    })
    joined = "\n".join(probs)
    assert len(probs) == 9, joined
    assert "benchmark.batch_size: must be >= 1, got 0" in joined
    assert "benchmark.image_size: must be int, got str 'big'" in joined
    assert "benchmark.warmup_steps: must be >= 0" in joined
    assert "benchmark.timeout_s: must be float, got bool" in joined
    assert "axes.backend: empty list" in joined
    assert "axes.precision: unknown value 'fp8'" in joined
    assert "axes.world_size: must be a positive integer, got 0" in joined
    assert "axes.memory_format: unknown value 'nhcw' (did you mean 'nhwc'?)" in joined
    assert "run.order: must be one of 'interleaved', 'sequential'" in joined
    assert all(p.startswith("m.toml: ") and "\n" not in p for p in probs)


def test_exclude_must_name_axes_and_values_on_them():
    probs = problems_of({"axes": {"precision": ["fp32", "bf16"]},
                         "exclude": [{"precison": "fp32"}, {"precision": "fp16"}, {}]})
    assert "m.toml: exclude[0].precison: unknown axis (did you mean 'precision'?)" in probs
    assert any(p.startswith("m.toml: exclude[1].precision: value 'fp16' is not on the axis") for p in probs)
    assert "m.toml: exclude[2]: must be a non-empty table of axis = value pairs" in probs


def test_cross_field_rule_names_the_knob():
    probs = problems_of({"benchmark": {"num_classes": 5}, "data": {"generate": {"num_classes": 10}}})
    assert any("benchmark.num_classes: 5 is fewer than data.generate.num_classes" in p for p in probs)


def test_missing_dataset_path(tmp_path):
    probs = problems_of({"data": {"path": str(tmp_path / "nope")}, "axes": {"backend": ["pytorch"]}})
    assert any("data.path: dataset" in p and "has no train/ or val/ directory" in p for p in probs)
    # synthetic-only matrices never read the dataset
    parse_matrix({"data": {"path": str(tmp_path / "nope")}, "axes": {"backend": ["synthetic"]}}, "m.toml")


def test_malformed_and_missing_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[benchmark\nname = 1")
    with pytest.raises(MatrixError, match=r"bad.toml: malformed TOML"):
        load_matrix(bad)
    with pytest.raises(MatrixError, match=r"nope.toml: matrix file not found"):
        load_matrix(tmp_path / "nope.toml")


def test_unsupported_version():
    assert problems_of({"version": 7}) == ["m.toml: version: unsupported matrix version 7; this nvbench reads 1"]


def test_expansion_and_excludes():
    m = parse_matrix({"axes": {"backend": ["pytorch", "synthetic"], "precision": ["fp32", "fp16", "bf16"],
                               "grad_accum": [1, 2]},
                      "exclude": [{"backend": "synthetic", "precision": ["fp16", "bf16"]}]}, "m.toml")
    cells = expand(m)
    combos = {(c.backend, c.precision, c.grad_accum) for c in cells}
    assert len(cells) == 2 * 3 * 2 - 2 * 2
    assert ("synthetic", "fp16", 1) not in combos and ("synthetic", "fp32", 2) in combos


def test_ids_are_stable_and_follow_what_is_measured():
    raw = {"axes": {"backend": ["synthetic", "pytorch"]}}
    first = [c.cell_id for c in expand(parse_matrix(raw, "a.toml"))]
    again = [c.cell_id for c in expand(parse_matrix(raw, "b.toml"))]
    assert first == again and len(set(first)) == 2
    # Known value: a change here breaks every stored history, so it must be deliberate.
    assert first[0].startswith("synthetic_nchw_fp32_ws1_ga1_")
    slower = expand(parse_matrix(raw | {"benchmark": {"batch_size": 128}}, "a.toml"))
    assert [c.cell_id for c in slower] != first
    longer_timeout = expand(parse_matrix(raw | {"benchmark": {"timeout_s": 99.0}}, "a.toml"))
    assert [c.cell_id for c in longer_timeout] == first


def test_cell_round_trips_through_json():
    cell = expand(parse_matrix({"axes": {"grad_accum": [2]}}, "m.toml"), smoke=True)[0]
    back = Cell.from_plain(cell.to_plain())
    assert back == cell and back.cell_id == cell.cell_id and back.is_smoke


def test_only_filters_and_rejects():
    m = parse_matrix({"axes": {"backend": ["pytorch", "synthetic"], "world_size": [1, 2]}}, "m.toml")
    cells = expand(m, only=["backend=synthetic", "world_size=2"])
    assert [(c.backend, c.world_size) for c in cells] == [("synthetic", 2)]
    with pytest.raises(MatrixError, match=r"--only 'backend': expected axis=value"):
        parse_only(["backend"], "m.toml")
    with pytest.raises(MatrixError, match=r"unknown axis \(did you mean 'precision'\?\)"):
        expand(m, only=["precison=fp16"])
    with pytest.raises(MatrixError, match=r"m.toml: no cell left to run after --only world_size=4"):
        expand(m, only=["world_size=4"])


def test_smoke_shrinks_every_cell():
    m = load_matrix(ROOT / "matrices" / "resnet50.toml")
    cells = expand(m, smoke=True)
    assert len(cells) == 96
    c = cells[0]
    assert (c.benchmark.image_size, c.benchmark.batch_size, c.benchmark.measure_steps) == (16, 4, 3)
    assert c.data.path == "" and c.data.generate.train_per_class == 8 and c.is_smoke


def test_interleaved_schedule_is_seeded():
    ids = ["a", "b", "c"]
    one = schedule(ids, 3, "interleaved", seed=1)
    assert one == schedule(ids, 3, "interleaved", seed=1) != schedule(ids, 3, "interleaved", seed=2)
    assert sorted(one) == sorted(schedule(ids, 3, "sequential", seed=0))
    assert schedule(ids, 2, "sequential", 0) == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("c", 1)]


def test_docs_list_every_knob():
    doc = (ROOT / "docs" / "matrix.md").read_text()
    assert markdown_reference() in doc, "docs/matrix.md is stale: python -m harness.config --markdown"


def test_docs_list_every_column():
    from harness.records import markdown_reference as columns

    doc = (ROOT / "docs" / "results.md").read_text()
    assert columns() in doc, "docs/results.md is stale: python -m harness.records"
