"""Checkpoint diff: a head-only fine-tune changes only the head; the CLI prints it largest first."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
import torchvision

from workbench.core.model.diff import module_diff
from workbench.core.model.freezing import apply_frozen
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.loop import Trainer


def test_a_head_only_fine_tune_lists_only_the_head(tmp_path):
    model = torchvision.models.resnet18(num_classes=10)
    apply_frozen(model, [n for n, _ in model.named_parameters() if not n.startswith("fc.")])
    data = DataConfig(dataset="fake", fake_shape=[3, 32, 32], fake_size=96, batch_size=16)
    run = tmp_path / "run"
    cfg = TrainConfig(data=data, epochs=1, lr=1e-2, run_dir=str(run), tensorboard=False)
    assert Trainer(model, cfg, arch="resnet18(num_classes=10)").fit() == "completed"

    start = torchvision.models.resnet18(num_classes=10)
    start.load_state_dict(torch.load(run / "init.pt", weights_only=True)["model_state_dict"])
    changes = module_diff(start, model)
    assert [c.module for c in changes] == ["fc"]  # frozen BatchNorm kept in eval(): its statistics stay
    assert 0 < changes[0].params < 1 and math.isnan(changes[0].buffers)

    out = subprocess.run([sys.executable, "-m", "workbench", "diff", str(run / "init.pt"), str(run / "last.pt")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fc  params ")


def test_buffers_and_shape_changes_are_reported_separately():
    a = torchvision.models.resnet18(num_classes=10)
    b = torchvision.models.resnet18(num_classes=10)
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        b.layer2[0].bn1.running_mean.add_(1.0)
        b.layer4[1].conv2.weight.mul_(1.5)
    changes = module_diff(a, b)
    assert [c.module for c in changes] == ["layer4.1.conv2", "layer2.0.bn1"] or \
        [c.module for c in changes] == ["layer2.0.bn1", "layer4.1.conv2"]
    conv = next(c for c in changes if c.module == "layer4.1.conv2")
    assert conv.params == pytest.approx(0.5, rel=1e-6) and math.isnan(conv.buffers)
    bn = next(c for c in changes if c.module == "layer2.0.bn1")
    assert bn.params == 0.0 and bn.buffers > 0
    assert changes == sorted(changes, key=lambda c: -c.largest)
    c = torchvision.models.resnet18(num_classes=5)
    assert module_diff(a, c)[0].note == "fc.bias shape (10,) vs (5,); fc.weight shape (10, 512) vs (5, 512)"
