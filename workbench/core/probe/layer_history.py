"""Bounded history of :class:`~workbench.core.probe.layer_stats.LayerSnapshot` s: the data of the heatmaps.

Written here rather than taken from a library because the trade-off is the
product's own: every layer over a whole run in fixed memory, the latest
measurements at full resolution and the older ones averaged (fastai's
``ActivationStats`` keeps every measurement and grows without bound).
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from workbench.core import csv_cells
from workbench.core.files import atomic_write_text
from workbench.core.probe.layer_stats import LOG_QUANTITIES, QUANTITIES, LayerSnapshot

__all__ = ["LayerHistory", "SORT_KEYS", "UPDATE_RATIO_REFERENCE", "display_levels"]

#: The update-to-weight ratio practitioners aim for (Karpathy, "A Recipe for Training Neural Networks", 2019).
UPDATE_RATIO_REFERENCE = 1e-3

#: Orders of the layer axis: execution order, name, worst value first.
SORT_KEYS = ("execution", "name", "worst")

#: For "worst" sorting: which end of a quantity is bad (+1: high is bad; -1: low is bad; 0: far from the median).
_WORST = {"act_mean": 0, "act_std": 0, "act_zeros": 1, "act_saturated": 1, "grad_norm": 0, "update_ratio": 1}


def _nanmean_pairs(a: np.ndarray, axis: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN pairs stay NaN
        return np.nanmean(a, axis=axis)


class LayerHistory:
    """Every layer's quantities over a run, in bounded memory.

    The last ``recent`` measurements are kept as they are (a ring). Older ones
    are averaged into at most ``older`` columns: each column first averages 1
    measurement, and whenever the columns are full, neighbouring pairs are
    merged (NaN-ignoring mean; an Inf stays Inf) and each later column averages
    twice as many. Each column keeps the step of its first measurement.

    Memory: ``len(QUANTITIES) * layers * (recent + older) * 4`` bytes of float32,
    ``(recent + older) * 8`` bytes of steps and ``len(QUANTITIES) * layers * 16``
    bytes of running sums: 24.6 MB for 500 layers with the defaults (1,024 +
    1,024), however long the run (:attr:`nbytes`).

    Parameters
    ----------
    recent : int
        Measurements kept at full resolution (>= 1).
    older : int
        Decimated columns for the rest of the run (even, >= 2).

    Raises
    ------
    ValueError
        ``recent`` < 1 or ``older`` odd or < 2.
    """

    def __init__(self, recent: int = 1024, older: int = 1024):
        if recent < 1 or older < 2 or older % 2:
            raise ValueError(f"LayerHistory needs recent >= 1 and an even older >= 2 (got {recent}, {older})")
        self.recent, self.older = int(recent), int(older)
        self.clear()

    def clear(self) -> None:
        """Forget every layer and measurement."""
        self.names: list[str] = []
        self.types: list[str] = []
        self._row: dict[str, int] = {}
        q = len(QUANTITIES)
        self._r = np.full((q, 0, self.recent), np.nan, np.float32)
        self._r_steps = np.zeros(self.recent, np.int64)
        self._r_n = 0  # columns held in the ring
        self._r_head = 0  # index of the oldest column once the ring is full
        self._o = np.full((q, 0, self.older), np.nan, np.float32)
        self._o_steps = np.zeros(self.older, np.int64)
        self._o_n = 0
        self._factor = 1  # measurements per older column
        # evicted columns waiting to fill one older column: a NaN-ignoring running sum and count
        self._acc_sum = np.zeros((q, 0), np.float64)
        self._acc_cnt = np.zeros((q, 0), np.int64)
        self._acc_n = 0
        self._acc_step = 0
        self.last_step = -1

    # ------------------------------------------------------------------ writing
    def _grow(self, names: Sequence[str], types: Sequence[str]) -> None:
        new = [(n, t) for n, t in zip(names, types) if n not in self._row]
        if not new:
            return
        for n, t in new:
            self._row[n] = len(self.names)
            self.names.append(n)
            self.types.append(t)
        pad = len(new)
        self._r = np.concatenate([self._r, np.full((self._r.shape[0], pad, self.recent), np.nan, np.float32)], 1)
        self._o = np.concatenate([self._o, np.full((self._o.shape[0], pad, self.older), np.nan, np.float32)], 1)
        self._acc_sum = np.concatenate([self._acc_sum, np.zeros((self._acc_sum.shape[0], pad))], 1)
        self._acc_cnt = np.concatenate([self._acc_cnt, np.zeros((self._acc_cnt.shape[0], pad), np.int64)], 1)

    def add(self, snap: LayerSnapshot) -> None:
        """Append one measurement (layers not seen before are added; missing ones get NaN)."""
        self._grow(snap.names, snap.types)
        column = np.full((len(QUANTITIES), len(self.names)), np.nan, np.float32)
        column[:, [self._row[n] for n in snap.names]] = snap.values.T
        if self._r_n < self.recent:
            slot = self._r_n
            self._r_n += 1
        else:
            slot = self._r_head
            self._evict(self._r[:, :, slot].copy(), int(self._r_steps[slot]))
            self._r_head = (self._r_head + 1) % self.recent
        self._r[:, :, slot] = column
        self._r_steps[slot] = snap.step
        self.last_step = int(snap.step)

    def _evict(self, column: np.ndarray, step: int) -> None:
        if self._acc_n == 0:
            self._acc_step = step
        seen = ~np.isnan(column)
        self._acc_sum[seen] += column[seen]
        self._acc_cnt += seen
        self._acc_n += 1
        if self._acc_n < self._factor:
            return
        with np.errstate(invalid="ignore", divide="ignore"):
            merged = np.where(self._acc_cnt > 0, self._acc_sum / np.maximum(self._acc_cnt, 1), np.nan)
        self._acc_sum[:] = 0.0
        self._acc_cnt[:] = 0
        self._acc_n = 0
        self._o[:, :, self._o_n] = merged
        self._o_steps[self._o_n] = self._acc_step
        self._o_n += 1
        if self._o_n == self.older:  # full: merge neighbouring pairs; each column (and the next) spans twice as many
            half = self.older // 2
            o = self._o.reshape(self._o.shape[0], self._o.shape[1], half, 2)
            self._o[:, :, :half] = _nanmean_pairs(o, 3)
            self._o[:, :, half:] = np.nan
            self._o_steps[:half] = self._o_steps[0::2]
            self._o_n = half
            self._factor *= 2

    # ------------------------------------------------------------------ reading
    @property
    def nbytes(self) -> int:
        """Bytes held by the value and step arrays."""
        return int(self._r.nbytes + self._o.nbytes + self._r_steps.nbytes + self._o_steps.nbytes
                   + self._acc_sum.nbytes + self._acc_cnt.nbytes)

    def __len__(self) -> int:
        """Columns held (older + recent)."""
        return self._o_n + self._r_n

    def _ring(self) -> np.ndarray:
        return np.roll(np.arange(self._r_n), -self._r_head) if self._r_n == self.recent else np.arange(self._r_n)

    def steps(self) -> np.ndarray:
        """``(T,)`` int64: the step of each column, oldest first."""
        return np.concatenate([self._o_steps[:self._o_n], self._r_steps[self._ring()]])

    def matrix(self, quantity: str, log: bool | None = None) -> np.ndarray:
        """``(L, T)`` float32 values of ``quantity``, oldest column first; rows in :attr:`names` order.

        ``log`` (default: True for :data:`~workbench.core.probe.layer_stats.LOG_QUANTITIES`)
        returns ``log10`` of the values (0 and negatives become NaN; Inf stays Inf).

        Raises
        ------
        KeyError
            An unknown quantity.
        """
        if quantity not in QUANTITIES:
            raise KeyError(f"unknown quantity {quantity!r}; one of {', '.join(QUANTITIES)}")
        q = QUANTITIES.index(quantity)
        ring = self._r[q]
        head = self._r_head if self._r_n == self.recent else 0
        out = np.concatenate([self._o[q, :, :self._o_n], ring[:, head:self._r_n], ring[:, :head]], axis=1)
        if log if log is not None else quantity in LOG_QUANTITIES:
            with np.errstate(divide="ignore", invalid="ignore"):
                np.log(out, out=out)  # in place (a fresh array); negatives -> NaN; 3x faster than np.log10
                out *= np.float32(1.0 / math.log(10.0))
            out[np.isneginf(out)] = np.nan  # log10(0)
        return out

    def order(self, quantity: str, by: str = "execution", text: str = "") -> list[int]:
        """Row indices for the layer axis: filtered by ``text`` (case-insensitive substring of the
        name or type) and sorted ``by`` one of :data:`SORT_KEYS`.

        "worst" ranks by the latest finite value of each row: highest first for
        shares and the update ratio, farthest from the median (in log10 for the
        grad norm) for the others; Inf / NaN-producing layers come first.
        """
        needle = text.strip().lower()
        rows = [i for i, (n, t) in enumerate(zip(self.names, self.types))
                if not needle or needle in n.lower() or needle in t.lower()]
        if by == "name":
            return sorted(rows, key=lambda i: self.names[i])
        if by != "worst" or not len(self):
            return rows
        m = self.matrix(quantity)
        latest = np.array([_last_finite(m[i]) for i in range(len(self.names))])
        finite = latest[np.isfinite(latest)]
        mid = float(np.median(finite)) if finite.size else 0.0
        direction = _WORST[quantity]

        def badness(i: int) -> float:
            v = latest[i]
            if math.isinf(v):
                return math.inf
            if math.isnan(v):
                return -math.inf
            return v if direction > 0 else abs(v - mid)

        return sorted(rows, key=badness, reverse=True)

    def since(self, name: str, quantity: str, holds: Callable[[float], bool]) -> int | None:
        """The first step of the latest unbroken run of columns where ``holds(value)`` is true for
        layer ``name`` up to its latest measurement; None when it does not hold now."""
        if name not in self._row:
            return None
        values = self.matrix(quantity, log=False)[self._row[name]]
        steps = self.steps()
        measured = np.flatnonzero(~np.isnan(values))
        start = None
        for j in measured[::-1]:
            if not holds(float(values[j])):
                break
            start = int(steps[j])
        return start

    def rows(self, quantities: Sequence[str] = QUANTITIES) -> Iterator[tuple[int, str, str, float]]:
        """Tidy rows ``(step, module, quantity, value)`` (raw values, no log), NaN cells left out."""
        steps = self.steps()
        for q in quantities:
            m = self.matrix(q, log=False)
            for i, name in enumerate(self.names):
                for j in np.flatnonzero(~np.isnan(m[i])):
                    yield int(steps[j]), name, q, float(m[i, j])

    def write_csv(self, path, quantities: Sequence[str] = QUANTITIES):
        """Write :meth:`rows` as CSV (header ``step,module,quantity,value``) atomically; returns the path."""
        buf = io.StringIO()
        writer = csv_cells.writer(buf, lineterminator="\n")
        writer.writerow(["step", "module", "quantity", "value"])
        writer.writerows((s, n, q, repr(v)) for s, n, q, v in self.rows(quantities))
        return atomic_write_text(path, buf.getvalue())


def display_levels(quantity: str, values: np.ndarray) -> tuple[float, float]:
    """Colour range ``(low, high)`` for a heatmap of :meth:`LayerHistory.matrix` values.

    Shares: ``(0, 1)``. The update ratio (log10): centred on
    log10(:data:`UPDATE_RATIO_REFERENCE`) = -3, so the reference is the middle
    colour of a diverging map, at least 2 decades each way. Others: the 2nd and
    98th percentiles of the finite values (robust to a few outliers).
    """
    if quantity in ("act_zeros", "act_saturated"):
        return 0.0, 1.0
    flat = values.ravel()
    if flat.size > 65_536:  # a strided sample: the percentiles of 1M cells cost 20 ms, of 64k under 1 ms
        flat = flat[:: flat.size // 65_536]
    finite = flat[np.isfinite(flat)]
    if quantity == "update_ratio":
        ref = math.log10(UPDATE_RATIO_REFERENCE)
        span = max(2.0, float(np.max(np.abs(finite - ref)))) if finite.size else 2.0
        return ref - span, ref + span
    if not finite.size:
        return 0.0, 1.0
    lo, hi = (float(v) for v in np.percentile(finite, [2, 98]))
    return (lo, hi) if hi > lo else (lo - 0.5, lo + 0.5)


def _last_finite(row: np.ndarray) -> float:
    """The latest non-NaN value of ``row`` (Inf counts), or NaN."""
    idx = np.flatnonzero(~np.isnan(row))
    return float(row[idx[-1]]) if idx.size else math.nan
