"""The recipe's options and learning-rate schedules on their own (harness.cell.recipe): every bad option named by
its field, at once; warm-up, cosine, linear, step and constant schedules, and the reference's epoch-granular
warm-up and decay."""

from __future__ import annotations

import pytest
from test_engine import options

from harness.cell.recipe import LrSchedule


def schedule(kind: str, *, total: int = 100, warmup: float = 0.1) -> LrSchedule:
    """The compressed timeline over `total` steps, warming up over `warmup` of them (90 epochs)."""
    return LrSchedule.from_options(options(schedule=kind, total_steps=total, lr_timeline="compressed",
                                           epochs=90, lr_warmup_epochs=round(warmup * 90)))


def test_warmup_ramps_linearly_from_one_step_to_peak():
    s = schedule("cosine")
    assert s.warmup_steps == 10
    assert [s(k) for k in range(10)] == pytest.approx([(k + 1) / 10 for k in range(10)])
    assert s(10) == pytest.approx(1.0)


def test_cosine_reaches_half_midway_and_zero_at_the_end():
    s = schedule("cosine")
    assert s(55) == pytest.approx(0.5)
    assert s(100) == pytest.approx(0.0, abs=1e-12)
    assert s(140) == pytest.approx(0.0, abs=1e-12)  # clamped past the end, never rising again
    assert all(s(k) > s(k + 1) for k in range(10, 99))


def test_linear_decays_to_zero():
    s = schedule("linear")
    assert s(55) == pytest.approx(0.5)
    assert s(100) == 0.0


def test_step_schedule_milestones_and_gamma():
    s = schedule("step", total=90, warmup=0.0)
    assert [s(k) for k in (0, 29, 30, 59, 60, 79, 80, 89)] == pytest.approx(
        [1, 1, 0.1, 0.1, 0.01, 0.01, 0.001, 0.001]
    )


def test_constant_after_warmup():
    s = schedule("constant", warmup=0.2)
    assert s(0) == pytest.approx(0.05)
    assert {s(k) for k in range(20, 100)} == {1.0}


def reference(kind: str = "cosine", **overrides) -> LrSchedule:
    """The reference timeline with 10 steps per epoch (1,000 images an epoch at a global batch of 100)."""
    return LrSchedule.from_options(options(schedule=kind, global_batch=100, epoch_images=1000, **overrides))


def test_reference_warmup_is_epoch_granular():
    s = reference()
    assert [s.epoch(k) for k in (0, 9, 10, 79, 80)] == [0, 0, 1, 7, 8]
    # DLE: lr = base * (epoch + 1) / 8 for the 8 warmup epochs; the step within the epoch is ignored.
    assert {s(k) for k in range(10)} == {1 / 8}
    assert [s(10 * e) for e in range(8)] == pytest.approx([(e + 1) / 8 for e in range(8)])
    assert s(79) == pytest.approx(1.0) and s(80) == pytest.approx(1.0)


def test_reference_decay_runs_over_the_epochs_of_the_reference_run():
    cosine, linear = reference(), reference("linear")
    assert cosine(10 * 49) == pytest.approx(0.5)  # (49 - 8) / (90 - 8) is halfway through the decay
    assert linear(10 * 49) == pytest.approx(0.5)
    assert cosine(10 * 90) == pytest.approx(0.0, abs=1e-12) and cosine(10 * 200) == pytest.approx(0.0, abs=1e-12)
    step = reference("step", lr_warmup_epochs=0)
    assert [step(10 * e) for e in (0, 29, 30, 59, 60, 79, 80)] == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01, 0.001])


def test_a_short_benchmark_of_imagenet_trains_at_an_eighth_of_the_peak():
    s = LrSchedule.from_options(options(global_batch=256, total_steps=130))  # the defaults: ImageNet, 8 of 90
    assert {s(k) for k in range(1000)} == {1 / 8}


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(grad_accum=0), r"grad_accum: must be >= 1"),
        (dict(precision="fp8"), r"precision: 'fp8' is not one of"),
        (dict(memory_format="NHWC"), r"memory_format: 'NHWC'"),
        (dict(device="gpu"), r"device: 'gpu'"),
        (dict(global_batch=10, grad_accum=4), r"global_batch: 10 is not a multiple of grad_accum=4"),
        (dict(lr_warmup_epochs=90), r"lr_warmup_epochs: must be in \[0, epochs=90\)"),
        (dict(epoch_images=0), r"epoch_images: must be >= 1"),
        (dict(lr_timeline="short"), r"lr_timeline: 'short'"),
        (dict(step_milestones=(0.6, 0.3)), r"step_milestones: must be strictly increasing"),
        (dict(momentum=0.0, nesterov=True), r"nesterov: needs momentum > 0"),
        (dict(schedule="poly"), r"schedule: 'poly'"),
        (dict(loss_scale_growth_interval=0), r"loss_scale_growth_interval"),
    ],
)
def test_invalid_options_name_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        options(**overrides)


def test_all_option_problems_are_reported_together():
    with pytest.raises(ValueError, match=r"(?s)total_steps.*label_smoothing"):
        options(total_steps=0, label_smoothing=1.5)


# ---- GPU: no host synchronisation in the step functions ---------------------------------------------
