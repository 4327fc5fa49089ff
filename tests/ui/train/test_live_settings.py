"""During a run the inspector shows what can change live (the LR, freezing) and what is fixed for the run."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QLabel, QLineEdit, QWidget

from workbench.ui.train.settings_form import FIXED_TIP

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


def test_a_run_marks_the_lr_live_and_the_other_sections_fixed_with_the_reason(window, qtbot, tmp_path):
    """Every setting was greyed out alike during a run, the live LR included in looks; nothing said why."""
    panel = window.training_panel
    settings = panel.settings
    panel.set_in_process(True, remember=False)
    settings.run_dir_edit.setText(str(tmp_path / "run"))
    settings.epochs_spin.setValue(50)
    window.show()
    sections = settings.sections
    tag = settings.findChild(QLabel, "lrLiveTag")
    note = panel.findChild(QLabel, "liveNote")
    assert tag is not None and note is not None
    assert not tag.isVisibleTo(panel) and not note.isVisibleTo(panel)  # idle: everything can change
    assert all(s.content.isEnabled() for s in sections.values())
    with qtbot.waitSignal(panel.runningChanged, timeout=10_000):
        panel.start_action.trigger()
    try:
        assert tag.isVisibleTo(panel) and "Live" in tag.toolTip()
        assert note.isVisibleTo(panel) and "learning rate" in note.text() and "stop" in note.text()
        line_edit = settings.lr_spin.findChild(QLineEdit)
        assert settings.lr_spin.isEnabled() and line_edit.isEnabled()  # typed, not only the arrows
        for name in ("data", "schedule", "transforms", "loader", "runFolder"):
            section = sections[name]
            assert not section.content.isEnabled(), name
            assert section.content.toolTip() == FIXED_TIP and FIXED_TIP in section.toggle.toolTip(), name
            assert section.toggle.isEnabled()  # the run's settings can still be read
        for name in ("datasetCombo", "epochsSpin", "deviceCombo", "runDirEdit"):
            assert not settings.findChild(QWidget, name).isEnabled(), name
        optimization = sections["optimization"]
        assert optimization.content.isEnabled() and "live" in optimization.toggle.toolTip()
        assert not settings.optimizer_combo.isEnabled()
    finally:
        with qtbot.waitSignal(panel.runningChanged, timeout=60_000):
            panel.stop_action.trigger()
    assert not tag.isVisibleTo(panel) and not note.isVisibleTo(panel)
    assert all(s.content.isEnabled() and not s.content.toolTip() for s in sections.values())
    assert FIXED_TIP not in sections["data"].toggle.toolTip()
    assert settings.findChild(QWidget, "datasetCombo").isEnabled()
