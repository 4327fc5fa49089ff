"""Stop finishes its step and writes ``last.pt`` at that step; Resume continues from exactly there.

Before, a stop in the middle of an epoch left ``last.pt`` at the last epoch end
(stopped at step 57, it held step 46), and Resume silently redid the steps
between. Here a run stopped mid-epoch, resumed by a NEW trainer from its
``last.pt``, ends bit-identical (CPU) to the same run never stopped: weights,
optimizer, and every epoch's metrics, the interrupted epoch's train loss included.
"""

from __future__ import annotations

import pytest
import torch

from tests.core.train.trainer.test_resume import assert_same_params, fresh_model, make_config
from workbench.core.train.entry import save_last
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer


class StopAtStep(Callback):
    """Ask for a stop at the end of step ``step`` (as the Stop button does from another thread)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, trainer, metrics):
        if metrics["step"] == self.step:
            trainer.request_stop()


@pytest.mark.parametrize("kw, stop_at", [
    ({}, 9),  # digits, 7 steps per epoch: in the 2nd epoch
    ({}, 14),  # the last step of the 2nd epoch: the stop comes with the epoch's end
    ({"fake": True, "batch_size": 16, "optimizer": "sgd", "momentum": 0.9, "scheduler": "cosine",
      "random_flip": True, "random_crop": 1}, 5),
    ({"fake": True, "batch_size": 16, "optimizer": "adamw", "scheduler": "onecycle", "weight_decay": 0.01}, 17),
])
def test_a_stop_mid_epoch_writes_last_pt_at_that_step_and_resumes_bit_identical(tmp_path, kw, stop_at):
    straight = fresh_model()
    t = Trainer(straight, make_config(tmp_path, "straight", 3, **kw))
    assert t.fit() == "completed"

    stopped = fresh_model()
    t1 = Trainer(stopped, make_config(tmp_path, "stopped", 3, **kw), [StopAtStep(stop_at)])
    assert t1.fit() == "stopped"
    assert t1.step == stop_at  # the step under way finished; no further step
    last = tmp_path / "stopped" / "last.pt"
    ck = torch.load(last, weights_only=True)
    assert ck["step"] == stop_at and ck["batch_in_epoch"] == stop_at - ck["epoch"] * t.steps_per_epoch >= 0
    for k, v in stopped.state_dict().items():
        assert torch.equal(ck["model_state_dict"][k], v), k
    assert save_last(t1) == last and torch.load(last, weights_only=True)["step"] == stop_at  # not written twice

    torch.manual_seed(999)  # the RNG state must come from the checkpoint, not from here
    resumed = fresh_model()
    t2 = Trainer(resumed, make_config(tmp_path, "resumed", 3, **kw))
    t2.resume_from(last)
    assert (t2.step, t2.batch_in_epoch) == (stop_at, ck["batch_in_epoch"])
    steps = []

    class Steps(Callback):
        def on_step_end(self, trainer, metrics):
            steps.append(metrics["step"])

    t2.callbacks.append(Steps())
    assert t2.fit() == "completed"
    assert steps[0] == stop_at + 1 and t2.step == t.step
    assert_same_params(straight, resumed)
    opt_a, opt_b = t.optimizer.state_dict()["state"], t2.optimizer.state_dict()["state"]
    for i in opt_a:
        for key, value in opt_a[i].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(opt_b[i][key])), (i, key)
    for a, b in zip(t.history, t2.history, strict=True):
        for key in ("epoch", "step", "train_loss", "val_loss", "val_acc", "lr"):
            assert a[key] == b[key], (a["epoch"], key)


def test_a_stop_without_checkpoints_writes_nothing_until_asked(tmp_path):
    """``checkpoint_every_epoch = false``: a stop writes no last.pt; the window's close (save_last) does."""
    trainer = Trainer(fresh_model(), make_config(tmp_path, "run", 3, checkpoint_every_epoch=False), [StopAtStep(4)])
    assert trainer.fit() == "stopped"
    last = tmp_path / "run" / "last.pt"
    assert not last.exists()
    assert save_last(trainer) == last and torch.load(last, weights_only=True)["step"] == 4


def test_a_stop_at_an_epoch_end_keeps_the_epoch_end_checkpoint(tmp_path):
    class StopAtEpochEnd(Callback):
        def on_epoch_end(self, trainer, metrics):
            trainer.request_stop()

    trainer = Trainer(fresh_model(), make_config(tmp_path, "run", 3), [StopAtEpochEnd()])
    assert trainer.fit() == "stopped"
    ck = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    assert (ck["epoch"], ck["step"], ck["batch_in_epoch"]) == (1, trainer.step, 0)


def test_non_finite_weights_never_overwrite_last_pt_on_any_route(tmp_path):
    """The window's close, Ctrl-C and a rank all save through ``save_last``: NaN weights wrote over a good
    last.pt there (only the stop inside ``fit()`` checked)."""
    trainer = Trainer(fresh_model(), make_config(tmp_path, "run", 3), [StopAtStep(4)])
    assert trainer.fit() == "stopped"
    last = tmp_path / "run" / "last.pt"
    good = last.read_bytes()
    with torch.no_grad():
        next(trainer.model.parameters()).fill_(float("nan"))
    trainer.step += 1  # a later step: the write is not the one already made
    assert save_last(trainer) is None
    assert last.read_bytes() == good
