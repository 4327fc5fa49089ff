"""A growing, column-oriented numpy buffer for live curves.

pyqtgraph's advice for live plots: create the curve once, keep a preallocated
numpy array that doubles when full, and hand ``curve.setData(x[:n], y[:n])``
views of it to the curve on each tick. Appending is amortised O(1) and the
views cost nothing to make.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np


class PlotBuffer:
    """Named float64 columns that grow together, doubling their capacity when full.

    Parameters
    ----------
    columns : sequence of str
        Column names, e.g. ``("step", "epoch", "time", "loss", "lr")``.
    capacity : int
        Initial number of rows allocated (at least 1).

    Examples
    --------
    >>> buf = PlotBuffer(("step", "loss"), capacity=2)
    >>> buf.append_many({"step": [0, 1, 2], "loss": [3.0, 2.0, 1.0]})
    >>> len(buf), buf.capacity
    (3, 4)
    >>> buf["loss"].tolist()
    [3.0, 2.0, 1.0]
    """

    def __init__(self, columns: Sequence[str], capacity: int = 1024):
        self.columns = tuple(columns)
        self._data = np.full((len(self.columns), max(1, int(capacity))), np.nan)
        self._index = {name: i for i, name in enumerate(self.columns)}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def capacity(self) -> int:
        """Rows allocated (grows by doubling)."""
        return self._data.shape[1]

    def __getitem__(self, name: str) -> np.ndarray:
        """A view of the first ``len(self)`` values of column ``name`` (no copy)."""
        return self._data[self._index[name], : self._n]

    def clear(self) -> None:
        """Forget every row; keep the allocation."""
        self._n = 0

    def _reserve(self, rows: int) -> None:
        cap = self.capacity
        if rows <= cap:
            return
        while cap < rows:
            cap *= 2
        grown = np.full((len(self.columns), cap), np.nan)
        grown[:, : self._n] = self._data[:, : self._n]
        self._data = grown

    def append(self, **values: float) -> None:
        """Append one row; columns not given are NaN."""
        self.append_many({k: (v,) for k, v in values.items()})

    def append_many(self, values: Mapping[str, Iterable[float] | np.ndarray]) -> None:
        """Append rows column-wise; every given column must have the same length.

        Columns not given are NaN for the new rows. Values are converted to float64
        (NaN and Inf are kept; the plots filter them).

        Raises
        ------
        KeyError
            A column name that the buffer does not have.
        ValueError
            Columns of different lengths.
        """
        arrays = {k: np.asarray(v, dtype=np.float64).ravel() for k, v in values.items()}
        if not arrays:
            return
        lengths = {a.shape[0] for a in arrays.values()}
        if len(lengths) != 1:
            raise ValueError(f"PlotBuffer.append_many: columns differ in length {sorted(lengths)}")
        m = lengths.pop()
        if m == 0:
            return
        self._reserve(self._n + m)
        rows = slice(self._n, self._n + m)
        self._data[:, rows] = np.nan
        for name, arr in arrays.items():
            self._data[self._index[name], rows] = arr
        self._n += m

    def last(self, name: str, default: float = float("nan")) -> float:
        """The last value of column ``name`` (``default`` when empty)."""
        return float(self._data[self._index[name], self._n - 1]) if self._n else default
