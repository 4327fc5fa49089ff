"""Models whose training forward fails in a chosen way at a chosen step (for the training-process fault tests).

Importable by module name, so a training process (spawned with this sys.path)
unpickles them like any model class of a package.
"""

from __future__ import annotations

import ctypes
import os
import threading

import torch

from workbench.core.model.demo import DigitsCNN


class FaultyDigitsCNN(DigitsCNN):
    """The demo CNN whose ``after``-th training forward (1-based) does ``fault``.

    ``fault``: ``"raise"`` (RuntimeError), ``"abort"`` (``os.abort()``, SIGABRT),
    ``"exit"`` (``os._exit(3)``), ``"segfault"`` (reads address 0), ``"hang"``
    (waits on an Event nobody sets: a forward that never returns); anything else (``"none"``) never fails.
    Forwards without gradients (pre-flight, validation) do not count.
    """

    def __init__(self, fault: str, after: int = 5):
        super().__init__()
        self.fault = fault
        self.after = after
        self.calls = 0

    def forward(self, x):
        if self.training and torch.is_grad_enabled():
            self.calls += 1
            if self.calls == self.after:
                self._fail()
        return super().forward(x)

    def _fail(self):
        print(f"forward {self.calls}: {self.fault}", flush=True)
        if self.fault == "raise":
            raise RuntimeError(f"forward {self.calls} failed on purpose")
        if self.fault == "abort":
            os.abort()
        if self.fault == "exit":
            os._exit(3)
        if self.fault == "segfault":
            ctypes.string_at(0)
        if self.fault == "hang":
            threading.Event().wait()  # never returns; only ending the process ends it


class SlowDigitsCNN(DigitsCNN):
    """The demo CNN whose training forwards from the ``after``-th on (1-based) each sleep ``delay`` seconds."""

    def __init__(self, delay: float, after: int = 3):
        super().__init__()
        self.delay = float(delay)
        self.after = after
        self.calls = 0

    def forward(self, x):
        if self.training and torch.is_grad_enabled():
            self.calls += 1
            if self.calls >= self.after:
                import time

                time.sleep(self.delay)
        return super().forward(x)
