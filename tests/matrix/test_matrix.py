"""Matrix parsing: every bad input is one line naming file and key; valid files become frozen configs."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import ROOT  # noqa: E402

from harness.matrix.cells import Cell, expand, parse_only, schedule
from harness.matrix.parse import MatrixError, load_matrix, parse_matrix
from harness.matrix.reference import markdown_reference

HEAD = {"version": 1, "benchmark": {}}
"""What every matrix states; tests add the keys they are about."""


def matrix_of(raw: dict, source: str = "m.toml", **kwargs):
    """parse_matrix of HEAD with `raw` laid over it (a table in `raw` replaces HEAD's)."""
    return parse_matrix(HEAD | raw, source, **kwargs)


def problems_of(raw: dict, *, head: dict = HEAD) -> list[str]:
    with pytest.raises(MatrixError) as info:
        parse_matrix(head | raw, "m.toml")
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
    m = matrix_of({})
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
    assert "run.order: unknown value 'random'; choose from interleaved, sequential" in joined
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
    matrix_of({"data": {"path": str(tmp_path / "nope")}, "axes": {"backend": ["synthetic"]}})


def test_malformed_and_missing_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[benchmark\nname = 1")
    with pytest.raises(MatrixError, match=r"bad.toml: malformed TOML"):
        load_matrix(bad)
    with pytest.raises(MatrixError, match=r"nope.toml: matrix file not found"):
        load_matrix(tmp_path / "nope.toml")


def test_unsupported_version():
    assert problems_of({"version": 7}) == ["m.toml: version: unsupported matrix version 7; this nvbench reads 1"]
    assert problems_of({"version": True}) == [
        "m.toml: version: unsupported matrix version True; this nvbench reads 1"]


def test_expansion_and_excludes():
    m = matrix_of({"axes": {"backend": ["pytorch", "synthetic"], "precision": ["fp32", "fp16", "bf16"],
                            "grad_accum": [1, 2]},
                   "exclude": [{"backend": "synthetic", "precision": ["fp16", "bf16"]}]})
    cells = expand(m)
    combos = {(c.backend, c.precision, c.grad_accum) for c in cells}
    assert len(cells) == 2 * 3 * 2 - 2 * 2
    assert ("synthetic", "fp16", 1) not in combos and ("synthetic", "fp32", 2) in combos


def test_ids_are_stable_and_follow_what_is_measured():
    raw = {"axes": {"backend": ["synthetic", "pytorch"]}}
    first = [c.cell_id for c in expand(matrix_of(raw, "a.toml"))]
    again = [c.cell_id for c in expand(matrix_of(raw, "b.toml"))]
    assert first == again and len(set(first)) == 2
    # Known value: a change here breaks every stored history, so it must be deliberate.
    assert first[0].startswith("synthetic_nchw_fp32_ws1_ga1_")
    slower = expand(matrix_of(raw | {"benchmark": {"batch_size": 128}}, "a.toml"))
    assert [c.cell_id for c in slower] != first
    longer_timeout = expand(matrix_of(raw | {"benchmark": {"timeout_s": 99.0}}, "a.toml"))
    assert [c.cell_id for c in longer_timeout] == first
    # the label is data of the cell, and the id is the label and the hash: the label is never read back from it
    cells = expand(matrix_of(raw | {"axes": {"backend": ["synthetic"], "model": ["resnet18", "resnet50"]}}, "a.toml"))
    from harness.catalogue.cells import ID_HASH_LEN, label_from_id
    assert [c.label for c in cells] == ["resnet18_synthetic_nchw_fp32_ws1_ga1", "resnet50_synthetic_nchw_fp32_ws1_ga1"]
    assert all(c.cell_id[:-ID_HASH_LEN - 1] == c.label and label_from_id(c.cell_id) == c.label for c in cells)


def test_cell_round_trips_through_json():
    cell = expand(matrix_of({"axes": {"grad_accum": [2]}}), smoke=True)[0]
    back = Cell.from_plain(cell.to_plain())
    assert back == cell and back.cell_id == cell.cell_id and back.is_smoke


def test_only_filters_and_rejects():
    m = matrix_of({"axes": {"backend": ["pytorch", "synthetic"], "world_size": [1, 2]}})
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
    assert (c.benchmark.image_size, c.benchmark.batch_size, c.benchmark.measure_steps) == (24, 4, 3)
    assert c.data.path == "" and c.data.generate.train_per_class == 8 and c.is_smoke


def test_smoke_only_keeps_a_slice_under_smoke_alone():
    m = matrix_of({"axes": {"precision": ["fp32", "bf16"], "world_size": [1, 2], "backend": ["synthetic", "pytorch"]},
                   "smoke": {"only": ["world_size=1", "backend=pytorch", "backend=synthetic"]}})
    assert len(expand(m)) == 8  # a full run keeps every cell
    assert [(c.world_size, c.backend) for c in expand(m, smoke=True)] == [(1, "synthetic"), (1, "synthetic"),
                                                                          (1, "pytorch"), (1, "pytorch")]
    assert [c.precision for c in expand(m, smoke=True, only=["precision=bf16"])] == ["bf16", "bf16"]  # narrows more
    with pytest.raises(MatrixError, match=r"no cell left to run after --only world_size=2 and smoke.only"):
        expand(m, smoke=True, only=["world_size=2"])


@pytest.mark.parametrize("only, problem", [
    ("wrold_size=1", "smoke.only: 'wrold_size=1': expected axis=value with one of the axes (model, backend, "),
    ("precision=fp16", "smoke.only: 'precision=fp16': 'fp16' is not on the axis (fp32)"),
    ("world_size=x", "smoke.only: 'world_size=x': must be a positive integer, got 'x'"),
])
def test_smoke_only_names_each_bad_filter(only, problem):
    probs = problems_of({"smoke": {"only": [only]}})
    assert len(probs) == 1 and probs[0].startswith(f"m.toml: {problem}"), probs


def test_interleaved_schedule_is_seeded():
    ids = ["a", "b", "c"]
    one = schedule(ids, 3, "interleaved", seed=1)
    assert one == schedule(ids, 3, "interleaved", seed=1) != schedule(ids, 3, "interleaved", seed=2)
    assert sorted(one) == sorted(schedule(ids, 3, "sequential", seed=0))
    assert schedule(ids, 2, "sequential", 0) == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("c", 1)]


def test_docs_list_every_knob():
    doc = (ROOT / "docs" / "matrix.md").read_text()
    assert markdown_reference() in doc, "docs/matrix.md is stale: python -m harness.matrix.reference --markdown"


def test_docs_list_every_column():
    from harness.results.schema import markdown_reference as columns

    doc = (ROOT / "docs" / "results.md").read_text()
    assert columns() in doc, "docs/results.md is stale: python -m harness.results.schema"


# ---------------------------------------------------------------- what is not a matrix


@pytest.mark.parametrize("raw", [{}, {"project": {"name": "x"}}, {"axes": {"backend": ["synthetic"]}}])
def test_a_document_without_version_and_benchmark_is_not_a_matrix(raw):
    assert problems_of(raw, head={}) == [
        "m.toml: not an nvbench matrix (no `version = 1` and no [benchmark] table)"]


def test_version_and_benchmark_are_required():
    assert problems_of({"benchmark": {}}, head={}) == [
        "m.toml: version: missing; the file's first line should be `version = 1`"]
    assert problems_of({"version": 1}, head={}) == [
        "m.toml: benchmark: missing table; a matrix names its model and sizes in [benchmark]"]


@pytest.mark.parametrize("data, message", [
    (b"", "m.toml: not an nvbench matrix"),
    (b"version = 1\n[benchmark]\nname = \"caf\xe9\"\n", "m.toml: not UTF-8 text at line 3, column 12 (byte 0xe9)"),
    (b"version = 1\n[benchmark]\nname = \"\xc3\xa9\xe9\"\n", "m.toml: not UTF-8 text at line 3, column 10 (byte 0xe9)"),
    (b"\xff\xfev\x00", "m.toml: not UTF-8 text at line 1, column 1 (byte 0xff)"),
    (b"version = 1\n[benchmark]\nbatch_size = = 2\n", "m.toml: malformed TOML at line 3, column 14: Invalid value"),
    (b"version = 1\n[benchmark", "m.toml: malformed TOML at the end of the file: "),
])
def test_undecodable_and_unparsable_files_are_one_line_with_where(tmp_path, data, message):
    path = tmp_path / "m.toml"
    path.write_bytes(data)
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith(f"{tmp_path}/{message}")


def test_a_byte_order_mark_is_not_part_of_the_toml(tmp_path):
    path = tmp_path / "m.toml"
    path.write_bytes(b"\xef\xbb\xbfversion = 1\n[benchmark]\nname = 'bom'\n")
    assert load_matrix(path).benchmark.name == "bom"


def test_problem_lines_stay_one_short_line():
    probs = problems_of({"benchmark": {"line\nbreak": 1, "k" * 1000: 2, "name": 3}})
    assert len(probs) == 3 and all("\n" not in p and len(p) <= 300 for p in probs)
    assert "m.toml: benchmark.line\\nbreak: unknown key" in probs
    assert any(p.startswith("m.toml: benchmark.kkkk") and p.endswith("...") for p in probs)


# ---------------------------------------------------------------- registries and predictable late failures


def test_registry_values_are_checked_with_a_suggestion():
    probs = problems_of({"benchmark": {"model": "resnet5"}, "recipe": {"schedule": "cosin"},
                         "data": {"generate": {"kind": "digit"}}, "run": {"device": "cdua"}})
    assert ("m.toml: benchmark.model: unknown value 'resnet5' (did you mean 'resnet50'?); choose from "
            "resnet18, resnet34, resnet50, resnet101, resnext101-32x4d, se-resnext101-32x4d, efficientnet-b0, "
            "efficientnet-b4; or your own model as 'package.module:builder'") in probs
    assert any(p.startswith("m.toml: recipe.schedule: unknown value 'cosin' (did you mean 'cosine'?)")
               for p in probs)
    assert any(p.startswith("m.toml: data.generate.kind: unknown value 'digit' (did you mean 'digits'?)")
               for p in probs)
    assert "m.toml: run.device: unknown value 'cdua' (did you mean 'cuda'?); choose from auto, cuda, cpu" in probs


def test_the_spec_names_what_the_code_registers():
    import typing

    from harness.cell import recipe
    from harness.data.generate import DatasetParams
    from harness.matrix.sections import MEMORY_FORMATS, PRECISIONS, GenerateConfig, RecipeConfig

    def literal(cls, name):
        return typing.get_args(typing.get_type_hints(cls)[name])

    assert (PRECISIONS, MEMORY_FORMATS) == (recipe.PRECISIONS, recipe.MEMORY_FORMATS)
    assert literal(RecipeConfig, "schedule") == recipe.SCHEDULES
    assert literal(GenerateConfig, "kind") == literal(DatasetParams, "kind")


def test_model_output_stride_is_what_the_models_do():
    import torch

    from harness.models import build_model
    from harness.matrix.sections import MODEL_NAMES, MODEL_OUTPUT_STRIDE

    for name in MODEL_NAMES:
        trunk = torch.nn.Sequential(*list(build_model(name, num_classes=2).children())[:-2])
        assert trunk(torch.zeros(1, 3, 64, 64)).shape[-1] == 64 // MODEL_OUTPUT_STRIDE, name


@pytest.mark.parametrize("raw, fragment", [
    ({"recipe": {"momentum": 1.0}}, "recipe.momentum: must be < 1, got 1.0"),
    ({"recipe": {"momentum": 0.0, "nesterov": True}}, "recipe.nesterov: Nesterov momentum needs recipe.momentum > 0"),
    ({"recipe": {"step_milestones": [0.5, 0.2]}}, "recipe.step_milestones: must be strictly increasing"),
    ({"recipe": {"step_milestones": [0.5, 1.0]}}, "recipe.step_milestones: item 1.0: must be < 1"),
    ({"recipe": {"lr_per_256": float("nan")}}, "recipe.lr_per_256: must be a finite number, got nan"),
    ({"benchmark": {"timeout_s": float("inf")}}, "benchmark.timeout_s: must be a finite number, got inf"),
    ({"benchmark": {"seed": 2**32}}, "benchmark.seed: must be <= 2.14748e+09"),
    ({"benchmark": {"measure_steps": 2**70}}, "benchmark.measure_steps: must fit in 64 bits"),
    ({"axes": {"grad_accum": [2**64]}}, "axes.grad_accum: must fit in 64 bits"),
    ({"data": {"generate": {"image_size": 12}}}, "data.generate.image_size: must be >= 16, got 12"),
    ({"axes": {"backend": ["pytorch"]}, "data": {"generate": {"kind": "digits", "num_classes": 12}},
      "benchmark": {"num_classes": 12}}, "data.generate.num_classes: digits has 10 classes, asked for 12"),
    ({"benchmark": {"batch_size": 1, "image_size": 32}}, "benchmark.batch_size: one image of 32 px"),
    ({"smoke": {"batch_size": 1}}, "smoke.batch_size: one image of 24 px"),
    ({"axes": {"backend": ["pytorch"], "world_size": [1, 4]},
      "data": {"generate": {"num_classes": 2, "train_per_class": 5}}, "benchmark": {"batch_size": 4}},
     "benchmark.batch_size: 4 is more than the 3 generated training images each of 4 process(es) reads"),
    ({"axes": {"backend": ["dali-cpu"], "world_size": [1, 4]},
      "data": {"generate": {"num_classes": 2, "train_per_class": 5}}, "benchmark": {"batch_size": 3}},
     "benchmark.batch_size: 3 is more than the 2 generated training images each of 4 process(es) reads"),
    ({"axes": {"backend": ["pytorch"]}, "smoke": {"batch_size": 100}},
     "smoke.batch_size: 100 is more than the 80 generated training images"),
    ({"axes": {"backend": ["pytorch"]}, "data": {"path": "~no-such-user-here/imagenet"}},
     "data.path: cannot expand '~no-such-user-here/imagenet'"),
])
def test_what_would_fail_once_cells_run_is_refused_now(raw, fragment):
    probs = problems_of(raw)
    assert any(fragment in p for p in probs), probs


def test_rules_that_only_bind_where_they_apply():
    # batch 1 is fine above the model's stride; a big batch is fine for synthetic data or a real dataset
    matrix_of({"benchmark": {"batch_size": 1, "image_size": 64}, "smoke": {"image_size": 40}})
    matrix_of({"axes": {"backend": ["synthetic"]}, "benchmark": {"batch_size": 1000}})
    # digits is only generated when a cell reads data
    matrix_of({"axes": {"backend": ["synthetic"]}, "data": {"generate": {"kind": "digits"}}})


def test_digits_without_scikit_learn_is_refused_at_validate_time(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sklearn" else real(name, *a))
    probs = problems_of({"axes": {"backend": ["pytorch"]}, "data": {"generate": {"kind": "digits"}}})
    assert probs == ["m.toml: data.generate.kind: 'digits' needs scikit-learn, which is not installed: "
                     "pip install 'nvbench[digits]', or use kind = 'shapes'"]
    monkeypatch.undo()
    matrix_of({"axes": {"backend": ["pytorch"]}, "data": {"generate": {"kind": "digits"}}})


def test_every_cell_of_a_valid_matrix_builds_what_its_process_builds():
    from harness.cell.build import engine_options
    from harness.data import LoaderSpec
    from harness.data.generate import DatasetParams
    from harness.models import MODELS

    for path in sorted((ROOT / "matrices").glob("*.toml")):
        for smoke in (False, True):
            for c in expand(load_matrix(path), smoke=smoke):
                b, g = c.benchmark, c.data.generate
                assert b.model in MODELS
                engine_options(c, "cuda:0", dataset_images=1)  # the options a cell process builds (cuda: any mode)
                DatasetParams(kind=g.kind, image_size=g.image_size, num_classes=g.num_classes,
                              train_per_class=g.train_per_class, val_per_class=g.val_per_class, seed=g.seed)
                LoaderSpec(root=None, split="train", batch_size=b.batch_size, image_size=b.image_size,
                           num_classes=b.num_classes, memory_format=c.memory_format, device="cpu")


def test_the_batch_rule_reads_only_the_cells_that_run():
    raw = {"version": 1, "benchmark": {"batch_size": 4, "image_size": 64},
           "data": {"generate": {"num_classes": 10, "train_per_class": 4}},
           "axes": {"backend": ["synthetic", "pytorch"], "world_size": [1, 16]}}
    with pytest.raises(MatrixError, match="4 is more than the 3 generated training images each of 16 process"):
        parse_matrix(raw, "m.toml")
    excluded = raw | {"exclude": [{"backend": "pytorch", "world_size": 16}]}
    assert len(expand(parse_matrix(excluded, "m.toml"))) == 3  # synthetic needs no images at any world size


def test_auto_warmup_needs_an_open_ended_timeline_and_a_sane_range():
    base = {"version": 1, "benchmark": {"warmup_steps": "auto"}}
    assert parse_matrix(base, "m.toml").benchmark.warmup_steps == "auto"
    with pytest.raises(MatrixError, match="'auto' leaves the cell's length open"):
        parse_matrix(base | {"recipe": {"lr_timeline": "compressed"}}, "m.toml")
    with pytest.raises(MatrixError, match="warmup_min_steps: 50 is more than benchmark.warmup_max_steps \\(20\\)"):
        parse_matrix({"version": 1, "benchmark": {"warmup_min_steps": 50, "warmup_max_steps": 20}}, "m.toml")
    with pytest.raises(MatrixError, match="warmup_steps: unknown value 'atuo' \\(did you mean 'auto'\\?\\)"):
        parse_matrix({"version": 1, "benchmark": {"warmup_steps": "atuo"}}, "m.toml")


def test_the_compile_axis_names_its_modes_and_eager_ids_keep_their_form():
    cells = expand(parse_matrix({"version": 1, "benchmark": {}, "axes": {"compile": ["eager", "inductor",
                                                                                      "cudagraph"]}}, "m.toml"))
    assert [c.compile for c in cells] == ["eager", "inductor", "cudagraph"]
    assert cells[0].cell_id.startswith("synthetic_nchw_fp32_ws1_ga1_") and cells[0].cell_id.count("_") == 5
    assert "_ga1_inductor_" in cells[1].cell_id and "_ga1_cudagraph_" in cells[2].cell_id
    with pytest.raises(MatrixError, match="axes.compile: unknown value 'jit'"):
        parse_matrix({"version": 1, "benchmark": {}, "axes": {"compile": ["jit"]}}, "m.toml")


def test_repeats_beyond_a_thousand_is_one_problem_not_a_plan_that_fills_memory():
    """`repeats = 2**31` once passed validation, and the dry run's plan of every (cell, repeat) filled 23 GB
    (the fuzz test's random draw found it by the kernel's OOM killer)."""
    from harness.matrix.parse import with_repeats

    (problem,) = problems_of({"run": {"repeats": 2**31}})
    assert "repeats" in problem and "1000" in problem, problem
    assert matrix_of({"run": {"repeats": 1000}}).run.repeats == 1000
    with pytest.raises(MatrixError, match=r"--repeats 1001: run.repeats must be >= 1 and <= 1000"):
        with_repeats(matrix_of({}), 1001)
