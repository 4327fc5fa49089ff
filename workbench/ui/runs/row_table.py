"""A table model of rows with named columns: what the Runs dock's two tables share.

:class:`RowTableModel` holds one Python object a row (:attr:`~RowTableModel.rows`) and names its columns
(:attr:`~RowTableModel.columns`, also the header's text); a subclass says only what a cell shows, in
:meth:`~RowTableModel.cell`. The local runs (``runs_panel.RunsTableModel``) and the runs on hosts
(``remote_runs.RemoteRunsModel``) are two such tables.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt

__all__ = ["RowTableModel"]


class RowTableModel(QAbstractTableModel):
    """Rows: any objects, in :attr:`rows`' order; columns: :attr:`columns` (their names head them).

    Attributes
    ----------
    columns : tuple of str
        The columns' names, left to right (a class attribute of each subclass).
    rows : list
        The rows shown; replace them with :meth:`set_rows`.
    """

    columns: tuple[str, ...] = ()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list = []

    def set_rows(self, rows) -> None:
        """Show ``rows`` (any iterable; a model reset)."""
        self.beginResetModel()
        self.rows = list(rows)
        self.endResetModel()

    def cell(self, row: Any, column: str, role: Qt.ItemDataRole) -> Any:
        """What cell (``row``, ``column``) shows for ``role``; None: nothing (the default for every role)."""
        return None

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return self.columns[section]
        return None

    def data(self, index: QModelIndex, role=Qt.ItemDataRole.DisplayRole):  # noqa: D102
        if not index.isValid():
            return None
        return self.cell(self.rows[index.row()], self.columns[index.column()], role)
