"""The training loop: learning on the digits, frozen parameters, commands, pause/stop, metrics."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch
from torch import nn

from tests.core.model.checkpoint_files import TiedDigits
from workbench.core.model.demo import DigitsCNN
from workbench.core.train.trainer.commands import SaveNow, SetLR, SetTrainable
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.devices import available_devices, cuda_memory, default_device
from workbench.core.train.trainer.hooks import STEP_KEYS, Callback
from workbench.core.train.trainer.loop import Trainer
from workbench.core.train.trainer.optim import lr_schedule_preview


class Recorder(Callback):
    def __init__(self):
        self.steps: list[dict] = []
        self.batches: list[list[dict]] = []
        self.epochs: list[dict] = []
        self.commands: list = []
        self.reasons: list[str] = []
        self.errors: list = []
        self.started = threading.Event()
        self.command_applied = threading.Event()
        self._progress = threading.Condition()

    def on_step_end(self, trainer, metrics):
        with self._progress:
            self.steps.append(metrics)
            self._progress.notify_all()
        self.started.set()

    def wait_for_steps(self, n: int, timeout: float = 20.0) -> bool:
        """Block until at least ``n`` steps were recorded (False after ``timeout`` seconds)."""
        with self._progress:
            return self._progress.wait_for(lambda: len(self.steps) >= n, timeout)

    def on_metrics(self, trainer, batch):
        self.batches.append(batch)

    def on_epoch_end(self, trainer, metrics):
        self.epochs.append(metrics)

    def on_command_applied(self, trainer, command):
        self.commands.append(command)
        self.command_applied.set()

    def on_exception(self, trainer, exc, tb):
        self.errors.append((exc, tb))

    def on_fit_end(self, trainer, reason):
        self.reasons.append(reason)


def cfg(tmp_path, **kw) -> TrainConfig:
    data = kw.pop("data", DataConfig(batch_size=64))
    return TrainConfig(data=data, run_dir=str(tmp_path / "run"), lr=kw.pop("lr", 3e-3), **kw)


def small(tmp_path, **kw) -> TrainConfig:
    """A fast config on 320 fake 8x8 images: 20 steps per epoch of 16."""
    data = DataConfig(dataset="fake", fake_shape=[1, 8, 8], fake_size=400, batch_size=16)
    return cfg(tmp_path, data=data, **kw)


def snapshot(model, names=None):
    return {n: p.detach().clone() for n, p in model.named_parameters() if names is None or n in names}


def test_digits_run_learns(tmp_path):
    rec = Recorder()
    model = DigitsCNN()
    trainer = Trainer(model, cfg(tmp_path, epochs=4), [rec])
    assert trainer.fit() == "completed"
    assert rec.reasons == ["completed"]
    losses = [m["loss"] for batch in rec.batches for m in batch]
    assert len(losses) == trainer.step == 4 * trainer.steps_per_epoch
    first = float(np.mean(losses[:5]))
    last_epoch = float(np.mean(losses[-trainer.steps_per_epoch:]))
    assert last_epoch < 0.5 * first, (first, last_epoch)
    assert rec.epochs[-1]["val_acc"] > 0.8
    assert [e["epoch"] for e in rec.epochs] == [0, 1, 2, 3]
    for key in STEP_KEYS:
        assert isinstance(rec.batches[0][0][key], (int, float)), key
    run = tmp_path / "run"
    assert {"run.toml", "metrics.csv", "last.pt", "best.pt"} <= {p.name for p in run.iterdir()}
    ck = torch.load(run / "last.pt", weights_only=True)
    for key in ("model_state_dict", "optimizer_state_dict", "epoch", "step", "loss",
                "arch", "frozen", "workbench_version", "rng_state"):
        assert key in ck, key
    assert ck["epoch"] == 4 and ck["arch"]["name"] == "digits_cnn"
    assert len((run / "metrics.csv").read_text().strip().splitlines()) == 5


def test_metrics_are_batched(tmp_path):
    rec = Recorder()
    trainer = Trainer(DigitsCNN(), small(tmp_path, epochs=1, emit_every_ms=1e6), [rec])
    trainer.fit()
    # one emission for the whole epoch (at the epoch end), every step in it
    assert len(rec.batches) == 1 and len(rec.batches[0]) == trainer.steps_per_epoch
    assert len(rec.steps) == trainer.steps_per_epoch


def test_frozen_backbone_stays_bit_identical(tmp_path):
    model = DigitsCNN()
    for p in model.features.parameters():
        p.requires_grad_(False)
    frozen_before = snapshot(model, {n for n, p in model.named_parameters() if not p.requires_grad})
    head_before = model.classifier.weight.detach().clone()
    trainer = Trainer(model, small(tmp_path, epochs=1, optimizer="sgd", momentum=0.9, weight_decay=1e-2), [])
    assert trainer.fit() == "completed"
    opt_params = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert opt_params == {id(p) for p in model.classifier.parameters()}
    for n, p in model.named_parameters():
        if n in frozen_before:
            assert torch.equal(p, frozen_before[n]), n
            assert p.grad is None
    assert not torch.equal(model.classifier.weight, head_before)


class FreezeMidRun(Callback):
    """Queue a freeze of the backbone at step 5, then an unfreeze at step 15."""

    def __init__(self):
        self.frozen_at = None
        self.snap = None
        self.applied = []

    def on_step_end(self, trainer, metrics):
        if metrics["step"] == 5:
            trainer.queue(SetTrainable(["features"], False))
        if metrics["step"] == 10:
            self.check = snapshot(trainer.model, {n for n in self.snap}) if self.snap else None

    def on_command_applied(self, trainer, command):
        self.applied.append(command)
        if isinstance(command, SetTrainable) and not command.flag:
            self.frozen_at = trainer.step
            self.snap = snapshot(trainer.model, set(command.changed))


def test_mid_run_freeze_keeps_parameters_bit_identical(tmp_path):
    model = DigitsCNN()
    cb = FreezeMidRun()
    trainer = Trainer(model, small(tmp_path, epochs=1, optimizer="adamw", weight_decay=0.1), [cb])
    assert trainer.fit() == "completed"
    assert cb.frozen_at == 5
    cmd = cb.applied[0]
    assert sorted(cmd.changed) == sorted(n for n, _ in model.features.named_parameters(prefix="features"))
    for n, before in cb.snap.items():
        assert torch.equal(dict(model.named_parameters())[n], before), n


def test_freezing_a_module_that_holds_a_tied_weight_freezes_that_weight(tmp_path):
    """The run used to resolve "decoder" to decoder.bias only: the shared weight kept training."""
    model = TiedDigits()
    start = model.embedding.weight.detach().clone()
    hidden = model.hidden.weight.detach().clone()
    trainer = Trainer(model, cfg(tmp_path, epochs=1, data=DataConfig(dataset="digits", batch_size=64)))
    command = SetTrainable(["decoder"], False)
    trainer.queue(command)
    assert trainer.fit() == "completed"
    assert command.changed == ["embedding.weight", "decoder.bias"] and command.error is None
    assert torch.equal(model.embedding.weight, start)
    assert not torch.equal(model.hidden.weight, hidden)


def test_frozen_batchnorm_keeps_its_statistics_by_default(tmp_path):
    """A user who unticks a BatchNorm expects it to stay as loaded (its running stats moved before)."""
    model = DigitsCNN()
    model.features.requires_grad_(False)
    before = {n: b.clone() for n, b in model.features.named_buffers()}
    trainer = Trainer(model, small(tmp_path, epochs=1))
    assert trainer.config.keep_frozen_bn_eval
    assert trainer.fit() == "completed"
    assert all(torch.equal(b, before[n]) for n, b in model.features.named_buffers())
    moving = DigitsCNN()
    moving.features.requires_grad_(False)
    start = moving.features[1].running_mean.clone()
    assert Trainer(moving, small(tmp_path / "opt_out", epochs=1, keep_frozen_bn_eval=False)).fit() == "completed"
    assert not torch.equal(moving.features[1].running_mean, start)  # the option still lets them update


def test_unfreeze_adds_param_group_and_trains_it(tmp_path):
    model = DigitsCNN()
    for p in model.features.parameters():
        p.requires_grad_(False)
    rec = Recorder()

    class Unfreeze(Callback):
        def on_step_end(self, trainer, metrics):
            if metrics["step"] == 3:
                trainer.queue(SetTrainable("features", True))

    before = model.features[0].weight.detach().clone()
    trainer = Trainer(model, small(tmp_path, epochs=1, scheduler="cosine", backbone_lr_mult=0.1), [Unfreeze(), rec])
    trainer.prepare()
    n_groups = len(trainer.optimizer.param_groups)
    assert trainer.fit() == "completed", rec.errors
    assert len(trainer.optimizer.param_groups) == n_groups + 1
    new = trainer.optimizer.param_groups[-1]
    assert new["wb_role"] == "backbone"
    assert new["lr"] == pytest.approx(0.1 * trainer.lr)
    assert not torch.equal(model.features[0].weight, before)


def test_after_backward_sees_gradients_before_the_step(tmp_path):
    class Grads(Callback):
        def __init__(self):
            self.norms = []

        def on_after_backward(self, trainer):
            w = trainer.model.classifier.weight
            self.norms.append(float(w.grad.norm()))
            assert trainer.model.features[0].weight.grad is None  # frozen: no grad at all

    model = DigitsCNN()
    model.features[0].requires_grad_(False)
    cb = Grads()
    trainer = Trainer(model, small(tmp_path, epochs=1, grad_clip=0.5), [cb])
    assert trainer.fit() == "completed", trainer.error
    assert len(cb.norms) == trainer.step and all(n > 0 for n in cb.norms)


def test_set_lr_and_save_now(tmp_path):
    rec = Recorder()

    class Cmds(Callback):
        def on_step_end(self, trainer, metrics):
            if metrics["step"] == 2:
                trainer.queue(SetLR(0.0123))
                trainer.queue(SaveNow(str(tmp_path / "now.pt")))

    trainer = Trainer(DigitsCNN(), small(tmp_path, epochs=1, optimizer="sgd"), [Cmds(), rec])
    assert trainer.fit() == "completed"
    assert trainer.lr == pytest.approx(0.0123)
    lrs = [m["lr"] for b in rec.batches for m in b]
    assert lrs[1] == pytest.approx(3e-3) and lrs[2] == pytest.approx(0.0123)
    ck = torch.load(tmp_path / "now.pt", weights_only=True)
    assert ck["step"] == 2 and ck["batch_in_epoch"] == 2
    assert [type(c).__name__ for c in rec.commands] == ["SetLR", "SaveNow"]
    assert rec.commands[1].saved_to == str(tmp_path / "now.pt")


class NaNAtFourthStep(DigitsCNN):
    """DigitsCNN whose 4th training forward returns NaN logits (one instance, one fit)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        out = super().forward(x)
        if self.training:
            self.calls += 1
            if self.calls == 4:
                out = out * float("nan")
        return out


