"""File > Attach to a run on a host…: choose a host, list its runs and waiting scripts, pick one.

The host is what ``ssh`` accepts (an alias of your ssh config, ``user@host``); hosts are remembered with
their runs folder in the one host list Training › Run on and the Runs dock share
(:mod:`workbench.ui.remote_hosts`), tokens never: each attach reads the run's discovery file on the
host again (:meth:`workbench.remote.RemoteRun.attach`). The listing runs over ssh off the GUI thread
(:func:`~workbench.ui.threading.run_in_background`); the dialog only shows what came back, and a failure is one
line in it.
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit, QListWidget,
                               QListWidgetItem, QPushButton, QVBoxLayout, QWidget)

from workbench.core.remote.jobs import DEFAULT_REMOTE_DIR
from workbench.ui.attach_parts import started_ago, take_over_check
from workbench.ui.qsettings import make_settings
from workbench.ui.remote_hosts import HostEntry, load_hosts, one_line, remember_host
from workbench.ui.threading import run_in_background

__all__ = ["RemoteAttachDialog", "ask_remote_target", "list_host"]

_TARGET_ROLE = Qt.ItemDataRole.UserRole + 1
_NOTE = ("Runs started with workbench submit (or Run on: HOST) and scripts that called workbench.attach on the "
         "host. Workbench reads each one's port and token on the host and opens the ssh tunnel itself.")


def _remember(settings, host: str, remote_dir: str) -> None:
    """Remember ``host`` with ``remote_dir``, keeping what Run on knows of it (SLURM, the job's shape)."""
    known = next((h for h in load_hosts(settings) if h.host == host), HostEntry(host))
    remember_host(settings, replace(known, remote_dir=remote_dir))


def list_host(host: str, remote_dir: str) -> list[tuple[str, object, bool]]:
    """``(row text, target, attachable)`` for the runs under ``remote_dir`` on ``host`` and the scripts waiting
    there that are not among them (called on a worker thread: two ssh commands)."""
    from workbench.core.remote.handle import runs_with_states
    from workbench.core.remote.waiting import scripts

    runs = runs_with_states(host, remote_dir=remote_dir)
    rows = [(f"{r.id}  ·  {state}" + (f"  ·  job {r.job}" if r.job else "") + f"  ·  {r.run_dir}", r,
             state == "running") for r, state in runs]
    for s in scripts(host, remote_dir=remote_dir):
        if any(s.run_dir == r.run_dir or s.run_dir.endswith(f"/{r.id}/run") for r, _ in runs):
            continue  # a listed run's own listener
        text = f"{s.name}  ·  script  ·  {s.model or '?'}  ·  pid {s.pid}  ·  {started_ago(s.started)}"
        rows.append((text, s, True))
    return rows


class RemoteAttachDialog(QDialog):
    """A host (``hostCombo``, editable, past hosts), its runs folder (``remoteDirEdit``), List (``listButton``),
    the runs and scripts found (``remoteList``), take the steering (``takeCheck``), Attach."""

    def __init__(self, parent: QWidget | None = None, settings=None):
        super().__init__(parent)
        self.setObjectName("remoteAttachDialog")
        self.setWindowTitle("Attach to a run on a host")
        self.settings = settings or make_settings()
        self.host = QComboBox(self)
        self.host.setObjectName("hostCombo")
        self.host.setEditable(True)
        self._hosts = {h.host: h for h in reversed(load_hosts(self.settings))}  # the latest remembered first
        self.host.addItems(list(self._hosts))
        self.host.lineEdit().setPlaceholderText("an ssh host: an alias of your ssh config, or user@host")
        self.remote_dir = QLineEdit(self)
        self.remote_dir.setObjectName("remoteDirEdit")
        self.host.currentTextChanged.connect(self._show_folder)
        self._show_folder(self.host.currentText())
        self.list_button = QPushButton("List", self)
        self.list_button.setObjectName("listButton")
        self.list_button.clicked.connect(self.refresh)
        self.list = QListWidget(self)
        self.list.setObjectName("remoteList")
        self.note = QLabel(_NOTE, self)
        self.note.setObjectName("remoteNote")
        self.note.setWordWrap(True)
        self.take = take_over_check(self)
        form = QFormLayout()
        form.addRow("Host", self.host)
        form.addRow("Runs folder there", self.remote_dir)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel,
                                        self)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Attach")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.list_button, 0, Qt.AlignmentFlag.AlignRight)
        layout.addWidget(self.list)
        layout.addWidget(self.note)
        layout.addWidget(self.take)
        layout.addWidget(self.buttons)
        self.list.currentItemChanged.connect(lambda *_: self._update_ok())
        self.list.itemDoubleClicked.connect(lambda _item: self._update_ok() or self._accept_if_ok())
        self.resize(720, 440)
        self._update_ok()

    def _show_folder(self, host: str) -> None:
        known = self._hosts.get(host.strip())
        self.remote_dir.setText(known.remote_dir if known else DEFAULT_REMOTE_DIR)

    def host_name(self) -> str:
        """The host as typed or chosen."""
        return self.host.currentText().strip()

    def refresh(self) -> bool:
        """List the host's runs and scripts (over ssh, off the GUI thread); False after saying why not."""
        host, folder = self.host_name(), self.remote_dir.text().strip() or DEFAULT_REMOTE_DIR
        self.list.clear()
        if not host:
            self.note.setText("Type a host first: an alias of your ssh config, or user@host.")
            return False
        try:
            rows = run_in_background(lambda: list_host(host, folder), f"Listing the runs on {host}…", self)
        except Exception as exc:  # noqa: BLE001 - ssh's own reason, one line in the dialog
            self.note.setText(f"Not listed: {one_line(exc)}")
            self._update_ok()
            return False
        for text, target, attachable in rows:
            item = QListWidgetItem(text)
            item.setData(_TARGET_ROLE, target)
            if not attachable:
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled)
                item.setToolTip("not running: nothing listens (workbench pull brings its folder back)")
            self.list.addItem(item)
        self.note.setText(f"{len(rows)} on {host}. " + _NOTE if rows else f"Nothing on {host} under {folder}.")
        _remember(self.settings, host, folder)
        first = next((i for i in range(self.list.count())
                      if self.list.item(i).flags() & Qt.ItemFlag.ItemIsEnabled), None)
        if first is not None:
            self.list.setCurrentRow(first)
        self._update_ok()
        return True

    def _accept_if_ok(self) -> None:
        if self.buttons.button(QDialogButtonBox.StandardButton.Ok).isEnabled():
            self.accept()

    def _update_ok(self) -> None:
        item = self.list.currentItem()
        ok = item is not None and bool(item.flags() & Qt.ItemFlag.ItemIsEnabled)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(ok)

    def target(self) -> tuple[object, bool | str] | None:
        """``(the chosen RemoteRun or RemoteScript, steer)``; ``steer`` is ``"take"`` when it is to be taken over."""
        item = self.list.currentItem()
        if item is None:
            return None
        return item.data(_TARGET_ROLE), ("take" if self.take.isChecked() else True)


def ask_remote_target(parent: QWidget | None = None) -> tuple[object, bool | str] | None:
    """Show :class:`RemoteAttachDialog`; ``(target, steer)``, or None."""
    dialog = RemoteAttachDialog(parent)
    try:
        return dialog.target() if dialog.exec() == QDialog.DialogCode.Accepted else None
    finally:
        dialog.deleteLater()
