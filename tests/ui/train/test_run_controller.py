"""RunController with a thread run alone: typed events in order, batching, error path, thread lifetime."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import QObject, Slot
from torch import nn

from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.events import (
    EVENT_TYPES, EpochEnded, ExtrasReady, Finished, Metrics, RunError, Sink, pack_metrics, to_cpu_copy,
)
from workbench.core.train.handle import RunHandle
from workbench.core.train.launch.in_thread import ThreadRun
from workbench.ui.threading import live_threads
from workbench.ui.train.run_controller import RunController

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


class Recorder(QObject):
    """Collects a controller's events on the GUI thread (as the panel gets them), sorted by type."""

    def __init__(self, controller):
        super().__init__()
        self.metrics, self.epochs, self.extras, self.errors, self.finished = [], [], [], [], []
        self.ended = 0
        controller.event.connect(self.on_event)
        controller.ended.connect(self.on_ended)

    @Slot(object)
    def on_event(self, event):
        if isinstance(event, Metrics):
            self.metrics.append(event.values)
        elif isinstance(event, EpochEnded):
            self.epochs.append(event.metrics)
        elif isinstance(event, ExtrasReady):
            self.extras.append(event.extras)
        elif isinstance(event, RunError):
            self.errors.append(event.text)
        elif isinstance(event, Finished):
            self.finished.append(event.reason)

    @Slot()
    def on_ended(self):
        self.ended += 1


def _run(qtbot, handle, timeout=30_000):
    controller = RunController()
    rec = Recorder(controller)
    controller.start(handle)
    qtbot.waitUntil(lambda: rec.ended == 1 and not live_threads(), timeout=timeout)
    assert not controller.is_running() and controller.handle is None  # the handle (and its trainer) let go
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
    worker = ThreadRun(model, _config(tmp_path), trainer_factory=_factory(_tiny_data()))
    assert isinstance(worker, RunHandle)
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

    worker = ThreadRun(nn.Linear(2, 2), _config(tmp_path), trainer_factory=broken)
    rec = _run(qtbot, worker)
    assert rec.finished == ["error"]
    assert len(rec.errors) == 1 and "Traceback" in rec.errors[0] and "cannot build the trainer" in rec.errors[0]


def test_stop_before_trainer_exists_is_honoured(qtbot, tmp_path):
    worker = ThreadRun(nn.Linear(32, 2), _config(tmp_path, epochs=100),
                            trainer_factory=_factory(_tiny_data()))
    worker.control.request_stop()
    rec = _run(qtbot, worker)
    assert rec.finished == ["stopped"]


def test_wait_for_returns_while_gui_thread_blocks(qtbot, tmp_path):
    """Stopping with the GUI thread blocked in wait must not deadlock (closeEvent path)."""
    worker = ThreadRun(nn.Linear(32, 2), _config(tmp_path, epochs=10_000), trainer_factory=_factory(_tiny_data()))
    controller = RunController()
    rec = Recorder(controller)
    controller.start(worker)
    qtbot.waitUntil(lambda: bool(rec.metrics), timeout=30_000)
    controller.stop()
    assert controller.wait(10_000)  # GUI thread blocked: quit() must still reach the thread
    assert live_threads() == []
    qtbot.waitUntil(lambda: rec.finished == ["stopped"] and rec.ended == 1, timeout=5000)


def test_the_panel_handles_every_event_type(qtbot):
    """One declaration of the events: the Training panel has a handler for each but ``Sink`` (the process run
    hands those to the window's callbacks itself), so a new event type without one fails here."""
    from tests.ui.helpers import RecordingPrompts
    from workbench.ui.session import Session
    from workbench.ui.train.panel import TrainingPanel

    panel = TrainingPanel(Session(), RecordingPrompts())
    qtbot.addWidget(panel)
    assert set(panel._handlers) == set(EVENT_TYPES.values()) - {Sink}
