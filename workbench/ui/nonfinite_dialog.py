"""The dialog shown when the training loss becomes NaN or Inf.

The trainer pauses at the offending step and waits for a decision; the panel
shows this dialog and hands the chosen action to ``trainer.resolve_nonfinite``.
"""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget

#: Actions, in the order of the buttons; the strings ``Trainer.resolve_nonfinite`` takes.
LOWER_LR = "lower_lr"
ROLLBACK = "rollback"
STOP = "stop"


class NonFiniteDialog(QMessageBox):
    """Ask what to do about a non-finite loss at ``step``.

    Parameters
    ----------
    step : int
        Global step whose loss was NaN / Inf.
    loss : float, optional
        The offending value (shown as text).
    can_rollback : bool
        Whether a checkpoint exists to roll back to (the button is disabled otherwise).
    trace : str
        Where the first non-finite value appeared (:meth:`NonFiniteTrace.text
        <workbench.core.train.trainer.nan_trace.NonFiniteTrace.text>`); empty: unknown.
    parent : QWidget, optional
        Owner window.

    Notes
    -----
    :meth:`action` returns :data:`LOWER_LR`, :data:`ROLLBACK` or :data:`STOP`;
    closing the dialog (Escape) means stop.
    """

    def __init__(self, step: int, loss: float | None = None, can_rollback: bool = True,
                 parent: QWidget | None = None, trace: str = ""):
        super().__init__(parent)
        self.setObjectName("nonFiniteDialog")
        self.setIcon(QMessageBox.Icon.Warning)
        self.setWindowTitle("Non-finite loss")
        value = "" if loss is None else f" ({loss})"
        self.setText(f"The training loss became non-finite{value} at step {step}."
                     + (f"\n\n{trace[:1].upper()}{trace[1:]}." if trace else ""))
        self.setInformativeText(
            ("The module is selected in the Model tree. " if trace else "")
            + "The run is paused at that step. Lower the learning rate (x0.1) and continue, "
            "roll back to the last checkpoint, or stop the run."
        )
        self.lower_button = self.addButton("Lower LR and continue", QMessageBox.ButtonRole.AcceptRole)
        self.rollback_button = self.addButton("Roll back to last checkpoint", QMessageBox.ButtonRole.ActionRole)
        self.stop_button = self.addButton("Stop", QMessageBox.ButtonRole.RejectRole)
        self.rollback_button.setEnabled(can_rollback)
        self.setDefaultButton(self.lower_button)
        self.setEscapeButton(self.stop_button)

    def action(self) -> str:
        """The choice after ``exec()``: ``"lower_lr"``, ``"rollback"`` or ``"stop"``."""
        clicked = self.clickedButton()
        if clicked is self.lower_button:
            return LOWER_LR
        if clicked is self.rollback_button:
            return ROLLBACK
        return STOP


def ask_nonfinite(parent: QWidget | None, step: int, loss: float | None = None,
                  can_rollback: bool = True, trace: str = "") -> str:
    """Show :class:`NonFiniteDialog` modally and return the chosen action."""
    dialog = NonFiniteDialog(step, loss, can_rollback, parent, trace=trace)
    dialog.exec()
    return dialog.action()


def mark_nonfinite(session, step: int, trace: dict | None) -> str:
    """Where a non-finite value first appeared, as text (empty: unknown); a forward or backward one is badged on
    its module in the tree (``session.set_badges``) and the module revealed.

    Parameters
    ----------
    session : Session
        The window's session (``measured_badges``, ``set_badges``, ``reveal``).
    step : int
        The step of the non-finite loss.
    trace : dict or None
        A :class:`~workbench.core.train.trainer.nan_trace.NonFiniteTrace`'s fields.
    """
    from workbench.core.probe.health import Badge
    from workbench.core.train.trainer.nan_trace import NonFiniteTrace

    if not trace:
        return ""
    text = NonFiniteTrace(**trace).text()
    if trace.get("phase") in ("forward", "backward"):
        module = trace.get("module", "")
        badges = dict(session.measured_badges)
        badges[module] = [b for b in badges.get(module, []) if b.kind != "nonfinite"] + [
            Badge("nonfinite", 1.0, step, text)]
        session.set_badges(badges)
        session.reveal(module, step)
    return text
