"""The LR finder's learning-rate axis: log ticks at 1, 2 and 5 of a decade, as many as stand apart, read as LRs.

pyqtgraph labelled every one of 1 ... 9 of a decade on the sweep's short axis
(``0.5`` over ``0.6``), and with its automatic SI scale wrote ``10²`` for
``1e-7`` (the factor in the axis title). Here each label is the learning rate
itself (``1e-7``, ``0.001``), and a tick whose label would come nearer than
:data:`GAP_PX` to one already kept (decades first) is left out.
"""

from __future__ import annotations

from PySide6.QtGui import QFontMetricsF

from workbench.ui.log_axis import LogTicks

__all__ = ["LRAxis", "GAP_PX", "lr_text"]

#: Least room between two tick labels, px.
GAP_PX = 8


def lr_text(lr: float) -> str:
    """A learning rate as a tick label: ``1e-7``, ``2e-5``, ``0.001``, ``0.5``, ``10``."""
    text = f"{lr:.3g}"
    if "e" in text:
        mant, exp = text.split("e")
        text = f"{mant}e{int(exp)}"
    return text


class LRAxis(LogTicks):
    """A bottom axis in log mode for learning rates (:func:`lr_text` labels, none overlapping).

    Parameters
    ----------
    **kwargs
        Passed to :class:`pg.AxisItem` (orientation ``"bottom"``).
    """

    def __init__(self, **kwargs):
        super().__init__("bottom", **kwargs)
        self.enableAutoSIPrefix(False)  # the labels are the learning rates, not a multiple of them

    def tickStrings(self, values, scale, spacing):  # noqa: N802 - pyqtgraph's name
        """Each tick's learning rate (log mode: ``10 ** value``)."""
        if not self.logMode:
            return super().tickStrings(values, scale, spacing)
        return [lr_text(10.0 ** v) for v in values]

    def tickValues(self, minVal, maxVal, size):  # noqa: N802 - pyqtgraph's name
        """:class:`LogTicks`' ticks less those whose label would overlap one kept before (decades first)."""
        levels = super().tickValues(minVal, maxVal, size)
        if not self.logMode or maxVal <= minVal or size <= 0:
            return levels
        metrics = QFontMetricsF(self.style["tickFont"] or self.font())
        px = size / (maxVal - minVal)
        kept: list[tuple[float, float]] = []  # (centre, half width) of each label kept, px
        out = []
        for spacing, values in levels:
            level = []
            for v in values:
                centre, half = (v - minVal) * px, metrics.horizontalAdvance(lr_text(10.0 ** v)) / 2
                if all(abs(centre - c) >= half + h + GAP_PX for c, h in kept):
                    kept.append((centre, half))
                    level.append(v)
            out.append((spacing, level))
        return out
