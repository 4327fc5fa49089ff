"""The LR range test: a sensible suggestion, everything restored bit for bit, headless output."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import numpy as np
import torch
import torchvision

from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.train.trainer.loop import Trainer
from workbench.core.train.lr_finder import lr_find, steepest, valley


def _state(trainer):
    return ({k: v.clone() for k, v in trainer.model.state_dict().items()},
            {n: p.requires_grad for n, p in trainer.model.named_parameters()})


def test_the_sweep_restores_weights_bn_statistics_optimizer_scheduler_and_rng_bit_identically(tmp_path):
    data = DataConfig(dataset="fake", fake_shape=[3, 32, 32], fake_size=400, batch_size=32)
    cfg = TrainConfig(data=data, epochs=2, lr=1e-3, optimizer="sgd", momentum=0.9, scheduler="cosine",
                      run_dir=str(tmp_path / "run"), tensorboard=False)
    model = torchvision.models.resnet18(num_classes=10)
    model.layer1.requires_grad_(False)  # a frozen set the sweep must keep
    trainer = Trainer(model, cfg)
    trainer.prepare()
    xb, yb = next(iter(trainer.train_loader))  # one real step: momentum buffers to restore
    torch.nn.functional.cross_entropy(trainer.model(xb), yb).backward()
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    weights, flags = _state(trainer)
    opt_state = trainer.optimizer.state_dict()
    momentum = {k: v["momentum_buffer"].clone() for k, v in opt_state["state"].items()}
    assert momentum
    sched_state = dict(trainer.scheduler.state_dict())
    rng = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())

    result = lr_find(trainer, min_lr=1e-5, max_lr=10.0, steps=20)
    assert len(result.lrs) >= 5 and result.lrs[0] == 1e-5
    assert all(math.isfinite(v) for v in result.losses)

    after, after_flags = _state(trainer)
    assert after_flags == flags
    for k, v in weights.items():  # parameters and BatchNorm running statistics
        assert torch.equal(after[k], v), k
    assert trainer.optimizer.state_dict()["param_groups"] == opt_state["param_groups"]
    restored = trainer.optimizer.state_dict()["state"]
    assert restored.keys() == momentum.keys()
    assert all(torch.equal(restored[k]["momentum_buffer"], m) for k, m in momentum.items())
    assert trainer.scheduler.state_dict() == sched_state
    assert torch.equal(torch.get_rng_state(), rng[0])
    assert np.array_equal(np.random.get_state()[1], rng[1]) and random.getstate() == rng[2]
    assert all(p.grad is None for p in trainer.model.parameters())
    # and the run that follows is the run that would have been
    assert trainer.fit() == "completed"


def test_the_sweep_stops_at_divergence_and_suggests_an_lr_inside_the_falling_part(tmp_path):
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=1, optimizer="sgd",
                      run_dir=str(tmp_path / "run"), tensorboard=False)
    from workbench.core.model.demo import DigitsCNN

    result = lr_find(Trainer(DigitsCNN(), cfg), min_lr=1e-4, max_lr=1e4, steps=120)
    assert result.reason in ("diverged", "nonfinite")
    assert len(result.lrs) < 120 and all(math.isfinite(s) for s in result.smoothed)
    assert result.lrs[0] < result.suggested < result.lrs[-1]
    i = min(range(len(result.lrs)), key=lambda k: abs(result.lrs[k] - result.suggested))
    assert result.smoothed[i] < result.smoothed[0]  # the suggestion lies where the loss has fallen


def test_valley_is_two_thirds_down_the_longest_descent():
    lrs = [10 ** (i / 10) for i in range(10)]
    losses = [5, 5, 4, 3, 2, 1, 0.5, 3, 8, 20]
    # longest decreasing run: indices 1..6 (fastai's algorithm)
    assert valley(lrs, losses) == lrs[3]


def test_suggestions_ignore_a_fall_inside_the_diverged_tail():
    """A loss that rose past its minimum and fell back (a 1,000-output head at ln 1000) is no suggestion."""
    lrs = [10 ** (i / 10 - 7) for i in range(40)]
    losses = [7.0 - 0.1 * i for i in range(20)] + [5.5, 9, 20, 60, 50, 40, 30, 20, 15, 12, 11, 10.5,
                                                   10.2, 10.1, 10.05, 10.02, 10.01, 10.0, 9.99, 9.98]
    lowest = losses.index(min(losses))
    assert steepest(lrs, losses) <= lrs[lowest + 1] and valley(lrs, losses) <= lrs[lowest]


def test_workbench_lr_find_prints_the_suggestion_last_and_writes_the_csv(tmp_path):
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=1, optimizer="sgd",
                      run_dir=str(tmp_path / "run"), tensorboard=False, model=ModelConfig(arch="digits_cnn"))
    cfg.to_toml(tmp_path / "run.toml")
    out = subprocess.run([sys.executable, "-m", "workbench", "lr-find", str(tmp_path / "run.toml"), "--steps", "60",
                          "--min-lr", "1e-4", "--max-lr", "100"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("suggested_lr = ")
    assert 1e-4 < float(last.split("=")[1]) < 100
    rows = (tmp_path / "lr_find.csv").read_text().splitlines()  # beside the run file (see the tests below)
    assert rows[0] == "step,lr,loss,smoothed" and len(rows) > 10
    assert not (tmp_path / "run").exists()  # nothing trained, nothing saved, no folder made


def _window_run_folder(tmp_path):
    """A run folder as a window run leaves it: run.toml (run_dir empty), init.pt, metrics.csv."""
    from workbench.core.model.demo import DigitsCNN
    from workbench.core.train.trainer.loop import Trainer

    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=256), epochs=1, optimizer="sgd",
                      run_dir=str(tmp_path / "my-run"), tensorboard=False, model=ModelConfig(arch="digits_cnn"))
    trainer = Trainer(DigitsCNN(), cfg)
    assert trainer.fit() == "completed"
    return trainer.run_dir


def test_lr_find_writes_into_the_run_folder_of_a_window_run(tmp_path):
    """A run folder's run.toml names no run_dir: the sweep's trainer made a new folder under the runs root and
    wrote lr_find.csv there, not into the run's folder as the README says."""
    from workbench.core.train.launch.headless import lr_find_from_toml
    from workbench.core.train.runs.folder import default_runs_root

    run = _window_run_folder(tmp_path)
    assert TrainConfig.from_toml(run / "run.toml").run_dir in (None, "")
    before = sorted(p.name for p in run.iterdir())
    lines = []
    assert lr_find_from_toml(run / "run.toml", out=lines.append, min_lr=1e-4, max_lr=10.0, steps=20) == 0, lines
    rows = (run / "lr_find.csv").read_text().splitlines()
    assert rows[0] == "step,lr,loss,smoothed" and len(rows) >= 6
    assert str(run / "lr_find.csv") in lines[0]
    assert sorted(p.name for p in run.iterdir()) == sorted([*before, "lr_find.csv"])  # nothing else changed
    root = default_runs_root()
    assert not root.exists() or not any(root.iterdir())  # no new run folder


def test_lr_find_of_a_hand_written_run_file_writes_beside_it(tmp_path):
    from workbench.core.train.launch.headless import lr_find_dir, lr_find_from_toml

    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=256), epochs=1, optimizer="sgd",
                      run_dir=str(tmp_path / "elsewhere"), tensorboard=False, model=ModelConfig(arch="digits_cnn"))
    (tmp_path / "exp").mkdir()
    cfg.to_toml(tmp_path / "exp" / "run.toml")
    assert lr_find_dir(tmp_path / "exp" / "run.toml") == (tmp_path / "exp").resolve()
    assert lr_find_from_toml(tmp_path / "exp" / "run.toml", out=lambda line: None, min_lr=1e-4, max_lr=10.0,
                             steps=20) == 0
    assert (tmp_path / "exp" / "lr_find.csv").is_file()
    assert not (tmp_path / "elsewhere").exists()  # the folder a training of this file would fill stays untouched
