"""The registry as data: importable without torch, every entry's figures equal to what its builder and the MFU
column's counter give, and the recipe defaults as DLE's configs.yml states them."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from torch import nn

from harness.cell.instruments.flops import training_flops_per_image
from harness.models import ENTRIES, MODELS, build_model, entry, model_names
from harness.models.flops import count_flops
from harness.matrix.sections import MODEL_NAMES, BenchmarkConfig, RecipeConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("module", ["harness.models", "harness.models.registry", "harness.models.user"])
def test_the_registry_loads_without_torch(module):
    probe = (f"import sys, {module} as m; m.model_names() if hasattr(m, 'model_names') else None; "
             "print(sorted(x for x in ('torch', 'numpy') if x in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_names_are_the_specs_and_unique():
    assert model_names() == tuple(MODELS) == tuple(e.name for e in ENTRIES)
    assert len(set(model_names())) == len(ENTRIES)


@pytest.mark.parametrize("name", model_names())
def test_an_entry_states_what_its_builder_builds(name):
    e = entry(name)
    with torch.device("meta"):
        net = build_model(name, num_classes=1000)
    assert sum(p.numel() for p in net.parameters()) == e.num_params
    # The registry's FLOPs are the MFU column's counter's, at the entry's image size.
    assert count_flops(name, num_classes=1000, image_size=e.recipe.image_size, training=False) == e.forward_flops


@pytest.mark.parametrize("name", ["resnet50", "efficientnet-b0"])
def test_a_training_image_costs_about_three_forwards(name):
    e = entry(name)
    train = training_flops_per_image(name, num_classes=1000, image_size=e.recipe.image_size)
    # backward = 2 x forward, less the first convolution's input gradient, which images do not need
    assert 2.9 * e.forward_flops < train < 3 * e.forward_flops


def test_a_grouped_convolutions_backward_costs_twice_its_forward():
    def builder(_name, *, num_classes):  # stem conv, depthwise 3x3 (groups 8), grouped 1x1 (groups 2), fc
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1, groups=8),
                             nn.Conv2d(8, 4, 1, groups=2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(4, num_classes))

    stem, depthwise, grouped, fc = 2 * 64 * 8 * 3 * 9, 2 * 64 * 8 * 9, 2 * 64 * 4 * 4, 2 * 4 * 5
    forward = count_flops("toy", num_classes=5, image_size=8, training=False, builder=builder)
    assert forward == stem + depthwise + grouped + fc
    train = count_flops("toy", num_classes=5, image_size=8, training=True, builder=builder)
    assert train == 2 * stem + 3 * (depthwise + grouped + fc)  # the stem computes no input gradient


def test_the_meta_count_draws_no_random_numbers():
    rng = torch.random.get_rng_state()
    count_flops("efficientnet-b4", num_classes=10, image_size=64, training=True)  # stochastic depth on
    assert torch.equal(torch.random.get_rng_state(), rng)


def test_recipes_are_the_references_configs():
    rn50, rnxt, b0, b4 = (entry(n).recipe for n in ("resnet50", "resnext101-32x4d", "efficientnet-b0",
                                                      "efficientnet-b4"))
    # configs.yml resnet_params_2k / _1k: lr 2.048 per 2048 and 1.024 per 1024 images = 0.256 per 256
    assert (rn50.lr_per_256, rn50.weight_decay, rn50.batch_size) == (0.256, 1 / 32768, 256)
    assert (rnxt.lr_per_256, rnxt.weight_decay, rnxt.batch_size) == (0.256, 1 / 16384, 128)
    assert entry("se-resnext101-32x4d").recipe == rnxt
    # efficientnet_b0/b4_params_4k: lr 0.08 / 0.16 per 4096 images, RMSprop, warmup 16 of 400 epochs
    assert (b0.lr_per_256, b0.weight_decay, b0.image_size, b0.batch_size) == (0.005, 1e-5, 224, 256)
    assert (b4.lr_per_256, b4.weight_decay, b4.image_size, b4.batch_size, b4.batch_size_tf32) == \
        (0.01, 5e-6, 380, 128, 64)
    assert (b0.optimizer, b0.rmsprop_alpha, b0.rmsprop_eps, b0.momentum) == ("rmsprop", 0.9, 0.01, 0.9)
    assert (b0.lr_warmup_epochs, b0.epochs, rn50.lr_warmup_epochs, rn50.epochs) == (16, 400, 8, 90)


def test_the_resnet50_recipe_is_the_matrix_default():
    defaults = entry("resnet50").recipe.matrix_defaults()
    bench, recipe = BenchmarkConfig(), RecipeConfig()
    assert all(getattr(bench, k) == v for k, v in defaults["benchmark"].items())
    assert all(getattr(recipe, k) == v for k, v in defaults["recipe"].items())
    assert entry("resnet50").recipe.not_honoured() == ()


def test_matrix_defaults_name_real_keys_and_the_rest_is_listed_as_not_honoured():
    sections = {"benchmark": BenchmarkConfig, "recipe": RecipeConfig}
    for e in ENTRIES:
        for section, values in e.recipe.matrix_defaults().items():
            assert set(values) <= {f.name for f in dataclasses.fields(sections[section])}, e.name
    assert entry("efficientnet-b0").recipe.not_honoured() == (
        "optimizer rmsprop (alpha 0.9, eps 0.01); nvbench trains with SGD", "mixup 0.2",
        "autoaugment augmentation", "bicubic resizing (nvbench resizes bilinearly)")


def test_published_throughput_is_attached_where_dle_publishes_it():
    assert (entry("resnet50").reference_tf32_img_per_s, entry("resnet50").reference_amp_img_per_s) == (938, 2470)
    assert entry("efficientnet-b4").reference_amp_img_per_s == 331
    assert entry("resnet18").reference_amp_img_per_s is None


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown model 'resnext50'; known models: resnet18, .*efficientnet-b4"):
        entry("resnext50")
