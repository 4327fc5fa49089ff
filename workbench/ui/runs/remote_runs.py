"""The Runs dock's "On hosts" list: the runs on each remembered host, their state, Pull and Cancel.

:class:`RemoteRunsView` (objectName ``remoteRuns``) lists :func:`workbench.remote.runs` of every host
remembered in QSettings (:mod:`workbench.ui.remote_hosts`: Training › Run options › Run on adds them) with
each run's state (``queued``, ``running``, ``completed``, ``stopped``, ``crashed``, ``cancelled``). The hosts
are asked on a worker thread, on demand (Refresh, the dock shown) and every :data:`REFRESH_MS` while the
list is shown; the window never waits on a host, and a host that cannot be reached is said in the status
line, its runs listed as they were last seen. "Pull" copies a run's folder into the local runs root
(:meth:`RemoteRun.pull`): it is then an ordinary local run the overlay draws (``pulled``). "Cancel" ends it
with ``last.pt`` saved (:meth:`RemoteRun.cancel`), after a question. "Attach" steers a run from this window
(:meth:`RemoteRun.attach`, through a tunnel Workbench manages); it is shown once the window gives the view
its way to attach (:meth:`RemoteRunsView.set_attach`). Errors are one line (``prompts.error``). Hidden while
no host is remembered.

objectNames: ``remoteRuns``, ``remoteRunsTable``, ``remoteRefreshButton``, ``remotePullButton``,
``remoteCancelButton``, ``remoteAttachButton``, ``remoteRunsStatus``.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView, QHBoxLayout, QLabel, QMessageBox, QPushButton, QSizePolicy, QTableView, QToolButton, QVBoxLayout,
    QWidget,
)

from workbench.core.run_folder.printable import printable
from workbench.ui.qsettings import make_settings
from workbench.ui.remote_hosts import HostEntry, load_hosts, one_line
from workbench.ui.runs.row_table import RowTableModel
from workbench.ui.threading import run_in_background, start_in_thread

__all__ = ["RemoteRunsView", "RemoteRunsModel", "REFRESH_MS", "COLUMNS"]

#: How often the list asks the hosts again while it is shown, ms (one ssh command per host and refresh, ~50 ms
#: each through the shared connection; a run's state changes at most this much later here).
REFRESH_MS = 20_000
#: The columns of the list.
COLUMNS = ("host", "run", "state", "job")
#: Rows of the list shown without scrolling (the local runs above keep the most room).
ROWS = 3


class RemoteRunsModel(RowTableModel):
    """Rows: ``(RemoteRun, state)``; columns: :data:`COLUMNS`; :meth:`set_rows` shows new ones."""

    columns = COLUMNS

    def cell(self, row: tuple, column: str, role: Qt.ItemDataRole):  # noqa: D102
        run, state = row
        if role == Qt.ItemDataRole.ToolTipRole:
            return printable(f"{run.host}:{run.folder}")
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        value = {"host": run.host, "run": run.id, "state": state,
                 "job": f"SLURM {run.job}" if run.job else "process"}[column]
        return printable(value)


class _Lister(QObject):
    """Asks each host for its runs and their states, on its own thread; ``listed((rows, problems))``."""

    listed = Signal(object)
    finished = Signal()

    def __init__(self, hosts: list[HostEntry]):
        super().__init__()
        self._hosts = hosts

    @Slot()
    def run(self) -> None:
        from workbench.remote import runs_with_states

        rows, problems = [], {}
        try:
            for entry in self._hosts:
                try:  # one ssh command a host: its runs and their states
                    rows += runs_with_states(entry.host, remote_dir=entry.submit_options()["remote_dir"])
                except Exception as exc:  # noqa: BLE001 - a host that cannot be reached is said, never raised
                    problems[entry.host] = one_line(exc)
            self.listed.emit((rows, problems))
        finally:
            self.finished.emit()


class RemoteRunsView(QWidget):
    """The runs on the remembered hosts, with Refresh, Pull and Cancel.

    Parameters
    ----------
    root_source : callable
        ``() -> str``: the local runs root a run is pulled into (the dock's "Runs in").
    prompts : Prompts
        ``error(text)``.
    parent : QWidget, optional

    Attributes
    ----------
    table_model : RemoteRunsModel
    confirm_cancel : callable
        ``confirm_cancel(run) -> bool``: Cancel's question (a dialog; tests replace it).

    Signals
    -------
    pulled(str)
        A run's folder was pulled into the local runs root: its name there.
    listed()
        A refresh finished (the list shows what the hosts said).
    """

    pulled = Signal(str)
    listed = Signal()

    def __init__(self, root_source: Callable[[], str], prompts, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("remoteRuns")
        self._root_source = root_source
        self.prompts = prompts
        self._qsettings = make_settings()
        self._thread = None
        self._problems: dict[str, str] = {}
        self.confirm_cancel = self._confirm_cancel
        self.table_model = RemoteRunsModel(self)
        self.table = QTableView(objectName="remoteRunsTable")
        self.table.setModel(self.table_model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setWordWrap(False)
        self.table.setFixedHeight(self.table.horizontalHeader().sizeHint().height() + 2 * self.table.frameWidth() + 2
                                  + ROWS * self.table.verticalHeader().defaultSectionSize())
        self.refresh_button = _button("Refresh", "remoteRefreshButton", "Ask the hosts for their runs again")
        self.pull_button = _button("Pull", "remotePullButton", "Copy the selected runs' folders into the runs "
                                   "folder here (again later: only what changed); they then list above")
        self.cancel_button = _button("Cancel run…", "remoteCancelButton", "End the selected run on its host: it "
                                     "stops at a step and saves last.pt (SLURM: scancel)")
        self.attach_button = _button("Attach", "remoteAttachButton", "Steer the selected run from this window "
                                     "(freeze, LR, pause, save now, stop) through a tunnel Workbench makes")
        self.attach_button.hide()
        self._attach: Callable | None = None
        self.status = QLabel("", objectName="remoteRunsStatus")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        # a host's long ssh error never widens the dock: clipped here, whole in the tooltip
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.toggle = QToolButton(objectName="remoteRunsToggle", text="On hosts", checkable=True, autoRaise=True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setToolTip("Show or hide the runs on the hosts remembered (Training › Run options › Run on)")
        self.toggle.toggled.connect(self.set_expanded)
        head = QHBoxLayout()
        head.addWidget(self.toggle)
        head.addWidget(self.status, 1)
        for button in (self.refresh_button, self.attach_button, self.pull_button, self.cancel_button):
            head.addWidget(button)
        v = QVBoxLayout(self)
        v.setContentsMargins(0, 4, 0, 0)
        v.addLayout(head)
        v.addWidget(self.table)
        self.refresh_button.clicked.connect(lambda: self.refresh())
        self.pull_button.clicked.connect(lambda: self.pull_selected())
        self.cancel_button.clicked.connect(lambda: self.cancel_selected())
        self.attach_button.clicked.connect(lambda: self.attach_selected())
        self.table.selectionModel().selectionChanged.connect(self._update_actions)
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(lambda: self.table.isVisible() and self.refresh())  # shown and opened
        self.timer.start()
        self._update_actions()
        self.set_expanded(False)
        self.setVisible(bool(load_hosts(self._qsettings)))

    def set_expanded(self, flag: bool) -> None:
        """Show the list (True) or only its line (False: the local runs and the plot keep the dock's room)."""
        self.toggle.setChecked(flag)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if flag else Qt.ArrowType.RightArrow)
        self.table.setVisible(flag)

    # -- listing -------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Ask every remembered host for its runs on a worker thread (``listed`` when done); False when a refresh
        is already under way or no host is remembered (the list is then hidden)."""
        hosts = load_hosts(self._qsettings)
        self.setVisible(bool(hosts))
        if not hosts:
            self.table_model.set_rows([])
            return False
        if self.is_refreshing():
            return False
        lister = _Lister(hosts)
        lister.listed.connect(self._on_listed, Qt.ConnectionType.QueuedConnection)
        lister.finished.connect(self._on_thread_finished, Qt.ConnectionType.QueuedConnection)
        self.status.setText("asking " + ", ".join(h.host for h in hosts) + "…")
        self._thread = start_in_thread(lister, "remoteRunsThread")
        return True

    def is_refreshing(self) -> bool:
        """A refresh is under way."""
        return self._thread is not None

    def add_submitted(self, run) -> None:
        """A run was just submitted from this window (``TrainingPanel.remoteSubmitted``): list it now, then ask."""
        self.setVisible(True)
        self.set_expanded(True)
        rows = [row for row in self.table_model.rows if (row[0].host, row[0].id) != (run.host, run.id)]
        self.table_model.set_rows(rows + [(run, "submitted")])
        self.table.resizeColumnsToContents()
        self.select(run.host, run.id)  # Pull, Cancel and Attach apply to it at once
        self.refresh()

    def state_of(self, host: str, name: str) -> str | None:
        """The state listed for run ``name`` on ``host`` (None: not listed)."""
        return next((state for run, state in self.table_model.rows if (run.host, run.id) == (host, name)), None)

    def selected_runs(self) -> list:
        """The selected rows' runs, in list order."""
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        return [self.table_model.rows[r][0] for r in rows]

    def select(self, host: str, name: str) -> None:
        """Select run ``name`` on ``host`` (tests, scripts)."""
        sel = self.table.selectionModel()
        sel.clearSelection()
        for row, (run, _state) in enumerate(self.table_model.rows):
            if (run.host, run.id) == (host, name):
                sel.select(self.table_model.index(row, 0), sel.SelectionFlag.Select | sel.SelectionFlag.Rows)

    @Slot(object)
    def _on_listed(self, result) -> None:
        rows, problems = result
        keep = {(r.host, r.id) for r in self.selected_runs()}
        # a host that did not answer keeps the rows last seen
        rows = rows + [row for row in self.table_model.rows if row[0].host in problems]
        self.table_model.set_rows(sorted(rows, key=lambda row: (row[0].host, row[0].id)))
        self.table.resizeColumnsToContents()
        for host, name in keep:
            sel = self.table.selectionModel()
            for row, (run, _state) in enumerate(self.table_model.rows):
                if (run.host, run.id) == (host, name):
                    sel.select(self.table_model.index(row, 0), sel.SelectionFlag.Select | sel.SelectionFlag.Rows)
        self._problems = problems
        said = [f"{len(rows)} run(s)"] + [f"{host}: {text}" for host, text in problems.items()]
        self.status.setText(printable(f"{len(rows)} run(s)" + (f" · not reached: {', '.join(problems)} (hover for "
                                                                 "why)" if problems else "")))
        self.status.setToolTip(printable("\n".join(said)))
        self.listed.emit()

    @Slot()
    def _on_thread_finished(self) -> None:
        self._thread = None

    def _update_actions(self, *_args) -> None:
        selected = len(self.table.selectionModel().selectedRows())
        self.pull_button.setEnabled(selected > 0)
        self.cancel_button.setEnabled(selected > 0)
        self.attach_button.setEnabled(selected == 1)

    def set_attach(self, attach: Callable[[object], object] | None) -> None:
        """How the window attaches to a run (``attach(RemoteRun)``, on the GUI thread); None hides Attach."""
        self._attach = attach
        self.attach_button.setVisible(attach is not None)

    def attach_selected(self) -> bool:
        """Attach the window to the one selected run (:meth:`set_attach`); False when there is none or no way."""
        runs = self.selected_runs()
        if self._attach is None or len(runs) != 1:
            return False
        return bool(self._attach(runs[0]))

    # -- Pull, Cancel --------------------------------------------------------------------
    def pull_selected(self) -> list[str]:
        """Pull the selected runs into the local runs root (a busy line meanwhile); the names pulled."""
        root = self._root_source() or None
        done = []
        for run in self.selected_runs():
            try:
                path = run_in_background(lambda run=run: run.pull(root), f"Pulling {run.id} from {run.host}…", self)
            except Exception as exc:  # noqa: BLE001 - ssh's or rsync's reason: one line
                self.prompts.error(f"Pull {run.id} from {run.host}: {one_line(exc)}")
                continue
            done.append(path.name)
            self.pulled.emit(path.name)
        return done

    def cancel_selected(self) -> list[str]:
        """After ``confirm_cancel``, end each selected run on its host with ``last.pt`` saved; the names ended."""
        done = []
        for run in self.selected_runs():
            if not self.confirm_cancel(run):
                continue
            try:
                state = run_in_background(run.cancel, f"Ending {run.id} on {run.host} (it saves last.pt)…", self)
            except Exception as exc:  # noqa: BLE001 - not running, ssh failed, still stopping: one line
                self.prompts.error(f"Cancel {run.id} on {run.host}: {one_line(exc)}")
                continue
            done.append(run.id)
            self.table_model.set_rows([(r, state if r == run else s) for r, s in self.table_model.rows])
        if done:
            self.refresh()
        return done

    def _confirm_cancel(self, run) -> bool:
        answer = QMessageBox.question(
            self, "Cancel run", f"End {run.id} on {run.host}? It stops at the next step and saves last.pt.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes


def _button(text: str, name: str, tip: str) -> QPushButton:
    button = QPushButton(text, objectName=name)
    button.setToolTip(tip)
    return button
