"""A Lightning fit and a Hugging Face Trainer in other processes, steered through workbench.connect.

Each script trains with its framework's ``WorkbenchCallback`` (tests/attach_scripts/lightning_fit.py,
hf_train.py); the checks are those of the plain loop (test_plain_loop_steered.py): freeze, LR, pause, save
now, resume, stop, a clean exit, frozen weights bit-identical while the rest trained on.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

import workbench
from tests.attach_scripts.common import finish, start_script, until
from workbench.core.train.events import CommandApplied, EpochEnded, Finished, Metrics, Paused, Sink

pytestmark = pytest.mark.timeout(300)

#: script -> (the module frozen, a parameter that trains on, the model's class, the LRs after set_lr(0.0123))
CASES = {
    "lightning_fit": ("features", "head.weight", "SmallCNN", [0.0123, 0.0246]),
    "hf_train": ("bert.embeddings", "classifier.weight", "BertForSequenceClassification", [0.0123, 0.0123]),
}


def _gradient_norms(run, module: str) -> dict:
    """Probe ``module`` from the window; the parameter gradient norms of the first report that has them.

    Gradients are read in a hook on the optimizer's step: only the real torch optimizer runs it.
    """
    run.probe([module])
    sink = until(run, Sink, lambda e: any(r.grads is not None and r.grads.params for r in e.data))
    return next(r.grads.params for r in sink.data if r.grads is not None and r.grads.params)


def _stop(run) -> None:
    run.stop()
    assert until(run, Finished).reason == "stopped"
    run.close()


@pytest.mark.parametrize("script", list(CASES))
def test_framework_freeze_lr_pause_save_stop(tmp_path, script):
    frozen_module, trained, model_class, lrs = CASES[script]
    run_dir = tmp_path / "run"
    proc, info = start_script(script, run_dir)
    try:
        run = workbench.connect(info["address"], info["token"])
        assert run.steering
        names = [m[0] for m in run.info["model"]["modules"]]
        assert frozen_module in names and run.info["model_class"] == model_class
        until(run, Metrics, lambda e: len(e.values["step"]) > 0)
        run.freeze(frozen_module)
        applied = until(run, CommandApplied)
        changed = applied.command.changed
        assert changed and all(n.startswith(frozen_module + ".") for n in changed)
        run.set_lr(0.0123)
        assert until(run, CommandApplied).command.lr == pytest.approx(0.0123)
        run.pause()
        paused_at = until(run, Paused).step
        run.save_now()
        saved = until(run, CommandApplied)
        assert saved.step == paused_at and saved.command.saved_to.endswith("last.pt")
        run.resume()
        # it trains on after the resume: steps past the pause, then an epoch's end
        until(run, Metrics, lambda e: e.values["step"].max() > paused_at + 2)
        until(run, EpochEnded)
        _stop(run)
    finally:
        code, out = finish(proc)
    assert code == 0, out
    final = torch.load(run_dir / "final.pt", weights_only=True)
    at_save = torch.load(run_dir / "last.pt", weights_only=True)["model_state_dict"]
    assert set(final) == set(at_save)  # the same key names as the model attached
    frozen = [n for n in final if n.startswith(frozen_module + ".") and (n.endswith("weight") or n.endswith("bias"))]
    assert frozen and set(frozen) <= set(changed)
    assert all(torch.equal(final[n], at_save[n]) for n in frozen)
    assert not torch.equal(final[trained], at_save[trained])  # the rest trained on
    assert json.loads((run_dir / "final.json").read_text())["lrs"] == [pytest.approx(v) for v in lrs]
    edits = [json.loads(line) for line in (run_dir / "edits.jsonl").read_text().splitlines()]
    assert [e["op"] for e in edits] == ["set_trainable", "set_lr", "pause", "save_now", "resume"]
    assert edits[1]["lr"] == pytest.approx(0.0123)


def test_lightning_forwards_logged_metrics_and_probes(tmp_path):
    proc, info = start_script("lightning_fit", tmp_path / "run")
    try:
        run = workbench.connect(info["address"], info["token"])
        # `self.log("train_acc", ...)` in training_step: a per-step value next to the loss
        metrics = until(run, Metrics, lambda e: "train_acc" in e.values)
        acc, loss = metrics.values["train_acc"], metrics.values["loss"]
        assert all(0.0 <= v <= 1.0 for v in acc) and all(math.isfinite(v) for v in loss)
        assert not any(k in metrics.values for k in ("val_loss", "val_acc", "train_acc_step"))
        # `self.log("val_loss"/"val_acc", ...)` in validation_step: the epoch row after each validation
        epoch = until(run, EpochEnded).metrics
        assert math.isfinite(epoch["val_loss"]) and 0.0 <= epoch["val_acc"] <= 1.0 and "train_acc" not in epoch
        assert _gradient_norms(run, "head")["head.weight"] > 0
        _stop(run)
    finally:
        code, out = finish(proc)
    assert code == 0, out


def test_transformers_forwards_losses_eval_metrics_and_probes(tmp_path):
    proc, info = start_script("hf_train", tmp_path / "run")
    try:
        run = workbench.connect(info["address"], info["token"])
        # logging_steps=1: every step's row has the loss the Trainer logged, and its grad_norm
        metrics = until(run, Metrics, lambda e: len(e.values["step"]) > 0)
        assert all(math.isfinite(v) for v in metrics.values["loss"])
        assert all(math.isfinite(v) and v >= 0 for v in metrics.values["grad_norm"])
        assert "learning_rate" not in metrics.values and "eval_loss" not in metrics.values
        # eval_steps=20: the evaluation's metrics in an epoch row, eval_loss also as val_loss
        epoch = until(run, EpochEnded, lambda e: "eval_loss" in e.metrics).metrics
        assert epoch["step"] % 20 == 0 and math.isfinite(epoch["eval_loss"])
        assert epoch["val_loss"] == epoch["eval_loss"] and "eval_runtime" not in epoch
        # the probe's gradient hook is on the torch optimizer inside accelerate's AcceleratedOptimizer
        assert _gradient_norms(run, "classifier")["classifier.weight"] > 0
        _stop(run)
    finally:
        code, out = finish(proc)
    assert code == 0, out