def test_pause_resume_stop_from_another_thread(tmp_path):
    rec = Recorder()
    trainer = Trainer(DigitsCNN(), small(tmp_path, epochs=200), [rec])
    result = {}
    th = threading.Thread(target=lambda: result.setdefault("reason", trainer.fit()), daemon=True)
    th.start()
    try:
        assert rec.started.wait(30)
        trainer.pause()
        assert trainer.is_paused
        assert trainer.control.wait_until_blocked(20), "the loop did not reach a step boundary"
        n = len(rec.steps)
        trainer.queue(SetLR(1e-4))  # commands apply while paused
        assert rec.command_applied.wait(20) and trainer.lr == pytest.approx(1e-4)
        assert trainer.is_waiting
        assert len(rec.steps) == n, "steps ran while paused"
        trainer.resume()
        assert rec.wait_for_steps(n + 4)
        assert not trainer.is_paused
    finally:
        trainer.request_stop()
        th.join(30)
    assert not th.is_alive()
    assert result["reason"] == "stopped" and rec.reasons == ["stopped"]
    assert trainer.epoch < 200
    assert all(p.grad is None for p in trainer.model.parameters())


def test_stop_requested_before_fit_starts(tmp_path):
    trainer = Trainer(DigitsCNN(), small(tmp_path, epochs=5), [])
    trainer.request_stop()
    assert trainer.fit() == "stopped" and trainer.step == 0
    trainer.config.epochs = 1  # the next fit() runs
    assert trainer.fit() == "completed" and trainer.epoch == 1


