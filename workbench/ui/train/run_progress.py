"""The row under the Training dock's plots: progress bar, input-wait meter and the ranks line.

:class:`RunProgress` says where a run is: ``"epoch 2/5 · step 90/230 · 1,840
samples/s · data wait 12% · ETA 0:41"`` while it trains, what it does before its
first step, and how it ended (``"completed · epoch 5/5 · step 230 · 1,790
samples/s"``). It only formats what the run's events carry; the panel calls it
on its redraw tick, never once per batch.
"""

from __future__ import annotations

import math
from collections import deque

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QVBoxLayout, QWidget

from workbench.core.train.data.loaders import INPUT_BOUND_SHARE, input_wait_text
from workbench.ui.train.progress_eta import EtaEstimator

__all__ = ["RunProgress", "RATE_WINDOW_S"]

#: Seconds of the trainer's clock the samples/s figure is measured over.
RATE_WINDOW_S = 2.0
#: A rate needs at least this much time between its first and last sample, s.
RATE_MIN_SPAN_S = 0.2
_STOPPING = " · stopping…"


class RunProgress(QWidget):
    """Progress bar (``progressBar``), input-wait meter (``inputMeterLabel``) and ranks line (``ranksLabel``).

    Attributes
    ----------
    samples_per_s : float
        Training samples per second over the last :data:`RATE_WINDOW_S` (NaN before a rate).
    paused : bool
        Said in the bar while True.
    """

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.bar = QProgressBar()
        self.bar.setObjectName("progressBar")
        self.bar.setRange(0, 1)
        self.bar.setValue(0)
        self.bar.setTextVisible(True)
        self.bar.setFormat("idle")
        self.input_label = QLabel("")
        self.input_label.setObjectName("inputMeterLabel")
        self.input_label.setToolTip("Share of the step time spent waiting for the next batch over the last "
                                    "emission window (host time, no device sync)")
        self.ranks_label = QLabel("")
        self.ranks_label.setObjectName("ranksLabel")
        self.ranks_label.setToolTip("Data-parallel run: each rank's last step, samples/s and the age of its "
                                    "last heartbeat; a rank silent for 60 s ends the run. The probes show "
                                    "rank 0's replica; gradient norms are those after the all-reduce.")
        self.ranks_label.setVisible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        row.addWidget(self.bar, 1)
        row.addWidget(self.input_label)
        layout.addLayout(row)
        layout.addWidget(self.ranks_label)
        self.eta = EtaEstimator()
        self.samples_per_s = math.nan
        self.paused = False
        self._rate_window: deque = deque()
        self._epochs = 0
        self._device = "cpu"
        self._steps_per_epoch = math.nan

    def begin(self, epochs: int, device: str) -> None:
        """A run starts: forget the last one; ``epochs`` planned, on ``device`` (``"cuda:0"``...)."""
        self._epochs = int(epochs)
        self._device = str(device).split(":")[0]
        self._steps_per_epoch = math.nan
        self.samples_per_s = math.nan
        self.paused = False
        self._rate_window = deque()
        self.eta.reset()
        self.input_label.setText("")
        self.ranks_label.setText("")
        self.ranks_label.setVisible(False)
        self.bar.setRange(0, max(1, self._epochs))
        self.bar.setValue(0)
        self.bar.setFormat("starting…")

    def set_plan(self, info: dict) -> None:
        """The run's ``FitStarted`` info: its steps per epoch (when its loader has a length)."""
        self._steps_per_epoch = float(info.get("steps_per_epoch") or math.nan)

    def add_steps(self, time_s: float, step: int) -> None:
        """One timed step for the ETA (the trainer's clock, s)."""
        self.eta.add(time_s, step)

    def show_metrics(self, m: dict) -> None:
        """Repaint from the newest ``Metrics`` values (``step``, ``time``, ``samples``, ``epoch_float``, ``input_wait``...)."""
        def last(key, default=math.nan):
            arr = m.get(key)
            return float(arr[-1]) if arr is not None and len(arr) else default

        self._add_rate(m, last("time"), last("samples"))
        step = int(last("step", 0))
        epochs = self._epochs
        epoch_f = last("epoch_float", last("epoch"))
        total = last("total_steps")
        spe = last("steps_per_epoch", self._steps_per_epoch)
        if not math.isfinite(total) and math.isfinite(spe):
            total = spe * epochs
        if math.isfinite(total) and total > 0:
            self.bar.setRange(0, int(total))
            self.bar.setValue(min(step, int(total)))
        # epoch_float reaches 1.0 at the last step of the first epoch: that step is still in epoch 1
        epoch_shown = max(1, math.ceil(epoch_f - 1e-9)) if math.isfinite(epoch_f) else 1
        if epochs > 0:
            parts = [f"epoch {min(epoch_shown, epochs)}/{epochs}",
                     f"step {step}" + (f"/{int(total)}" if math.isfinite(total) else "")]
        else:  # no plan (an attached script): where it is, no total, no ETA
            epoch = last("epoch")
            parts = [f"epoch {int(epoch) + 1}" if math.isfinite(epoch) else "", f"step {step}"]
            parts = [p for p in parts if p]
            total = math.nan
        if math.isfinite(self.samples_per_s):
            parts.append(f"{self.samples_per_s:,.0f} samples/s")
        self.show_input_wait(last("input_wait"))
        if epochs > 0:
            parts.append(self.eta.text(total))
        if self.paused:
            parts.append("paused")
        self.bar.setFormat(" · ".join(parts))

    def _add_rate(self, m: dict, t_now: float, seen: float) -> None:
        if not (math.isfinite(t_now) and math.isfinite(seen)):
            return
        times, samples = m.get("time"), m.get("samples")
        if not self._rate_window and times is not None and len(times) > 1:  # a batch of steps spans time too
            self._rate_window.append((float(times[0]), float(samples[0])))
        self._rate_window.append((t_now, seen))
        while len(self._rate_window) > 2 and t_now - self._rate_window[1][0] >= RATE_WINDOW_S:
            self._rate_window.popleft()
        (t_a, s_a) = self._rate_window[0]
        if t_now - t_a > RATE_MIN_SPAN_S:
            self.samples_per_s = (seen - s_a) / (t_now - t_a)

    def show_input_wait(self, share: float) -> None:
        """The input-bound meter: ``"data wait 12%"``, or the hint when data dominates the step time."""
        text = input_wait_text(share, self._device)
        if text != self.input_label.text():
            self.input_label.setText(text)
        bound = math.isfinite(share) and share >= INPUT_BOUND_SHARE
        sheet = "color: #b04000; font-weight: bold;" if bound else ""
        if sheet != self.input_label.styleSheet():  # a style sheet re-polishes the label and lays the panel out
            self.input_label.setStyleSheet(sheet)

    def show_starting(self, text: str) -> None:
        """Before the first step (the pre-flight image scan, a process starting): say where it is."""
        self.bar.setFormat(f"starting… {text}")

    def show_ranks(self, text: str) -> None:
        """A data-parallel run's per-rank line, on its own row under the bar."""
        self.ranks_label.setText(text + " · probes: rank 0's replica")
        self.ranks_label.setVisible(True)

    def show_stopping(self) -> None:
        """Stop was asked: say so until the run ends."""
        if _STOPPING not in self.bar.format():
            self.bar.setFormat(self.bar.format() + _STOPPING)

    def finish(self, reason: str, last_step: int) -> None:
        """The run ended with ``reason`` after ``last_step`` steps: no ETA, no "paused"; a completed run fills the bar."""
        fmt = self.bar.format().replace(_STOPPING, "")
        if fmt.startswith("starting"):  # ended before its first step
            fmt = ""
        fmt = " · ".join(part for part in fmt.split(" · ") if not part.startswith(("ETA", "paused")))
        if reason == "completed" and self._epochs > 0:  # the text gives the steps done, not a planned total
            self.bar.setValue(self.bar.maximum())
            fmt = f"epoch {self._epochs}/{self._epochs} · step {int(last_step)}"
            if not math.isfinite(self.samples_per_s) and len(self._rate_window) > 1:  # a run shorter than the
                (t_a, s_a), (t_b, s_b) = self._rate_window[0], self._rate_window[-1]  # rate's warm-up
                self.samples_per_s = (s_b - s_a) / (t_b - t_a) if t_b > t_a else math.nan
            if math.isfinite(self.samples_per_s):
                fmt += f" · {self.samples_per_s:,.0f} samples/s"
        self.paused = False
        self.bar.setFormat(f"{reason} · {fmt}" if fmt else reason)
