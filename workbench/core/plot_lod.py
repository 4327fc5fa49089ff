"""Levels of detail for drawing long curves: a min/max pyramid built once, sliced per view.

A curve of 100,000 points drawn on 1,000 pixels needs about two points per pixel
column (its minimum and its maximum there) to look exactly like the full curve.
pyqtgraph's ``setDownsampling(method="peak")`` computes that envelope again from
the whole visible slice at every view change (a pan or zoom of 20 such curves
cost ~70 ms on the 2-core reference machine). :class:`MinMaxPyramid` computes it
once per curve, at levels of 2, 4, 8... points per bin; a view then takes the
coarsest level that still has at least ``pixels`` bins in view, which costs
O(pixels) instead of O(points). Workbench's own because it is what the Runs
dock's overlay target (``overlay_20_runs_redraw_ms``) needs; pyqtgraph offers
no precomputed levels. Qt-free.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MinMaxPyramid", "FACTOR"]

#: Points per bin grow by this factor from one level to the next.
FACTOR = 2


class MinMaxPyramid:
    """The min/max envelopes of one curve ``(x, y)`` at levels of ``FACTOR ** k`` points per bin.

    Parameters
    ----------
    x, y : array_like, shape (N,)
        ``x`` ascending (steps, epochs, wall time).

    Notes
    -----
    Memory: level k holds ``2 * N / FACTOR ** k`` points of x and y (float64), so all
    levels together hold about ``N`` pairs: ~1.6 MB for N = 100,000. NaN values
    (an epoch without validation) are skipped by the min/max of their bin.
    """

    def __init__(self, x, y):
        self.x = np.asarray(x, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)
        if self.x.shape != self.y.shape or self.x.ndim != 1:
            raise ValueError(f"x and y must be 1-D of one length (got {self.x.shape} and {self.y.shape})")
        #: ``(bin size, x, y)`` per level; x and y interleave each bin's min and max points
        self.levels: list[tuple[int, np.ndarray, np.ndarray]] = []
        # each level from the one below (FACTOR column-wise fmin/fmax: fast, and NaN is skipped)
        lo = hi = self.y
        first = last = self.x
        size = 1
        while len(lo) // FACTOR >= 2:
            bins = len(lo) // FACTOR
            cut = bins * FACTOR
            lo = _fold(np.fmin, lo[:cut].reshape(bins, FACTOR))
            hi = _fold(np.fmax, hi[:cut].reshape(bins, FACTOR))
            first, last = first[:cut:FACTOR], last[FACTOR - 1:cut:FACTOR]
            size *= FACTOR
            lx, ly = np.empty(2 * bins), np.empty(2 * bins)
            lx[0::2], lx[1::2] = first, last
            ly[0::2], ly[1::2] = lo, hi
            self.levels.append((size, lx, ly))

    def view(self, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
        """The points to draw for the x range ``[x0, x1]`` on ``pixels`` pixel columns.

        The raw points when at most ``2 * pixels`` fall in the range; else the
        coarsest level with at least ``pixels`` bins there (a min and a max point per
        pixel column at least, as pyqtgraph's "peak" downsampling). One point beyond
        each end is kept, so the line reaches the edges of the view.

        Returns
        -------
        (ndarray, ndarray)
            x and y, shape (M,), M < ~2 * FACTOR * pixels.
        """
        lo, hi = int(np.searchsorted(self.x, x0, "left")), int(np.searchsorted(self.x, x1, "right"))
        lo, hi = max(0, lo - 1), min(len(self.x), hi + 1)
        want = 2 * max(1, int(pixels))
        if hi - lo <= want or not self.levels:
            return self.x[lo:hi], self.y[lo:hi]
        chosen = None
        for size, lx, ly in self.levels:
            if (hi - lo) // size < want // 2:
                break
            chosen = (size, lx, ly)
        if chosen is None:
            return self.x[lo:hi], self.y[lo:hi]
        size, lx, ly = chosen
        a, b = 2 * (lo // size), min(len(lx), 2 * (-(-hi // size)))
        return lx[a:b], ly[a:b]


def _fold(op, cols: np.ndarray) -> np.ndarray:
    """``op`` over the columns of ``cols`` (shape (B, FACTOR)), one vectorized call per column."""
    out = cols[:, 0].copy()
    for k in range(1, cols.shape[1]):
        op(out, cols[:, k], out=out)
    return out
