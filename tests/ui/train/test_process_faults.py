"""A training process that dies, hangs or raises never takes the window down.

Real spawned processes, the real panel, the demo digits; each test also checks
that no child process and no QThread is left (``no_dangling_qthreads``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import pytest
import torch
import torchvision
from PySide6.QtCore import Qt

from tests.image_folders import cut_short, jpeg_folder
from tests.ui.helpers import panel_host
from tests.ui.train.faulty import FaultyDigitsCNN
from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.ui.train import stop_timeout

RUN_TIMEOUT_MS = 90_000

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


def _host(qtbot, tmp_path, model, in_process=False):
    win = panel_host(model, input_shape=(1, 1, 8, 8))
    win.panel.set_in_process(in_process)
    win.panel.settings.run_dir_edit.setText(str(tmp_path / "run"))
    qtbot.addWidget(win)
    win.resize(1100, 750)
    win.show()
    return win


def _run_to_end(qtbot, panel, epochs=3):
    panel.settings.epochs_spin.setValue(epochs)
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("fault, exit_text, output", [
    ("abort", "signal 6, SIGABRT", "Fatal Python error: Aborted"),
    ("segfault", "signal 11, SIGSEGV", "Fatal Python error: Segmentation fault"),
    ("exit", "exit code 3", "forward 30: exit"),
])
def test_a_training_process_that_dies_leaves_the_window_usable(qtbot, tmp_path, fault, exit_text, output):
    """After the first epoch (23 steps) the 30th step kills the process."""
    model = FaultyDigitsCNN(fault, after=30)
    before = _weights(model)
    host = _host(qtbot, tmp_path, model)
    panel = host.panel
    _run_to_end(qtbot, panel)
    assert panel.last_reason() == "crashed"
    assert len(panel.errors) == 1
    assert f"training process ended unexpectedly ({exit_text})" in panel.errors[0]
    assert "Last output:" in panel.errors[0] and output in panel.errors[0]
    assert multiprocessing.active_children() == []
    # the window keeps the model as it was at the last sync (none: the weights it started from)
    after = _weights(host.model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    # the run folder keeps the checkpoint of the epoch that finished
    assert (Path(panel.run_dir()) / "last.pt").is_file()
    # the window stays usable: the same model trains again, in the window's process this time
    assert panel.start_button.isEnabled() and not panel.stop_button.isEnabled()
    host.model.fault = "none"
    panel.set_in_process(True)
    _run_to_end(qtbot, panel, epochs=1)
    assert panel.last_reason() == "completed"


def test_a_training_process_killed_from_outside_is_reported(qtbot, tmp_path):
    host = _host(qtbot, tmp_path, DigitsCNN())
    panel = host.panel
    panel.settings.epochs_spin.setValue(500)
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        panel.start()
    qtbot.waitUntil(lambda: len(panel.plots.steps) >= 3, timeout=RUN_TIMEOUT_MS)
    os.kill(panel.run.handle.process.pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert panel.last_reason() == "crashed"
    assert "training process ended unexpectedly (signal 9, SIGKILL)" in panel.errors[0]
    assert multiprocessing.active_children() == []


def test_a_step_that_never_returns_is_ended_after_stop(qtbot, tmp_path, monkeypatch):
    """Stop asks at the next step boundary; after the timeout the panel offers to end the process."""
    monkeypatch.setattr(stop_timeout, "STOP_FLOOR_MS", 1000)  # the default waits at least 10 s
    host = _host(qtbot, tmp_path, FaultyDigitsCNN("hang", after=30))
    panel = host.panel
    panel.settings.epochs_spin.setValue(50)
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        panel.start()
    # the 30th forward hangs (it says so in the process's output first)
    qtbot.waitUntil(lambda: "forward 30: hang" in panel.run.handle.process.log_tail(), timeout=RUN_TIMEOUT_MS)
    panel.stop()
    assert host.prompts.count("end_training_process") == 0  # not before the timeout
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert host.prompts.count("end_training_process") == 1
    assert panel.last_reason() == "ended" and panel.errors == []
    assert multiprocessing.active_children() == []
    assert panel.start_button.isEnabled()


def test_closing_during_a_step_that_never_returns_ends_the_process(qtbot, tmp_path):
    host = _host(qtbot, tmp_path, FaultyDigitsCNN("hang", after=30))
    panel = host.panel
    panel.settings.epochs_spin.setValue(50)
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        panel.start()
    qtbot.waitUntil(lambda: "forward 30: hang" in panel.run.handle.process.log_tail(), timeout=RUN_TIMEOUT_MS)
    assert panel.shutdown(ask=True, timeout_ms=1500)
    assert host.prompts.count("confirm_stop") == 1
    assert not panel.is_running() and multiprocessing.active_children() == []


@pytest.mark.parametrize("in_process", [False, True])
def test_an_exception_in_forward_shows_its_traceback(qtbot, tmp_path, in_process):
    host = _host(qtbot, tmp_path, FaultyDigitsCNN("raise", after=5), in_process=in_process)
    panel = host.panel
    _run_to_end(qtbot, panel)
    assert panel.last_reason() == "error"
    assert len(panel.errors) == 1
    assert "Traceback" in panel.errors[0] and "forward 5 failed on purpose" in panel.errors[0]
    assert "faulty.py" in panel.errors[0]  # the user's own line is in it
    assert panel.start_button.isEnabled() and multiprocessing.active_children() == []


def _jpeg_folder(root, truncated):
    jpeg_folder(root, per_class=6)
    cut_short(root / truncated)  # the header is intact: the pre-flight scan passes


@pytest.mark.parametrize("in_process", [False, True])
def test_an_exception_in_the_dataset_shows_its_traceback(qtbot, tmp_path, in_process):
    """A JPEG cut in half: its pixels cannot be decoded (caught by the pre-flight check, before any step)."""
    _jpeg_folder(tmp_path / "photos", truncated="train/bees/3.jpg")
    host = _host(qtbot, tmp_path, torchvision.models.resnet18(num_classes=2), in_process=in_process)
    panel = host.panel
    cfg = TrainConfig(data=DataConfig(dataset="imagefolder", root=str(tmp_path / "photos"), batch_size=4,
                                      num_workers=0), epochs=1, run_dir=str(tmp_path / "run"))
    panel.settings.set_config(cfg)
    _run_to_end(qtbot, panel, epochs=1)
    assert panel.last_reason() == "error", panel.errors
    assert "Traceback" in panel.errors[0] and "truncated" in panel.errors[0].lower()
    assert "train/bees/3.jpg" in panel.errors[0]  # the file is named
    assert panel.start_button.isEnabled() and multiprocessing.active_children() == []


@pytest.mark.parametrize("in_process", [False, True])
def test_skip_unreadable_images_names_them_and_the_input_meter_reads(qtbot, tmp_path, in_process):
    """The same cut JPEG with Skip unreadable images ticked: the run completes, the window names the
    file and its class folder, and the input-bound meter beside the progress bar shows a reading."""
    _jpeg_folder(tmp_path / "photos", truncated="train/bees/3.jpg")
    host = _host(qtbot, tmp_path, torchvision.models.resnet18(num_classes=2), in_process=in_process)
    panel = host.panel
    cfg = TrainConfig(data=DataConfig(dataset="imagefolder", root=str(tmp_path / "photos"), batch_size=4,
                                      skip_unreadable=True), epochs=1, run_dir=str(tmp_path / "run"))
    panel.settings.set_config(cfg)
    assert panel.settings.skip_check.isChecked()
    _run_to_end(qtbot, panel, epochs=1)
    assert panel.last_reason() == "completed", panel.errors
    assert len(panel.view.skipped_images) == 1
    assert "train/bees/3.jpg (class folder bees)" in panel.view.skipped_images[0]
    assert panel.input_label.text().startswith(("data wait", "input-bound"))
    assert multiprocessing.active_children() == []  # the persistent loader workers ended with the run
