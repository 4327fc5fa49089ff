"""Test doubles shared by the UI tests (imported as ``tests.ui_helpers``)."""

from __future__ import annotations

from workbench.ui.train.panel import TrainingPanel


class RecordingPanel(TrainingPanel):
    """A TrainingPanel whose dialogs are replaced by recorders (never block a test).

    ``errors`` collects error texts, ``nonfinite_asked`` the steps of NaN/Inf
    questions (answered with ``nonfinite_answer``), ``confirm_asked`` counts the
    stop confirmations (answered with ``confirm_answer``).
    """

    def __init__(self, window):
        self.errors: list[str] = []
        self.nonfinite_asked: list[int] = []
        self.nonfinite_answer = "stop"
        self.confirm_answer = True
        self.confirm_asked = 0
        super().__init__(window)

    def show_error(self, text):
        self.errors.append(text)

    def ask_nonfinite(self, step, loss):
        self.nonfinite_asked.append(step)
        return self.nonfinite_answer

    def confirm_stop(self):
        self.confirm_asked += 1
        return self.confirm_answer
