"""The Runs dock: two real runs listed, overlaid, compared and exported."""

from __future__ import annotations

import csv

from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.loop import Trainer
from workbench.ui.runs.runs_panel import COLUMNS, RunsPanel


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
    assert panel.table_model.index(0, COLUMNS.index("state")).data() == "finished"
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


def test_long_curves_draw_their_view_from_the_pyramid_with_the_legend_and_the_envelope_kept(qtbot, tmp_path):
    import numpy as np

    from workbench.ui.runs.runs_panel import LOD_POINTS

    panel = RunsPanel(tmp_path)
    qtbot.addWidget(panel)
    panel.resize(1000, 700)
    panel.show()
    n = 4 * LOD_POINTS
    x = np.arange(n, dtype=np.float64)
    spiky = np.zeros(n)
    spiky[12_345] = 5.0  # one step's spike: must survive the decimation at every zoom that shows it
    panel.draw({"long": (x, spiky), "short": (x[:50], np.ones(50))})
    legend = [label.text for _, label in panel.plot.plotItem.legend.items]
    assert legend == ["long", "short"]
    vx, vy = panel.curves["long"].getData()
    assert len(vx) < n / 4 and vy.max() == 5.0  # decimated, the peak kept
    panel.plot.setXRange(12_000, 13_000, padding=0)
    zx, zy = panel.curves["long"].getData()
    inside = (zx >= 12_000) & (zx <= 13_000)
    assert inside.sum() >= 500 and zy[inside].max() == 5.0  # finer in the zoomed view, the peak still there
    assert zx[0] == 0 and zx[-1] == n - 1  # the ends are kept, so auto-range sees the whole curve
    panel.draw({"long": (x[:100], spiky[:100]), "short": (x[:50], np.ones(50))})  # long -> short: rebuilt
    assert len(panel.curves["long"].getData()[0]) == 100
    assert [label.text for _, label in panel.plot.plotItem.legend.items] == ["long", "short"]
