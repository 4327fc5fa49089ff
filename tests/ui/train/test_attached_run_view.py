"""A window attached to a run mid-way: the per-epoch metric plot fills while the run goes on (epochs ending faster
than the window's redraw passes left it empty until the end), the fit line does not say "estimating…" for ever, and
the end says where the attached run's folder is (never "no run folder was created")."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import QTimer
from torch import nn

import workbench
from tests.ui.helpers import RecordingPrompts
from workbench.ui.main_window import MainWindow
from workbench.ui.train.fit_line import FIT_ATTACHED
from workbench.ui.train.loss_plot import TrainingPlots
from workbench.ui.train.run_progress import RunProgress
from workbench.ui.train.run_view import RunView

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_dangling_qthreads")]

#: ms between the script's epochs: shorter than the window's epoch redraw pass (REDRAW_MS), as a small model's are
EPOCH_EVERY_MS = 120


def _acc_points(plots) -> np.ndarray:
    y = plots.acc_curve.getData()[1]
    return np.zeros(0) if y is None else np.asarray(y)[np.isfinite(y)]


def test_an_attached_running_script_shows_its_epoch_metric_its_fit_line_and_its_folder(qtbot, tmp_path):
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    att = workbench.attach(model, torch.optim.SGD(model.parameters(), lr=0.1), run_dir=tmp_path / "run",
                           name="epochs_script")
    for epoch in range(3):  # the epochs done before the window attaches: its history
        att.step(1.0 / (epoch + 1))
        att.epoch_end(val_loss=1.0 / (epoch + 1), val_acc=0.5 + 0.1 * epoch)
    att.flush()

    def next_epoch():
        att.step(0.2)
        att.epoch_end(val_loss=0.2, val_acc=0.9)
        att.flush()

    ticker = QTimer(interval=EPOCH_EVERY_MS)
    ticker.timeout.connect(next_epoch)
    window = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(window)
    window.show()
    panel = window.training_panel
    try:
        assert window.attach_to(att.address, att.token)
        ticker.start()
        assert panel.run_bar.fit_line.full_text == FIT_ATTACHED
        # the history's epochs and new ones, drawn while the script still trains (epochs keep ending meanwhile)
        qtbot.waitUntil(lambda: len(_acc_points(panel.plots)) >= 5, timeout=30_000)
        assert panel.is_running() and panel.run_bar.fit_line.full_text == FIT_ATTACHED
        assert list(_acc_points(panel.plots)[:4]) == pytest.approx([0.5, 0.6, 0.7, 0.9])
        assert panel.plots.shown_metric() == "val_acc"
        ticker.stop()
        att.close()
        qtbot.waitUntil(lambda: not panel.is_running(), timeout=30_000)
        assert window.statusBar().currentMessage() == f"Training completed - run folder {att.run_dir}"
    finally:
        ticker.stop()
        panel.shutdown(ask=False)
        att.close()


@pytest.fixture
def view(qtbot):
    plots, progress = TrainingPlots(), RunProgress()
    qtbot.addWidget(plots)
    qtbot.addWidget(progress)
    said: list[str] = []
    v = RunView(plots, progress, lambda text, ms: said.append(text))
    v.said = said
    yield v
    v.end()


def test_the_end_of_an_attached_remote_run_names_its_host_and_how_to_pull_it(view, tmp_path):
    view.begin(0, "cpu", "run")
    view.follow_attached("gpu-box", "mnist-1")
    view.finished("completed")
    assert view.said[-1] == ("Training completed - run folder run on gpu-box; copy it here with: "
                             "workbench pull --host gpu-box mnist-1")
    view.begin(0, "cpu", "/home/me/runs/x")  # a remote script (not a submitted run): no pull
    view.follow_attached("gpu-box")
    view.finished("stopped")
    assert view.said[-1] == "Training stopped - run folder /home/me/runs/x on gpu-box"
    view.begin(0, "cpu", str(tmp_path / "gone"))  # a run of the window's own that made no folder
    view.finished("crashed")
    assert view.said[-1] == "Training crashed - no run folder was created"


def test_epochs_ending_between_every_pass_still_draw_the_metric_plot(view):
    """One epoch's end per redraw pass: the loss plot was redrawn each time and the metric plot never."""
    plots = view.plots
    for epoch in range(4):
        plots.add_epoch(epoch + 1.0, 10.0 * (epoch + 1), val_loss=1.0 / (epoch + 1), val_acc=0.5 + 0.1 * epoch)
        plots.refresh_epochs(one_plot=True)
    # the two plots take turns: the metric plot drew all four epochs, the loss plot three (the 4th at its next turn)
    assert list(_acc_points(plots)) == pytest.approx([0.5, 0.6, 0.7, 0.8])
    assert len(plots.val_loss_curve.getData()[1]) == 3
    plots.refresh_epochs(one_plot=True)
    assert len(plots.val_loss_curve.getData()[1]) == 4
