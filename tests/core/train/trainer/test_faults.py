"""Faults: NaN/Inf loss (pause + lower_lr / rollback / stop, headless stop), dataset exceptions, OOM."""

from __future__ import annotations

import math
import threading

import pytest
import torch
from torch import nn

from workbench.core.errors import TrainingError
from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.data.datasets import TensorBatchLoader
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer


class NaNAt(nn.Module):
    """DigitsCNN whose output is NaN at the given forward calls (1-based, training mode only)."""

    def __init__(self, bad_calls=(4,)):
        super().__init__()
        self.net = DigitsCNN()
        self.bad_calls = set(bad_calls)
        self.calls = 0

    def forward(self, x):
        out = self.net(x)
        if self.training:
            self.calls += 1
            if self.calls in self.bad_calls:
                out = out * float("nan")
        return out


def config(tmp_path, **kw) -> TrainConfig:
    data = kw.pop("data", DataConfig(dataset="fake", fake_shape=[1, 8, 8], fake_size=200, batch_size=16))  # 10 steps/epoch
    return TrainConfig(data=data, epochs=kw.pop("epochs", 1), lr=1e-2, optimizer="sgd",
                       run_dir=str(tmp_path / "run"), **kw)


class Answer(Callback):
    def __init__(self, action, from_thread=False):
        self.action = action
        self.from_thread = from_thread
        self.nonfinite: list[int] = []
        self.reasons: list[str] = []
        self.paused_seen = []
        self.steps: list[int] = []
        self.losses: list[float] = []

    def on_step_end(self, trainer, metrics):
        self.steps.append(metrics["step"])

    def on_nonfinite(self, trainer, step, loss):
        self.nonfinite.append(step)
        self.losses.append(loss)
        self.paused_seen.append(trainer.is_paused)
        if len(self.nonfinite) > 3:
            trainer.resolve_nonfinite("stop")
        elif self.from_thread:  # the GUI answers later, from its own thread
            threading.Timer(0.1, trainer.resolve_nonfinite, args=(self.action,)).start()
        else:
            trainer.resolve_nonfinite(self.action)

    def on_fit_end(self, trainer, reason):
        self.reasons.append(reason)


def params_finite(model):
    return all(torch.isfinite(p).all() for p in model.parameters())


def test_nonfinite_headless_stops(tmp_path):
    model = NaNAt({4})
    t = Trainer(model, config(tmp_path), [])
    assert t.fit() == "nonfinite"
    assert isinstance(t.error, TrainingError) and "step 4" in str(t.error)
    assert t.step == 3 and params_finite(model)


def test_nonfinite_lower_lr_skips_the_step_and_continues(tmp_path):
    model = NaNAt({4})
    cb = Answer("lower_lr", from_thread=True)
    t = Trainer(model, config(tmp_path), [cb])
    assert t.fit() == "completed"
    assert cb.nonfinite == [4] and cb.paused_seen == [True]
    assert t.lr == pytest.approx(1e-3)
    assert t.step == 9  # 10 batches, one skipped
    assert params_finite(model)


def test_nonfinite_rollback_reloads_last_checkpoint(tmp_path):
    model = NaNAt({15})  # step 5 of the second epoch; last.pt is from the end of the first
    cb = Answer("rollback")
    t = Trainer(model, config(tmp_path, epochs=2), [cb])
    assert t.fit() == "completed"
    assert cb.nonfinite == [15]
    # steps 11..14 ran, the rollback went back to step 10, then the whole epoch ran again
    assert cb.steps == list(range(1, 15)) + list(range(11, 21))
    assert t.step == 20 and params_finite(model)


def test_nonfinite_rollback_without_checkpoint_stops(tmp_path):
    cb = Answer("rollback")
    t = Trainer(NaNAt({2}), config(tmp_path), [cb])
    assert t.fit() == "nonfinite"
    assert "no checkpoint" in str(t.error)


def test_nonfinite_stop(tmp_path):
    cb = Answer("stop")
    t = Trainer(NaNAt({2}), config(tmp_path), [cb])
    assert t.fit() == "nonfinite"
    assert cb.reasons == ["nonfinite"] and t.step == 1


def test_inf_loss_is_caught_too(tmp_path):
    class InfModel(NaNAt):
        def forward(self, x):
            out = self.net(x)
            return out * float("inf") if self.training else out

    t = Trainer(InfModel(), config(tmp_path), [])
    assert t.fit() == "nonfinite" and t.step == 0
    assert "the loss is nan" in str(t.error)  # inf logits give a NaN cross-entropy


