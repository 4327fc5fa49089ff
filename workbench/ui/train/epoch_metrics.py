"""The named per-epoch metrics of a run (``val_r2``, ``val_f1``, a user step's ``train_tokens``...).

:class:`EpochMetrics` keeps one float column per metric name seen in the
``EpochEnded`` metrics, aligned with the rows of the epoch buffer: a name that
first arrives at epoch 3 reads NaN for epochs 1 and 2. The plots pick one of
them for the validation plot (:func:`preferred_metric`) and export them all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

__all__ = ["EpochMetrics", "metric_keys", "preferred_metric", "metric_label", "is_unit_metric"]

#: Keys of the EpochEnded metrics that are not metrics to pick (drawn on the loss plot or bookkeeping).
_NOT_PICKED = {"val_loss", "train_loss"}
#: The metric shown first when it has a value, in order (a classification run's accuracy, a regression's R²).
_PREFERRED = ("val_acc", "val_r2", "val_f1", "val_map", "val_top5", "val_mae", "val_rmse")
#: Metrics that live in [0, 1]: the plot keeps that y range for them.
_UNIT = {"val_acc", "val_accuracy", "val_top5", "val_f1", "val_map"}


def metric_keys(metrics: Mapping) -> dict[str, float]:
    """The ``val_*`` / ``train_*`` numbers of an ``EpochEnded`` metrics dict (the losses left out), as floats."""
    out = {}
    for key, value in metrics.items():
        if not isinstance(key, str) or key in _NOT_PICKED or not key.startswith(("val_", "train_")):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    return out


def preferred_metric(names: list[str], has_value) -> str | None:
    """The metric the validation plot shows by default: the first of :data:`_PREFERRED` with a finite value,
    else the first ``val_*``, else the first name; None when there is none.

    ``has_value(name) -> bool`` says whether a name has a finite value yet.
    """
    with_values = [n for n in names if has_value(n)]
    for name in _PREFERRED:
        if name in with_values:
            return name
    for name in with_values:
        if name.startswith("val_"):
            return name
    return with_values[0] if with_values else (names[0] if names else None)


def metric_label(name: str) -> str:
    """The axis title of a metric: ``val_acc`` -> ``"val accuracy"``, ``train_tokens`` -> ``"train tokens"``."""
    if name in ("val_acc", "val_accuracy"):
        return "val accuracy"
    return name.replace("_", " ", 1)


def is_unit_metric(name: str) -> bool:
    """True for metrics in [0, 1] (accuracy, top-5, F1, mAP): their plot spans 0..1."""
    return name in _UNIT


class EpochMetrics:
    """One float column per metric name, one row per epoch (NaN where a metric has no value).

    Attributes
    ----------
    best : list of float
        The run's ``best`` flag per row: 1.0, 0.0, or NaN when the row did not say.
    """

    def __init__(self):
        self._columns: dict[str, list[float]] = {}
        self.best: list[float] = []

    def __len__(self) -> int:
        return len(self.best)

    def clear(self) -> None:
        """Forget every row and name."""
        self._columns.clear()
        self.best.clear()

    def add_row(self, values: Mapping[str, float], best: bool | None = None) -> list[str]:
        """Append one epoch's ``values``; returns the names seen for the first time."""
        n = len(self.best)
        new = [k for k in values if k not in self._columns]
        for key in new:
            self._columns[key] = [math.nan] * n
        for key, column in self._columns.items():
            column.append(float(values.get(key, math.nan)))
        self.best.append(math.nan if best is None else float(bool(best)))
        return new

    def names(self) -> list[str]:
        """Metric names in the order they first arrived."""
        return list(self._columns)

    def has_value(self, name: str) -> bool:
        """True once ``name`` has a finite value in some row."""
        return any(math.isfinite(v) for v in self._columns.get(name, ()))

    def __getitem__(self, name: str) -> np.ndarray:
        """The column of ``name`` as a float64 array (all NaN for an unknown name)."""
        column = self._columns.get(name)
        if column is None:
            return np.full(len(self.best), np.nan)
        return np.asarray(column, dtype=np.float64)

    def last_best(self) -> int | None:
        """The row of the last epoch the run flagged ``best``, or None when no row carried the flag."""
        flagged = [i for i, b in enumerate(self.best) if b == 1.0]
        if flagged:
            return flagged[-1]
        return None

    def says_best(self) -> bool:
        """True when some row carried the run's ``best`` flag (then :meth:`last_best` is the run's own answer)."""
        return any(not math.isnan(b) for b in self.best)
