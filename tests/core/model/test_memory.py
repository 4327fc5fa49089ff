"""Will it fit: the memory estimate against what torch.optim and autograd really hold on CPU."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from workbench.core.model.example_input import ExampleInput
from workbench.core.model.memory import (
    FIT_HEADROOM,
    MEMORY_KEYS,
    device_memory,
    estimate_memory,
    fit_line,
    fit_summary,
    meta_copy,
    saved_tensor_bytes,
)

BATCH = 8


def _linear_stack() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.Linear(64, 16), nn.Linear(16, 4))


def _tiny_gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=64,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def _real_saved_bytes(model: nn.Module, call) -> int:
    """What autograd really saves on CPU for one training forward (parameters and buffers left out)."""
    model.train()
    with saved_tensor_bytes(model, exclude=[*model.parameters(), *model.buffers()]) as counts:
        out = call(model)
    del out
    return sum(counts.values())


def _real_optimizer_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer, x) -> int:
    """Bytes of every state tensor torch.optim keeps after one step, the scalar ``step`` left out."""
    model(x).sum().backward()
    optimizer.step()
    return sum(v.numel() * v.element_size() for state in optimizer.state.values()
               for k, v in state.items() if k != "step" and isinstance(v, torch.Tensor))


def test_linear_stack_is_exact_in_bytes():
    model = _linear_stack()
    est = estimate_memory(model, torch.zeros(1, 32), batch_size=BATCH, optimizer="adamw")
    numel = sum(p.numel() for p in model.parameters())
    root = est.root
    assert root.params_bytes == 4 * numel
    assert root.grads_bytes == 4 * numel
    assert root.optimizer_bytes == 2 * 4 * numel  # exp_avg + exp_avg_sq, fp32
    adamw = torch.optim.AdamW(model.parameters())
    assert root.optimizer_bytes == _real_optimizer_state_bytes(model, adamw, torch.randn(BATCH, 32))
    # each Linear saves its input for the weight's gradient: (B, 32), (B, 64), (B, 16) in fp32
    assert root.activations_bytes == BATCH * (32 + 64 + 16) * 4
    assert est.modules["1"].activations_bytes == BATCH * 64 * 4
    assert root.total_bytes == sum(getattr(root, k) for k in MEMORY_KEYS[:4])
    assert set(est.root.as_dict()) == set(MEMORY_KEYS)
    assert est.modules["0"].params_bytes == (32 * 64 + 64) * 4


@pytest.mark.parametrize(("name", "momentum"), [("adam", 0.0), ("sgd", 0.0), ("sgd", 0.9),
                                                ("rmsprop", 0.0), ("rmsprop", 0.9)])
def test_optimizer_state_matches_torch_optim(name, momentum):
    model = _linear_stack()
    est = estimate_memory(model, torch.zeros(1, 32), batch_size=2, optimizer=name, momentum=momentum)
    cls = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD, "rmsprop": torch.optim.RMSprop}[name]
    kwargs = {} if name == "adam" else {"lr": 0.01, "momentum": momentum}
    real = _real_optimizer_state_bytes(model, cls(model.parameters(), **kwargs), torch.randn(2, 32))
    assert est.root.optimizer_bytes == real


def test_fake_activations_equal_a_real_cpu_run():
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 16), nn.GELU(),
                          nn.Linear(16, 4))
    est = estimate_memory(model, torch.zeros(3, 32), batch_size=BATCH)
    real = _real_saved_bytes(model, lambda m: m(torch.randn(BATCH, 32)))
    assert est.root.activations_bytes == real > 0
    gpt = _tiny_gpt2()
    ids = torch.zeros(1, 24, dtype=torch.long)
    est = estimate_memory(gpt, ExampleInput((), {"input_ids": ids}), batch_size=2)
    real = _real_saved_bytes(gpt, lambda m: m(input_ids=torch.randint(0, 512, (2, 24))))
    assert est.root.activations_bytes == real > 0


def test_frozen_layers_have_no_grads_or_optimizer_state():
    model = _linear_stack()
    model[0].requires_grad_(False)
    est = estimate_memory(model, torch.zeros(1, 32), batch_size=BATCH)
    frozen = est.modules["0"]
    assert frozen.grads_bytes == frozen.optimizer_bytes == 0 and frozen.params_bytes > 0
    assert est.modules["1"].grads_bytes == est.modules["1"].params_bytes
    # the frozen first layer needs no input saved: only (B, 64) and (B, 16) remain
    assert est.root.activations_bytes == BATCH * (64 + 16) * 4
    assert est.root.activations_bytes == _real_saved_bytes(model, lambda m: m(torch.randn(BATCH, 32)))
    # trainable= plans a freeze without touching the flags
    plan = estimate_memory(model, torch.zeros(1, 32), batch_size=BATCH, trainable={"2.weight", "2.bias"})
    assert plan.root.grads_bytes == (16 * 4 + 4) * 4
    assert model[0].weight.requires_grad is False and model[1].weight.requires_grad is True


def test_resnet18_and_gpt2_scale_with_the_batch_and_leave_the_model_alone():
    resnet = torchvision.models.resnet18().eval()
    weight = resnet.conv1.weight
    two = estimate_memory(resnet, torch.zeros(1, 3, 224, 224), batch_size=2)
    four = estimate_memory(resnet, torch.zeros(1, 3, 224, 224), batch_size=4)
    assert four.root.activations_bytes == pytest.approx(2 * two.root.activations_bytes, rel=0.05)
    assert two.root.params_bytes == 11_689_512 * 4
    assert 10e6 < two.root.activations_bytes < 200e6  # tens of MB a sample at 224 x 224
    assert two.modules["layer1"].activations_bytes > two.modules["fc"].activations_bytes
    assert resnet.conv1.weight is weight and not weight.is_meta and resnet.training is False
    gpt = _tiny_gpt2()
    call = ExampleInput((), {"input_ids": torch.zeros(1, 32, dtype=torch.long)})
    two = estimate_memory(gpt, call, batch_size=2)
    four = estimate_memory(gpt, call, batch_size=4)
    assert four.root.activations_bytes == pytest.approx(2 * two.root.activations_bytes, rel=0.05)
    # bf16 autocast: each sample saves less; its bf16 copies of the weights are a part that does not scale
    two_bf16 = estimate_memory(gpt, call, batch_size=2, precision="bf16").root.activations_bytes
    four_bf16 = estimate_memory(gpt, call, batch_size=4, precision="bf16").root.activations_bytes
    assert 0 < four_bf16 - two_bf16 < 0.8 * (four.root.activations_bytes - two.root.activations_bytes)
    # parents sum their children (the tied lm_head weight counted once, at the embedding)
    h = two.modules["transformer.h"]
    assert h.activations_bytes == sum(two.modules[f"transformer.h.{i}"].activations_bytes for i in range(2))
    assert two.root.params_bytes == 4 * sum(p.numel() for p in gpt.parameters())


def test_meta_model_is_estimated_without_weights():
    with torch.device("meta"):
        model = _linear_stack()
    est = estimate_memory(model, torch.zeros(1, 32), batch_size=BATCH)
    assert est.root.activations_bytes == BATCH * (32 + 64 + 16) * 4
    assert next(model.parameters()).is_meta


def test_bad_arguments_say_what_to_choose():
    model = _linear_stack()
    with pytest.raises(ValueError, match="at least 1"):
        estimate_memory(model, torch.zeros(1, 32), batch_size=0)
    with pytest.raises(ValueError, match="choose adamw"):
        estimate_memory(model, torch.zeros(1, 32), batch_size=1, optimizer="lion")
    with pytest.raises(ValueError, match="choose fp32"):
        estimate_memory(model, torch.zeros(1, 32), batch_size=1, precision="fp8")


def test_fit_summary_says_what_would_make_it_fit():
    est = estimate_memory(_linear_stack(), torch.zeros(1, 32), batch_size=64)
    root = est.root
    assert fit_summary(est, "cpu", available=root.total_bytes * 2).endswith(": fits.")
    static = root.params_bytes + root.grads_bytes + root.optimizer_bytes
    # room for the weights and about 16 samples' activations
    available = int((static + root.activations_bytes / 4) / FIT_HEADROOM) + 1
    text = fit_summary(est, "cuda:0", available=available)
    assert "does not fit" in text and "on cuda:0" in text
    assert "batch 16 with accumulate_grad_batches = 4" in text
    assert "bf16" not in text  # half the activations is still too many
    # checkpointing each Linear alone would keep the inputs they save anyway: not offered
    assert "activation checkpointing" not in text and est.activations_checkpointed_bytes == root.activations_bytes
    text = fit_summary(est, "cuda:0", available=int((static + root.activations_bytes * 0.6) / FIT_HEADROOM))
    assert "accumulate_grad_batches = 2" in text and "bf16 autocast" in text
    assert "batch of 1" in fit_summary(est, "cpu", available=10)
    free, total = device_memory("cpu")
    assert 0 < free <= total
    assert " available on cpu" in fit_summary(est, "cpu")


def test_fit_line_is_the_short_form():
    est = estimate_memory(_linear_stack(), torch.zeros(1, 32), batch_size=64)
    root = est.root
    line = fit_line(est, "cuda:0", available=root.total_bytes * 2)
    assert line.startswith("Memory: ") and " free on cuda:0" in line and line.endswith("— fits")
    static = root.params_bytes + root.grads_bytes + root.optimizer_bytes
    line = fit_line(est, "cuda:0", available=int((static + root.activations_bytes / 4) / FIT_HEADROOM) + 1)
    assert "— does not fit: try batch 16 x 4 accumulated, " in line and "\n" not in line
    assert line.endswith("batch of 1") is False and "batch of 1" in fit_line(est, "cpu", available=10)
    assert " free on cpu — " in fit_line(est, "cpu")  # the system's RAM


def test_meta_copy_estimates_as_the_model_and_leaves_it_alone():
    model = _linear_stack()
    model[0].requires_grad_(False)
    calls = []
    model[1].register_forward_hook(lambda *a: calls.append(1))  # a probe's hook: not copied
    copy = meta_copy(model)
    assert all(p.is_meta for p in copy.parameters()) and not next(model.parameters()).is_meta
    assert [p.requires_grad for p in copy.parameters()] == [p.requires_grad for p in model.parameters()]
    assert not copy[1]._forward_hooks and model[1]._forward_hooks
    kw = dict(batch_size=BATCH, device="cpu")
    assert estimate_memory(copy, torch.zeros(1, 32), **kw) == estimate_memory(model, torch.zeros(1, 32), **kw)
    gpt = _tiny_gpt2()  # tied lm_head / wte: one twin, counted once
    twin = meta_copy(gpt)
    assert twin.lm_head.weight is twin.transformer.wte.weight
    call = ExampleInput((), {"input_ids": torch.zeros(1, 16, dtype=torch.long)})
    assert estimate_memory(twin, call, batch_size=2, device="cpu") == estimate_memory(gpt, call, batch_size=2)


def test_a_shape_the_model_does_not_take_raises_once_without_a_logged_traceback():
    import logging

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("torch._subclasses.fake_tensor")  # torch's loggers do not propagate to the root
    logger.addHandler(handler)
    try:
        with pytest.raises(RuntimeError, match="same reduction dim"):
            estimate_memory(nn.Linear(16, 4), torch.zeros(1, 10), batch_size=2)
        logger.error("failed while attempting to run meta for %s", "another thread's op")  # still logged
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in records] == ["failed while attempting to run meta for another thread's op"]


def test_estimates_in_several_threads_at_once_do_not_collide():
    """FakeTensorMode's cache is shared by every thread: two windows' memory workers at once crashed the process
    (and raised "fake_mode.in_kernel_invocation must be False" without the lock); one at a time, each is right."""
    import threading

    import torchvision

    from workbench.core.model.memory import estimate_memory

    models = [torchvision.models.resnet18(), torchvision.models.mobilenet_v3_small()]
    image = torch.randn(1, 3, 64, 64)
    alone = [estimate_memory(m, image, batch_size=8).root.total_bytes for m in models]
    got, errors = [], []

    def work(i):
        for _ in range(3):
            try:
                got.append((i, estimate_memory(models[i], image, batch_size=8).root.total_bytes))
            except Exception as exc:  # noqa: BLE001 - collected: the assertion below names them
                errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and len(got) == 9
    assert all(total == alone[i] for i, total in got)
