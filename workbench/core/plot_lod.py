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
no precomputed levels. A curve too long to hold (a metrics.csv of millions of
rows) is given in pieces to :class:`PyramidBuilder`, which keeps only bins past
a bound, so the pyramid's memory is bounded whatever the curve's length. Qt-free.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MinMaxPyramid", "PyramidBuilder", "FACTOR", "fold_bins"]

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
    A pyramid built by :class:`PyramidBuilder` from a long curve keeps no points
    (:attr:`x` and :attr:`y` are None, :attr:`base` > 1): its finest level has bins
    of :attr:`base` points, and a view never shows finer detail than that.
    """

    def __init__(self, x, y):
        self.x = np.asarray(x, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)
        if self.x.shape != self.y.shape or self.x.ndim != 1:
            raise ValueError(f"x and y must be 1-D of one length (got {self.x.shape} and {self.y.shape})")
        #: points of the curve
        self.n = len(self.x)
        #: points per bin of the finest level kept: 1 when :attr:`x` and :attr:`y` hold every point
        self.base = 1
        #: ``(x, y)`` of the curve's first and last points (None when empty)
        self.first = (self.x[0], self.y[0]) if self.n else None
        self.last = (self.x[-1], self.y[-1]) if self.n else None
        #: ``(bin size, x, y)`` per level; x and y interleave each bin's min and max points
        self.levels: list[tuple[int, np.ndarray, np.ndarray]] = []
        self._grow(self.y, self.y, self.x, self.x, 1)

    @classmethod
    def from_bins(cls, n: int, size: int, first, last, lo, hi, ends) -> MinMaxPyramid:
        """A pyramid whose finest level is given: bins of ``size`` points (the points themselves are not kept).

        Parameters
        ----------
        n : int
            Points of the curve.
        size : int
            Points per bin, a power of :data:`FACTOR`.
        first, last, lo, hi : ndarray, shape (B,)
            Each bin's first and last x, and its min and max y (NaN skipped).
        ends : tuple
            ``((x, y) of the first point, (x, y) of the last point)``.
        """
        self = cls.__new__(cls)
        self.n, self.base = int(n), int(size)
        self.first, self.last = ends
        self.x = self.y = None
        self.levels = []
        first, last, lo, hi = (np.asarray(a, dtype=np.float64) for a in (first, last, lo, hi))
        self.levels.append((self.base, *_interleave(first, last, lo, hi)))
        self._grow(lo, hi, first, last, self.base)
        return self

    def _grow(self, lo, hi, first, last, size) -> None:
        """Append the levels above bins of ``size`` (each from the one below: FACTOR column-wise fmin/fmax)."""
        while len(lo) // FACTOR >= 2:
            lo, hi, first, last = fold_bins(lo, hi, first, last)
            size *= FACTOR
            self.levels.append((size, *_interleave(first, last, lo, hi)))

    def view(self, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
        """The points to draw for the x range ``[x0, x1]`` on ``pixels`` pixel columns.

        The raw points when at most ``2 * pixels`` fall in the range (the finest
        level when the points are not kept); else the coarsest level with at
        least ``pixels`` bins there (a min and a max point per pixel column at
        least, as pyqtgraph's "peak" downsampling). One point beyond
        each end is kept, so the line reaches the edges of the view.

        Returns
        -------
        (ndarray, ndarray)
            x and y, shape (M,), M < ~2 * FACTOR * pixels.
        """
        lo, hi = self._span(x0, x1)
        want = 2 * max(1, int(pixels))
        if self.base == 1 and (hi - lo <= want or not self.levels):
            return self.x[lo:hi], self.y[lo:hi]
        chosen = self.levels[0] if self.base > 1 else None
        for size, lx, ly in self.levels:
            if (hi - lo) // size < want // 2:
                break
            chosen = (size, lx, ly)
        if chosen is None:
            return self.x[lo:hi], self.y[lo:hi]
        size, lx, ly = chosen
        a, b = 2 * (lo // size), min(len(lx), 2 * (-(-hi // size)))
        return lx[a:b], ly[a:b]

    def _span(self, x0: float, x1: float) -> tuple[int, int]:
        """Indices ``[lo, hi)`` of the points in ``[x0, x1]``, one more beyond each end (to a bin's edge)."""
        if self.base == 1:
            lo, hi = int(np.searchsorted(self.x, x0, "left")), int(np.searchsorted(self.x, x1, "right"))
            return max(0, lo - 1), min(self.n, hi + 1)
        lx = self.levels[0][1]  # each bin's first and last x
        b0, b1 = int(np.searchsorted(lx, x0, "left")) // 2, -(-int(np.searchsorted(lx, x1, "right")) // 2)
        bins = len(lx) // 2
        return max(0, b0 - 1) * self.base, min(bins, b1 + 1) * self.base


class PyramidBuilder:
    """Builds a :class:`MinMaxPyramid` from a curve given in consecutive pieces, in bounded memory.

    The points are kept while there are at most ``max_points``; past that only
    bins are, of 2, 4, 8... points, coarsened whenever their min and max points
    would number more than ``max_points``. The levels it builds are those
    :class:`MinMaxPyramid` builds from the whole curve, from its finest kept
    level up.

    Parameters
    ----------
    max_points : int
        The most points (or bin min/max points) kept: memory is about
        ``48 * max_points`` bytes with the levels above.
    """

    def __init__(self, max_points: int = 2**18):
        self.max_points = max(4 * FACTOR, int(max_points))
        self.n = 0
        self.size = 1  # points per bin; 1: the points themselves are kept in _xs/_ys
        self._xs: list[np.ndarray] = []
        self._ys: list[np.ndarray] = []
        self._bins: list[tuple[np.ndarray, ...]] = []  # (first, last, lo, hi) per piece, once size > 1
        self._count = 0  # points (size 1) or bins kept
        #: the unfinished bin (size > 1): (points, first x, last x, min y, max y)
        self._partial: tuple | None = None
        self._first = self._last = None

    def add(self, x, y) -> None:
        """Append the points ``(x, y)`` (float arrays of one length) to the curve."""
        x, y = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
        if x.shape != y.shape:
            raise ValueError(f"x and y must be of one length (got {x.shape} and {y.shape})")
        if not len(x):
            return
        if self._first is None:
            self._first = (x[0], y[0])
        self._last = (x[-1], y[-1])
        self.n += len(x)
        if self.size == 1:
            self._xs.append(x)
            self._ys.append(y)
            self._count += len(x)
            if self._count > self.max_points:
                x, y = np.concatenate(self._xs), np.concatenate(self._ys)
                self._xs, self._ys, self._count, self.size = [], [], 0, FACTOR
                self._add_binned(x, y)
        else:
            self._add_binned(x, y)
        while self.size > 1 and 2 * self._count > self.max_points:
            self._coarsen()

    def _add_binned(self, x: np.ndarray, y: np.ndarray) -> None:
        if self._partial is not None:  # complete the unfinished bin first
            count, first, _last, lo, hi = self._partial
            take = self.size - count
            tx, ty = x[:take], y[:take]
            self._partial = (count + len(tx), first, tx[-1], np.fmin(lo, np.fmin.reduce(ty)),
                             np.fmax(hi, np.fmax.reduce(ty)))
            x, y = x[take:], y[take:]
            if self._partial[0] < self.size:
                return
            self._bins.append(tuple(np.array([v]) for v in self._partial[1:]))
            self._count += 1
            self._partial = None
        bins = len(x) // self.size
        cut = bins * self.size
        if bins:
            cols = (x[:cut:self.size], x[self.size - 1:cut:self.size],
                    _fold(np.fmin, y[:cut].reshape(bins, self.size)), _fold(np.fmax, y[:cut].reshape(bins, self.size)))
            self._bins.append(cols)
            self._count += bins
        if cut < len(x):
            tx, ty = x[cut:], y[cut:]
            self._partial = (len(tx), tx[0], tx[-1], np.fmin.reduce(ty), np.fmax.reduce(ty))

    def _coarsen(self) -> None:
        """Bins FACTOR times larger; the old bins left over start the unfinished bin."""
        first, last, lo, hi = (np.concatenate(a) for a in zip(*self._bins))
        whole = len(lo) // FACTOR * FACTOR
        rest = (first[whole:], last[whole:], lo[whole:], hi[whole:])
        lo, hi, first, last = fold_bins(lo[:whole], hi[:whole], first[:whole], last[:whole])
        self._bins, self._count = [(first, last, lo, hi)], len(lo)
        if len(rest[0]):
            count, rf, rl, rlo, rhi = len(rest[0]) * self.size, rest[0][0], rest[1][-1], np.fmin.reduce(rest[2]), \
                np.fmax.reduce(rest[3])
            if self._partial is not None:
                pc, _pf, pl, plo, phi = self._partial
                count, rl, rlo, rhi = count + pc, pl, np.fmin(rlo, plo), np.fmax(rhi, phi)
            self._partial = (count, rf, rl, rlo, rhi)
        self.size *= FACTOR

    def finish(self) -> MinMaxPyramid:
        """The pyramid of the curve added so far."""
        if self.size == 1:
            x = np.concatenate(self._xs) if self._xs else np.zeros(0)
            y = np.concatenate(self._ys) if self._ys else np.zeros(0)
            return MinMaxPyramid(x, y)
        first, last, lo, hi = (np.concatenate(a) for a in zip(*self._bins))
        return MinMaxPyramid.from_bins(self.n, self.size, first, last, lo, hi, (self._first, self._last))


def fold_bins(lo, hi, first, last):
    """Bins FACTOR times larger from ``(lo, hi, first, last)`` per bin (a last incomplete group is dropped)."""
    bins = len(lo) // FACTOR
    cut = bins * FACTOR
    return (_fold(np.fmin, lo[:cut].reshape(bins, FACTOR)), _fold(np.fmax, hi[:cut].reshape(bins, FACTOR)),
            first[:cut:FACTOR], last[FACTOR - 1:cut:FACTOR])


def _interleave(first, last, lo, hi):
    lx, ly = np.empty(2 * len(lo)), np.empty(2 * len(lo))
    lx[0::2], lx[1::2] = first, last
    ly[0::2], ly[1::2] = lo, hi
    return lx, ly


def _fold(op, cols: np.ndarray) -> np.ndarray:
    """``op`` over the columns of ``cols`` (shape (B, FACTOR)), one vectorized call per column."""
    out = cols[:, 0].copy()
    for k in range(1, cols.shape[1]):
        op(out, cols[:, k], out=out)
    return out