def test_on_nonfinite_receives_the_loss_value(tmp_path):
    """The NaN dialog shows the value; the trainer used to send only the step."""
    class InfLossAt4(DigitsCNN):
        calls = 0

        def forward(self, x):
            out = super().forward(x)
            if self.training:
                self.calls += 1
                if self.calls == 4:  # every logit but the first at -inf: cross-entropy +inf
                    out = torch.cat([out[:, :1], torch.full_like(out[:, 1:], -float("inf"))], dim=1)
            return out

    cb = Answer("lower_lr")
    t = Trainer(InfLossAt4(), config(tmp_path, data=DataConfig(dataset="digits", batch_size=64)), [cb])
    assert t.fit() == "completed"
    assert cb.nonfinite == [4] and cb.losses == [float("inf")]


class BrokenDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 37:
            raise ValueError("corrupt sample 37")
        return torch.zeros(1, 8, 8), 0


class Errors(Callback):
    def __init__(self):
        self.errors = []
        self.reasons = []

    def on_exception(self, trainer, exc, tb):
        self.errors.append((exc, tb))

    def on_fit_end(self, trainer, reason):
        self.reasons.append(reason)


def test_dataset_exception_ends_run_cleanly(tmp_path):
    loader = torch.utils.data.DataLoader(BrokenDataset(), batch_size=8, shuffle=False)
    model = DigitsCNN()
    cb = Errors()
    t = Trainer(model, config(tmp_path), [cb], data=(loader, loader))
    assert t.fit() == "error"
    assert cb.reasons == ["error"]
    (exc, tb), = cb.errors
    assert isinstance(exc, ValueError) and "corrupt sample 37" in tb and "__getitem__" in tb
    assert t.error is exc
    # the model is usable afterwards: train mode, no stale grads, forward + a new run work
    assert model.training and all(p.grad is None for p in model.parameters())
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    good = TensorBatchLoader(torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,)), 8)
    assert Trainer(model, config(tmp_path), [], data=(good, good)).fit() == "completed"


def test_forward_exception(tmp_path):
    class Bad(DigitsCNN):
        def forward(self, x):
            raise RuntimeError("shape mismatch in forward")

    cb = Errors()
    assert Trainer(Bad(), config(tmp_path), [cb]).fit() == "error"
    assert "shape mismatch in forward" in cb.errors[0][1]


def test_data_error_reported_not_raised(tmp_path):
    c = config(tmp_path)
    c.data = DataConfig(dataset="mnist", root=str(tmp_path / "nowhere"))
    cb = Errors()
    assert Trainer(DigitsCNN(), c, [cb]).fit() == "error"
    assert "nowhere" in str(cb.errors[0][0]) and "Download" in str(cb.errors[0][0])


def test_oom_stops_with_message(tmp_path):
    class OOM(DigitsCNN):
        def forward(self, x):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    cb = Errors()
    t = Trainer(OOM(), config(tmp_path), [cb])
    assert t.fit() == "oom"
    assert cb.reasons == ["oom"]
    assert isinstance(t.error, TrainingError) and "smaller batch size" in str(t.error)
    assert isinstance(cb.errors[0][0], TrainingError)


def test_broken_callback_does_not_escape(tmp_path):
    class Broken(Callback):
        def on_epoch_end(self, trainer, metrics):
            raise KeyError("bug in a callback")

    cb = Errors()
    assert Trainer(DigitsCNN(), config(tmp_path), [Broken(), cb]).fit() == "error"
    assert "bug in a callback" in cb.errors[0][1]


class PoisonBufferAt(Callback):
    """Writes NaN into ``features.1.running_var`` at step ``at``: the loss stays finite (train-mode BN)."""

    def __init__(self, at: int):
        self.at, self.done = at, False

    def on_step_end(self, trainer, metrics):
        if metrics["step"] == self.at and not self.done:
            self.done = True
            with torch.no_grad():
                trainer.model.net.features[1].running_var.fill_(float("nan"))


def test_nonfinite_buffer_at_epoch_end_stops_headless_without_writing_it(tmp_path):
    """A diverged buffer used to end "completed", saved into best.pt and last.pt."""
    model = NaNAt(bad_calls=())
    t = Trainer(model, config(tmp_path, epochs=2), [PoisonBufferAt(15)])
    assert t.fit() == "nonfinite"
    assert "net.features.1.running_var" in str(t.error)
    last = torch.load(tmp_path / "run" / "last.pt", weights_only=True)  # written at the end of epoch 1
    assert last["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in last["model_state_dict"].values() if v.is_floating_point())


def test_nonfinite_buffer_at_epoch_end_rolls_back_when_asked(tmp_path):
    model = NaNAt(bad_calls=())
    answer = Answer("rollback")
    t = Trainer(model, config(tmp_path, epochs=2), [PoisonBufferAt(15), answer])
    assert t.fit() == "completed"
    assert answer.nonfinite == [20] and math.isnan(answer.losses[0])
    assert params_finite(model) and all(torch.isfinite(b).all() for b in model.buffers() if b.is_floating_point())