def test_stop_while_paused(tmp_path):
    rec = Recorder()
    trainer = Trainer(DigitsCNN(), small(tmp_path, epochs=200), [rec])
    th = threading.Thread(target=trainer.fit, daemon=True)
    trainer.pause()
    th.start()
    # paused before the first step: the loop blocks at its first step boundary
    assert trainer.control.wait_until_blocked(20), "the paused loop did not block"
    assert rec.steps == []
    trainer.request_stop()
    th.join(30)
    assert rec.reasons == ["stopped"]


@pytest.mark.parametrize("opt", ["sgd", "adam", "adamw", "rmsprop"])
def test_optimizers_and_losses_run(tmp_path, opt):
    loss = {"sgd": "mse", "adam": "cross_entropy", "adamw": "bce_with_logits", "rmsprop": "l1"}[opt]
    data = DataConfig(dataset="fake", fake_shape=[1, 8, 8], fake_size=96, batch_size=32)
    trainer = Trainer(DigitsCNN(), cfg(tmp_path, epochs=1, optimizer=opt, loss=loss, grad_clip=1.0,
                                       nesterov=True, data=data), [])
    assert trainer.fit() == "completed", trainer.error
    assert math.isfinite(trainer.history[-1]["val_loss"])


@pytest.mark.parametrize("sched", ["step", "multistep", "cosine", "onecycle", "plateau"])
def test_schedulers(tmp_path, sched):
    c = cfg(tmp_path, epochs=2, scheduler=sched, step_size=1, milestones=[1], backbone_lr_mult=0.5)
    c.data = DataConfig(dataset="fake", fake_shape=[1, 8, 8], fake_size=80, batch_size=16)
    rec = Recorder()
    trainer = Trainer(DigitsCNN(), c, [rec])
    assert trainer.fit() == "completed", trainer.error
    preview = lr_schedule_preview(c, trainer.steps_per_epoch)
    assert preview.shape == (2 * trainer.steps_per_epoch,)
    if sched != "plateau":
        lrs = np.array([m["lr"] for b in rec.batches for m in b])
        np.testing.assert_allclose(lrs, preview, rtol=1e-6)
    roles = {g["wb_role"] for g in trainer.optimizer.param_groups}
    assert roles == {"head", "backbone"}


