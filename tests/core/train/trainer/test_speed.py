"""Fitting big models: gradient accumulation, activation checkpointing, torch.compile, fused AdamW."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer import speed
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer
from workbench.core.train.trainer.optim import build_optimizer, fused_kwargs


class Lines(Callback):
    def __init__(self):
        self.lines: list[str] = []
        self.losses: list[float] = []

    def on_progress(self, trainer, text):
        self.lines.append(text)

    def on_metrics(self, trainer, batch):
        self.losses.extend(r["loss"] for r in batch)


def _config(tmp_path, **kw) -> TrainConfig:
    return TrainConfig(data=DataConfig(dataset="digits", batch_size=16), epochs=1, run_dir=str(tmp_path / "run"),
                       checkpoint_every_epoch=False, tensorboard=False, **kw)


# ---------------------------------------------------------------- accumulation
def test_optimizer_steps_and_the_batches_that_close_them():
    assert [speed.optimizer_steps(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert [b for b in range(1, 11) if speed.closes_step(b, 10, 4)] == [4, 8, 10]  # the remainder closes the epoch
    assert all(speed.closes_step(b, 10, 1) for b in range(1, 11))


def _mlp() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))


def test_four_batches_of_four_accumulated_equal_one_batch_of_sixteen(tmp_path):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)
    val = [(x[:4], y[:4])]
    runs = {}
    for accumulate, train in ((4, [(x[i:i + 4], y[i:i + 4]) for i in range(0, 16, 4)]), (1, [(x, y)])):
        cfg = _config(tmp_path / str(accumulate), optimizer="sgd", momentum=0.9, lr=0.5, scheduler="cosine",
                      min_lr=0.01, accumulate_grad_batches=accumulate)
        cfg.epochs = 2  # two optimizer steps: the cosine schedule moved once between them
        tr = Trainer(_mlp(), cfg, data=(train, val))
        assert tr.fit() == "completed"
        runs[accumulate] = tr
    acc, one = runs[4], runs[1]
    assert acc.step == one.step == 2 and acc.steps_per_epoch == 1
    assert acc.lr == pytest.approx(one.lr) and acc.lr < 0.5  # the schedule counts optimizer steps
    for (name, a), (_, b) in zip(acc.model.state_dict().items(), one.model.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert acc.history[0]["train_loss"] == pytest.approx(one.history[0]["train_loss"], rel=1e-5)


def test_a_remainder_closes_the_epoch_with_a_shorter_step(tmp_path):
    lines = Lines()
    train = [(torch.randn(4, 8), torch.randint(0, 3, (4,))) for _ in range(10)]
    tr = Trainer(_mlp(), _config(tmp_path, accumulate_grad_batches=4), callbacks=[lines], data=(train, train[:1]))
    assert tr.fit() == "completed"
    assert tr.step == 3 == tr.steps_per_epoch and tr.samples == 40
    assert tr.batch_in_epoch == 0 and tr.epoch == 1 and len(lines.losses) == tr.step


# ---------------------------------------------------------------- activation checkpointing
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.act = nn.Linear(16, 16), nn.GELU()

    def forward(self, x):
        return x + self.act(self.fc(x))


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.blocks, self.out = nn.Linear(8, 16), nn.ModuleList(Block() for _ in range(3)), nn.Linear(16, 2)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.out(x)


def _loss_and_grads(model, forward):
    model.zero_grad(set_to_none=True)
    loss = forward(model)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_checkpointed_blocks_give_the_same_loss_and_gradients_and_recompute(tmp_path):
    torch.manual_seed(0)
    model = Stack().train()
    x = torch.randn(5, 8)
    calls = []
    model.blocks[1].fc.register_forward_hook(lambda m, a, o: calls.append(1))
    keys = list(model.state_dict())
    base_loss, base = _loss_and_grads(model, lambda m: m(x).square().mean())
    assert len(calls) == 1
    note = speed.enable_activation_checkpointing(model)
    assert "3 blocks (blocks.0 .. blocks.2, Block)" in note
    calls.clear()
    loss, grads = _loss_and_grads(model, lambda m: m(x).square().mean())
    assert len(calls) == 2  # the block ran again in backward: its activations were not kept
    assert list(model.state_dict()) == keys and torch.equal(loss, base_loss)
    for n in base:
        torch.testing.assert_close(grads[n], base[n], msg=n)
    calls.clear()
    with torch.no_grad():
        model(x)
    assert len(calls) == 1  # no recomputation without grad
    speed.disable_activation_checkpointing(model)
    assert "forward" not in model.blocks[0].__dict__


def test_repeated_blocks_pick_the_largest_same_class_container():
    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.ModuleList([nn.Linear(64, 64) for _ in range(3)]),
                          nn.ModuleList([nn.Linear(64, 2), nn.Linear(2, 2)]))
    assert [n for n, _ in speed.repeated_blocks(model)] == ["2.0", "2.1", "2.2"]
    assert speed.repeated_blocks(nn.Linear(2, 2)) == []
    assert "no repeated blocks" in speed.enable_activation_checkpointing(nn.Linear(2, 2))


def test_a_tiny_bert_checkpoints_through_hugging_face_with_the_same_loss_and_gradients():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=37, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(cfg).train()
    ids = torch.randint(0, 50, (2, 7))

    def forward(m):
        return m(input_ids=ids, labels=ids).loss

    base_loss, base = _loss_and_grads(model, forward)
    note = speed.enable_activation_checkpointing(model)
    assert "checkpointing_enable()" in note
    assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    loss, grads = _loss_and_grads(model, forward)
    torch.testing.assert_close(loss, base_loss)
    assert grads.keys() == base.keys()
    for n in base:
        torch.testing.assert_close(grads[n], base[n], rtol=1e-4, atol=1e-6, msg=n)


def test_the_trainer_applies_activation_checkpointing_and_says_so(tmp_path):
    lines = Lines()
    tr = Trainer(Stack(), _config(tmp_path, activation_checkpointing=True, loss="mse"), callbacks=[lines],
                 data=([(torch.randn(4, 8), torch.randn(4, 2)) for _ in range(3)], [(torch.randn(4, 8),
                                                                                    torch.randn(4, 2))]))
    assert tr.fit() == "completed"
    assert any(line.startswith("activation checkpointing: 3 blocks") for line in lines.lines)
    assert "forward" in tr.model.blocks[0].__dict__


# ---------------------------------------------------------------- compile
def test_compiled_step_runs_eager_while_a_probe_hooks_and_says_it_once():
    model = Stack()
    step = speed.CompiledStep(model)
    net, note = step.module(model)
    assert net is not model and note is None
    seen = []
    handle = model.blocks[0].register_forward_hook(lambda m, a, o: seen.append(o.shape))
    net, note = step.module(model)
    assert net is model and "run uncompiled" in note
    net(torch.randn(2, 8))
    assert seen == [torch.Size([2, 16])]
    assert step.module(model)[1] is None and step.eager_steps == 2
    handle.remove()
    assert step.module(model)[0] is not model


def test_compile_report_lists_graph_breaks_once():
    from torch._dynamo.utils import counters

    said: set[str] = set()
    counters["graph_break"]["Failed to trace builtin operator print\n  Explanation: ..."] += 1
    try:
        text = speed.compile_report(said, None)
        assert "graph break: Failed to trace builtin operator print Explanation: ... (x1)" in text
        assert speed.compile_report(said, speed._frames_total()) is None  # nothing new
    finally:
        counters["graph_break"].clear()


@pytest.mark.slow
def test_compile_trains_the_demo_and_the_loss_falls(tmp_path):
    lines = Lines()
    t0 = time.perf_counter()
    cfg = _config(tmp_path, compile=True, lr=3e-3)
    cfg.data.drop_last = True  # one batch shape: one compilation (a last short batch compiles again)
    tr = Trainer(DigitsCNN(), cfg, callbacks=[lines])
    assert tr.fit() == "completed", tr.error
    elapsed = time.perf_counter() - t0
    first, last = lines.losses[:5], lines.losses[-5:]
    assert sum(last) / 5 < 0.7 * sum(first) / 5
    assert any(line.startswith("torch.compile: ") for line in lines.lines), lines.lines
    assert not isinstance(tr.model, torch._dynamo.eval_frame.OptimizedModule)  # the trainer keeps the module
    assert list(tr.model.state_dict()) == list(DigitsCNN().state_dict())
    print(f"compile: 1 epoch of the demo in {elapsed:.1f} s", lines.lines)


# ---------------------------------------------------------------- fused AdamW
class _FakeCuda:
    is_cuda = True

    def is_floating_point(self):
        return True


def test_fused_adamw_is_chosen_only_when_every_parameter_is_on_cuda():
    cpu = [nn.Parameter(torch.zeros(2))]
    assert fused_kwargs([{"params": cpu}], torch.optim.AdamW) == {}
    assert fused_kwargs([{"params": []}], torch.optim.AdamW) == {}
    assert fused_kwargs([{"params": [_FakeCuda(), _FakeCuda()]}], torch.optim.AdamW) == {"fused": True}
    assert fused_kwargs([{"params": [_FakeCuda(), cpu[0]]}], torch.optim.AdamW) == {}

    class NoFused(torch.optim.Optimizer):
        def __init__(self, params, lr=1e-3):
            super().__init__(params, {"lr": lr})

    assert fused_kwargs([{"params": [_FakeCuda()]}], NoFused) == {}
    opt = build_optimizer([{"params": cpu, "lr": 1e-3, "wb_role": "all"}], TrainConfig(optimizer="adamw"))
    assert not opt.defaults.get("fused")  # a CPU run keeps torch's default
