"""The memory feed: the tree's Memory column and the Training panel's fit line, estimated off the GUI thread.

:class:`MemoryFeed` watches what a training step's memory depends on — the
opened model, its frozen parts and edits, the input shape, and the Training
settings' batch size, optimizer (and momentum), mixed precision and device — and,
:data:`DEBOUNCE_MS` after the last change, estimates it in core
(:func:`workbench.core.model.memory.estimate_memory` on a
:func:`~workbench.core.model.memory.meta_copy` of the model, so the model itself
is never touched by the worker) on a worker thread
(:func:`workbench.ui.threading.start_in_thread`). The result goes to
``ModelTreeModel.set_memory`` and to the run bar's ``FitLine``. Nothing is
estimated while a run owns the model; the last figures stay.

The feed lives here, above the wings, because it joins two of them (the
model tree and the Training panel), which never import each other.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from workbench.ui.threading import live_threads, start_in_thread, wait_for
from workbench.ui.train.fit_line import FIT_PENDING
from workbench.ui.train.lr_find_dialog import BACKGROUND_CALL

__all__ = ["MemoryFeed", "DEBOUNCE_MS", "SHUTDOWN_WAIT_MS", "training_choices"]

#: Wait this long (ms) after the last change before estimating: a spin box held down changes the batch size
#: many times a second, and each estimate runs a fake forward (50 ms for the demo, ~0.2 s for resnet18).
DEBOUNCE_MS = 300
#: How long a closing window waits for an estimate under way (ms): a QThread destroyed while it runs aborts the
#: process ("QThread: Destroyed while thread ... is still running"); a 1B-parameter model's takes a few seconds.
SHUTDOWN_WAIT_MS = 30_000


def training_choices(settings) -> dict[str, Any]:
    """What the estimate needs from the Training form: batch size, optimizer, momentum, precision, device.

    Parameters
    ----------
    settings : TrainingSettings
        The form (``config()``; its widgets when the form does not validate).

    Returns
    -------
    dict
        ``batch_size`` (int), ``optimizer`` (str), ``momentum`` (float), ``precision`` (``"fp32"``,
        ``"bf16"`` or ``"fp16"``: mixed precision is bf16 on a CPU, else the form's ``amp_dtype``), ``device``
        (``"cpu"``, ``"cuda:0"``) and ``activation_checkpointing`` (bool).
    """
    try:
        cfg = settings.config()
        batch, optimizer, momentum = cfg.data.batch_size, cfg.optimizer, cfg.momentum
        amp, amp_dtype, device = cfg.amp, cfg.amp_dtype, cfg.device
        checkpointing = bool(getattr(cfg, "activation_checkpointing", False))
    except (ValueError, TypeError):  # a field that does not validate (milestones...): the widgets say enough
        batch, optimizer = settings.batch_spin.value(), settings.optimizer_combo.currentData()
        momentum, amp, amp_dtype = settings.momentum_spin.value(), settings.amp_check.isChecked(), "bfloat16"
        device = settings.device_and_processes()[0]
        checkpointing = settings.activation_ckpt_check.isChecked()
    device = str(device or "cpu")
    precision = "fp32"
    if amp:
        precision = "fp16" if amp_dtype == "float16" and not device.startswith("cpu") else "bf16"
    return {"batch_size": int(batch), "optimizer": str(optimizer), "momentum": float(momentum),
            "precision": precision, "device": device, "activation_checkpointing": checkpointing}


class _EstimateJob(QObject):
    """Runs ``fn()`` on its thread and emits ``done(result or exception)``, then ``finished``."""

    finished = Signal()
    done = Signal(object)

    def __init__(self, fn: Callable[[], Any]):
        super().__init__()
        self._fn = fn

    @Slot()
    def run(self) -> None:
        try:
            result = self._fn()
        except Exception as exc:  # noqa: BLE001 - any error of the model's forward is shown in the fit line
            result = exc
        try:
            self.done.emit(result)
        finally:
            self.finished.emit()


def _estimate(snapshot, example, shape, choices: dict) -> tuple:
    """On the worker thread: ``(estimate, line, details, fits)`` (core calls only)."""
    from workbench.core.formatting import format_bytes
    from workbench.core.model.example_input import example_input
    from workbench.core.model.memory import (
        FIT_HEADROOM, device_memory, estimate_memory, fit_line, fit_summary,
    )

    if example is None:
        example = example_input(snapshot, shape)
    device = choices["device"]
    est = estimate_memory(snapshot, example, batch_size=choices["batch_size"], optimizer=choices["optimizer"],
                          precision=choices["precision"], momentum=choices["momentum"], device=device,
                          activation_checkpointing=choices["activation_checkpointing"])
    try:
        available = device_memory(device)[0]
    except (OSError, RuntimeError, ValueError):
        available = None
    root = est.root
    parts = (f"parameters {format_bytes(root.params_bytes)} + gradients {format_bytes(root.grads_bytes)} + "
             f"optimizer state {format_bytes(root.optimizer_bytes)} + activations "
             f"{format_bytes(root.activations_bytes)}, for batch {est.batch_size} ({est.optimizer}, {est.precision})")
    details = parts + "\n" + fit_summary(est, device, available=available)
    fits = None if available is None else est.total_bytes <= int(available * FIT_HEADROOM)
    return est, fit_line(est, device, available=available), details, fits


class MemoryFeed(QObject):
    """Keeps the Memory column and the fit line in step with the model and the Training settings.

    Parameters
    ----------
    session : Session
        The opened model (``model``, ``example``, ``input_shape``, ``running`` and their signals).
    settings : TrainingSettings
        The Training form (its ``changed`` signal; :func:`training_choices`).
    tree_model : ModelTreeModel
        Gets each estimate (``set_memory``).
    fit_line : FitLine
        Gets the one-line total (``show_fit``).
    tree_widget : ModelTreeWidget, optional
        Its ``inputShapeEntered`` re-estimates for the typed input shape.
    parent : QObject, optional
        Ends the feed (and drops a late result) when it is deleted.

    Signals
    -------
    estimated(object)
        A new ``MemoryEstimate`` was shown.
    """

    estimated = Signal(object)

    def __init__(self, session, settings, tree_model, fit_line, tree_widget=None, parent: QObject | None = None):
        super().__init__(parent if parent is not None else settings)
        self.session, self.settings, self.tree_model, self.fit_line = session, settings, tree_model, fit_line
        self._timer = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self._timer.timeout.connect(self._start)
        self._job: _EstimateJob | None = None
        self._thread = None
        self._closed = False
        self._dirty = False
        #: the error of the last estimate (None when it worked), as the fit line shows it
        self.last_error: str | None = None
        settings.changed.connect(self.schedule)
        session.modelChanged.connect(self._on_model_changed)
        session.structureChanged.connect(self.schedule)
        session.trainableChanged.connect(self.schedule)
        session.runningChanged.connect(self._on_running_changed)
        if tree_widget is not None:
            tree_widget.inputShapeEntered.connect(self._on_input_shape_entered)
        if session.model is not None:
            fit_line.show_fit(FIT_PENDING)
            self.schedule()

    def schedule(self) -> None:
        """Estimate again :data:`DEBOUNCE_MS` after the last call (a call meanwhile restarts the wait)."""
        self._dirty = True
        self._timer.start()

    def shutdown(self, timeout_ms: int = SHUTDOWN_WAIT_MS) -> bool:
        """No more estimates; wait up to ``timeout_ms`` (ms) for one under way. True when none runs any more.

        The window calls it when it closes, before its threads are torn down.
        """
        self._closed = True
        self._timer.stop()
        return wait_for(self._thread, timeout_ms) if self._job is not None else True

    def is_idle(self) -> bool:
        """True when no estimate is waiting or running (what a test waits for)."""
        return not self._dirty and self._job is None and not self._timer.isActive()

    @Slot(bool)
    def _on_running_changed(self, running: bool) -> None:
        if not running:
            self.schedule()  # a run may have changed what is frozen (staged unfreezing)

    @Slot(str)
    def _on_input_shape_entered(self, _text: str) -> None:
        self.schedule()

    @Slot()
    def _on_model_changed(self) -> None:
        self.tree_model.set_memory(None)  # the figures were another model's
        self.fit_line.show_fit(FIT_PENDING if self.session.model is not None else "")  # the line keeps its place
        self.schedule()

    @Slot()
    def _start(self) -> None:
        session = self.session
        if self._closed or self._job is not None or not self._dirty:
            return  # the running estimate starts the next one when it ends
        if session.model is None or session.running:
            self._dirty = False
            if self.fit_line.full_text == FIT_PENDING:  # a model set during a run: nothing is estimated till it ends
                self.fit_line.show_fit("")
            return
        if any(t.objectName() == BACKGROUND_CALL for t in live_threads()) or not self.fit_line.window().isVisible():
            # a background call may hold the model (a graph capture swaps in fake tensors); a window not shown
            # (not yet, or closed) needs no figures: look again later
            self._timer.start()
            return
        from workbench.core.model.memory import meta_copy

        self._dirty = False
        choices = training_choices(self.settings)
        example = session.example if session.input_shape is None else None
        shape = session.input_shape
        try:
            snapshot = meta_copy(session.model)  # on the GUI thread, which owns the model; no data is copied
        except Exception as exc:  # noqa: BLE001 - an attribute deepcopy refuses; said in the fit line
            self._show_error(f"the model cannot be copied to estimate it ({type(exc).__name__}: {exc})")
            return
        job = _EstimateJob(lambda: _estimate(snapshot, example, shape, choices))
        job.done.connect(self._on_done)
        self._job = job
        self._thread = start_in_thread(job, "memoryEstimateThread")

    @Slot(object)
    def _on_done(self, result) -> None:
        self._job = None
        if self._closed:
            return
        if self._dirty:  # something changed meanwhile: these figures are already stale
            self._timer.start()
            return
        if isinstance(result, BaseException):
            first = (str(result).strip().splitlines() or [type(result).__name__])[0]
            self._show_error(first)
            return
        est, line, details, fits = result
        self.last_error = None
        self.tree_model.set_memory(est)
        self.fit_line.show_fit(line, details, fits)
        self.estimated.emit(est)

    def _show_error(self, text: str) -> None:
        self.last_error = text
        self.tree_model.set_memory(None)
        self.fit_line.show_fit(f"Memory: not estimated — {text}",
                               "The estimate runs one forward on fake tensors of the input shape (Model dock) "
                               "with the Training settings' batch size; set an input shape the model takes.",
                               None)
