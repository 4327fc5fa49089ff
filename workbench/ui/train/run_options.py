"""The inspector's last section, "Run options": resume, where the run trains, Reset and TensorBoard."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QGridLayout, QPushButton

from workbench.ui.train.collapsible import CollapsibleSection, compact_form

__all__ = ["RunOptions", "IN_PROCESS_KEY"]

#: QSettings key: train on a QThread in the window's process instead of a training process.
IN_PROCESS_KEY = "training/in_process"


class RunOptions(CollapsibleSection):
    """The run options (objectName ``runOptions``, collapsed at first).

    Parameters
    ----------
    qsettings : QSettings
        Remembers "Train in this window's process" (``IN_PROCESS_KEY``).
    on_reset, on_tensorboard : callable
        What Reset settings and TensorBoard… do.

    Attributes
    ----------
    resume_check, in_process_check : QCheckBox
        objectNames ``resumeCheck``, ``inProcessCheck``.
    reset_button, tensorboard_button : QPushButton
        objectNames ``resetSettingsButton``, ``tensorboardButton`` (Empty CUDA cache is in the run bar).
    """

    def __init__(self, qsettings, on_reset, on_tensorboard):
        super().__init__("Run options", "runOptions", compact_form(), expanded=False)
        self._qsettings = qsettings
        self.resume_check = QCheckBox("Resume from opened checkpoint", objectName="resumeCheck")
        self.resume_check.setToolTip("Restore optimizer, scheduler, epoch, step and RNG from the file opened")
        self.in_process_check = QCheckBox("Train in this window's process", objectName="inProcessCheck")
        self.in_process_check.setToolTip(
            "Off (default): training runs in its own process at full speed, and a crash there never "
            "closes the window.\nOn: training runs on a thread of the window (slower; a crash takes the window down).")
        self.in_process_check.setChecked(_as_bool(qsettings.value(IN_PROCESS_KEY, False)))
        self.reset_button = _button("Reset settings", "resetSettingsButton", on_reset,
                                    "Put every training setting back to its default (and forget the remembered ones)")
        self.tensorboard_button = _button("TensorBoard…", "tensorboardButton", on_tensorboard,
                                          "Copy the command that opens the last run in TensorBoard "
                                          "(no server is started)")
        form = self.content.layout()
        form.addRow(self.resume_check)
        form.addRow(self.in_process_check)
        buttons = QGridLayout()
        buttons.addWidget(self.reset_button, 0, 0)
        buttons.addWidget(self.tensorboard_button, 0, 1)
        form.addRow(buttons)

    def remember_in_process(self, flag: bool) -> None:
        """Remember "Train in this window's process" for the next start of the window."""
        self._qsettings.setValue(IN_PROCESS_KEY, bool(flag))

    def offer_resume(self, can_resume: bool, running: bool) -> None:
        """Resume is offered for a checkpoint with optimizer state, when idle; the section opens to show it."""
        self.resume_check.setEnabled(can_resume and not running)
        if can_resume:
            self.set_expanded(True)
        else:
            self.resume_check.setChecked(False)


def _button(text: str, name: str, slot, tip: str) -> QPushButton:
    button = QPushButton(text, objectName=name)
    button.setToolTip(tip)
    button.clicked.connect(lambda: slot())
    return button


def _as_bool(value) -> bool:
    """A QSettings value as bool (the INI backend gives back ``"true"`` / ``"false"`` strings)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
