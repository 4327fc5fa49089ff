"""The LR finder in the window: the range test on a copy of the model, its curve, "Use this LR".

:class:`LRFindWorker` runs :func:`workbench.core.train.lr_finder.find_lr` on a
QThread on a copy of the window's model (:func:`~workbench.core.train.lr_finder.sweep_copy`,
taken on the GUI thread; the window's model is never touched, and the core
restores even the copy). :class:`LRFindDialog` draws the raw and smoothed loss
against the LR on a log axis as the steps arrive, marks the steepest descent
and the valley point, and "Use this LR" hands the suggestion to the training form.

While a background call holds the model (the Graph tab's capture traces it
with ``torch.export``, which puts fake tensors in its place until it returns),
:class:`LRFinder` waits for it before copying.

objectNames: ``lrFindDialog``, ``lrFindPlot``, ``lrFindLabel``, ``useLrButton``.
"""

from __future__ import annotations

import math
import traceback

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject, QTimer, Signal, Slot
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPushButton, QVBoxLayout, QWidget

from workbench.core.errors import WorkbenchError
from workbench.core.train.lr_finder import LRFindResult, find_lr, sweep_copy
from workbench.ui.plot_legend import legend_above
from workbench.ui.threading import live_threads, start_in_thread, wait_for
from workbench.ui.train.lr_axis import LRAxis

#: The objectName of :func:`workbench.ui.threading.run_in_background`'s thread: while one lives, the GUI thread
#: waits in its local event loop and the call may hold the model (a graph capture traces it with fake tensors).
BACKGROUND_CALL = "backgroundCall"
#: How often a deferred start checks whether the background call has returned, ms.
DEFER_POLL_MS = 50


class LRFindWorker(QObject):
    """Run the range test on ``model`` (a copy; call :meth:`run` on a QThread).

    Parameters
    ----------
    model : nn.Module
        The copy to sweep (:func:`~workbench.core.train.lr_finder.sweep_copy` of the window's model).
    config : TrainConfig
        The form's settings (:func:`~workbench.core.train.lr_finder.find_lr` writes nothing to the runs).
    arch : ArchSpec, optional
    min_lr, max_lr : float
    steps : int

    Signals
    -------
    stepped(int, float, float)
        Step index, LR, raw loss.
    done(object)
        The :class:`LRFindResult`.
    failed(str)
        The formatted traceback.
    finished()
        Always last.
    """

    stepped = Signal(int, float, float)
    done = Signal(object)
    failed = Signal(str)
    finished = Signal()

    def __init__(self, model, config, arch=None, min_lr: float = 1e-7, max_lr: float = 10.0, steps: int = 100):
        super().__init__()
        self.model, self.config, self.arch = model, config, arch
        self.min_lr, self.max_lr, self.steps = float(min_lr), float(max_lr), int(steps)
        #: set from the GUI thread to end the sweep at the next step
        self.aborted = False

    @Slot()
    def run(self) -> None:
        """Sweep (in core); emits ``done`` or ``failed``, then ``finished``."""
        try:
            def progress(i: int, lr: float, loss: float) -> bool:
                self.stepped.emit(i, lr, loss)
                return self.aborted

            result = find_lr(self.model, self.config, self.arch, self.min_lr, self.max_lr, self.steps,
                             progress=progress)
            self.done.emit(result)
        except Exception:  # noqa: BLE001 - shown in the dialog, never raised into Qt
            self.failed.emit(traceback.format_exc())
        finally:
            self.model = None
            self.finished.emit()


