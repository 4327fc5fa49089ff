"""Empty CUDA cache sits in the run bar, in view during a run, where CUDA is (issue 39: on an H200 the
button was in the collapsed "Run options" section, so ``test_cuda_run_shows_memory`` failed)."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.ui.helpers import panel_host
from workbench.core.model.demo import DigitsCNN
from workbench.ui.train import panel as panel_module


def test_empty_cuda_cache_is_in_the_run_bar_in_view_when_cuda_is(qtbot, monkeypatch):
    monkeypatch.setattr(panel_module, "_cuda_available", lambda: True)
    win = panel_host(DigitsCNN(), input_shape=(1, 1, 8, 8))
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    panel = win.panel
    panel.run_options.set_expanded(False)
    panel.update_buttons()
    assert panel.cache_button.isVisible()
    assert panel.run_bar.isAncestorOf(panel.cache_button)
    emptied = []
    monkeypatch.setattr(panel.run, "empty_cuda_cache", lambda: emptied.append(1))
    qtbot.mouseClick(panel.cache_button, Qt.MouseButton.LeftButton)
    assert emptied == [1]
    monkeypatch.setattr(panel_module, "_cuda_available", lambda: False)
    panel.update_buttons()
    assert not panel.cache_button.isVisible()
