"""Run one probe batch off the GUI thread.

:class:`ProbeBatchWorker` is a QObject moved to a QThread (superqt wiring, see
:func:`start_probe_worker`). Its :meth:`~ProbeBatchWorker.run` slot builds the
batch (random data of the input shape, or the first samples of a dataset) and
calls :func:`workbench.core.probe.activations.probe_batch`, which runs one forward pass in
``eval()`` under ``torch.no_grad()`` and restores every module's mode. Only
CPU results (:class:`~workbench.core.probe.activations.ActivationStats`, and the weight
histograms of chosen parameters from :func:`workbench.core.probe.gradients.weight_histograms`)
come back, by the ``done`` signal; an exception comes back as ``failed(traceback text)``.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

import torch
from PySide6.QtCore import QObject, Signal, Slot

from workbench.core.probe.activations import probe_batch
from workbench.core.probe.gradients import weight_histograms
from workbench.core.probe.health import activation_badges
from workbench.core.train.launch.in_thread import worker_thread_count


class ProbeBatchWorker(QObject):
    """One probe batch: ``make_batch()`` then ``probe_batch(model, batch, names)``.

    Parameters
    ----------
    model : nn.Module
    names : list of str
        Modules to probe.
    make_batch : callable
        ``make_batch() -> Tensor``, run on the worker thread (may raise ``DataError``).
    probe_kwargs : dict, optional
        Passed to :class:`~workbench.core.probe.activations.ActivationProbe`.
    weight_names : list of str, optional
        Parameters whose weight histograms come back too (names no longer in the model are skipped).

    Signals
    -------
    done(dict)
        ``{"stats": dict[str, ActivationStats], "badges": dict[str, list[Badge]],
        "weights": dict[str, Histogram]}``.
    failed(str)
        The formatted traceback.
    finished()
        Always last.
    """

    done = Signal(dict)
    failed = Signal(str)
    finished = Signal()

    def __init__(
        self,
        model,
        names: list[str],
        make_batch: Callable,
        probe_kwargs: dict | None = None,
        weight_names: list[str] | None = None,
    ):
        super().__init__()
        self.weight_names = list(weight_names or [])
        self.model = model
        self.names = list(names)
        self.make_batch = make_batch
        self.probe_kwargs = dict(probe_kwargs or {})
        self.aborted = False

    @Slot()
    def run(self) -> None:
        """Build the batch, probe, emit ``done`` (unless aborted) or ``failed``, then ``finished``."""
        try:
            torch.set_num_threads(worker_thread_count())  # new threads inherit the GUI thread's 1
            stats = probe_batch(self.model, self.make_batch(), self.names, **self.probe_kwargs)
            params = {n for n, _ in self.model.named_parameters()}
            weights = weight_histograms(self.model, [n for n in self.weight_names if n in params])
            if not self.aborted:
                self.done.emit({"stats": stats, "badges": activation_badges(stats), "weights": weights})
        except Exception as exc:  # noqa: BLE001 - reported to the GUI, never swallowed
            if not self.aborted:
                self.failed.emit("".join(traceback.format_exception(exc)))
        finally:
            self.finished.emit()
