"""The first non-finite value traced to the module that made it: forward, backward, in a real run, headless."""

from __future__ import annotations

import subprocess
import sys

import torch
import torchvision
from torch import nn

from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer
from workbench.core.train.trainer.nan_trace import trace_nonfinite


def _ce(model, batch):
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)

BREAKS_AT = 5  # the step after which layer3.1.bn2 outputs Inf


class BreakBN(Callback):
    """After step BREAKS_AT, layer3.1.bn2's running variance becomes 0 and eps 0 in eval-like use:
    here simply its weight becomes Inf, so its output (and everything after it) is Inf/NaN."""

    def on_step_end(self, trainer, metrics):
        if metrics["step"] == BREAKS_AT:
            with torch.no_grad():
                trainer.model.get_submodule("layer3.1.bn2").weight.fill_(float("inf"))


class Record(Callback):
    def __init__(self):
        self.steps = []

    def on_nonfinite(self, trainer, step, loss):
        self.steps.append(step)
        trainer.control.resolve_nonfinite("stop")


def test_a_run_names_the_module_that_made_the_first_inf(tmp_path):
    data = DataConfig(dataset="fake", fake_shape=[3, 32, 32], fake_size=240, batch_size=16)
    cfg = TrainConfig(data=data, epochs=1, lr=1e-3, run_dir=str(tmp_path / "run"), tensorboard=False)
    model = torchvision.models.resnet18(num_classes=10)
    rec = Record()
    trainer = Trainer(model, cfg, [BreakBN(), rec])
    assert trainer.fit() == "nonfinite"
    trace = trainer.nonfinite_trace
    assert rec.steps == [BREAKS_AT + 1]
    assert (trace.phase, trace.module, trace.module_type) == ("forward", "layer3.1.bn2", "BatchNorm2d")
    assert trace.step == BREAKS_AT + 1 and trace.exact
    assert trace.broken_weights == ["layer3.1.bn2.weight"]
    assert "first non-finite output: layer3.1.bn2 (BatchNorm2d) at step 6" in trace.text()
    assert "layer3.1.bn2 (BatchNorm2d)" in str(trainer.error)
    # the re-run changed no buffer: BatchNorm running statistics of an earlier layer are as the failing step left them
    assert torch.isfinite(model.layer1[0].bn1.running_mean).all()


class InfInBackward(torch.autograd.Function):
    """Identity forward; Inf gradient backward."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return torch.full_like(grad, float("inf"))


class Boom(nn.Module):
    def forward(self, x):
        return InfInBackward.apply(x)


def test_a_finite_forward_with_an_inf_gradient_names_the_parameter():
    model = torchvision.models.resnet18(num_classes=10)
    model.layer4[1].relu = nn.Sequential(nn.ReLU(), Boom())  # the backward of layer4.1 turns Inf
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    before = model.layer1[0].bn1.running_mean.clone()
    trace = trace_nonfinite(model, (x, y), _ce, step=12)
    assert trace.phase == "backward"
    # backward reaches layer4.1.bn2 first after the Inf appears (the block's second relu call feeds the output)
    assert trace.parameter.startswith("layer4.1.") and trace.module == trace.parameter.rpartition(".")[0]
    assert "first non-finite gradient" in trace.text() and "the forward was finite" in trace.text()
    assert torch.equal(model.layer1[0].bn1.running_mean, before)  # buffers restored
    assert all(p.grad is None for p in model.parameters())  # grads restored (none before)


def test_a_finite_batch_says_the_failure_did_not_repeat():
    model = torchvision.models.resnet18(num_classes=10)
    trace = trace_nonfinite(model, (torch.randn(2, 3, 32, 32), torch.tensor([1, 2])), _ce, 3)
    assert trace.phase == "none" and "did not repeat" in trace.text()


def test_workbench_train_prints_the_traced_module_and_fails(tmp_path):
    # digits_cnn with an LR so high that a conv's output overflows; headless prints the trace and exits non-zero
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=2, lr=1e10, optimizer="sgd",
                      run_dir=str(tmp_path / "run"), tensorboard=False, model=ModelConfig(arch="digits_cnn"))
    cfg.to_toml(tmp_path / "run.toml")
    out = subprocess.run([sys.executable, "-m", "workbench", "train", str(tmp_path / "run.toml")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("error:"))
    assert "first non-finite output: features." in line and "(Conv2d) at step" in line, out.stdout[-2000:]
    assert "finished: nonfinite" in out.stdout


def test_a_non_finite_gradient_is_caught_before_the_update_and_traced_in_backward(tmp_path):
    data = DataConfig(dataset="fake", fake_shape=[3, 32, 32], fake_size=80, batch_size=16)
    cfg = TrainConfig(data=data, epochs=1, lr=1e-3, run_dir=str(tmp_path / "run"), tensorboard=False)
    model = torchvision.models.resnet18(num_classes=10)
    model.layer4[1].relu = nn.Sequential(nn.ReLU(), Boom())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = Trainer(model, cfg, [Record()])
    assert trainer.fit() == "nonfinite"
    trace = trainer.nonfinite_trace
    assert trace.phase == "backward" and trace.step == 1 and trace.parameter.startswith("layer4.1.")
    assert "step 1: a gradient is non-finite" in str(trainer.error) and "the weights were not updated" in str(
        trainer.error)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # the step was skipped
