"""On CUDA: layer statistics, the NaN trace (noticed at the emission cadence) and the LR finder's restore."""

from __future__ import annotations

import math

import pytest
import torch
import torchvision

from workbench.core.probe.callback import ProbeCallback
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer
from workbench.core.train.lr_finder import lr_find

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _cfg(tmp_path, **kw):
    data = DataConfig(dataset="fake", fake_shape=[3, 32, 32], fake_size=640, batch_size=64)
    return TrainConfig(data=data, epochs=1, lr=1e-3, device="cuda", amp=True, run_dir=str(tmp_path / "run"),
                       tensorboard=False, **kw)


def test_layer_statistics_on_cuda(tmp_path):
    reports = []
    trainer = Trainer(torchvision.models.resnet18(num_classes=10), _cfg(tmp_path), [ProbeCallback(reports.extend,
                                                                                                   every=2)])
    assert trainer.fit() == "completed", trainer.error
    snaps = [r.layers for r in reports if r.layers is not None]
    assert len(snaps) >= 3
    last = snaps[-1]
    conv1 = last.names.index("conv1")
    assert last.names[:3] == ("conv1", "bn1", "relu")
    assert math.isfinite(last.values[conv1, 0]) and last.values[conv1, 1] > 0  # mean, std
    assert last.values[conv1, 4] > 0 and 0 < last.values[conv1, 5] < 1  # grad norm, update ratio
    assert 0.2 < last.values[last.names.index("relu"), 2] < 0.9  # ReLU zeros share


class BreakBN(Callback):
    def on_step_end(self, trainer, metrics):
        if metrics["step"] == 3:
            with torch.no_grad():
                trainer.model.get_submodule("layer3.1.bn2").weight.fill_(float("inf"))


class Stop(Callback):
    def on_nonfinite(self, trainer, step, loss):
        trainer.control.resolve_nonfinite("stop")


def test_the_nan_trace_on_cuda_says_it_is_not_exact(tmp_path):
    """CUDA reads the loss at the emission cadence (no sync per step), so the NaN is noticed after the
    failing step's update: the trace re-runs the latest batch with the broken weights and says so."""
    trainer = Trainer(torchvision.models.resnet18(num_classes=10), _cfg(tmp_path, emit_every_ms=0.0),
                      [BreakBN(), Stop()])
    assert trainer.fit() == "nonfinite"
    trace = trainer.nonfinite_trace
    assert trace is not None and trace.phase == "forward" and not trace.exact
    assert trace.broken_weights == [f"{trace.module}.weight"]  # the first layer the broken update reached
    assert "an earlier update broke it" in trace.text() and "[re-run on the latest batch" in trace.text()


def test_lr_find_on_cuda_restores_the_weights(tmp_path):
    trainer = Trainer(torchvision.models.resnet18(num_classes=10), _cfg(tmp_path))
    trainer.prepare()
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    cuda_rng = torch.cuda.get_rng_state()
    result = lr_find(trainer, 1e-6, 1.0, steps=15)
    assert len(result.lrs) >= 5
    assert all(torch.equal(v, before[k]) for k, v in trainer.model.state_dict().items())
    assert torch.equal(torch.cuda.get_rng_state(), cuda_rng)
