"""The Runs dock's actions on real run folders: rename and delete (to the trash) with undo, open, resume."""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import Qt

from tests.core.train.damaged_runs import isolated_trash
from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer
from workbench.ui.runs.runs_panel import RunsPanel

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


class _StopAfterFirstEpoch(Callback):
    def on_epoch_end(self, trainer, metrics):
        trainer.request_stop()


def _run(root, name, stop_early=False):
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=2, lr=3e-3, run_dir=str(root / name),
                      tensorboard=False)
    reason = Trainer(DigitsCNN(), cfg, [_StopAfterFirstEpoch()] if stop_early else []).fit()
    assert reason == ("stopped" if stop_early else "completed")


@pytest.fixture
def trash(tmp_path, monkeypatch):
    """The freedesktop.org home trash, inside the test's folder (never the user's)."""
    return isolated_trash(monkeypatch, tmp_path)


def test_rename_and_delete_to_the_trash_are_undone_by_the_docks_undo(qtbot, tmp_path, trash):
    root = tmp_path / "runs"
    _run(root, "first")
    _run(root, "second")
    panel = RunsPanel(root)
    qtbot.addWidget(panel)
    panel.refresh()
    panel.select(["first"])
    panel.ask_name = lambda current: "baseline"
    qtbot.mouseClick(panel.rename_button, Qt.MouseButton.LeftButton)
    assert (root / "baseline" / "last.pt").is_file() and not (root / "first").exists()
    assert [r.name for r in panel.selected_runs()] == ["baseline"]
    assert not panel.rename_selected("second")  # taken: nothing is overwritten, and said
    assert "already exists" in panel.status.text() and (root / "baseline").is_dir()
    assert not panel.rename_selected("a/b") and "not a folder name" in panel.status.text()

    panel.select(["baseline", "second"])
    assert panel.delete_selected() == 2
    assert not (root / "baseline").exists() and not (root / "second").exists()
    assert sorted(p.name for p in (trash / "files").iterdir()) == ["baseline", "second"]
    assert panel.table_model.rowCount() == 0
    assert panel.undo_button.text() == "Undo delete 2 runs" and panel.undo_button.isEnabled()
    qtbot.mouseClick(panel.undo_button, Qt.MouseButton.LeftButton)  # both come back, from the trash
    assert (root / "baseline" / "metrics.csv").is_file() and (root / "second" / "last.pt").is_file()
    assert list((trash / "files").iterdir()) == [] and list((trash / "info").iterdir()) == []
    assert sorted(r.name for r in panel.table_model.runs) == ["baseline", "second"]
    assert panel.undo_button.text() == "Undo rename first to baseline"
    panel.undo_button.click()
    assert (root / "first").is_dir() and not (root / "baseline").exists()


def test_open_and_resume_a_run_from_the_dock(main_window, qtbot, tmp_path):
    window, panel = main_window
    root = tmp_path / "runs"
    _run(root, "halfway", stop_early=True)  # 1 of 2 epochs, last.pt with its optimizer state
    runs = window.runs_panel
    runs.root_edit.setText(str(root))
    runs.refresh()
    runs.select(["halfway"])
    assert runs.open_button.isEnabled() and runs.resume_button.isEnabled()
    qtbot.mouseClick(runs.open_button, Qt.MouseButton.LeftButton)
    assert str(window.session.checkpoint.path) == str(root / "halfway" / "last.pt")

    qtbot.mouseClick(runs.resume_button, Qt.MouseButton.LeftButton)
    assert panel.resume_check.isChecked() and panel.settings.run_dir_edit.text() == str(root / "halfway")
    assert panel.start()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=120_000)
    assert panel.last_reason() == "completed", window.prompts.errors
    rows = (root / "halfway" / "metrics.csv").read_text().splitlines()[1:]
    assert [r.split(",")[0] for r in rows] == ["0", "1"]  # the second epoch appended to the same run
    assert torch.load(root / "halfway" / "last.pt", weights_only=True)["epoch"] == 2