class LRFindDialog(QDialog):
    """The range test's curve with the suggestions marked; "Use this LR" emits :attr:`lrChosen`.

    Signals
    -------
    lrChosen(float)
        The suggested LR, when the user clicks "Use this LR".
    """

    lrChosen = Signal(float)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("lrFindDialog")
        self.setWindowTitle("Find a learning rate")
        self.result: LRFindResult | None = None
        self._lrs: list[float] = []
        self._losses: list[float] = []
        self.plot = pg.PlotWidget(axisItems={"bottom": LRAxis()})  # LRs as labels, never overlapping
        self.plot.setObjectName("lrFindPlot")
        self.plot.setLogMode(x=True, y=False)
        self.plot.setLabel("bottom", "learning rate")
        self.plot.setLabel("left", "training loss")
        legend_above(self.plot.getPlotItem(), columns=2, row_height=20)  # never over the curve's steep end
        self.raw_curve = self.plot.plot([], [], pen=pg.mkPen("#9ecae1", width=1), name="loss")
        self.smooth_curve = self.plot.plot([], [], pen=pg.mkPen("#08519c", width=2), name="smoothed (EMA)")
        self.marks = pg.ScatterPlotItem(size=11, pen=None)
        self.plot.addItem(self.marks)
        self.label = QLabel("Sweeping the learning rate on a copy of the model…", objectName="lrFindLabel")
        self.label.setWordWrap(True)
        self.use_button = QPushButton("Use this LR", objectName="useLrButton")
        self.use_button.setEnabled(False)
        self.use_button.clicked.connect(self._on_use)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.addButton(self.use_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        v = QVBoxLayout(self)
        v.addWidget(self.plot, 1)
        v.addWidget(self.label)
        v.addWidget(buttons)
        self.resize(640, 460)

    @Slot(int, float, float)
    def add_step(self, i: int, lr: float, loss: float) -> None:
        """One step of the sweep (live curve)."""
        self._lrs.append(lr)
        self._losses.append(loss)
        self.raw_curve.setData(self._lrs, self._losses)
        self.label.setText(f"Step {i + 1}: lr {lr:.3g}, loss {loss:.4g}")

    @Slot(object)
    def show_result(self, result: LRFindResult) -> None:
        """Draw the final curve, mark the suggestions and enable "Use this LR"."""
        self.result = result
        self.raw_curve.setData(result.lrs, result.losses)
        self.smooth_curve.setData(result.lrs, result.smoothed)
        spots = []
        for lr, color in ((result.steepest, "#e6550d"), (result.valley, "#31a354")):
            if lr is not None:
                i = int(np.argmin(np.abs(np.log10(result.lrs) - math.log10(lr))))
                spots.append({"pos": (math.log10(lr), result.smoothed[i]), "brush": pg.mkBrush(color)})
        self.marks.setData(spots)
        if result.smoothed:  # frame the smoothed curve: a few raw spikes would flatten it
            lo, hi = min(result.smoothed), max(result.smoothed)
            pad = 0.1 * (hi - lo) or 0.1 * abs(hi) or 0.1
            self.plot.setYRange(lo - pad, hi + pad, padding=0)
        ended = {"completed": "all steps", "diverged": "the loss diverged", "nonfinite": "a NaN/Inf loss",
                 "stopped": "stopped"}.get(result.reason, result.reason)
        parts = [f"{len(result.lrs)} steps, ended by {ended}."]
        if result.valley is not None:
            parts.append(f"Valley (green): {result.valley:.3g}.")
        if result.steepest is not None:
            parts.append(f"Steepest descent (orange): {result.steepest:.3g}.")
        if result.suggested is None:
            parts.append("Too few finite steps for a suggestion: widen the range.")
        self.label.setText(" ".join(parts))
        self.use_button.setEnabled(result.suggested is not None)
        if result.suggested is not None:
            self.use_button.setText(f"Use {result.suggested:.3g}")

    @Slot(str)
    def show_error(self, text: str) -> None:
        """The sweep failed: its last line, the traceback as the tooltip."""
        last = text.strip().splitlines()[-1] if text.strip() else "error"
        self.label.setText(f"The LR finder failed: {last}")
        self.label.setToolTip(text)

    def _on_use(self) -> None:
        if self.result is not None and self.result.suggested is not None:
            self.lrChosen.emit(float(self.result.suggested))
            self.accept()


class LRFinder(QObject):
    """Starts a range test from the training form and shows its dialog (the Training panel holds one).

    Parameters
    ----------
    parent : QWidget
        Owner of the dialog.
    make_config : callable
        ``make_config() -> TrainConfig``: the form's settings (may raise ``ValueError`` with a message).
    session : Session
        ``model`` and ``arch_spec`` to copy.
    set_lr : callable
        ``set_lr(lr)``: what "Use this LR" does (the form's LR field).
    report : callable
        ``report(text)``: a message for the user (a setting error).
    """

    def __init__(self, parent: QWidget, make_config, session, set_lr, report):
        super().__init__(parent)
        self._parent, self._make_config, self.session = parent, make_config, session
        self._set_lr, self._report = set_lr, report
        self.dialog: LRFindDialog | None = None
        self.worker: LRFindWorker | None = None
        self.thread = None
        self._pending: tuple | None = None  # (config, min_lr, max_lr, steps) of a start waiting for the model
        self._defer = QTimer(self)
        self._defer.setSingleShot(True)
        self._defer.setInterval(DEFER_POLL_MS)
        self._defer.timeout.connect(self._start_pending)

    def is_running(self) -> bool:
        """True while a sweep runs, or waits for the model to start."""
        return self.thread is not None or self._pending is not None

    def start(self, min_lr: float = 1e-7, max_lr: float = 10.0, steps: int = 100) -> bool:
        """Open the dialog and start the sweep; False (with a message) when it cannot start.

        While a background call may hold the model (:data:`BACKGROUND_CALL`), the dialog
        says so and the copy is taken as soon as it has returned.
        """
        if self.is_running():
            return False
        try:
            if self.session.model is None:
                raise ValueError("There is no model: open a checkpoint or the demo first.")
            config = self._make_config()
        except Exception as exc:  # noqa: BLE001 - a setting the user can fix
            self._report(f"Cannot find a learning rate: {exc}")
            return False
        self.dialog = LRFindDialog(self._parent)
        self.dialog.lrChosen.connect(self._set_lr)
        self.dialog.rejected.connect(self.abort)
        self.dialog.show()
        self._pending = (config, float(min_lr), float(max_lr), int(steps))
        if _model_borrowed():
            self.dialog.label.setText("Waiting for the model: a background task (the graph capture) holds it…")
            self._defer.start()
        else:
            self._start_pending()
        return True

    def _start_pending(self) -> None:
        """Copy the model now that nothing else holds it, and start the sweep's thread."""
        if self._pending is None:
            return
        if _model_borrowed():
            self._defer.start()
            return
        (config, min_lr, max_lr, steps), self._pending = self._pending, None
        dialog = self.dialog
        if dialog is None or not dialog.isVisible() or self.session.model is None:
            return  # closed while waiting, or the model went away
        try:
            model = sweep_copy(self.session.model)
        except WorkbenchError as exc:
            dialog.show_error(str(exc))
            return
        dialog.label.setText("Sweeping the learning rate on a copy of the model…")
        self.worker = LRFindWorker(model, config, self.session.arch_spec, min_lr, max_lr, steps)
        self.worker.stepped.connect(dialog.add_step)
        self.worker.done.connect(dialog.show_result)
        self.worker.failed.connect(dialog.show_error)
        self.thread = start_in_thread(self.worker, "lrFindThread")
        self.thread.finished.connect(self._on_thread_finished)

    def abort(self) -> None:
        """End a running sweep at its next step, or forget a start still waiting (the dialog was closed)."""
        self._pending = None
        self._defer.stop()
        if self.worker is not None:
            self.worker.aborted = True

    def shutdown(self, timeout_ms: int = 30000) -> bool:
        """Abort and wait for the sweep's thread (the window closes)."""
        self.abort()
        thread = self.thread
        return True if thread is None else wait_for(thread, timeout_ms)

    def _on_thread_finished(self) -> None:
        self.thread = None
        self.worker = None


def _model_borrowed() -> bool:
    """True while a :func:`~workbench.ui.threading.run_in_background` call runs (it may hold the model)."""
    return any(t.objectName() == BACKGROUND_CALL for t in live_threads())


__all__ = ["BACKGROUND_CALL", "LRFindDialog", "LRFindWorker", "LRFinder"]
