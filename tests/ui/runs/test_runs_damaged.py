"""The Runs dock on damaged run folders, escaped names, live runs and a long metrics.csv (real files on disk)."""

from __future__ import annotations

import threading
import time

import pyqtgraph as pg
import pytest
from PySide6.QtCore import Qt, QTimer

from tests.core.train.damaged_runs import (
    DAMAGES,
    INFO,
    damaged_root,
    good_run,
    isolated_trash,
    set_status,
    write_long_metrics,
)
from workbench.core.train.runs.folder import write_status
from workbench.ui.runs import runs_panel
from workbench.ui.runs.runs_panel import COLUMNS, RunsPanel

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")

STATE = COLUMNS.index("state")


def _panel(qtbot, root) -> RunsPanel:
    panel = RunsPanel(root)
    qtbot.addWidget(panel)
    panel.resize(1000, 700)
    panel.show()
    return panel


def _rows(panel) -> dict[str, int]:
    model = panel.table_model
    return {model.index(r, 0).data(): r for r in range(model.rowCount())}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", sorted(DAMAGES))
def test_the_dock_lists_a_damaged_run_marked_and_the_others_as_usual(qtbot, tmp_path, kind):
    panel = _panel(qtbot, damaged_root(tmp_path, kind))
    start = time.monotonic()
    panel.refresh()  # a FIFO must not block the window
    assert time.monotonic() - start < 10
    rows, model = _rows(panel), panel.table_model
    assert sorted(rows) == ["a-good", "b-bad", "c-good"]
    marker = DAMAGES[kind][1]
    bad = rows["b-bad"]
    assert marker in model.index(bad, STATE).data()
    assert marker in model.index(bad, 0).data(Qt.ItemDataRole.ToolTipRole)
    icon = model.index(bad, 0).data(Qt.ItemDataRole.DecorationRole)
    assert icon is not None and not icon.isNull()  # a warning icon on the name
    for name in ("a-good", "c-good"):
        assert model.index(rows[name], STATE).data() == "finished"
        assert model.index(rows[name], 0).data(Qt.ItemDataRole.DecorationRole) is None
    assert panel.status.text() == "3 run(s), 1 with files that cannot be read"
    panel.select(["a-good", "b-bad", "c-good"])  # what can be read is drawn; the problem is said by the settings
    assert {"a-good", "c-good"} <= set(panel.curves)
    assert len(panel.curves["a-good"].getData()[0]) == 3
    assert f"b-bad: {marker}" in panel.diff.toPlainText()


def test_the_dock_shows_names_and_text_from_a_folder_escaped(qtbot, tmp_path):
    root = tmp_path / "runs"
    d = good_run(root, "evil\x1b]0;pwned\x07", 1e9)
    set_status(d, model="<b>cnn</b>\x1b[2J")
    good_run(root, "plain", 1e9 + 1)
    panel = _panel(qtbot, root)
    panel.refresh()
    model = panel.table_model
    assert model.index(0, 0).data() == "evil\\x1b]0;pwned\\x07"
    assert model.index(0, COLUMNS.index("model")).data() == "<b>cnn</b>\\x1b[2J"
    assert "\x1b" not in model.index(0, 0).data(Qt.ItemDataRole.ToolTipRole)
    panel.select(["evil\x1b]0;pwned\x07", "plain"])
    legend = [label.text for _, label in panel.plot.plotItem.legend.items]
    assert legend == ["evil\\x1b]0;pwned\\x07", "plain"]
    assert panel.status.textFormat() == Qt.TextFormat.PlainText  # a name is never taken for rich text


def test_rename_and_delete_in_the_dock_refuse_a_run_that_is_training(qtbot, tmp_path, monkeypatch):
    trash = isolated_trash(monkeypatch, tmp_path)  # the trash, inside the test's folder
    root = tmp_path / "runs"
    live = good_run(root, "live", 1e9)
    write_status(live, None, 1e9, INFO)  # running, in this process
    done = good_run(root, "done", 1e9 + 1)
    panel = _panel(qtbot, root)
    panel.refresh()
    assert panel.table_model.index(_rows(panel)["live"], STATE).data() == "running"
    panel.select(["live"])
    assert not panel.rename_selected("renamed")
    assert "live is training (process" in panel.status.text()
    assert "stop the run before you rename it" in panel.status.text()
    assert live.is_dir() and not (root / "renamed").exists() and not panel.undo_stack.canUndo()
    panel.select(["live", "done"])
    assert panel.delete_selected() == 1  # the finished one goes; the live one stays, and why is said
    assert live.is_dir() and not done.exists() and (trash / "files" / "done").is_dir()
    text = panel.status.text()
    assert text.startswith("Moved 1 run(s) to the trash") and "stop the run before you delete it" in text
    write_status(live, "completed", 1e9, INFO)  # it ended: now it can go
    panel.select(["live"])
    assert panel.rename_selected("renamed") and (root / "renamed").is_dir()


