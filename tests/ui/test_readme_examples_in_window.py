"""The three worked examples of the README's "Your own task", run from the window as a user runs them.

Each: the settings typed into the Training panel, the model made with File > New
(the Tabular MLP for the table, or a typed ``file.py:Class`` spec), Start, the
validation loss falls, the task's metrics reach the metric picker and
metrics.csv, and the run folder's run.toml replays the run bit-identically
(``workbench train run.toml``).
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
import torch
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit

from tests.ui.helpers import choose_item, type_text
from workbench.core.model.spec import ArchSpec
from workbench.core.train.launch.headless import train_from_toml
from workbench.ui.train.data_source import SPEC

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RUN_TIMEOUT_MS = 180_000


def _run(qtbot, win, panel) -> Path:
    with qtbot.waitSignal(panel.runningChanged, timeout=10_000):
        qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert win.prompts.errors == [] and panel.last_reason() == "completed"
    return Path(panel.run_dir())


def _rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _replays_bit_identically(run_dir: Path) -> None:
    lines: list[str] = []
    assert train_from_toml(run_dir / "run.toml", lines.append, trust=True) == 0, lines
    again = Path(next(x for x in lines if x.startswith("run folder: ")).removeprefix("run folder: "))
    first = torch.load(run_dir / "last.pt", weights_only=True)["model_state_dict"]
    second = torch.load(again / "last.pt", weights_only=True)["model_state_dict"]
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def test_tabular_regression_from_a_csv_with_default_settings(main_window, qtbot):
    """In a training process (the window's default), no code: R² above 0.4 with the default settings."""
    win, panel = main_window
    s = panel.settings
    choose_item(s.dataset_combo, "csv")
    type_text(qtbot, s.root_edit, str(EXAMPLES / "tabular" / "diabetes.csv"))
    type_text(qtbot, s.findChild(QLineEdit, "targetEdit"), "progression")
    win.new_table_model_action.trigger()  # File > New Tabular MLP for the table
    assert win.arch_spec == ArchSpec("tabular_mlp", {"in_features": 10, "num_outputs": 1})
    run_dir = _run(qtbot, win, panel)
    rows = _rows(run_dir)
    assert len(rows) == 5  # the default epochs
    assert float(rows[-1]["val_loss"]) < float(rows[0]["val_loss"])
    assert max(float(r["val_r2"]) for r in rows) > 0.4
    panel.plots.refresh(force=True)
    assert {"val_r2", "val_mae", "val_rmse"} <= set(panel.plots.metric_names())
    _replays_bit_identically(run_dir)


def _copy(name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(EXAMPLES / name, folder)
    return folder


def test_text_classifier_with_a_user_dataset_and_training_step(main_window, qtbot, tmp_path):
    win, panel = main_window
    folder = _copy("text", tmp_path)
    assert win.new_from_architecture(ArchSpec.parse(f"{folder}/text_task.py:TinyTextClassifier"))
    s = panel.settings
    panel.set_in_process(True, remember=False)
    choose_item(s.dataset_combo, SPEC)
    type_text(qtbot, s.findChild(QLineEdit, "datasetSpecEdit"), f"{folder}/text_task.py:make_dataset")
    type_text(qtbot, s.findChild(QLineEdit, "datasetKwargsEdit"), "n = 600")
    type_text(qtbot, s.task_fields.step_edit, f"{folder}/text_task.py:training_step")
    type_text(qtbot, s.lr_spin.lineEdit(), "0.01")
    s.epochs_spin.setValue(3)
    run_dir = _run(qtbot, win, panel)
    rows = _rows(run_dir)
    assert {"train_acc", "val_acc"} <= set(rows[0])
    assert float(rows[-1]["val_loss"]) < float(rows[0]["val_loss"])
    panel.plots.refresh(force=True)
    assert {"val_acc", "train_acc"} <= set(panel.plots.metric_names())
    _replays_bit_identically(run_dir)


def test_a_model_that_returns_its_own_loss(main_window, qtbot, tmp_path):
    win, panel = main_window
    folder = _copy("own_loss", tmp_path)
    assert win.new_from_architecture(ArchSpec.parse(f"{folder}/hf_style.py:TinyTagger"))
    s = panel.settings
    panel.set_in_process(True, remember=False)
    choose_item(s.dataset_combo, SPEC)
    type_text(qtbot, s.findChild(QLineEdit, "datasetSpecEdit"), f"{folder}/hf_style.py:make_dataset")
    choose_item(s.task_fields.kind_combo, "model_loss")
    type_text(qtbot, s.lr_spin.lineEdit(), "0.02")
    s.epochs_spin.setValue(2)
    run_dir = _run(qtbot, win, panel)
    rows = _rows(run_dir)
    assert float(rows[-1]["val_loss"]) < 0.5 * float(rows[0]["val_loss"])
    _replays_bit_identically(run_dir)
