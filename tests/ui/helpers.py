"""Test doubles and input helpers shared by the UI tests (imported as ``tests.ui.helpers``)."""

from __future__ import annotations

from PySide6.QtCore import Qt

from workbench.ui.session import Session


class RecordingPrompts:
    """The :class:`workbench.ui.prompts.Prompts` methods, answered at once and recorded.

    Attributes
    ----------
    errors : list of str
        Every error and training error shown.
    asked : list of tuple
        ``(method name, *arguments)`` of every question asked.
    answers : dict
        The answer per method name (a callable is called with the arguments).
        Defaults: no trust, no partial load, cancel the architecture dialog,
        confirm stop, ``"stop"`` for a NaN, None for files and numbers, ``"trained"`` for start_from.
    """

    def __init__(self, **answers):
        self.errors: list[str] = []
        self.traces: list[str] = []  # the NaN trace line each nonfinite() question showed
        self.asked: list[tuple] = []
        self.answers = {"trust": False, "partial_load": False, "architecture": None, "new_architecture": None,
                        "confirm_stop": True, "nonfinite": "stop", "open_path": None, "save_path": None,
                        "integer": None, "number": None, "replace_head": False, "open_intact": False,
                        "end_training_process": True, "lora_save": "merge", "attach_target": None,
                        "start_from": "trained", **answers}

    def _answer(self, name, *args):
        self.asked.append((name, *args))
        answer = self.answers[name]
        return answer(*args) if callable(answer) else answer

    def open_path(self, start_dir=""):
        return self._answer("open_path", start_dir)

    def lora_save(self):
        return self._answer("lora_save")

    def open_folder(self, start_dir=""):
        return self._answer("open_folder", start_dir)

    def save_path(self, title, filters, default):
        return self._answer("save_path", title, filters, default)

    def architecture(self, candidates, file_name):
        return self._answer("architecture", candidates, file_name)

    def new_architecture(self):
        return self._answer("new_architecture")

    def trust(self, err):
        return self._answer("trust", err)

    def partial_load(self, report, file_name, spec):
        return self._answer("partial_load", report, file_name, spec)

    def open_intact(self, err):
        return self._answer("open_intact", err)

    def integer(self, title, label, value):
        return self._answer("integer", title, label, value)

    def number(self, title, label, value):
        return self._answer("number", title, label, value)

    def error(self, message):
        self.errors.append(message)

    def training_error(self, text):
        self.errors.append(text)

    def confirm_stop(self):
        return self._answer("confirm_stop")

    def attach_target(self):
        return self._answer("attach_target")

    def end_training_process(self, seconds):
        return self._answer("end_training_process", seconds)

    def cancel_end_training_process(self):
        self.cancelled_stop_questions = getattr(self, "cancelled_stop_questions", 0) + 1

    def replace_head(self, data_classes, outputs, message):
        self.errors.append(message)
        return self._answer("replace_head", data_classes, outputs)

    def start_from(self, run_name, path):
        return self._answer("start_from", run_name, path)

    def nonfinite(self, step, loss, can_rollback=True, trace=""):
        self.traces.append(trace)
        return self._answer("nonfinite", step, loss)

    def count(self, name: str) -> int:
        """How often ``name`` was asked."""
        return sum(1 for a in self.asked if a[0] == name)


def make_session(model, arch_spec=None, checkpoint=None, input_shape=None) -> Session:
    """A :class:`Session` showing ``model`` (what a panel needs, without a window)."""
    session = Session()
    session.set_model(model, arch_spec, checkpoint, input_shape)
    return session


def panel_host(model, arch_spec=None, checkpoint=None, input_shape=None):
    """A QMainWindow holding a real :class:`TrainingPanel` on a Session with :class:`RecordingPrompts`.

    The one stand-in for the window in panel tests: ``host.session``,
    ``host.prompts``, ``host.panel`` (with ``panel.errors`` = ``prompts.errors``),
    ``host.model``; status lines go to ``host.statusBar()``.
    """
    from PySide6.QtWidgets import QMainWindow

    from workbench.ui.train.panel import TrainingPanel

    host = QMainWindow()
    host.session = make_session(model, arch_spec, checkpoint, input_shape)
    host.session.statusMessage.connect(lambda text, ms: host.statusBar().showMessage(text, ms))
    host.prompts = RecordingPrompts()
    host.panel = TrainingPanel(host.session, host.prompts, host)
    host.panel.errors = host.prompts.errors
    host.model = model
    host.setCentralWidget(host.panel)
    return host


def pause_and_sync(qtbot, panel, timeout=60_000) -> None:
    """Pause the panel's run and wait until it is blocked and the window's model has its weights.

    A run in a training process sends ``stateSynced`` right after ``paused``; a run
    on a thread of this process trains the window's model itself.
    """
    signals = [panel.runPaused] + ([] if panel.in_process() else [panel.weightsSynced])
    with qtbot.waitSignals(signals, timeout=timeout):
        panel.pause()


def choose_item(combo, key) -> None:
    """Select the item of ``combo`` with data ``key``, as picking it from the list does (emits ``activated``)."""
    index = combo.findData(key)
    assert index >= 0, key
    combo.setCurrentIndex(index)
    combo.activated.emit(index)


def type_text(qtbot, edit, text: str, enter: bool = False) -> None:
    """Select the field's text as a user does (Ctrl+A) and type ``text`` over it; ``enter`` presses Enter after."""
    edit.setFocus()
    qtbot.keyClick(edit, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(edit, text)
    if enter:
        qtbot.keyClick(edit, Qt.Key.Key_Return)
