"""The status bar: the file label leaves the messages their room, and a message cut short is whole in a tooltip."""

from __future__ import annotations

from PySide6.QtCore import QPoint

from workbench.ui.status_line import FILE_LABEL_WIDTH, format_name, human_source


def test_formats_are_named_as_people_name_them():
    assert format_name("hf_folder") == "Hugging Face folder"
    assert format_name("something_new") == "something_new"
    assert (human_source("model · hf_folder · bert (detected)", "hf_folder")
            == "model · Hugging Face folder · bert (detected)")
    assert human_source("hf_folder · hf_folder", "hf_folder") == "hf_folder · Hugging Face folder"  # the format only
    assert human_source("demo", None) == "demo"


def test_a_long_file_name_is_elided_and_a_long_message_is_whole_in_the_tooltip(shown, qtbot):
    win = shown
    bar = win.statusBar()
    name = "a_checkpoint_of_a_rather_long_experiment_name_epoch_0042_val_loss_0.1234.pt · training checkpoint"
    win.status_file.setText(name)
    qtbot.waitUntil(lambda: win.status_file.width() == FILE_LABEL_WIDTH)
    assert win.status_file.text() == win.status_file.toolTip() == name  # whole where it can be read
    shown_text = win.status_file.shown_text()
    assert "…" in shown_text and shown_text.endswith("checkpoint") and shown_text.startswith("a_check")
    message = ("Text classification (BertModel): choose a text file under Root with a text and a label column; "
               "BertModel has no head: training adds a classification head (Edit > Change architecture… to pick "
               "another)")
    bar.showMessage(message, 10000)
    assert bar.toolTip() == message
    # the permanent labels leave the message most of the bar
    left_of_labels = win.status_file.mapTo(bar, QPoint(0, 0)).x()
    assert left_of_labels >= 0.45 * bar.width(), (left_of_labels, bar.width())
    bar.clearMessage()
    assert bar.toolTip() == ""
