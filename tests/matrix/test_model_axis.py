"""The model axis in the matrix: a registry model's defaults fill the keys a file leaves out and an explicit key
wins; single-model matrices keep their cell ids; several models, or the user's own, put the model in the id;
every bad model value is one line naming its key. Pure: nothing here imports torch."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest
from conftest import ROOT

from harness.models.registry import entry
from harness.matrix.cells import expand
from harness.matrix.sections import BenchmarkConfig, RecipeConfig
from harness.matrix.model_axis import defaults_lines
from harness.matrix.parse import MatrixError, load_matrix, parse_matrix

HEAD = {"version": 1, "benchmark": {"name": "m"}}


def matrix_of(raw: dict, source: str = "m.toml"):
    return parse_matrix(HEAD | raw, source)


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(MatrixError) as info:
        parse_matrix(HEAD | raw, "m.toml")
    return info.value.problems


def ids_digest(path: Path, *, smoke: bool = False) -> str:
    ids = [c.cell_id for c in expand(load_matrix(path), smoke=smoke)]
    return hashlib.sha256("".join(f"{i}\n" for i in ids).encode()).hexdigest()[:16]


def test_single_model_matrices_keep_the_cell_ids_they_had_before_the_model_axis():
    # The digests of the ids (in plan order) `nvbench run --dry-run` printed at ea7eb57, before the axis existed:
    # run folders, baselines and history written then must keep matching their cells.
    assert ids_digest(ROOT / "matrices" / "resnet50.toml") == "c03baed54416d663"
    # --smoke's ids changed once since, on purpose: its crop went from 16 to 24 px (223d92c54bc176ae before)
    assert ids_digest(ROOT / "matrices" / "resnet50.toml", smoke=True) == "e2eccf307f899f97"
    assert ids_digest(ROOT / "matrices" / "cpu-quick.toml") == "cef686de47e8e641"
    assert expand(load_matrix(ROOT / "matrices" / "cpu-quick.toml"))[0].cell_id == \
        "synthetic_nchw_fp32_ws1_ga1_08416303d4"


def test_one_model_on_the_axis_is_the_same_matrix_as_benchmark_model():
    by_bench = expand(matrix_of({"benchmark": {"model": "resnext101-32x4d"}}))
    by_axis = expand(matrix_of({"axes": {"model": ["resnext101-32x4d"]}}))
    assert [c.cell_id for c in by_bench] == [c.cell_id for c in by_axis]
    assert not by_axis[0].cell_id.startswith("resnext")


def test_several_models_name_the_model_first_in_every_id():
    m = matrix_of({"axes": {"model": ["resnet50", "se-resnext101-32x4d"], "precision": ["fp32", "fp16"]}})
    cells = expand(m)
    assert [c.model for c in cells] == ["resnet50"] * 2 + ["se-resnext101-32x4d"] * 2  # the first axis
    assert [c.label for c in cells] == [
        "resnet50_synthetic_nchw_fp32_ws1_ga1", "resnet50_synthetic_nchw_fp16_ws1_ga1",
        "se-resnext101-32x4d_synthetic_nchw_fp32_ws1_ga1", "se-resnext101-32x4d_synthetic_nchw_fp16_ws1_ga1"]
    alone = expand(matrix_of({"axes": {"precision": ["fp32"]}}))[0]
    # the hash is the measurement's: the same resnet50 cell alone or beside other models
    assert cells[0].cell_id.rpartition("_")[2] == alone.cell_id.rpartition("_")[2]
    assert [c.model for c in expand(m, only=["model=se-resnext101-32x4d"])] == ["se-resnext101-32x4d"] * 2


def test_a_registry_models_defaults_fill_what_the_file_leaves_out():
    m = matrix_of({"axes": {"model": ["resnet50", "resnext101-32x4d", "efficientnet-b0"]}})
    by_model = {c.model: c for c in expand(m)}
    rn50, rnx, b0 = by_model["resnet50"], by_model["resnext101-32x4d"], by_model["efficientnet-b0"]
    assert (rn50.benchmark, rn50.recipe) == (dataclasses.replace(BenchmarkConfig(), name="m"), RecipeConfig())
    assert (rnx.benchmark.batch_size, rnx.recipe.weight_decay, rnx.recipe.lr_per_256) == (128, 1 / 16384, 0.256)
    b0_recipe = entry("efficientnet-b0").recipe
    assert (b0.benchmark.batch_size, b0.recipe.lr_per_256, b0.recipe.weight_decay, b0.recipe.momentum,
            b0.recipe.epochs, b0.recipe.lr_warmup_epochs) == (256, b0_recipe.lr_per_256, 1e-5, 0.9, 400, 16)
    assert all(c.recipe.label_smoothing == 0.1 and c.benchmark.image_size == 224 for c in by_model.values())


def test_an_explicit_key_wins_over_the_models_default():
    m = matrix_of({"axes": {"model": ["resnext101-32x4d", "efficientnet-b0"]},
                   "benchmark": {"name": "m", "batch_size": 64}, "recipe": {"weight_decay": 1e-4, "epochs": 90}})
    for cell in expand(m):
        assert (cell.benchmark.batch_size, cell.recipe.weight_decay, cell.recipe.epochs) == (64, 1e-4, 90)
    # written with the knob's own default value is still written: resnext's default of 128 does not replace it
    same = matrix_of({"axes": {"model": ["resnext101-32x4d"]}, "benchmark": {"name": "m", "batch_size": 256}})
    assert expand(same)[0].benchmark.batch_size == 256
    smoke = expand(m, smoke=True)[1]  # --smoke shrinks sizes and steps; the recipe stays the model's
    assert (smoke.benchmark.batch_size, smoke.recipe.lr_per_256) == (4, entry("efficientnet-b0").recipe.lr_per_256)


def test_validate_lists_what_each_models_defaults_set():
    m = matrix_of({"axes": {"model": ["resnet50", "resnext101-32x4d", "efficientnet-b0"]},
                   "recipe": {"momentum": 0.875}})
    lines = defaults_lines(m)
    assert len(lines) == 2  # resnet50's defaults are the knobs' own: it sets nothing
    assert lines[0] == ("resnext101-32x4d: its registry defaults set benchmark.batch_size = 128, "
                        "recipe.weight_decay = 6.103515625e-05")
    assert lines[1].startswith("efficientnet-b0: its registry defaults set recipe.lr_per_256 = 0.005, "
                               "recipe.weight_decay = 1e-05, recipe.lr_warmup_epochs = 16, recipe.epochs = 400; "
                               "of its reference recipe "
                               "nvbench does not do: optimizer rmsprop")  # momentum: written in the file
    assert defaults_lines(m, {"resnet50"}) == []


def test_a_default_that_breaks_a_rule_names_its_model_and_how_to_override_it():
    probs = problems_of({"axes": {"model": ["resnet50", "efficientnet-b0"]}, "recipe": {"epochs": 10}})
    assert probs == [("m.toml: recipe.lr_warmup_epochs: 16 must be fewer than recipe.epochs (10) (model "
                      "efficientnet-b0; efficientnet-b0's registry default sets recipe.lr_warmup_epochs: give it in "
                      "the file to override)")]


@pytest.mark.parametrize("raw, problem", [
    ({"axes": {"model": ["resnet50", "resnext101"]}},
     "axes.model: unknown value 'resnext101' (did you mean 'resnet101'?); choose from resnet18, "),
    ({"axes": {"model": ["my-nets:build"]}}, "axes.model: 'my-nets:build': 'my-nets' is not an absolute module name"),
    ({"axes": {"model": [3]}}, "axes.model: must be str, got int 3"),
    ({"benchmark": {"model": "mynets:"}}, "benchmark.model: 'mynets:': expected 'package.module:builder'"),
    ({"benchmark": {"model": "resnet50"}, "axes": {"model": ["resnet50"]}},
     "benchmark.model: the file also has axes.model; name the model in one place"),
    ({"axes": {"model": ["resnet50"]}, "exclude": [{"model": "resnet18"}]},
     "exclude[0].model: value 'resnet18' is not on the axis (resnet50)"),
    ({"benchmark": {"model": "mynets:build"}, "recipe": {"zero_init_residual": True}},
     "recipe.zero_init_residual: applies to registry models only; 'mynets:build' initialises its own weights"),
])
def test_every_bad_model_is_one_line_naming_its_key(raw, problem):
    probs = problems_of(raw)
    assert len(probs) == 1 and probs[0].startswith(f"m.toml: {problem}"), probs


def test_the_users_model_is_looked_for_beside_the_matrix_then_here_and_carries_its_hash(tmp_path):
    path = tmp_path / "nets.toml"
    path.write_text('version = 1\n[benchmark]\nmodel = "mynets:build"\n')
    cell = expand(load_matrix(path))[0]
    assert cell.model_search_dirs == (str(tmp_path.resolve()), os.getcwd())
    assert cell.label == "mynets.build-2b46e979_synthetic_nchw_fp32_ws1_ga1"
    moved = dataclasses.replace(cell, model_search_dirs=("/elsewhere",))
    assert moved.cell_id == cell.cell_id  # where the module is found is not what is measured
    assert cell.recipe == RecipeConfig()  # the matrix's recipe: a user model has no registry defaults


def test_the_docs_worked_example_is_a_matrix_beside_its_module():
    cells = expand(load_matrix(ROOT / "examples" / "mynets.toml"))
    assert [c.label for c in cells] == [
        "resnet18_synthetic_nchw_fp32_ws1_ga1", "resnet18_pytorch_nchw_fp32_ws1_ga1",
        "mynets.build-2b46e979_synthetic_nchw_fp32_ws1_ga1", "mynets.build-2b46e979_pytorch_nchw_fp32_ws1_ga1"]
    assert cells[-1].model_search_dirs[0] == str((ROOT / "examples").resolve())


def test_the_convnets_matrix_is_the_mission_on_the_family_and_its_smoke_a_slice_that_runs_on_a_cpu():
    m = load_matrix(ROOT / "matrices" / "convnets.toml")
    family = {"resnet50", "resnext101-32x4d", "se-resnext101-32x4d", "efficientnet-b0"}
    cells = expand(m)
    assert len(cells) == 4 * 4 * 2 * 3 * 2 * 2 and {c.model for c in cells} == family
    for c in cells:  # each model on its own reference recipe: the file leaves those keys to the registry
        r = entry(c.model).recipe
        assert (c.benchmark.batch_size, c.benchmark.image_size, c.recipe.weight_decay, c.recipe.epochs) == \
            (r.batch_size, r.image_size, r.weight_decay, r.epochs)
    smoke = expand(m, smoke=True)
    assert {(c.world_size, c.grad_accum, c.memory_format, c.benchmark.image_size) for c in smoke} == {(1, 1, "nhwc", 24)}
    assert sorted((c.model, c.precision, c.backend) for c in smoke) == sorted(
        (model, p, b) for model in family for p in ("fp32", "fp16", "bf16") for b in ("dali-gpu", "pytorch", "synthetic"))
