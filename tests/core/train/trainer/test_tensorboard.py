"""TensorBoard for real: a run's event files hold its scalars (checked against metrics.csv) and probe histograms."""

from __future__ import annotations

import csv

import pytest

from workbench.core.model.demo import DigitsCNN
from workbench.core.probe.callback import ProbeCallback
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.loop import Trainer


def test_event_files_match_metrics_csv_and_hold_probe_histograms(tmp_path):
    # imported here: the GPU machine runs `pytest -m gpu` without the tensorboard package
    from tensorboard.backend.event_processing.event_accumulator import HISTOGRAMS, SCALARS, EventAccumulator

    run = tmp_path / "run"
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=2, lr=1e-3, run_dir=str(run),
                      tensorboard=True)
    probe = ProbeCallback(lambda reports: None, every=5, probed=["features.3"], tb_histogram_budget=1.0)
    trainer = Trainer(DigitsCNN(), cfg, [probe])
    assert trainer.fit() == "completed"
    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={SCALARS: 0, HISTOGRAMS: 0})
    acc.Reload()
    tags = acc.Tags()
    assert {"train/loss", "train/lr", "train/samples_per_s", "val/loss", "val/accuracy"} <= set(tags["scalars"])
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    val = acc.Scalars("val/loss")
    assert [e.step for e in val] == [int(r["step"]) for r in rows]
    assert [e.value for e in val] == pytest.approx([float(r["val_loss"]) for r in rows], rel=1e-6)
    assert [e.value for e in acc.Scalars("val/accuracy")] == pytest.approx([float(r["val_acc"]) for r in rows],
                                                                            rel=1e-6)
    losses = [e.step for e in acc.Scalars("train/loss")]  # once per emission window (headless: every 40 ms)
    assert losses == sorted(set(losses)) and losses[-1] == trainer.step and len(losses) >= 2
    assert {"weights/features.3.weight", "grads/features.3.weight", "weights/features.3.bias"} <= set(
        tags["histograms"])
    # measured every 5 steps; a budget of the whole fit's time lets each measured step write them
    # (step 1's may be refused by that budget: the writer's first histogram can cost more than the fit's first step)
    measured = list(range(1, trainer.step + 1, 5))
    assert [e.step for e in acc.Histograms("weights/features.3.weight")] in (measured, measured[1:])
