"""Training › Run options › Process priority: the training process runs at the priority chosen, and says so.

It ran at nice +10 whatever the machine, unsaid: with anything else busy the same loop ran 5-15x slower.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

from tests.ui.helpers import panel_host
from workbench.core.model.demo import DigitsCNN
from workbench.core.train.launch.priority import LOWER_NICE, default_priority
from workbench.ui.train.run_options import PRIORITY_KEY

RUN_TIMEOUT_MS = 90_000

pytestmark = [pytest.mark.usefixtures("no_dangling_qthreads"),
              pytest.mark.skipif(not hasattr(os, "getpriority"), reason="no nice values on this system")]


def _host(qtbot, tmp_path):
    win = panel_host(DigitsCNN(), input_shape=(1, 1, 8, 8))
    win.panel.settings.run_dir_edit.setText(str(tmp_path / "run"))
    win.panel.settings.epochs_spin.setValue(1)
    qtbot.addWidget(win)
    win.show()
    return win


def test_the_training_process_runs_at_the_priority_chosen_and_the_status_bar_says_it(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_START_AHEAD", "1")
    host = _host(qtbot, tmp_path)
    panel = host.panel
    options = panel.run_options
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    # nothing chosen yet: the box shows what this machine and run call for
    assert options.chosen_priority() is None
    assert options.priority_combo.currentData() == default_priority(panel.settings.config())
    messages: list[str] = []
    host.session.statusMessage.connect(lambda text, ms: messages.append(text))
    options.set_priority("normal")  # what picking it in the box does
    assert panel._qsettings.value(PRIORITY_KEY) == "normal"
    spare = panel.run.launcher.spare
    assert spare is not None and spare.wait_ready(), spare.log_tail() if spare else "no process started ahead"
    assert os.getpriority(os.PRIO_PROCESS, spare.pid) == mine  # the process started ahead is at it...
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        assert panel.start()
    process = panel.run.handle.process
    assert panel.run.kind == "process" and process is spare  # ...and trains the run: no cold start
    assert os.getpriority(os.PRIO_PROCESS, process.pid) == mine
    assert any("Training process at normal priority" in m for m in messages), messages
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert panel.last_reason() == "completed" and panel.errors == []
    # lower: the process started ahead for the next run is replaced by one at nice +10
    options.set_priority("lower")
    spare = panel.run.launcher.spare
    assert spare is not None and spare.wait_ready(), spare.log_tail() if spare else "no process started ahead"
    assert os.getpriority(os.PRIO_PROCESS, spare.pid) == min(19, mine + LOWER_NICE)
    assert options.chosen_priority() == "lower"
    assert panel.shutdown(ask=False)
    assert multiprocessing.active_children() == []
