"""The window attached to a script shows the script's real state: a pause it finds, the notices the script sends
(a failed write, a lapsed pause lease); Detach leaves no "attached" label; the dialog can take over steering."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import workbench
from tests.ui.helpers import RecordingPrompts
from workbench.ui.attach_dialog import AttachDialog
from workbench.ui.main_window import MainWindow

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_dangling_qthreads")]


def test_a_paused_script_shows_paused_its_notices_show_and_detach_clears_attached(qtbot, tmp_path):
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    att = workbench.attach(model, torch.optim.SGD(model.parameters(), lr=0.1), run_dir=tmp_path / "run",
                           name="state_script")
    att.step(1.0)
    att.flush()
    att.control.pause()  # as a window that paused it and detached left it
    window = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(window)
    window.show()
    panel = window.training_panel
    try:
        assert window.attach_to(att.address, att.token)
        assert panel.is_paused() and "attached" in window.windowTitle()
        qtbot.waitUntil(lambda: "paused" in panel.run_progress.bar.format(), timeout=30_000)
        assert "state_script is paused at step 1" in window.statusBar().currentMessage()

        att.writes.failed(att.run_dir / "edits.jsonl", OSError(28, "No space left on device"))
        qtbot.waitUntil(lambda: "edits.jsonl not written: No space left on device"
                        in window.statusBar().currentMessage(), timeout=30_000)
        att._lease_lapsed()  # the lease of a window gone to sleep lapsed: the script resumed
        qtbot.waitUntil(lambda: not panel.is_paused(), timeout=30_000)
        assert "pause lease lapsed after 120 s: resumed" in window.statusBar().currentMessage()

        assert window.detach()
        qtbot.waitUntil(lambda: not panel.is_running(), timeout=30_000)
        assert "attached" not in window.windowTitle().replace("detached", "")
        assert "attached" not in window.status_file.text().replace("detached", "")
        assert "detached: the script trains on" in window.windowTitle()
        assert not panel.inspector.live_note.isVisible()
    finally:
        panel.shutdown(ask=False)
        att.close()


def test_the_dialog_can_take_over_steering(qtbot):
    dialog = AttachDialog()
    qtbot.addWidget(dialog)
    dialog.address.setText("127.0.0.1:5678")
    dialog.token.setText("secret")
    assert dialog.target() == ("127.0.0.1:5678", "secret")
    dialog.take.setChecked(True)
    assert dialog.target() == ("127.0.0.1:5678", "secret", "take")
