"""What the curves and the progress line show of a run, and how often they are repainted.

:class:`RunView` takes the run's plan, metrics, epoch ends and end (from the
panel's event handlers) into the plot buffers (:class:`~workbench.ui.train.plot_feed.PlotFeed`)
and the progress line (:class:`~workbench.ui.train.run_progress.RunProgress`),
and repaints them on a timer, never per batch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, QTimer

from workbench.ui.train.plot_feed import PlotFeed

__all__ = ["RunView", "REDRAW_MS", "METRICS_MS"]

#: Plot redraw interval during a run, ms (metrics arrive every METRICS_MS and are only
#: appended to the buffers; the curves are redrawn at most this often). Every
#: repaint is CPU the training process does not get: on 2 cores, 200 ms gave a GUI
#: p99 of 19 ms (5 pairs, median) and 500 ms 15.6 ms, at the same training speed.
REDRAW_MS = 500
#: The trainer's ``emit_every_ms`` for runs started here: every step's loss still arrives, in
#: batches 4x a second instead of 25x (the curves redraw at 2 Hz anyway). Each batch wakes the
#: window's relay thread and GUI thread; on 2 cores that CPU is taken from training
#: (5 interleaved pairs: 0.87 vs 0.81 of the plain loop, GUI p99 20.3 vs 25.5 ms).
METRICS_MS = REDRAW_MS // 2


class RunView(QObject):
    """The run as the plots and the progress line show it.

    Parameters
    ----------
    plots : TrainingPlots
    progress : RunProgress
    status : callable
        ``status(text, ms)``: a line for the status bar.
    parent : QObject, optional

    Attributes
    ----------
    feed : PlotFeed
    run_dir : str or None
        Folder of the current / last run (once the trainer created it).
    skipped_images : list of str
        ``"<file> (class folder <name>): <reason>"`` of the images the current run skipped as unreadable.
    """

    def __init__(self, plots, progress, status: Callable[[str, int], object], parent: QObject | None = None):
        super().__init__(parent)
        self.plots, self.progress, self._status = plots, progress, status
        self.feed = PlotFeed(plots)
        self.run_dir: str | None = None
        self.skipped_images: list[str] = []
        self._last_samples: float | None = None
        self._last_epoch: dict = {}
        self._last_metrics: dict | None = None
        self._attached: tuple[str | None, str | None] | None = None  # (host, run name) of an attached run
        self._phase = 0
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_MS // 2)  # plots and progress take turns
        self._timer.timeout.connect(self.redraw)

    def begin(self, epochs: int, device, run_dir: str | None) -> None:
        """A run starts: empty curves, the progress of ``epochs`` on ``device``, repaints on."""
        self._last_samples, self._last_epoch, self.skipped_images = None, {}, []
        self.run_dir, self._attached = run_dir, None
        self.feed.begin()
        self.progress.begin(epochs, device)
        self._timer.start()

    def follow_attached(self, host: str | None = None, run_name: str | None = None) -> None:
        """The run begun is attached (after :meth:`begin`): its folder is on the machine that trains it.

        Parameters
        ----------
        host : str, optional
            The ssh host of a remote run (None: a run this machine reaches directly).
        run_name : str, optional
            A submitted remote run's name, for ``workbench pull --host HOST RUN`` (None: not a submitted run).
        """
        self._attached = (host, run_name)

    def folder_note(self) -> str:
        """Where the run's folder is, for the status bar: ``"run folder runs/x"``, ``"run folder run on gpu-box;
        copy it here with: workbench pull --host gpu-box x"``, or ``"no run folder was created"``."""
        here = self.run_dir if self.run_dir and Path(self.run_dir).is_dir() else None
        if self._attached is None:
            return f"run folder {here}" if here else "no run folder was created"
        host, name = self._attached
        if not self.run_dir:
            return "its run folder is on the machine that trained it"
        if host is None:
            return f"run folder {self.run_dir}" + ("" if here else ", on the machine that trained it")
        pull = f"; copy it here with: workbench pull --host {host} {name}" if name else ""
        return f"run folder {self.run_dir} on {host}{pull}"

    def fit_started(self, info: dict) -> None:
        """The trainer's plan: the progress's totals, a resumed run's past epochs, the run folder."""
        self.progress.set_plan(info)
        self.feed.plan(info)
        for metrics in info.get("history") or []:  # a resumed run: draw the epochs it continues
            self.epoch_ended(metrics)
        if info.get("run_dir"):
            self.run_dir = info["run_dir"]
            note = f" ({info['data_note']})" if info.get("data_note") else ""
            where = f" on {self._attached[0]}" if self._attached and self._attached[0] else ""
            self._status(f"Training… run folder {self.run_dir}{where}{note}", 8000)

    def add_metrics(self, m: dict) -> None:
        """A batch of step metrics into the buffers (the progress is repainted on the next redraw)."""
        last = self.feed.add_metrics(m)
        if last is None:
            return
        self.progress.add_steps(*last)
        self._last_metrics = m
        samples = m.get("samples")
        if samples is not None and len(samples):
            self._last_samples = float(samples[-1])

    def epoch_ended(self, m: dict) -> None:
        """An epoch's metrics into the epoch curves; the images it skipped are said."""
        self.feed.add_epoch(m)
        self._last_epoch = m
        skipped = [str(name) for name in (m.get("skipped") or [])]
        if skipped:
            self.skipped_images.extend(skipped)
            shown = "; ".join(skipped[:3]) + (f" and {len(skipped) - 3} more" if len(skipped) > 3 else "")
            epoch = m.get("epoch") if isinstance(m.get("epoch"), (int, float)) else 0
            self._status(f"Epoch {int(epoch) + 1}: skipped {len(skipped)} unreadable image(s): {shown}", 20000)

    def redraw(self) -> None:
        """Repaint the plots, or the progress, each at most every ``REDRAW_MS`` (painting is the GUI's main cost).

        The timer fires twice per ``REDRAW_MS`` and the two take turns (the step
        curves; the progress and, after an epoch's end, one plot's epoch curves):
        each event-loop pass then holds the GUI thread about half as long. A 10 ms timer
        was late by more than 16 ms on about half the combined redraws (2-core
        reference machine), so that the two together were the largest share of
        ``gui_latency_p99_ms``.
        """
        self._phase ^= 1
        if self._phase:
            self.plots.refresh_steps()
            return
        m, self._last_metrics = self._last_metrics, None
        if m is not None:
            self.progress.show_metrics(m)
        self.plots.refresh_epochs(one_plot=True)  # an epoch's end: one plot per pass, not with the step curves

    def finished(self, reason: str) -> None:
        """The run ended for ``reason``: say so (with its folder), show the last metrics and the end."""
        self._status(f"Training {reason} - {self.folder_note()}", 10000)
        m, self._last_metrics = self._last_metrics, None
        if m is not None:  # the metrics that arrived after the last redraw tick
            self.progress.show_metrics(m)
        self.progress.finish(reason, int(self.plots.steps.last("step", 0.0)))

    def end(self) -> None:
        """The run's thread finished: repaints off, everything drawn once more."""
        self._timer.stop()
        self.plots.refresh(force=True)

    def last_run_stats(self) -> dict:
        """``{"samples", "time"}`` of the last run: training samples seen, and seconds from the start of
        ``fit()`` to its last epoch's end (train + validation); ``{}`` before a run's first epoch."""
        m = self._last_epoch
        if not m or self._last_samples is None:
            return {}
        return {"samples": float(self._last_samples), "time": float(m.get("time", math.nan))}
