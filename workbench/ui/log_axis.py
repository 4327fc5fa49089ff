"""A log axis labelled at 1, 2 and 5 of each decade only.

pyqtgraph labels every one of 2 ... 9 when a log axis spans less than a decade,
and on a short axis (the loss plot's grad-norm axis, the Gradients tab) those
labels are written over each other: 0.4, 0.5, ... 0.9 in one smudge.
"""

from __future__ import annotations

import math

import pyqtgraph as pg

__all__ = ["LogTicks", "mantissa"]


class LogTicks(pg.AxisItem):
    """An :class:`pg.AxisItem` whose log-mode ticks within a decade are 1, 2 and 5 only.

    Parameters
    ----------
    orientation : str
        ``"left"``, ``"right"``, ``"top"`` or ``"bottom"``.
    **kwargs
        Passed to :class:`pg.AxisItem`.
    """

    def tickValues(self, minVal, maxVal, size):  # noqa: N802 - pyqtgraph's name
        """pyqtgraph's ticks, in log mode less those whose mantissa is not 1, 2 or 5."""
        levels = super().tickValues(minVal, maxVal, size)
        if not self.logMode:
            return levels
        return [(spacing, [v for v in values if mantissa(v) in (1.0, 2.0, 5.0)]) for spacing, values in levels]


def mantissa(log10_value: float) -> float:
    """The leading digit pattern of ``10 ** log10_value``, rounded: 1.0 for 0.01, 2.0 for 0.2, 5.0 for 50."""
    return round(10 ** (log10_value - math.floor(log10_value + 1e-9)), 3)
