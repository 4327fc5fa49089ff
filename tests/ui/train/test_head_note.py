"""A head that does not match the data's classes is said beside Start, with "Replace head…" (the count filled in).

The issue: a 1,000-output ``fc`` trained against a 10-class ImageFolder started with no warning
(Find LR ran at loss ln 1000). Core counts the classes (the ImageFolder's class folders) and the
head's outputs; the Training dock shows the note before Start.
"""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.image_folders import jpeg_folder
from tests.ui.helpers import type_text


def test_a_1000_output_head_on_10_classes_is_said_before_start(main_window, qtbot, tmp_path):
    win, panel = main_window
    note = panel.head_note
    qtbot.waitUntil(lambda: not note.timer.isActive(), timeout=5000)
    assert not note.isVisible()  # the demo: 10 outputs, digits: 10 classes
    root = jpeg_folder(tmp_path / "photos", per_class=1, size=(8, 8), classes=tuple(f"c{i}" for i in range(10)))
    s = panel.settings
    s.dataset_combo.setCurrentIndex(s.dataset_combo.findData("imagefolder"))
    type_text(qtbot, s.root_edit, str(root), enter=True)
    assert win.replace_head("classifier", 1000)
    qtbot.waitUntil(note.isVisible, timeout=5000)
    assert "classifier has 1,000 outputs but the data has 10 classes" in note.label.text()
    assert note.button.text() == "Replace head…" and note.button.isVisible()
    win.prompts.answers["integer"] = lambda title, label, value: value  # accept what is filled in
    qtbot.mouseClick(note.button, Qt.MouseButton.LeftButton)
    assert [a[1:] for a in win.prompts.asked if a[0] == "integer"] == [
        ("Replace head", "Number of outputs of the new classifier:", 10)]
    assert win.model.classifier.out_features == 10
    qtbot.waitUntil(lambda: not note.isVisible(), timeout=5000)
    win.undo_stack.undo()  # the old head back: the note again
    qtbot.waitUntil(note.isVisible, timeout=5000)
    s.dataset_combo.setCurrentIndex(s.dataset_combo.findData("fake"))  # fake data: its class count setting
    s.classes_spin.setValue(1000)
    qtbot.waitUntil(lambda: not note.isVisible(), timeout=5000)