def test_bf16_autocast_on_cpu(tmp_path):
    trainer = Trainer(DigitsCNN(), small(tmp_path, epochs=1, amp=True), [])
    assert trainer.fit() == "completed", trainer.error
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())


def test_devices():
    devs = available_devices()
    assert devs[0][0] == "cpu"
    assert default_device() in [d for d, _ in devs]
    assert cuda_memory("cpu") == (0, 0)


def test_deferred_loss_path_on_cpu(tmp_path):
    """The CUDA code path (losses kept as device tensors, read per emission) exercised on CPU."""
    class LossType(Callback):
        types = set()

        def on_step_end(self, trainer, metrics):
            self.types.add(type(metrics["loss"]))

    rec = Recorder()
    trainer = Trainer(DigitsCNN(), small(tmp_path, epochs=2, emit_every_ms=1e6), [rec, LossType()])
    trainer.prepare()
    trainer._defer_loss = True
    assert trainer.fit() == "completed", trainer.error
    assert LossType.types == {torch.Tensor}
    assert len(rec.batches) == 2 and all(isinstance(m["loss"], float) for b in rec.batches for m in b)
    assert math.isfinite(rec.epochs[-1]["train_loss"])
    assert rec.epochs[-1]["train_loss"] == pytest.approx(np.mean([m["loss"] for m in rec.batches[-1]]))


def test_deferred_nonfinite_detected_at_emission(tmp_path):
    trainer = Trainer(NaNAtFourthStep(), small(tmp_path, epochs=1, emit_every_ms=0), [])
    trainer.prepare()
    trainer._defer_loss = True
    assert trainer.fit() == "nonfinite"
    assert "step 4" in str(trainer.error)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_reads_the_loss_at_the_emission_cadence(tmp_path):
    """No host-device synchronization inside steps 3..12: torch's sync debug mode raises on any
    (counting ``Tensor.item`` calls counted the optimizer's own CPU step counters too)."""

    class NoSyncWindow(Callback):
        def on_step_end(self, trainer, metrics):
            if metrics["step"] == 2:
                torch.cuda.set_sync_debug_mode("error")
            elif metrics["step"] == 12:
                torch.cuda.set_sync_debug_mode("default")

    rec = Recorder()
    trainer = Trainer(DigitsCNN(), cfg(tmp_path, epochs=2, device="cuda", emit_every_ms=1e6), [NoSyncWindow(), rec])
    try:
        assert trainer.fit() == "completed", trainer.error
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert trainer.step > 12
    assert all(isinstance(m["loss"], float) for b in rec.batches for m in b)
    assert rec.epochs[-1]["val_acc"] > 0.8
    alloc, reserved = cuda_memory("cuda:0")
    assert reserved >= alloc > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_fp16_autocast_with_gradscaler(tmp_path):
    rec = Recorder()
    trainer = Trainer(DigitsCNN(), cfg(tmp_path, epochs=2, device="cuda:0", amp=True, amp_dtype="float16"), [rec])
    assert trainer.fit() == "completed", trainer.error
    assert trainer.scaler is not None and trainer.scaler.get_scale() > 0
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert rec.epochs[-1]["val_acc"] > 0.8
    ck = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    assert "scaler_state_dict" in ck


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_nonfinite_detected_at_emission(tmp_path):
    trainer = Trainer(NaNAtFourthStep(), cfg(tmp_path, epochs=1, device="cuda", emit_every_ms=0), [])
    assert trainer.fit() == "nonfinite"
    assert "step 4" in str(trainer.error)


class _Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(64, 16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(torch.relu(self.body(x.flatten(1))))


def test_default_head_and_custom_loaders(tmp_path):
    from workbench.core.train.data.datasets import TensorBatchLoader

    x, y = torch.randn(40, 1, 8, 8), torch.randint(0, 10, (40,))
    loaders = (TensorBatchLoader(x, y, 8), TensorBatchLoader(x, y, 8, shuffle=False))
    trainer = Trainer(_Linear(), cfg(tmp_path, epochs=1, backbone_lr_mult=0.1), [], data=loaders)
    assert trainer.fit() == "completed"
    lrs = {g["wb_role"]: g["lr"] for g in trainer.optimizer.param_groups}
    assert lrs["backbone"] == pytest.approx(0.1 * lrs["head"])
    assert trainer.config.model.arch == ""  # unknown model: run.toml cannot rebuild it
