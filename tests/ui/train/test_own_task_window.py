"""Your own task from the window (issue 26): the Task section, CSV and spec datasets, code read from a file,
the metric picker of the validation plot, and a regression run on scikit-learn's diabetes CSV."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLabel, QLineEdit

from tests.ui.helpers import RecordingPrompts, choose_item, panel_host, type_text
from workbench.core.model.spec import ArchSpec
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.tabular_mlp import tabular_mlp
from workbench.core.train.config import TaskConfig, TrainConfig
from workbench.ui.train.code_confirm import confirm_file_code
from workbench.ui.train.settings_form import TrainingSettings

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


@pytest.fixture
def settings(qtbot):
    s = TrainingSettings()
    qtbot.addWidget(s)
    s.resize(360, 1400)
    s.show()
    return s


def test_the_task_section_round_trips_every_task_field(settings, qtbot):
    section = settings.sections["task"]
    qtbot.mouseClick(section.toggle, Qt.MouseButton.LeftButton)
    assert section.is_expanded()
    f = settings.task_fields
    for name in ("taskKindCombo", "stepEdit", "validationStepEdit", "lossSpecEdit", "metricsEdit",
                 "monitorCombo", "modeCombo"):
        assert settings.findChild(object, name) is not None, name
    choose_item(f.kind_combo, "regression")
    type_text(qtbot, f.step_edit, "my_task.py:training_step")
    type_text(qtbot, f.validation_step_edit, "my_task.py:validation_step")
    type_text(qtbot, f.loss_edit, "huber")
    type_text(qtbot, f.metrics_edit, "mae, r2, my_metrics.py:within_10")
    type_text(qtbot, f.monitor_combo.lineEdit(), "val_within_10")
    choose_item(f.mode_combo, "max")
    cfg = settings.config()
    assert cfg.task == TaskConfig(kind="regression", step="my_task.py:training_step",
                                  validation_step="my_task.py:validation_step", loss="huber",
                                  metrics=["mae", "r2", "my_metrics.py:within_10"], monitor="val_within_10",
                                  mode="max")
    assert TrainConfig.from_toml(cfg.to_toml()).task == cfg.task  # and through run.toml

    other = TaskConfig(kind="model_loss", step="", validation_step="pkg.steps:val", loss="", metrics=["f1"],
                       monitor="val_f1", mode="max", files={"/abs/steps.py": "ab" * 32})
    settings.set_config(TrainConfig(task=other))
    assert settings.config().task == other  # files (written by a run) kept through the form
    settings.set_config(TrainConfig())
    assert settings.config().task == TaskConfig()


def test_choosing_a_monitor_from_the_list_sets_its_direction(settings, qtbot):
    f = settings.task_fields
    f.monitor_combo.lineEdit().selectAll()
    qtbot.keyClicks(f.monitor_combo.lineEdit(), "val_r2")
    qtbot.keyClick(f.monitor_combo.lineEdit(), Qt.Key.Key_Return)
    assert settings.config().task.monitor == "val_r2" and settings.config().task.mode == "max"
    f.monitor_combo.lineEdit().selectAll()
    qtbot.keyClicks(f.monitor_combo.lineEdit(), "val_mae")
    qtbot.keyClick(f.monitor_combo.lineEdit(), Qt.Key.Key_Return)
    assert settings.config().task.mode == "min"


def test_csv_table_shows_its_columns_and_hides_the_image_transforms(settings, qtbot):
    target = settings.findChild(QLineEdit, "targetEdit")
    features = settings.findChild(QLineEdit, "featuresEdit")
    assert not target.isVisibleTo(settings)  # digits: no table columns
    assert settings.sections["transforms"].isVisibleTo(settings)
    choose_item(settings.dataset_combo, "csv")
    assert target.isVisibleTo(settings) and features.isVisibleTo(settings)
    assert settings.root_edit.isVisibleTo(settings) and "table file" in settings.root_edit.placeholderText()
    assert not settings.sections["transforms"].isVisibleTo(settings)
    assert not settings.fake_shape_edit.isVisibleTo(settings)
    type_text(qtbot, settings.root_edit, "/data/diabetes.csv")
    type_text(qtbot, target, "progression")
    type_text(qtbot, features, "age, bmi")
    d = settings.config().data
    assert (d.dataset, d.root, d.target, d.features) == ("csv", "/data/diabetes.csv", ["progression"], ["age", "bmi"])
    choose_item(settings.dataset_combo, "fake")
    assert settings.fake_shape_edit.isVisibleTo(settings) and not target.isVisibleTo(settings)
    assert settings.sections["transforms"].isVisibleTo(settings)


def test_a_typed_spec_is_the_dataset_with_its_arguments(settings, qtbot):
    from workbench.ui.train.data_source import SPEC

    spec_edit = settings.findChild(QLineEdit, "datasetSpecEdit")
    kwargs_edit = settings.findChild(QLineEdit, "datasetKwargsEdit")
    assert not spec_edit.isVisibleTo(settings)
    choose_item(settings.dataset_combo, SPEC)
    assert spec_edit.isVisibleTo(settings) and kwargs_edit.isVisibleTo(settings)
    assert not settings.sections["transforms"].isVisibleTo(settings)
    with pytest.raises(ValueError, match="make_dataset"):
        settings.config()  # no spec typed yet: said, with an example
    type_text(qtbot, spec_edit, "my_data.py:make_dataset")
    type_text(qtbot, kwargs_edit, 'n = 100, vocab = 50, name = "train"')
    cfg = settings.config()
    assert cfg.data.dataset == "my_data.py:make_dataset"
    assert cfg.data.kwargs == {"n": 100, "vocab": 50, "name": "train"}
    assert settings.code_to_confirm(cfg) is None  # typed here: the user's own decision
    type_text(qtbot, kwargs_edit, "n = ")
    with pytest.raises(ValueError, match="TOML"):
        settings.config()
    settings.set_config(TrainConfig.from_dict({"data": {"dataset": "pkg.data:make", "kwargs": {"k": [1, 2]}}}))
    assert settings.dataset_combo.currentData() == SPEC and spec_edit.text() == "pkg.data:make"
    assert settings.config().data.kwargs == {"k": [1, 2]}


def test_code_named_by_a_file_waits_for_the_users_yes(qtbot, tmp_path):
    host = panel_host(DigitsCNN())
    qtbot.addWidget(host)
    panel, settings = host.panel, host.panel.settings
    settings.run_dir_edit.setText(str(tmp_path / "run"))
    host.show()
    origin = str(tmp_path / "old" / "run.toml")
    cfg = TrainConfig.from_dict({"task": {"step": "steps.py:training_step", "metrics": ["accuracy"]}})
    settings.set_config(cfg, origin=origin)
    note = settings.findChild(QLabel, "codeSpecNote")
    assert note.isVisibleTo(settings) and "steps.py:training_step" in note.text() and "Start asks" in note.text()
    assert settings.sections["task"].is_expanded()
    assert not panel.start()  # trust: no (the recording prompts' default)
    assert host.prompts.count("trust") == 1 and not panel.is_running()
    err = host.prompts.asked[-1][1]
    # made absolute against the run file's folder when shown, as workbench train resolves it
    assert err.globals == [f"{tmp_path / 'old' / 'steps.py'}:training_step"] and origin in str(err)

    yes = RecordingPrompts(trust=True)
    assert confirm_file_code(settings, settings.config(), yes) is None
    assert yes.count("trust") == 1 and not note.isVisibleTo(settings)
    assert settings.code_to_confirm(settings.config()) is None  # asked once

    settings.set_config(cfg, origin=origin)
    type_text(qtbot, settings.task_fields.step_edit, "mine.py:step")  # the user's own now
    assert settings.code_to_confirm(settings.config()) is None


# ------------------------------------------------------------------ the metric picker
@pytest.fixture
def plots(qtbot):
    from workbench.ui.train.loss_plot import TrainingPlots

    w = TrainingPlots()
    qtbot.addWidget(w)
    w.resize(700, 430)
    w.show()
    return w


def _epoch(epoch, val_loss, best, **metrics):
    return {"epoch": epoch, "step": 10 * (epoch + 1), "train_loss": val_loss + 0.1, "val_loss": val_loss,
            "val_acc": math.nan, "lr": 1e-3, "time": float(epoch + 1), "best": best, **metrics}


def test_the_metric_picker_lists_every_epoch_metric_and_plots_the_chosen(plots, qtbot, tmp_path):
    from workbench.ui.train.plot_feed import PlotFeed

    feed = PlotFeed(plots)
    combo = plots.findChild(QComboBox, "valMetricCombo")
    assert combo is not None and plots.shown_metric() == "val_acc"
    feed.add_epoch(_epoch(0, 0.9, True, val_mae=0.7, val_rmse=0.9, val_r2=0.1))
    # a monitor of max R²: epoch 2 is not the best although its loss is lower
    feed.add_epoch(_epoch(1, 0.8, False, val_mae=0.6, val_rmse=0.8, val_r2=0.05))
    plots.refresh(force=True)
    assert plots.metric_names() == ["val_mae", "val_rmse", "val_r2"]  # val_acc: NaN in a regression run
    assert combo.currentText() == "val_r2" and plots.shown_metric() == "val_r2"
    assert list(plots.acc_curve.getData()[1]) == pytest.approx([0.1, 0.05])
    assert plots.accuracy_plot.getPlotItem().getAxis("left").labelText == "val r2"
    assert plots.best_epoch() == 0 and plots.best_line.value() == 10.0
    assert plots.best_line.label.toPlainText() == "best: epoch 1"

    feed.add_epoch(_epoch(2, 0.7, True, val_mae=0.5, val_rmse=0.7, val_r2=0.4, train_tokens=321.0))
    plots.refresh(force=True)
    assert "train_tokens" in plots.metric_names()  # a new key appears as it arrives
    assert plots.best_line.label.toPlainText() == "best: epoch 3"
    choose_item(combo, "val_mae")  # the user's pick
    assert plots.shown_metric() == "val_mae"
    assert list(plots.acc_curve.getData()[1]) == pytest.approx([0.7, 0.6, 0.5])
    lo, hi = plots.accuracy_plot.getPlotItem().getViewBox().viewRange()[1]
    assert lo < 0.5 and hi > 0.7 and hi < 1.0  # fitted to the metric, not 0..1
    feed.add_epoch(_epoch(3, 0.6, True, val_mae=0.4, val_rmse=0.6, val_r2=0.5, train_tokens=300.0))
    assert plots.shown_metric() == "val_mae"  # kept

    import csv

    rows = list(csv.DictReader(open(plots.export_csv(tmp_path / "curves.csv"))))
    epochs = [r for r in rows if r["kind"] == "epoch"]
    assert float(epochs[-1]["val_r2"]) == 0.5 and float(epochs[2]["train_tokens"]) == 321.0
    assert epochs[0]["train_tokens"] == ""


def test_a_classification_run_shows_accuracy_first(plots):
    from workbench.ui.train.plot_feed import PlotFeed

    feed = PlotFeed(plots)
    feed.add_epoch({**_epoch(0, 1.0, True), "val_acc": 0.6, "val_top5": 0.9})
    plots.refresh(force=True)
    assert plots.shown_metric() == "val_acc" and plots.metric_names() == ["val_acc", "val_top5"]
    lo, hi = plots.accuracy_plot.getPlotItem().getViewBox().viewRange()[1]
    assert lo <= 0.0 and hi >= 1.0


# ------------------------------------------------------------------ a real run from the window
def _diabetes_csv(path: Path) -> Path:
    import sklearn

    data = Path(sklearn.__file__).parent / "datasets" / "data"
    x = np.loadtxt(gzip.open(data / "diabetes_data_raw.csv.gz"))
    y = np.loadtxt(gzip.open(data / "diabetes_target.csv.gz"))
    names = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]
    lines = [",".join([*names, "progression"])]
    lines += [",".join(f"{v:g}" for v in [*row, t]) for row, t in zip(x, y)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_csv_regression_run_from_the_window_plots_val_r2(qtbot, tmp_path):
    table = _diabetes_csv(tmp_path / "diabetes.csv")
    model = tabular_mlp(in_features=10, num_outputs=1)
    host = panel_host(model, ArchSpec("tabular_mlp", {"in_features": 10, "num_outputs": 1}), None, (1, 10))
    qtbot.addWidget(host)
    panel, settings = host.panel, host.panel.settings
    panel.set_in_process(True, remember=False)
    settings.run_dir_edit.setText(str(tmp_path / "run"))
    host.show()
    choose_item(settings.dataset_combo, "csv")
    type_text(qtbot, settings.root_edit, str(table))
    type_text(qtbot, settings.findChild(QLineEdit, "targetEdit"), "progression")
    choose_item(settings.task_fields.kind_combo, "regression")
    settings.epochs_spin.setValue(3)
    with qtbot.waitSignal(panel.runningChanged, timeout=10_000):
        assert panel.start_action.isEnabled()
        panel.start_action.trigger()
    if panel.is_running():
        qtbot.waitUntil(lambda: not panel.is_running(), timeout=120_000)
    assert not host.prompts.errors, host.prompts.errors
    assert panel.last_reason() == "completed"
    plots = panel.plots
    plots.refresh(force=True)
    assert "val_r2" in plots.metric_names() and plots.shown_metric() == "val_r2"
    y = plots.acc_curve.getData()[1]
    assert len(y) == 3 and np.isfinite(y).all()
    header = (Path(panel.run_dir()) / "metrics.csv").read_text().splitlines()[0]
    assert "val_r2" in header


def test_the_small_plots_top_tick_labels_are_whole(plots, qtbot):
    """At 1280 x 800 the top tick label of the accuracy ("1.0") and LR ("0.0015") plots was cut in half."""
    from PySide6.QtGui import QFontMetricsF

    qtbot.waitExposed(plots)
    qtbot.wait(30)
    for plot in (plots.accuracy_plot, plots.lr_plot):
        axis = plot.getPlotItem().getAxis("left")
        half_label = QFontMetricsF(axis.style.get("tickFont") or plot.font()).height() / 2
        view_top = plot.getPlotItem().getViewBox().sceneBoundingRect().top()
        assert view_top >= half_label, plot.objectName()
