"""The Runs dock's two tables share one row/column model (workbench.ui.runs.row_table): same headers, counts and
resets; each says only what its cells show (real run folders; RemoteRun rows as the host listing makes them)."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, Qt

from tests.core.train.damaged_runs import good_run
from workbench.core.remote.handle import RemoteRun
from workbench.core.train.runs.index import TABLE_COLUMNS, list_runs
from workbench.ui.runs.remote_runs import COLUMNS as REMOTE_COLUMNS
from workbench.ui.runs.remote_runs import RemoteRunsModel
from workbench.ui.runs.row_table import RowTableModel
from workbench.ui.runs.runs_panel import RunsTableModel

H = Qt.Orientation.Horizontal


def _headers(model) -> list:
    return [model.headerData(c, H) for c in range(model.columnCount())]


def test_the_local_runs_table_heads_its_columns_and_resets_with_its_runs(qtbot, tmp_path):
    for i, name in enumerate(["a-run", "b-run"]):
        good_run(tmp_path, name, started=1_800_000_000.0 + i)
    model = RunsTableModel()
    assert isinstance(model, RowTableModel) and model.rowCount() == 0
    assert _headers(model) == list(TABLE_COLUMNS)
    assert model.headerData(0, Qt.Orientation.Vertical) is None
    assert model.headerData(0, H, Qt.ItemDataRole.ToolTipRole) is None
    resets = []
    model.modelReset.connect(lambda: resets.append(1))
    model.set_runs(list_runs(tmp_path))
    assert resets == [1] and model.runs is model.rows and model.rowCount() == 2
    first = model.index(0, 0)
    assert model.rowCount(first) == 0 and model.columnCount(first) == 0  # a table: no child rows
    assert {model.index(r, 0).data() for r in range(2)} == {"a-run", "b-run"}
    assert str(tmp_path) in first.data(Qt.ItemDataRole.ToolTipRole)
    assert first.data(Qt.ItemDataRole.DecorationRole) is None  # a readable run has no warning icon
    assert model.data(QModelIndex()) is None


def test_the_hosts_table_shows_host_run_state_job_and_the_folder_as_tooltip(qtbot):
    runs = [(RemoteRun("r1", "gpu-box", "/srv/wb/r1/run", "/srv/wb/r1"), "running"),
            (RemoteRun("r2", "cluster", "/scratch/r2/run", "/scratch/r2", job="4242"), "queued")]
    model = RemoteRunsModel()
    assert _headers(model) == list(REMOTE_COLUMNS) == ["host", "run", "state", "job"]
    model.set_rows(runs)
    cells = [[model.index(r, c).data() for c in range(model.columnCount())] for r in range(model.rowCount())]
    assert cells == [["gpu-box", "r1", "running", "process"], ["cluster", "r2", "queued", "SLURM 4242"]]
    assert model.index(1, 3).data(Qt.ItemDataRole.ToolTipRole) == "cluster:/scratch/r2"
    assert model.index(0, 0).data(Qt.ItemDataRole.DecorationRole) is None
    assert model.index(0, 0).data(Qt.ItemDataRole.EditRole) is None
    model.set_rows([])
    assert model.rowCount() == 0
