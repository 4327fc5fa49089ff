"""How the panel picks where a run trains: a process started ahead, a cold one, or this process."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from PySide6.QtCore import Qt

from tests.ui.helpers import panel_host
from workbench.core.model.demo import DigitsCNN
from workbench.ui.train.run_options import IN_PROCESS_KEY

RUN_TIMEOUT_MS = 90_000

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


def _host(qtbot, tmp_path, model):
    win = panel_host(model, input_shape=(1, 1, 8, 8))
    win.panel.settings.run_dir_edit.setText(str(tmp_path / "run"))
    win.panel.settings.epochs_spin.setValue(1)
    qtbot.addWidget(win)
    win.show()
    return win


def _train(qtbot, panel):
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)


def test_a_process_started_ahead_trains_the_next_run_and_another_is_started_after(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_START_AHEAD", "1")
    host = _host(qtbot, tmp_path, DigitsCNN())
    panel = host.panel
    spare = panel.run.launcher.spare
    assert spare is not None and spare.wait_ready()
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        panel.start()
    assert panel.run.kind == "process" and panel.run.handle.process is spare
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert panel.last_reason() == "completed" and panel.errors == []
    assert panel.run.launcher.spare is not None and panel.run.launcher.spare is not spare  # ready for the next Start
    assert panel.shutdown(ask=False)
    assert multiprocessing.active_children() == []


def test_a_cold_start_says_so(qtbot, tmp_path):
    host = _host(qtbot, tmp_path, DigitsCNN())
    panel = host.panel
    messages = []
    host.session.statusMessage.connect(lambda text, ms: messages.append(text))
    _train(qtbot, panel)
    assert any(m.startswith("Starting training process…") for m in messages), messages  # then its priority
    assert panel.last_reason() == "completed"


def test_a_model_that_cannot_cross_trains_in_this_process_and_the_status_bar_says_why(qtbot, tmp_path):
    model = DigitsCNN()
    model.scale = lambda x: x  # a lambda does not pickle
    host = _host(qtbot, tmp_path, model)
    panel = host.panel
    messages = []
    host.session.statusMessage.connect(lambda text, ms: messages.append(text))
    before = model.classifier.weight.detach().clone()
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        panel.start()
    assert panel.run.kind == "thread"
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert any(m.startswith("Training in the window's process: the model cannot be pickled") for m in messages)
    assert panel.last_reason() == "completed"
    assert not torch.equal(model.classifier.weight, before)  # trained in place


def test_the_in_process_setting_is_remembered(qtbot, tmp_path):
    host = _host(qtbot, tmp_path, DigitsCNN())
    panel = host.panel
    assert not panel.in_process()
    panel.in_process_check.setChecked(True)
    assert panel.in_process() and panel._qsettings.value(IN_PROCESS_KEY) in (True, "true")
    again = _host(qtbot, tmp_path, DigitsCNN())
    assert again.panel.in_process()
    _train(qtbot, again.panel)
    assert again.panel.last_reason() == "completed"
    assert multiprocessing.active_children() == []
