"""The QThread bridge alone: signals, batching, error path, thread lifetime."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import QObject, Slot
from torch import nn

from workbench.core.train.config import DataConfig, TrainConfig
from workbench.ui.threading import live_threads, start_in_thread, wait_for
from workbench.core.train.events import pack_metrics, to_cpu_copy
from workbench.ui.train.worker import TrainingWorker

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


class Recorder(QObject):
    """Collects a worker's signals on the GUI thread (queued, as the panel gets them).

    Plain Python callables connected to a worker signal would run on the training
    thread; a QObject receiver makes the connection queued.
    """

    def __init__(self, worker):
        super().__init__()
        self.metrics, self.epochs, self.extras, self.errors, self.finished = [], [], [], [], []
        worker.metrics.connect(self.on_metrics)
        worker.epochEnded.connect(self.on_epoch)
        worker.extrasReady.connect(self.on_extras)
        worker.error.connect(self.on_error)
        worker.finished.connect(self.on_finished)

    @Slot(object)
    def on_metrics(self, m):
        self.metrics.append(m)

    @Slot(object)
    def on_epoch(self, m):
        self.epochs.append(m)

    @Slot(object)
    def on_extras(self, m):
        self.extras.append(m)

    @Slot(str)
    def on_error(self, text):
        self.errors.append(text)

    @Slot(str)
    def on_finished(self, reason):
        self.finished.append(reason)


def _run(qtbot, worker, timeout=30_000):
    rec = Recorder(worker)
    start_in_thread(worker)
    qtbot.waitUntil(lambda: bool(rec.finished) and not live_threads(), timeout=timeout)
    return rec


def _tiny_data(n=256, batch=8):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 32, generator=g)
    y = (x[:, 0] > 0).long()
    train = [(x[i:i + batch], y[i:i + batch]) for i in range(0, n, batch)]
    return train, train[:4]


def _config(tmp_path, epochs=2):
    return TrainConfig(data=DataConfig(dataset="fake"), epochs=epochs, run_dir=str(tmp_path / "run"),
                       tensorboard=False, checkpoint_every_epoch=False)


def _factory(data):
    from workbench.core.train.trainer.loop import Trainer

    def make(model, config, callbacks, arch, control=None):
        return Trainer(model, config, callbacks, arch, data=data, control=control)

    return make


def test_pack_metrics_and_cpu_copies():
    batch = [{"step": 1, "loss": torch.tensor(0.5), "lr": 1e-3}, {"step": 2, "loss": 0.25}]
    packed = pack_metrics(batch)
    assert set(packed) == {"step", "loss", "lr"}
    assert all(isinstance(v, np.ndarray) and v.dtype == np.float64 for v in packed.values())
    np.testing.assert_array_equal(packed["loss"], [0.5, 0.25])
    assert np.isnan(packed["lr"][1])
    p = nn.Parameter(torch.ones(3))
    copied = to_cpu_copy({"state": {0: {"exp_avg": p * 2}}, "param_groups": [{"lr": 0.1, "params": [0]}]})
    t = copied["state"][0]["exp_avg"]
    assert not t.requires_grad and t.grad_fn is None and t.device.type == "cpu"
    assert copied["param_groups"][0]["params"] == [0]


def test_worker_batches_metrics_and_finishes(qtbot, tmp_path):
    model = nn.Linear(32, 2)
    worker = TrainingWorker(model, _config(tmp_path), trainer_factory=_factory(_tiny_data()))
    rec = _run(qtbot, worker)
    assert rec.finished == ["completed"] and rec.errors == []
    assert len(rec.epochs) == 2 and rec.extras
    steps = np.concatenate([b["step"] for b in rec.metrics])
    assert steps.tolist() == list(range(1, 65))  # every step arrives once, in order
    assert len(rec.metrics) < 64  # batched, not one signal per step
    for b in rec.metrics:
        for v in b.values():
            assert isinstance(v, np.ndarray)
    assert all(isinstance(v, (int, float, bool, str, type(None))) or (isinstance(v, list) and all(
        isinstance(x, str) for x in v)) for e in rec.epochs for v in e.values())
    assert rec.extras[0]["step"] == 64 and "optimizer_state_dict" in rec.extras[0]
    assert worker.trainer.control is worker.control  # one RunControl, shared, never copied


def test_worker_error_in_construction_is_reported(qtbot, tmp_path):
    def broken(*args, **kwargs):
        raise RuntimeError("cannot build the trainer")

    worker = TrainingWorker(nn.Linear(2, 2), _config(tmp_path), trainer_factory=broken)
    rec = _run(qtbot, worker)
    assert rec.finished == ["error"]
    assert len(rec.errors) == 1 and "Traceback" in rec.errors[0] and "cannot build the trainer" in rec.errors[0]


def test_stop_before_trainer_exists_is_honoured(qtbot, tmp_path):
    worker = TrainingWorker(nn.Linear(32, 2), _config(tmp_path, epochs=100),
                            trainer_factory=_factory(_tiny_data()))
    worker.control.request_stop()
    rec = _run(qtbot, worker)
    assert rec.finished == ["stopped"]


def test_wait_for_returns_while_gui_thread_blocks(qtbot, tmp_path):
    """Stopping with the GUI thread blocked in wait_for must not deadlock (closeEvent path)."""
    worker = TrainingWorker(nn.Linear(32, 2), _config(tmp_path, epochs=10_000),
                            trainer_factory=_factory(_tiny_data()))
    rec = Recorder(worker)
    thread = start_in_thread(worker)
    qtbot.waitUntil(lambda: bool(rec.metrics), timeout=30_000)
    worker.control.request_stop()
    assert wait_for(thread, 10_000)  # GUI thread blocked: quit() must still reach the thread
    assert live_threads() == []
    qtbot.waitUntil(lambda: rec.finished == ["stopped"], timeout=5000)


def test_every_event_of_the_protocol_has_its_signal():
    """Both workers relay events by name (``emit_event``): a new event without a signal would raise there.
    ``sink`` is the one the process worker hands to the window's callbacks instead."""
    from workbench.core.train.events import EVENTS
    from workbench.ui.train.worker import RunWorker

    missing = [name for name in EVENTS if not hasattr(RunWorker, name)]
    assert missing == ["sink"]