def test_a_long_metrics_csv_is_read_on_a_worker_thread_behind_a_progress_bar(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(runs_panel, "SYNC_BYTES", 2**20)
    root = tmp_path / "runs"
    write_long_metrics(good_run(root, "long", 1e9) / "metrics.csv", 200_000)  # ~17 MB
    good_run(root, "short", 1e9 + 1)
    calls = []
    real = runs_panel.read_curve

    def read_curve(path, x_key, metric, progress=None):
        calls.append((threading.current_thread() is threading.main_thread(), progress is not None))
        return real(path, x_key, metric, progress)

    monkeypatch.setattr(runs_panel, "read_curve", read_curve)
    panel = _panel(qtbot, root)
    ticks = []  # the GUI thread's event loop, sampled while a load runs
    timer = QTimer(panel)
    timer.timeout.connect(lambda: ticks.append((panel.progress.isVisible(), panel.progress.value())))
    timer.start(5)
    panel.refresh()  # the list reads the long file's rows and best metrics: on a worker thread
    assert any(visible for visible, _ in ticks) and not panel.progress.isVisible()
    assert panel.table_model.runs[0].epochs_done == 200_000
    ticks.clear()
    panel.select(["long", "short"])  # selects one, then the other
    assert calls == [(False, True), (True, False)]  # the long curve off the GUI thread with progress; the short here
    assert any(visible for visible, _ in ticks)  # its value moves too, but a fast machine reads 200k rows between ticks
    assert not panel.progress.isVisible()
    assert isinstance(panel.curves["long"], pg.PlotCurveItem) and panel.pyramids["long"].n == 200_000
    assert len(panel.curves["long"].getData()[0]) < 10_000
    calls.clear()
    panel.x_combo.setCurrentIndex(panel.x_combo.findData("epoch"))  # another axis: read again
    panel.x_combo.setCurrentIndex(panel.x_combo.findData("step"))
    assert calls == [(False, True)] * 4  # both together on the worker thread: more than SYNC_BYTES
    calls.clear()
    panel.show_selected()  # nothing changed: the curves shown are kept, not read again
    assert calls == []


def test_the_dock_lists_runs_whose_times_a_clock_cannot_show(qtbot, tmp_path):
    """``started`` of 1e20, -1e18, Infinity or NaN: time.localtime raised from resizeColumnsToContents()."""
    root = tmp_path / "runs"
    good_run(root, "good", 1e9)
    texts = {"huge": b'{"state":"finished","started":1e20}', "negative": b'{"state":"finished","started":-1e18}',
             "infinity": b'{"state":"finished","started":Infinity}', "nan": b'{"state":"finished","started":NaN}'}
    for name, text in texts.items():
        (good_run(root, name, 1e9) / "status.json").write_bytes(text)
    panel = _panel(qtbot, root)
    panel.refresh()
    rows, model = _rows(panel), panel.table_model
    assert sorted(rows) == ["good", "huge", "infinity", "nan", "negative"]
    started = COLUMNS.index("started")
    assert model.index(rows["good"], started).data() == time.strftime("%Y-%m-%d %H:%M", time.localtime(1e9))
    for name in texts:
        assert model.index(rows[name], started).data() == "-"
        assert "not a time" in model.index(rows[name], STATE).data()
        assert model.index(rows[name], 0).data(Qt.ItemDataRole.DecorationRole) is not None
    assert panel.status.text() == "5 run(s), 4 with files that cannot be read"


def test_the_table_model_shows_a_summary_of_any_time_without_raising(qtbot):
    from workbench.core.train.runs.index import RunSummary
    from workbench.ui.runs.runs_panel import RunsTableModel

    model = RunsTableModel()
    model.set_runs([RunSummary("far", "/x", started=1e20, best_val_loss=float("-inf")),
                    RunSummary("inf", "/y", started=float("inf"))])
    cells = [[model.index(r, c).data() for c in range(len(COLUMNS))] for r in range(2)]
    assert [row[COLUMNS.index("started")] for row in cells] == ["-", "-"]
    assert cells[0][COLUMNS.index("best val loss")] == "-inf"
