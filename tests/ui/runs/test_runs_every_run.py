"""The Runs dock says what really happened: every counted run has a row in view, an attached script's run is
listed as one, a run stopped before its first epoch draws, and the metric picker offers every metric the selected
runs have (a task's own ``val_top5``, an attached script's ``val_r2``, the per-step curves)."""

from __future__ import annotations

import pytest

from tests.core.train.runs.test_attached_runs import attached_run
from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.runs.index import STEP_PREFIX
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer
from workbench.ui.runs.runs_panel import COLUMNS, RunsPanel

pytestmark = [pytest.mark.usefixtures("no_dangling_qthreads"), pytest.mark.timeout(120)]


class StopAt(Callback):
    def on_step_end(self, trainer, metrics):
        if metrics["step"] == 5:
            trainer.request_stop()


def _run(root, name, epochs, callbacks=()):
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=epochs, lr=1e-3,
                      run_dir=str(root / name), tensorboard=False)
    return Trainer(DigitsCNN(), cfg, list(callbacks)).fit()


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "runs"
    assert _run(root, "a-done", 1) == "completed"
    assert _run(root, "b-early", 2, [StopAt()]) == "stopped"
    attached_run(root / "c-script", epochs=2)
    return root


def _cells(panel, row):
    return {c: panel.table_model.index(row, i).data() for i, c in enumerate(COLUMNS)}


def test_every_counted_run_has_a_row_in_view_at_the_docks_size(qtbot, root):
    panel = RunsPanel(root)
    qtbot.addWidget(panel)
    panel.resize(560, 330)  # the Runs tab under the tree at 1280x800
    panel.show()
    panel.refresh()
    qtbot.wait(20)
    assert panel.status.text() == "3 run(s)" and panel.table_model.rowCount() == 3
    view = panel.table.viewport().rect()
    for row in range(3):
        rect = panel.table.visualRect(panel.table_model.index(row, 0))
        assert view.contains(rect), (row, rect, view)  # seen without scrolling
    script = _cells(panel, 2)
    assert script["name"] == "c-script" and script["state"] == "finished" and script["epochs"] == "2"
    assert "attached script" in script["dataset"] and script["steps"] == "6"
    early = _cells(panel, 1)
    assert (early["epochs"], early["steps"], early["state"]) == ("0/2", "5", "stopped")


def test_the_picker_offers_the_union_of_the_selected_runs_metrics_and_every_run_draws(qtbot, root):
    panel = RunsPanel(root)
    qtbot.addWidget(panel)
    panel.refresh()
    panel.select(["b-early"])  # no epoch ended: the per-step loss is what it has, and it is drawn
    assert panel.metric_combo.currentData() == f"{STEP_PREFIX}train_loss"
    assert set(panel.curves) == {"b-early"} and len(panel.curves["b-early"].getData()[0]) == 5
    panel.select(["a-done", "b-early", "c-script"])
    offered = [panel.metric_combo.itemData(i) for i in range(panel.metric_combo.count())]
    assert {"val_loss", "val_top5", "val_r2", f"{STEP_PREFIX}train_loss", f"{STEP_PREFIX}mae"} <= set(offered)
    assert panel.metric_combo.currentData() == f"{STEP_PREFIX}train_loss"  # kept: every run has it
    assert set(panel.curves) == {"a-done", "b-early", "c-script"}
    panel.metric_combo.setCurrentIndex(panel.metric_combo.findData("val_r2"))
    assert set(panel.curves) == {"c-script"}
    assert "a-done: no val_r2" in panel.diff.toPlainText()
    panel.metric_combo.setCurrentIndex(panel.metric_combo.findData("val_top5"))
    assert set(panel.curves) == {"a-done"} and panel.plot.getPlotItem().getAxis("left").labelText == "val_top5"
