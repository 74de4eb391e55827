"""The engine on CPU: accumulation equivalence, fp16 overflow handling, schedules, decay groups,
precision x memory format, validation counts, DDP no_sync, option validation."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from harness.cell.engine import Engine
from harness.cell.recipe import STATIC_GROWTH_INTERVAL, EngineOptions, LrSchedule, param_groups
from harness.models import build_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # other engineers' tests share the 2 cores


def options(**overrides) -> EngineOptions:
    base = dict(precision="fp32", memory_format="nchw", grad_accum=1, device="cpu", global_batch=8, total_steps=10)
    return EngineOptions(**(base | overrides))


def tiny_net(*, norm: bool = False, classes: int = 5) -> nn.Module:
    """Conv (+BN) -> ReLU -> global pool -> fc: every layer kind the groups and formats care about."""
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Conv2d(3, 4, 3, padding=1, bias=not norm)]
    if norm:
        layers.append(nn.BatchNorm2d(4))
    layers += [nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, classes)]
    return nn.Sequential(*layers)


def batch(n: int, *, classes: int = 5, size: int = 8, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, size, size, generator=gen), torch.randint(0, classes, (n,), generator=gen)


def params_of(engine: Engine) -> list[torch.Tensor]:
    return [p.detach().clone() for p in engine.model.parameters()]


# ---- gradient accumulation --------------------------------------------------------------------------


def test_grad_accum_4x2_matches_one_batch_of_8():
    # Large lr and weight decay so that any mis-scaling of loss, decay or momentum shows up.
    recipe = dict(global_batch=8, lr_per_256=25.6, weight_decay=0.05, lr_warmup_epochs=0, label_smoothing=0.1)
    net = tiny_net()
    whole = Engine(copy.deepcopy(net), options(grad_accum=1, **recipe))
    split = Engine(copy.deepcopy(net), options(grad_accum=4, **recipe))
    for step in range(3):  # several steps so momentum buffers take part
        images, labels = batch(8, seed=step)
        whole.forward_backward(images, labels)
        whole.optimizer_step()
        for micro in range(4):
            part = slice(2 * micro, 2 * micro + 2)
            split.forward_backward(images[part], labels[part], sync_grads=micro == 3)
        split.optimizer_step()
    for a, b in zip(params_of(whole), params_of(split), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not torch.equal(params_of(whole)[0], tiny_net()[0].weight)  # training really moved the weights
    # The reported loss is the per-image mean times images either way.
    torch.testing.assert_close(whole.pop_train_loss(), split.pop_train_loss(), rtol=1e-6, atol=1e-6)
    assert whole.pop_train_loss().tolist() == [0.0, 0.0]  # popped means reset


def test_train_loss_is_label_smoothed_mean_times_batch():
    net = tiny_net()
    engine = Engine(copy.deepcopy(net), options(label_smoothing=0.1))
    images, labels = batch(6)
    engine.forward_backward(images, labels)
    expected = F.cross_entropy(net(images), labels, label_smoothing=0.1) * 6
    loss_sum, count = engine.pop_train_loss().tolist()
    assert count == 6
    assert loss_sum == pytest.approx(expected.item(), rel=1e-6)


# ---- fp16 loss scaling -----------------------------------------------------------------------------


def test_fp16_overflow_skips_the_step_and_halves_the_scale():
    engine = Engine(tiny_net(), options(precision="fp16", init_loss_scale=1024.0, lr_warmup_epochs=0))
    assert engine.loss_scale() == 1024.0
    images, labels = batch(4)
    before = params_of(engine)
    fc_weight = engine.model[-1].weight
    hook = fc_weight.register_hook(lambda grad: grad * math.inf)  # one poisoned gradient
    engine.forward_backward(images, labels)
    hook.remove()
    engine.optimizer_step()
    for a, b in zip(before, params_of(engine), strict=True):
        assert torch.equal(a, b)  # the whole step is skipped, finite gradients included
    assert engine.loss_scale() == 512.0
    # A skipped first step must leave momentum at zero, not at fused SGD's uninitialised buffers.
    for state in engine.optimizer.state.values():
        assert torch.count_nonzero(state["momentum_buffer"]) == 0

    engine.forward_backward(images, labels)
    engine.optimizer_step()
    after = params_of(engine)
    assert all(torch.isfinite(p).all() for p in after)
    assert all(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert engine.loss_scale() == 512.0  # static by default: a clean step never grows it


def test_fp16_step_matches_fp32_step_after_unscaling():
    # The scaler must divide the scale back out: one fp16 step lands where the fp32 step does.
    recipe = dict(lr_warmup_epochs=0, lr_per_256=2.56, init_loss_scale=256.0)
    net = tiny_net()
    fp32 = Engine(copy.deepcopy(net), options(precision="fp32", **recipe))
    fp16 = Engine(copy.deepcopy(net), options(precision="fp16", **recipe))
    images, labels = batch(8)
    for engine in (fp32, fp16):
        engine.forward_backward(images, labels)
        engine.optimizer_step()
    for a, b in zip(params_of(fp32), params_of(fp16), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-3)


def test_scaler_only_for_fp16():
    assert Engine(tiny_net(), options(precision="bf16")).loss_scale() is None
    assert Engine(tiny_net(), options(precision="fp32")).scaler is None
    scaler = Engine(tiny_net(), options(precision="fp16", dynamic_loss_scale=True,
                                        loss_scale_growth_interval=7)).scaler
    assert (scaler.get_growth_factor(), scaler.get_backoff_factor(), scaler.get_growth_interval()) == (2.0, 0.5, 7)


def test_fp16_loss_scale_is_the_references_static_128_unless_dynamic():
    static = Engine(tiny_net(), options(precision="fp16", loss_scale_growth_interval=2))
    dynamic = Engine(tiny_net(), options(precision="fp16", dynamic_loss_scale=True, loss_scale_growth_interval=2))
    assert static.scaler.get_growth_interval() == STATIC_GROWTH_INTERVAL  # the growth interval is ignored
    images, labels = batch(4)
    for _ in range(4):  # clean steps
        for engine in (static, dynamic):
            engine.forward_backward(images, labels)
            engine.optimizer_step()
    assert static.loss_scale() == 128.0
    assert dynamic.loss_scale() == 128.0 * 4  # doubled after every 2 clean steps


# ---- learning-rate schedules -----------------------------------------------------------------------


def test_engine_lr_scales_with_global_batch_and_follows_the_schedule():
    engine = Engine(tiny_net(), options(global_batch=512, total_steps=20, lr_timeline="compressed",
                                        lr_warmup_epochs=9))
    peak = 0.256 * 512 / 256
    expected = LrSchedule.from_options(engine.opts)
    assert engine.opts.peak_lr == pytest.approx(peak)
    seen = []
    for _ in range(20):
        seen.append(engine.lr())
        engine.optimizer_step()  # no gradients: only the schedule moves
    assert seen == pytest.approx([peak * expected(k) for k in range(20)])
    assert seen[0] == pytest.approx(peak / 2) and seen[2] == pytest.approx(peak)
    assert engine.lr() == pytest.approx(0.0, abs=1e-12)
    assert {g["lr"] for g in engine.optimizer.param_groups} == {engine.lr()}


def test_step_records_keep_each_steps_mean_loss_and_its_lr():
    net = tiny_net()
    engine = Engine(copy.deepcopy(net), options(grad_accum=2, total_steps=4, lr_timeline="compressed",
                                                lr_warmup_epochs=45))
    expected_loss, expected_lr = [], []
    for step in range(3):
        expected_lr.append(engine.lr())
        losses = []
        for micro in range(2):
            images, labels = batch(4, seed=10 * step + micro)
            with torch.no_grad():
                losses.append(F.cross_entropy(engine.model(images), labels, label_smoothing=0.1).item())
            engine.forward_backward(images, labels, sync_grads=micro == 1)
        expected_loss.append(sum(losses) / 2)
        engine.optimizer_step()
    loss, lr = engine.step_records()
    assert loss == pytest.approx(expected_loss, rel=1e-5)
    assert lr.tolist() == pytest.approx(expected_lr) and expected_lr[0] < expected_lr[1]  # warming up


# ---- weight-decay groups ---------------------------------------------------------------------------


def test_norm_params_and_biases_get_no_weight_decay():
    model = build_model("resnet18", num_classes=10)
    engine = Engine(model, options())
    decay, no_decay = engine.optimizer.param_groups
    assert decay["weight_decay"] == pytest.approx(3.0517578125e-05) and no_decay["weight_decay"] == 0.0
    norm_and_bias = {id(p) for m in model.modules() if isinstance(m, nn.BatchNorm2d) for p in m.parameters()}
    norm_and_bias.add(id(model.fc.bias))
    assert {id(p) for p in no_decay["params"]} == norm_and_bias
    weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Conv2d | nn.Linear)}
    assert {id(p) for p in decay["params"]} == weights
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_bn_bias_weight_decay_puts_everything_in_one_group():
    model = tiny_net(norm=True)
    (group,) = param_groups(model, weight_decay=0.1, decay_norm_and_bias=True)
    assert group["weight_decay"] == 0.1 and len(group["params"]) == len(list(model.parameters()))


# ---- precision x memory format ---------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("memory_format", ["nchw", "nhwc"])
def test_mixed_precision_steps_run_in_both_formats(precision, memory_format):
    seen_by_wrap = []

    def wrap(module: nn.Module) -> nn.Module:
        seen_by_wrap.append(module[0].weight.is_contiguous(memory_format=torch.channels_last))
        return module

    opts = options(precision=precision, memory_format=memory_format, grad_accum=2)
    engine = Engine(tiny_net(norm=True), opts, wrap=wrap)
    for seed in range(2):
        images, labels = batch(4, seed=seed)
        engine.forward_backward(images, labels, sync_grads=seed == 1)
    engine.optimizer_step()
    loss_sum, count = engine.pop_train_loss().tolist()
    assert count == 8 and math.isfinite(loss_sum) and loss_sum > 0
    conv_weight = engine.model[0].weight
    nhwc = memory_format == "nhwc"
    assert seen_by_wrap == [nhwc]  # the format was applied before the wrapper saw the model
    assert conv_weight.is_contiguous(memory_format=torch.channels_last) == nhwc
    assert conv_weight.is_contiguous() != nhwc  # a 4x3x3x3 weight cannot be both
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in engine.model.parameters())


@pytest.mark.parametrize(
    "precision, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)]
)
def test_autocast_dtype_per_precision(precision, dtype):
    engine = Engine(tiny_net(), options(precision=precision))
    seen = []
    engine.model[0].register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    engine.forward_backward(*batch(2))
    assert seen == [dtype]


# ---- validation ------------------------------------------------------------------------------------


def identity_logits(classes: int) -> nn.Module:
    """A model whose logits are its input, so tests choose the logits exactly."""
    model = nn.Linear(classes, classes, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(classes))
    return model


def test_validation_counts_top1_top5_and_plain_loss():
    engine = Engine(identity_logits(7), options(label_smoothing=0.1))
    ranks = torch.tensor([6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0])  # class c is ranked c-th
    logits = ranks.repeat(4, 1)
    labels = torch.tensor([0, 3, 4, 6])  # top-1 hit, top-5 only, top-5 only (rank 5), miss
    engine.validate_batch(logits, labels)
    engine.validate_batch(logits[:1], torch.tensor([5]))  # another miss, accumulated
    loss_sum, correct1, correct5, count = engine.pop_val().tolist()
    assert (correct1, correct5, count) == (1, 3, 5)
    expected = F.cross_entropy(torch.cat([logits, logits[:1]]), torch.tensor([0, 3, 4, 6, 5]), reduction="sum")
    assert loss_sum == pytest.approx(expected.item(), rel=1e-6)  # no label smoothing in validation
    assert engine.pop_val().tolist() == [0.0, 0.0, 0.0, 0.0]


def test_top5_is_clipped_to_the_number_of_classes():
    engine = Engine(identity_logits(3), options())
    engine.validate_batch(torch.tensor([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0]]), torch.tensor([0, 2]))
    assert engine.pop_val().tolist()[1:] == [1.0, 2.0, 2.0]


def test_validate_uses_eval_mode_and_training_restores_train_mode():
    engine = Engine(tiny_net(norm=True), options())
    bn = engine.model[1]
    engine.validate_batch(*batch(4))
    assert not engine.model.training and bn.num_batches_tracked.item() == 0  # running stats untouched
    engine.forward_backward(*batch(4))
    assert engine.model.training and bn.num_batches_tracked.item() == 1


# ---- DDP ---------------------------------------------------------------------------------------------


def test_ddp_no_sync_skips_all_reduce_until_the_last_micro_batch():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        reductions = []

        def counting_hook(state, bucket):
            reductions.append(1)
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        def wrap(module):
            ddp = nn.parallel.DistributedDataParallel(module)
            ddp.register_comm_hook(None, counting_hook)
            return ddp

        engine = Engine(tiny_net(), options(grad_accum=3, global_batch=6), wrap=wrap)
        for micro in range(3):
            engine.forward_backward(*batch(2, seed=micro), sync_grads=micro == 2)
            assert len(reductions) == (1 if micro == 2 else 0)
        engine.optimizer_step()
    finally:
        dist.destroy_process_group()


# ---- options -----------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_step_functions_never_sync_the_host(precision):
    opts = options(precision=precision, memory_format="nhwc", grad_accum=2, device="cuda:0")
    engine = Engine(tiny_net(norm=True), opts)
    images, labels = (t.cuda() for t in batch(4))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any implicit device->host wait raises
    try:
        for _ in range(3):  # the first steps include lazy scaler and optimizer-state setup
            engine.forward_backward(images, labels, sync_grads=False)
            engine.forward_backward(images, labels)
            engine.optimizer_step()
        engine.validate_batch(images, labels)
        train, val = engine.pop_train_loss(), engine.pop_val()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert train.tolist()[1] == 24 and val.tolist()[3] == 4


# ---- compile modes ---------------------------------------------------------------------------------


def test_inductor_trains_as_eager_does(monkeypatch):
    """torch.compile keeps the reference's numerics: the same loss trajectory and weights as eager, and
    compiling (prepare) trains nothing."""
    import torch._inductor.config

    # Numerics, not speed: no compile-worker pool to start, no probing of vector ISAs (each compiles a test
    # program), scalar C++ kernels. Halves a cold compile on the 2-core CI machine.
    monkeypatch.setattr(torch._inductor.config, "compile_threads", 1)
    monkeypatch.setattr(torch._inductor.config.cpp, "vec_isa_ok", False)
    net = tiny_net(norm=True)
    recipe = dict(grad_accum=2, total_steps=6, lr_per_256=256.0, weight_decay=0.05)  # large steps: drift shows
    eager = Engine(copy.deepcopy(net), options(**recipe))
    compiled = Engine(copy.deepcopy(net), options(compile="inductor", **recipe))
    torch._dynamo.reset()
    assert compiled.prepare(*batch(4, seed=99)) > 0
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # it did compile
    assert compiled.steps_taken == 0 and compiled.pop_train_loss().tolist() == [0.0, 0.0]
    for a, b in zip(params_of(compiled), params_of(eager), strict=True):
        assert torch.equal(a, b)  # preparing restored every weight
    for engine in (eager, compiled):
        for step in range(4):
            for micro in range(2):
                engine.forward_backward(*batch(4, seed=10 * step + micro), sync_grads=micro == 1)
            engine.optimizer_step()
    eager_loss, _ = eager.step_records()
    compiled_loss, _ = compiled.step_records()
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-4)
    assert eager_loss[0] != pytest.approx(eager_loss[-1], rel=1e-3)  # it did train
    for a, b in zip(params_of(compiled), params_of(eager), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_cudagraph_needs_cuda_and_a_single_process():
    with pytest.raises(ValueError, match="compile: cudagraph needs a CUDA device"):
        options(compile="cudagraph")
    assert Engine(tiny_net(), options()).prepare(*batch(2)) == 0.0  # eager: nothing to prepare


def test_nothing_autotunes_on_the_cpu():
    engine = Engine(tiny_net(norm=True), options(grad_accum=2))
    before = params_of(engine)
    assert engine.autotune(*batch(4)) == 0.0  # no step is run: the CPU has no cuDNN to autotune
    assert all(torch.equal(a, b) for a, b in zip(before, params_of(engine), strict=True))
    assert engine.steps_taken == 0 and engine.pop_train_loss().tolist() == [0.0, 0.0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("compile", ["eager", "inductor"])
def test_the_autotuning_step_is_timed_and_trains_nothing(compile):
    """On CUDA the first step of the shapes (cuDNN's autotuning) runs apart and is undone: the engine then
    trains the steps it would have trained without it, and an inductor cell still compiles in prepare."""
    torch.backends.cudnn.benchmark = True
    opts = options(device="cuda", precision="fp16", memory_format="nhwc", grad_accum=2, compile=compile)
    tuned, plain = (Engine(tiny_net(norm=True), opts) for _ in range(2))
    images, labels = (t.cuda() for t in batch(4))
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert tuned.autotune(images, labels) > 0
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # the eager module: nothing compiled
    assert tuned.steps_taken == 0 and tuned.pop_train_loss().tolist() == [0.0, 0.0]
    for engine in (tuned, plain):
        engine.prepare(images, labels)
        for step in range(2):
            for micro in range(2):
                engine.forward_backward(*(t.cuda() for t in batch(4, seed=10 * step + micro)), sync_grads=micro == 1)
            engine.optimizer_step()
    for a, b in zip(params_of(tuned), params_of(plain), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)  # cuDNN may pick other algorithms: not bitwise


GRAPHED_RECIPE = dict(memory_format="nhwc", grad_accum=2, total_steps=8, lr_timeline="compressed",
                      lr_warmup_epochs=45)
"""The cudagraph test's recipe: a warmup over 4 of its 8 steps (45 of 90 epochs, compressed), so the LR of each
of the 4 steps it runs differs from the step before and from the LR the graph was captured with."""
GRAPHED_STEPS = 4


def run_graphed_recipe(engine: Engine, device: str = "cpu") -> None:
    for step in range(GRAPHED_STEPS):
        for micro in range(2):
            x, y = (t.to(device) for t in batch(4, seed=10 * step + micro))
            engine.forward_backward(x, y, sync_grads=micro == 1)
        engine.optimizer_step()


def assert_lr_changes_every_step(lr: list[float]) -> None:
    """The premise of the cudagraph test: a graph that kept the LR it was captured with (step 0's) would train
    every later step at a wrong LR."""
    assert len(lr) == GRAPHED_STEPS and all(a != b for a, b in zip(lr, lr[1:])) and lr[0] not in lr[1:], lr


def test_the_cudagraph_tests_recipe_would_catch_a_graph_that_ignored_the_lr():
    """The cudagraph test's premise and its power, on the CPU where they can run: its recipe changes the LR at
    every step it checks, and a step that kept its first LR (as a graph reading a captured constant would) ends
    beyond that test's tolerance from the eager step."""
    net = tiny_net(norm=True)
    eager = Engine(copy.deepcopy(net), options(precision="bf16", **GRAPHED_RECIPE))
    frozen = Engine(copy.deepcopy(net), options(precision="bf16", **GRAPHED_RECIPE))

    def advance_without_the_optimizer() -> None:  # the host's records move on; the optimizer's LR does not
        frozen._step += 1
        frozen._lr = frozen.opts.peak_lr * frozen._schedule(frozen._step)

    frozen._advance = advance_without_the_optimizer
    for engine in (eager, frozen):
        run_graphed_recipe(engine)
    assert_lr_changes_every_step(eager.step_records()[1].tolist())
    assert frozen.step_records()[1].tolist() == eager.step_records()[1].tolist()  # the records cannot tell
    with pytest.raises(AssertionError):
        for a, b in zip(params_of(frozen), params_of(eager), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)  # the cudagraph test's tolerance


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_cudagraph_replays_the_eager_step(precision):
    """The captured step trains as the eager step does (same losses, same weights), preparing trains nothing,
    and the LR, changed after capture at every step, reaches the replayed optimizer (a graph that kept its
    captured LR ends beyond the weights' tolerance: test_the_cudagraph_tests_recipe_would_catch_...)."""
    net = tiny_net(norm=True)
    recipe = dict(precision=precision, device="cuda:0", **GRAPHED_RECIPE)
    eager = Engine(copy.deepcopy(net), options(**recipe))
    graphed = Engine(copy.deepcopy(net), options(compile="cudagraph", **recipe))
    images, labels = (t.cuda() for t in batch(4, seed=99))
    assert graphed.prepare(images, labels) > 0 and graphed.steps_taken == 0
    for engine in (eager, graphed):
        run_graphed_recipe(engine, "cuda")
    eager_loss, eager_lr = eager.step_records()
    graphed_loss, graphed_lr = graphed.step_records()
    assert_lr_changes_every_step(eager_lr.tolist())
    assert graphed_lr.tolist() == eager_lr.tolist()
    assert graphed_loss == pytest.approx(eager_loss, rel=1e-3)
    for a, b in zip(params_of(graphed), params_of(eager), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(graphed.pop_train_loss(), eager.pop_train_loss())
