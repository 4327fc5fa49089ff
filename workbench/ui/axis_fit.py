"""Axis text that fits its axis: category ticks that never overlap, axis titles that are never cut.

A bar chart of 24 layers names each bar with its module (``encoder.layer.11.attention.output.dense``):
written in full at every bar they run into each other, and a rotated axis title
longer than a short plot is cut at both ends ("og10 grad norm"). These helpers
shorten the names in the middle (the full name stays in a tooltip), label only
every k-th category so the labels keep a gap, and choose the longest title that fits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtGui import QFont, QFontMetricsF

__all__ = ["ELLIPSIS", "axis_font", "category_ticks", "elide_middle", "fit_axis_title"]

ELLIPSIS = "…"
#: Pixels kept free between two neighbouring tick labels.
GAP_PX = 8.0


def elide_middle(text: str, max_chars: int) -> str:
    """``text`` shortened to ``max_chars`` characters with an ellipsis in the middle (its start and end kept).

    Module names differ at both ends (``layer3.1.conv2``), so the middle goes first.

    Parameters
    ----------
    text : str
    max_chars : int
        At least 3.

    Returns
    -------
    str
    """
    if len(text) <= max_chars:
        return text
    keep = max(2, max_chars) - 1
    head = (keep + 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (keep - head):]


def axis_font(axis: pg.AxisItem) -> QFont:
    """The font ``axis`` draws its tick labels in."""
    return axis.style["tickFont"] or axis.font()


def category_ticks(names: Sequence[str], length_px: float, font: QFont, *, along: bool = True,
                   max_chars: int = 16, lead_px: float | None = None) -> list[tuple[float, str]]:
    """Ticks ``(index, label)`` for categories at 0, 1, ... on an axis ``length_px`` long, none overlapping.

    Names are elided to ``max_chars`` (:func:`elide_middle`); only every k-th
    category is labelled, k the least that leaves :data:`GAP_PX` between labels.

    Parameters
    ----------
    names : sequence of str
        One per category, in axis order.
    length_px : float
        Length of the axis in pixels.
    font : QFont
        The tick font (:func:`axis_font`).
    along : bool
        True when the labels run along the axis (a bottom axis: their widths count),
        False when they stack across it (a left axis: their heights count).
    max_chars : int
        Longest label, in characters.
    lead_px : float, optional
        Room before the first category's centre (to the widget's edge); labels that would
        stick out of it are skipped, the first one labelled is the first whose label fits.

    Returns
    -------
    list of (float, str)
    """
    if not names:
        return []
    labels = [elide_middle(n, max_chars) for n in names]
    metrics = QFontMetricsF(font)
    size = max(metrics.horizontalAdvance(s) for s in labels) if along else metrics.height()
    fit = max(1, math.floor(max(length_px, 1.0) / (size + GAP_PX)))
    every = max(1, math.ceil(len(names) / fit))
    start = 0
    if along and lead_px is not None:
        step_px = max(length_px, 1.0) / len(names)
        start = max(0, math.ceil((size / 2 - lead_px) / step_px))
    return [(float(i), labels[i]) for i in range(start, len(names), every)]


def fit_axis_title(item: pg.PlotItem, side: str, titles: Sequence[str]) -> str:
    """Set the first of ``titles`` that fits along axis ``side`` of ``item`` as its title; ``""`` hides it.

    Parameters
    ----------
    item : pg.PlotItem
    side : str
        ``"left"``, ``"right"``, ``"top"`` or ``"bottom"``.
    titles : sequence of str
        Longest first, e.g. ``("log10 grad norm", "log10 norm")``.

    Returns
    -------
    str
        The title set.
    """
    axis = item.getAxis(side)
    length = axis.geometry().height() if side in ("left", "right") else axis.geometry().width()
    metrics = QFontMetricsF(axis.label.font())
    chosen = next((t for t in titles if metrics.horizontalAdvance(t) + 4 <= length), "")
    if chosen != axis.labelText or axis.label.isVisible() != bool(chosen):
        if chosen:
            item.setLabel(side, chosen)
        else:
            axis.labelText = ""
            axis.showLabel(False)
    return chosen
