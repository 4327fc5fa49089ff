"""Image classification from the window, no code (issue 40): a ViT folder with its image processor proposes
the task and its processor; Start adds the head sized to the ImageFolder's classes and the model learns them."""

from __future__ import annotations

import csv

import pytest

from tests.core.train.image_models import COLOURS, colour_folder, tiny_vit_folder

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


@pytest.mark.slow
def test_a_vit_folder_is_fine_tuned_on_an_image_folder_with_its_processor(window, qtbot, tmp_path):
    folder = tiny_vit_folder(tmp_path / "vit")
    root = colour_folder(tmp_path / "colours")
    assert window.open_path(folder), window.errors
    panel = window.training_panel
    form = panel.settings
    assert form.task_fields.kind_combo.currentData() == "image_classification"
    assert form.dataset_combo.currentData() == "imagefolder"
    assert form.source_fields.processor_edit.text() == str(folder)
    assert form._data_form.isRowVisible(form.source_fields.processor_edit)
    assert "Image classification" in window.statusBar().currentMessage()
    form.root_edit.setText(str(root))
    form.batch_spin.setValue(8)
    form.epochs_spin.setValue(1)
    form.lr_spin.setValue(2e-3)
    form.run_dir_edit.setText(str(tmp_path / "run"))
    with qtbot.waitSignal(panel.runningChanged, timeout=60_000):
        assert panel.start(), window.errors
    model = window.session.model
    assert type(model).__name__ == "ViTForImageClassification"
    assert sorted(model.config.id2label.values()) == sorted(COLOURS)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=150_000)
    assert panel.last_reason() == "completed", window.errors
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert float(rows[-1]["val_acc"]) >= 0.8, rows  # chance 0.33
    assert (tmp_path / "run" / "class_report.json").is_file()


def test_a_vision_folder_without_an_image_processor_leaves_the_image_settings_alone(window, tmp_path):
    folder = tiny_vit_folder(tmp_path / "vit")
    (folder / "preprocessor_config.json").unlink()
    form = window.training_panel.settings
    before = form.task_fields.kind_combo.currentData()
    assert window.open_path(folder), window.errors
    assert form.task_fields.kind_combo.currentData() == before
    assert form.source_fields.processor_edit.text() == ""
