"""File > Attach to a running script…: choose a waiting script, or type ``host:port`` and a token.

The list shows the scripts on this machine that called ``workbench.attach``
(their discovery files, :func:`workbench.core.attach.discovery.scan_waiting`;
a discovery folder others may write into lists nothing, and the dialog says why);
picking one fills in its address and token. A script on another machine is
reached through ``ssh -L`` (the dialog shows the command to copy) and its
token typed in. "Take over steering" takes the run from a window that steers it
(that window is told and watches read-only).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit, QListWidget, QListWidgetItem,
                               QPushButton, QVBoxLayout, QWidget)

from workbench.core.attach.discovery import scan_waiting
from workbench.ui.attach_parts import started_ago, take_over_check

__all__ = ["AttachDialog", "SSH_HINT", "ask_attach_target"]

_INFO_ROLE = Qt.ItemDataRole.UserRole + 1
_NONE_WAITING = ("No script on this machine is waiting. In your script: "
                 "wb = workbench.attach(model, optimizer), then wb.step(loss) after each step.")
#: How to reach a script on another machine (shown in the dialog; selectable text).
SSH_HINT = ("A script on another machine listens on its own 127.0.0.1. Forward its port, then type "
            "127.0.0.1:PORT and the token it printed:\n    ssh -N -L PORT:127.0.0.1:PORT user@server")


def _row_text(info: dict) -> str:
    return (f"{info.get('name', '?')}  ·  {info.get('model', '?')}  ·  pid {info.get('pid', '?')}  ·  "
            f"{info.get('address', '?')}  ·  {started_ago(info.get('started'))}")


class AttachDialog(QDialog):
    """The scripts waiting here (``waitingList``), an address (``addressEdit``), a token (``tokenEdit``) and
    whether to take the steering from another window (``takeCheck``)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("attachDialog")
        self.setWindowTitle("Attach to a running script")
        self.list = QListWidget(self)
        self.list.setObjectName("waitingList")
        self.empty = QLabel(_NONE_WAITING, self)
        self.empty.setObjectName("waitingNote")
        self.empty.setWordWrap(True)
        self.address = QLineEdit(self)
        self.address.setObjectName("addressEdit")
        self.address.setPlaceholderText("127.0.0.1:PORT")
        self.token = QLineEdit(self)
        self.token.setObjectName("tokenEdit")
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("the token the script printed")
        refresh = QPushButton("Refresh", self)
        refresh.setObjectName("refreshButton")
        refresh.clicked.connect(self.refresh)
        hint = QLabel(SSH_HINT, self)
        hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        hint.setWordWrap(True)
        self.take = take_over_check(self)
        form = QFormLayout()
        form.addRow("Address", self.address)
        form.addRow("Token", self.token)
        form.addRow("", self.take)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel,
                                        self)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Attach")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Scripts waiting on this machine:", self))
        layout.addWidget(self.list)
        layout.addWidget(self.empty)
        layout.addWidget(refresh, 0, Qt.AlignmentFlag.AlignRight)
        layout.addLayout(form)
        layout.addWidget(hint)
        layout.addWidget(self.buttons)
        self.list.currentItemChanged.connect(self._on_current_changed)
        self.list.itemDoubleClicked.connect(lambda _item: self.accept())
        self.address.textChanged.connect(self._update_ok)
        self.token.textChanged.connect(self._update_ok)
        self.resize(640, 420)
        self.refresh()

    def refresh(self) -> None:
        """List the waiting scripts again (newest first; the first is selected)."""
        self.list.clear()
        found = scan_waiting()
        self.empty.setText(f"Not listed: {found.problem}." if found.problem else _NONE_WAITING)
        for info in found.scripts:
            item = QListWidgetItem(_row_text(info))
            item.setData(_INFO_ROLE, info)
            item.setToolTip(f"run folder {info.get('run_dir', '?')}")
            self.list.addItem(item)
        self.empty.setVisible(self.list.count() == 0)
        if self.list.count():
            self.list.setCurrentRow(0)
        self._update_ok()

    def _on_current_changed(self, item, _previous=None) -> None:
        info = item.data(_INFO_ROLE) if item is not None else None
        if info:
            self.address.setText(str(info.get("address", "")))
            self.token.setText(str(info.get("token", "")))

    def _update_ok(self) -> None:
        ok = bool(self.address.text().strip() and self.token.text().strip())
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(ok)

    def target(self) -> tuple[str, str] | tuple[str, str, str]:
        """``(address, token)`` as entered, and ``"take"`` third when the steering is to be taken over."""
        chosen = (self.address.text().strip(), self.token.text().strip())
        return (*chosen, "take") if self.take.isChecked() else chosen


def ask_attach_target(parent: QWidget | None = None) -> tuple[str, str] | tuple[str, str, str] | None:
    """Show :class:`AttachDialog`; ``(address, token)`` (``"take"`` third to take over steering), or None."""
    dialog = AttachDialog(parent)
    try:
        return dialog.target() if dialog.exec() == QDialog.DialogCode.Accepted else None
    finally:
        dialog.deleteLater()
