"""Keep a live plot's view on its data while moving it as rarely as possible.

Written here rather than using pyqtgraph's auto-range because of what that costs
during a run: auto-range re-fits the view at every ``setData``, and each new
view makes every axis lay out its ticks again (``AxisItem.generateDrawSpecs``)
and the whole plot repaint. On the 2-core reference machine one refresh of the
training plots took 17 ms (median) with auto-range and 3 ms with a still view,
and the window's repaints are what delays its event loop (``gui_latency_p99_ms``).
"""

from __future__ import annotations

import math

import pyqtgraph as pg

__all__ = ["X_PAD", "FollowRange", "ceil_2_digits", "nice_ceil"]

#: Headroom above the data's top, as a share of the data's span.
Y_PAD = 0.08
#: Room left below a falling curve whose values can be negative, as a share of the data's span.
Y_FALL_ROOM = 0.25
#: Room right of a planned extent (:meth:`FollowRange.expect_x`), as a share of it: the last epoch's
#: markers (the 16 px best-epoch star) sit at its end and were cut in half by the view's edge.
X_PAD = 0.04


def nice_ceil(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^k that is >= ``value`` (``value`` > 0)."""
    if not math.isfinite(value) or value <= 0:
        return 1.0
    exp = math.floor(math.log10(value))
    for mult in (1.0, 2.0, 5.0, 10.0):
        bound = mult * 10.0 ** exp
        if bound >= value * (1 - 1e-12):
            return bound
    return 10.0 ** (exp + 1)


def ceil_2_digits(value: float) -> float:
    """``value`` (> 0) rounded up to two significant digits: 2.484 -> 2.5, 0.01234 -> 0.013."""
    unit = 10.0 ** (math.floor(math.log10(value)) - 1)
    return math.ceil(value / unit * (1 - 1e-12)) * unit


def _y_view(y_lo: float, y_hi: float) -> tuple[float, float]:
    """The y view for data in ``[y_lo, y_hi]``: from 0 for data that are never negative (a loss, a learning rate).

    A falling loss then moves the view only when it rises above its top, not at
    each new minimum (every move re-lays out the axes and repaints the plot: 5-24 ms
    on the 2-core reference machine against 1-2 ms for a still view). Data below 0
    get room below them, so a falling curve does not move the view at each refresh either.
    """
    if y_lo >= 0.0:  # the view spans [0, y_hi]; its top rounded up to 2 digits, so runs alike share one view
        return 0.0, (ceil_2_digits(y_hi * (1.0 + Y_PAD)) if y_hi > 0.0 else 1.0)
    span = max(y_hi - y_lo, abs(y_hi) * 1e-3, 1e-12)
    return y_lo - Y_FALL_ROOM * span, y_hi + Y_PAD * span


class FollowRange:
    """The view of a plot the user has not zoomed follows its data, in steps.

    x grows to the next 1-2-5 bound past the data (at least 25 % headroom), or spans the planned
    extent (:meth:`expect_x`) and :data:`X_PAD` of it more, y
    spans 0 (data never negative) or the data's minimum less 25 % of their span,
    to their maximum plus 8 % (from 0: rounded up to two digits); the view changes
    only when data leave it, and is not set again when it already shows that range. A pan or
    zoom by the user (``sigRangeChangedManually``) stops the following; pyqtgraph's
    "auto" button (which turns its auto-range on) or :meth:`reset` starts it again.

    Parameters
    ----------
    plot : pg.PlotWidget
    follow_y : bool
        Also manage the y range (False: y keeps pyqtgraph's own auto-range).
    """

    def __init__(self, plot: pg.PlotWidget, follow_y: bool = True):
        self.vb = plot.getPlotItem().getViewBox()
        self.follow_y = follow_y
        self.active = True
        self._x: tuple[float, float] | None = None
        self._y: tuple[float, float] | None = None
        self._expected: tuple[float, float] | None = None
        self.vb.sigRangeChangedManually.connect(self._on_manual)
        self._take_over()

    def _take_over(self) -> None:
        self.vb.enableAutoRange(axis=pg.ViewBox.XAxis, enable=False)
        if self.follow_y:
            self.vb.enableAutoRange(axis=pg.ViewBox.YAxis, enable=False)

    def _on_manual(self, *args) -> None:
        self.active = False

    def reset(self) -> None:
        """Follow the data again from the next :meth:`update` (a new run)."""
        self.active = True
        self._x = self._y = None
        self._expected = None
        self._take_over()

    def expect_x(self, lo: float, hi: float) -> None:
        """The x extent the data will fill (a run's planned steps): the view takes it (with :data:`X_PAD`
        more on the right) at once and keeps it."""
        if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
            self._expected = (float(lo), float(hi))

    def update(self, x_lo: float, x_hi: float, y_lo: float = math.nan, y_hi: float = math.nan) -> bool:
        """Make the view hold ``[x_lo, x_hi] x [y_lo, y_hi]``; True when the view moved.

        Non-finite bounds leave that axis as it is.
        """
        auto = self.vb.autoRangeEnabled()
        if auto[0] or (self.follow_y and auto[1]):  # the user pressed "auto": follow again
            self.reset()
        if not self.active:
            return False
        x, y = self._x, self._y
        if math.isfinite(x_lo) and math.isfinite(x_hi):
            if x is None or x_hi > x[1] or x_lo < x[0]:
                e = self._expected
                if e is not None and e[0] <= x_lo and x_hi <= e[1]:
                    x = (e[0], e[1] + X_PAD * (e[1] - e[0]))
                else:
                    x = (x_lo, x_lo + nice_ceil(max(x_hi - x_lo, 1e-9) * 1.25))
        if self.follow_y and math.isfinite(y_lo) and math.isfinite(y_hi):
            if y is None or y_hi > y[1] or y_lo < y[0]:
                y = _y_view(y_lo, y_hi)
        if x == self._x and y == self._y:
            return False
        # compared with the view as it is, not as this follower last set it: a new run like the last one
        # (cleared followers, same planned steps, a loss alike) keeps the view and its laid-out axes
        shown_x, shown_y = self.vb.viewRange()
        kwargs = {}
        if x is not None and not _same(x, shown_x):
            kwargs["xRange"] = x
        if y is not None and not _same(y, shown_y):
            kwargs["yRange"] = y
        self._x, self._y = x, y
        if not kwargs:
            return False
        self.vb.setRange(padding=0, **kwargs)
        return True


def _same(a, b) -> bool:
    """Two ranges equal to a millionth of their span (the view box stores its range as floats)."""
    tol = 1e-6 * max(abs(a[1] - a[0]), 1e-300)
    return abs(a[0] - b[0]) <= tol and abs(a[1] - b[1]) <= tol
