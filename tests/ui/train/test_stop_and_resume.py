"""Stop writes ``last.pt`` at the step it stopped; Runs > Resume continues from exactly there.

Before, Stop left ``last.pt`` at the last epoch end (stopped at step 57, it held
step 46) and Resume restarted 30 steps back without a word. Driven as a user
does, in the real window, for a run in a training process and on a thread.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PySide6.QtCore import Qt

from tests.ui.helpers import RecordingPrompts

RUN_TIMEOUT_MS = 120_000
STEPS_PER_EPOCH = 23  # the demo digits, batch 64, 20 % validation

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


@pytest.fixture(params=["process", "thread"])
def window(qtbot, tmp_path, request):
    from workbench.ui.main_window import MainWindow

    win = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(win)
    panel = win.training_panel
    panel.set_in_process(request.param == "thread")
    panel.settings.run_dir_edit.setText(str(tmp_path / "run"))
    win.resize(1400, 900)
    win.show()
    yield win
    if panel.is_running():
        panel.shutdown(ask=False)


def _click(qtbot, button) -> None:
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def _steps(panel) -> list[int]:
    return [int(s) for s in panel.plots.steps["step"]]


def test_stop_saves_the_step_it_stopped_at_and_resume_continues_from_there(window, qtbot, tmp_path):
    panel = window.training_panel
    panel.settings.epochs_spin.setValue(3)
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        _click(qtbot, panel.start_button)
    qtbot.waitUntil(lambda: len(_steps(panel)) >= STEPS_PER_EPOCH + 3, timeout=RUN_TIMEOUT_MS)
    _click(qtbot, panel.stop_button)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert panel.last_reason() == "stopped" and window.prompts.errors == []
    stopped_at = _steps(panel)[-1]
    assert STEPS_PER_EPOCH < stopped_at < 3 * STEPS_PER_EPOCH
    run_dir = Path(panel.run_dir())
    last = torch.load(run_dir / "last.pt", weights_only=True)
    assert last["step"] == stopped_at  # not the last epoch end's step
    # mid-epoch as a rule; exactly at an epoch's end when the run outpaced the click (a busy machine)
    assert last["batch_in_epoch"] == stopped_at - last["epoch"] * STEPS_PER_EPOCH >= 0

    # Runs > Resume: open last.pt, resume into its folder, press Start
    assert window.resume_run(str(run_dir / "last.pt"), str(run_dir))
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        _click(qtbot, panel.start_button)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert panel.last_reason() == "completed" and window.prompts.errors == []
    resumed = _steps(panel)
    assert resumed[0] == stopped_at + 1 and resumed[-1] == 3 * STEPS_PER_EPOCH

    # every epoch once in the run's metrics.csv: nothing redone, nothing lost. (Bit-identity with a run never
    # stopped is tested in core, tests/core/train/trainer/test_stop_resume.py: here a straight run in the test's own
    # thread would train with whatever intra-op thread count earlier tests left, and differ in the last bits.)
    rows = (run_dir / "metrics.csv").read_text().splitlines()[1:]
    assert [(r.split(",")[0], r.split(",")[1]) for r in rows] == [(str(e), str((e + 1) * STEPS_PER_EPOCH))
                                                                  for e in range(3)]
    resumed_from = torch.load(run_dir / "last.pt", weights_only=True)
    assert resumed_from["step"] == 3 * STEPS_PER_EPOCH
    for name, value in resumed_from["model_state_dict"].items():
        assert torch.equal(window.model.state_dict()[name], value), name  # the window holds the final weights
