"""The time left of a run, as the progress bar says it: :class:`EtaEstimator`.

A moving estimate, as Lightning's and fastai's progress bars give one: steps
per second over the last :data:`WINDOW_S` seconds of the trainer's own clock
(the ``time`` of each step's metrics), never from the wall time since Start,
which counts the training process's start, the pre-flight scan and the first
step's one-off costs (oneDNN creating its kernels). Until :data:`MIN_STEPS`
steps have been timed it says "estimating…" (the first ETA of a 2-minute run
read "31:23"). After a pause the window starts again and the rate before the
pause stands in until the new window is long enough.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["EtaEstimator", "MIN_STEPS", "WINDOW_S", "format_duration"]

#: Steps that must have been timed before an ETA is shown.
MIN_STEPS = 10
#: Seconds of the trainer's clock the rate is measured over (the newest samples).
WINDOW_S = 30.0
#: What the progress bar says while there is no estimate yet.
ESTIMATING = "ETA estimating…"


def format_duration(seconds: float) -> str:
    """``"1:02:03"`` / ``"2:03"`` for a number of seconds; ``"–"`` when it is not a finite, non-negative number."""
    if not math.isfinite(seconds) or seconds < 0:
        return "–"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class EtaEstimator:
    """Steps per second over a moving window of ``(time, step)`` samples, and the time left.

    Parameters
    ----------
    min_steps : int
        Steps timed (since the first sample, or since a pause) before an estimate is given.
    window_s : float
        Seconds of samples the rate is measured over.
    """

    def __init__(self, min_steps: int = MIN_STEPS, window_s: float = WINDOW_S):
        self.min_steps = int(min_steps)
        self.window_s = float(window_s)
        self._samples: deque[tuple[float, int]] = deque()
        self._rate_before = math.nan  # steps/s measured before the last pause

    def reset(self) -> None:
        """A new run: forget every sample and rate."""
        self._samples.clear()
        self._rate_before = math.nan

    def restart_window(self) -> None:
        """After a pause: the time paused is no step time. The rate so far stands in until the new window fills."""
        rate = self._window_rate()
        if math.isfinite(rate):
            self._rate_before = rate
        self._samples.clear()

    def add(self, time_s: float, step: int) -> None:
        """The trainer finished ``step`` at ``time_s`` seconds of its clock (a sample per metrics batch is enough)."""
        if not (math.isfinite(time_s) and math.isfinite(step)):
            return
        if self._samples and step <= self._samples[-1][1]:
            return  # a repeated or older sample (a rollback restarts the steps: keep the window's)
        self._samples.append((float(time_s), int(step)))
        # older samples leave once the rest still spans the window and holds min_steps steps
        while (len(self._samples) > 2 and time_s - self._samples[1][0] >= self.window_s
               and step - self._samples[1][1] >= self.min_steps):
            self._samples.popleft()

    def _window_steps(self) -> int:
        return self._samples[-1][1] - self._samples[0][1] if len(self._samples) >= 2 else 0

    def _window_rate(self) -> float:
        if len(self._samples) < 2:
            return math.nan
        (t0, s0), (t1, s1) = self._samples[0], self._samples[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else math.nan

    def steps_per_s(self) -> float:
        """The rate the estimate uses (NaN while estimating)."""
        if self._window_steps() >= self.min_steps:
            return self._window_rate()
        return self._rate_before

    def seconds_left(self, total_steps: float) -> float | None:
        """Seconds until step ``total_steps``; None while there is no estimate yet."""
        rate = self.steps_per_s()
        if not self._samples or not math.isfinite(total_steps) or not math.isfinite(rate) or rate <= 0:
            return None
        return max(0.0, (total_steps - self._samples[-1][1]) / rate)

    def text(self, total_steps: float) -> str:
        """``"ETA 1:59"``, or ``"ETA estimating…"`` before :attr:`min_steps` steps were timed."""
        left = self.seconds_left(total_steps)
        return ESTIMATING if left is None else f"ETA {format_duration(left)}"
