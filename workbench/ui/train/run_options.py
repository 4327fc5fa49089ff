"""The inspector's last section, "Run options": the machine it runs on, resume, how it trains here (process,
priority), Reset and TensorBoard."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QGridLayout, QLabel, QPushButton

from workbench.core.train.launch.priority import HEADROOM_CORES, PRIORITIES, default_priority
from workbench.ui.train.collapsible import CollapsibleSection, compact_form
from workbench.ui.train.remote_target import RunTarget

__all__ = ["RunOptions", "IN_PROCESS_KEY", "PRIORITY_KEY", "PRIORITY_TEXT", "PRIORITY_NOTE"]

#: QSettings key: train on a QThread in the window's process instead of a training process.
IN_PROCESS_KEY = "training/in_process"
#: QSettings key: the process priority the user chose ("normal" / "lower"); absent: chosen for the machine.
PRIORITY_KEY = "training/priority"
#: How the Process priority box names each choice (the note under it says what "lower" is for: the box stays
#: narrow enough for the inspector's column).
PRIORITY_TEXT = {"normal": "normal", "lower": "lower"}
#: The note under the Process priority box.
PRIORITY_NOTE = "lower keeps the window smooth on a small machine; normal gives a run its full speed"


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
    run_target : RunTarget
        "Run on: This machine | HOST…" (:mod:`.remote_target`): where Start trains.
    resume_check, in_process_check : QCheckBox
        objectNames ``resumeCheck``, ``inProcessCheck``.
    reset_button, tensorboard_button : QPushButton
        objectNames ``resetSettingsButton``, ``tensorboardButton`` (Empty CUDA cache is in the run bar).
    priority_combo : QComboBox
        objectName ``priorityCombo``: "Process priority: normal | lower"; until the user picks one, it shows
        the one :func:`~workbench.core.train.launch.priority.default_priority` chooses for each run.

    Signals
    -------
    priorityChosen(str)
        The user picked ``"normal"`` or ``"lower"`` (remembered: QSettings ``PRIORITY_KEY``).
    """

    priorityChosen = Signal(str)

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
        self.priority_combo = QComboBox(objectName="priorityCombo")
        for key in PRIORITIES:
            self.priority_combo.addItem(PRIORITY_TEXT[key], key)
        self.priority_combo.setToolTip(
            "The training process's scheduling priority. Normal: a run gets its full speed even when other "
            "programs are busy. Lower (nice +10): the window stays smooth while a run takes every core.\n"
            f"Until you choose, normal when this machine has {HEADROOM_CORES} cores more than the run's threads "
            "and loader workers use, else lower. A run in the window's process is not affected.")
        chosen = qsettings.value(PRIORITY_KEY, "")
        if chosen in PRIORITIES:
            self.priority_combo.setCurrentIndex(PRIORITIES.index(chosen))
        self.priority_combo.activated.connect(self._on_priority_activated)
        self.priority_note = QLabel(PRIORITY_NOTE, objectName="priorityNote", wordWrap=True)
        self.priority_note.setEnabled(False)  # drawn as a hint
        self.run_target = RunTarget(qsettings)
        self.run_target.targetChanged.connect(lambda host: host and self.set_expanded(True))
        form = self.content.layout()
        form.addRow(self.run_target)
        form.addRow(self.resume_check)
        form.addRow(self.in_process_check)
        form.addRow("Process priority:", self.priority_combo)
        form.addRow(self.priority_note)
        buttons = QGridLayout()
        buttons.addWidget(self.reset_button, 0, 0)
        buttons.addWidget(self.tensorboard_button, 0, 1)
        form.addRow(buttons)

    def steer_priority(self, controller, config_source) -> None:
        """Give ``controller`` (a RunController) the priority of each run and of the process it starts ahead.

        ``config_source()`` gives the form's settings (the default priority depends on the run's threads and
        loader workers); a choice in the box goes to ``controller.set_priority`` at once.
        """
        controller.priority_source = self.priority_for
        self.priorityChosen.connect(controller.set_priority)
        try:
            first = self.priority_for(config_source())
        except Exception:  # noqa: BLE001 - an unfinished setting: the run's own settings decide at Start
            first = self.chosen_priority() or "lower"
        controller.launcher.set_priority(first)  # the process started ahead starts at it

    def chosen_priority(self) -> str | None:
        """The priority the user picked (remembered), or None while the window chooses it for each run."""
        value = self._qsettings.value(PRIORITY_KEY, "")
        return value if value in PRIORITIES else None

    def priority_for(self, config) -> str:
        """The priority of a run of ``config``: the user's choice, else the default for this machine and run
        (:func:`~workbench.core.train.launch.priority.default_priority`), which the box then shows."""
        chosen = self.chosen_priority()
        if chosen is not None:
            return chosen
        priority = default_priority(config)
        self.priority_combo.setCurrentIndex(PRIORITIES.index(priority))
        return priority

    def set_priority(self, priority: str) -> None:
        """Choose ``priority`` as the user would (remembered, then ``priorityChosen``)."""
        self.priority_combo.setCurrentIndex(PRIORITIES.index(priority))
        self._on_priority_activated(self.priority_combo.currentIndex())

    def _on_priority_activated(self, index: int) -> None:
        priority = self.priority_combo.itemData(index)
        self._qsettings.setValue(PRIORITY_KEY, priority)
        self.priorityChosen.emit(priority)

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
