"""How long a Stop waits for the step in progress before the window offers to end the training process.

A fixed 10 s asked "Training does not stop … (a forward that hangs?)" of every
run whose steps take 10 s or more. :class:`StepClock` keeps the durations of
the run's recent steps (from the ``time`` column of its
:class:`~workbench.core.train.events.Metrics` events: seconds since the run
began, one row per step), and the wait is :data:`STOP_STEPS` times the slowest
of them, never less than :data:`STOP_FLOOR_MS`. Qt-free.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

__all__ = ["RECENT_STEPS", "STOP_FLOOR_MS", "STOP_STEPS", "StepClock"]

#: The shortest wait after Stop, ms: a step of a few ms that has not returned in 10 s is stuck, not slow.
STOP_FLOOR_MS = 10000
#: The wait after Stop in steps: the slowest recent step may come again, slower still (a validation pass, a
#: checkpoint, a busy machine, an input pipeline refilling); three of them are a hang, not a slow step.
STOP_STEPS = 3
#: How many of the latest steps "recent" means (their slowest sets the wait; an early compile step is forgotten).
RECENT_STEPS = 20


class StepClock:
    """The durations of a run's latest steps, and the Stop timeout they imply.

    Attributes
    ----------
    steps : int
        Steps seen since :meth:`reset`.
    """

    def __init__(self):
        self._durations: deque[float] = deque(maxlen=RECENT_STEPS)
        self._last_time: float | None = None
        self.steps = 0

    def reset(self) -> None:
        """A new run (its ``time`` column starts again at 0)."""
        self._durations.clear()
        self._last_time = None
        self.steps = 0

    def add(self, values: dict) -> None:
        """The rows of one ``Metrics`` event: ``values["time"]`` (S,) seconds since the run began."""
        times = values.get("time")
        if times is None:
            return
        for t in np.asarray(times, dtype=np.float64).ravel():
            if not math.isfinite(t):
                continue
            previous = 0.0 if self._last_time is None else self._last_time
            if t >= previous:
                self._durations.append(t - previous)
            self._last_time = float(t)
            self.steps += 1

    def slowest_s(self) -> float | None:
        """The slowest of the recent steps, s (None before the first)."""
        return max(self._durations) if self._durations else None

    def timeout_ms(self, floor_ms: int | None = None, steps: int | None = None) -> int:
        """:data:`STOP_STEPS` times the slowest recent step, at least :data:`STOP_FLOOR_MS`, ms."""
        floor_ms = STOP_FLOOR_MS if floor_ms is None else floor_ms
        steps = STOP_STEPS if steps is None else steps
        slowest = self.slowest_s()
        return int(max(floor_ms, 0 if slowest is None else math.ceil(steps * slowest * 1000.0)))
