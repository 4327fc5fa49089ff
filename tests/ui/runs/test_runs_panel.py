"""The Runs dock: two real runs listed, overlaid, compared and exported."""

from __future__ import annotations

import csv

from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.loop import Trainer
from workbench.ui.runs.runs_panel import RunsPanel


def _run(root, name, lr):
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=2, lr=lr, run_dir=str(root / name),
                      tensorboard=False)
    assert Trainer(DigitsCNN(), cfg).fit() == "completed"


def test_two_runs_overlay_their_curves_show_their_differences_and_export(qtbot, tmp_path):
    root = tmp_path / "runs"
    _run(root, "lr-1e-3", 1e-3)
    _run(root, "lr-1e-2", 1e-2)
    panel = RunsPanel(root)
    qtbot.addWidget(panel)
    panel.refresh()
    assert [r.name for r in panel.table_model.runs] == ["lr-1e-3", "lr-1e-2"]
    assert panel.table_model.index(0, 7).data() == "finished"
    panel.select(["lr-1e-3", "lr-1e-2"])
    assert set(panel.curves) == {"lr-1e-3", "lr-1e-2"}
    x, y = panel.curves["lr-1e-2"].getData()
    assert list(x) == [23, 46] and len(y) == 2  # val loss at each epoch's last step
    assert panel.diff.toPlainText() == "lr: lr-1e-3=0.001, lr-1e-2=0.01"
    panel.x_combo.setCurrentIndex(panel.x_combo.findData("epoch"))
    assert list(panel.curves["lr-1e-3"].getData()[0]) == [1, 2]
    rows = list(csv.DictReader(open(panel.export_csv(tmp_path / "runs.csv"))))
    assert {r["run"] for r in rows} == {"lr-1e-3", "lr-1e-2"}
    assert {"run": "lr-1e-2", "step": "46", "epoch": "1", "metric": "val_loss"}.items() <= next(
        r for r in rows if r["run"] == "lr-1e-2" and r["metric"] == "val_loss" and r["step"] == "46").items()


def test_a_missing_runs_folder_is_said_not_raised(qtbot, tmp_path):
    panel = RunsPanel(tmp_path / "none")
    qtbot.addWidget(panel)
    panel.refresh()
    assert panel.table_model.rowCount() == 0 and "no such runs folder" in panel.status.text()
