"""Validation metrics, accumulated batch by batch and computed once per epoch.

Built-in metrics by name (the column each writes into ``metrics.csv``, with the
``val_`` prefix, is in brackets):

* classification: ``accuracy`` (``val_acc``: the name earlier runs used), ``top5``;
* regression: ``mae``, ``rmse``, ``r2`` (coefficient of determination,
  ``1 - SS_res / SS_tot`` with ``SS_tot`` about each target column's mean and
  both summed over the columns: ``sklearn.metrics.r2_score`` with
  ``multioutput="variance_weighted"``);
* multi-label: ``f1`` (micro-averaged at logit 0, i.e. probability 0.5) and
  ``map`` (mean average precision over labels: torchmetrics'
  ``MultilabelAveragePrecision``, when torchmetrics is installed);
* text classification: ``accuracy`` (``val_acc``) and ``macro_f1`` (``val_f1``:
  the unweighted mean of the per-class F1, torchmetrics'
  ``multiclass_f1_score(average="macro")``);
* multi-label text classification (``[data] target`` a list of 0/1 columns):
  ``multilabel_accuracy`` (``val_acc``: the share of (row, label) decisions
  right at logit 0, torchmetrics' ``multilabel_accuracy(average="micro")``) and
  ``multilabel_f1`` (``val_f1``: the unweighted mean of the per-label F1,
  torchmetrics' ``multilabel_f1_score(average="macro")``);
* token classification: ``accuracy`` (``val_acc``: token accuracy over the
  labelled tokens, each word's first sub-token) and ``macro_f1`` (``val_f1``: macro F1 over tags);
* causal language model: ``perplexity`` (``val_perplexity``: ``exp`` of the mean
  validation loss per sample, i.e. per token for packed blocks of equal length).

They are written here as running sums rather than as torchmetrics objects
because they are three lines each and must run on every device and under
DistributedDataParallel without torchmetrics installed; mAP needs every score,
so it uses torchmetrics, the ecosystem's implementation.

A user metric is a spec of ``metric(output, target) -> number``, averaged over
samples (weighted by batch size). A metric a training or validation step returns
in its dict (``{"loss": ..., "iou": ...}``) is averaged the same way.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

__all__ = ["Metric", "BUILTIN_METRICS", "DEFAULT_METRICS", "MULTILABEL_NAMES", "build_metric", "column", "Mean"]

#: The built-in metrics of each task kind, used when ``[task] metrics`` is empty.
DEFAULT_METRICS = {"classification": ("accuracy", "top5"), "regression": ("mae", "rmse", "r2"),
                   "multilabel": ("f1", "map"), "model_loss": (), "text_classification": ("accuracy", "macro_f1"),
                   "token_classification": ("accuracy", "macro_f1"), "causal_lm": ("perplexity",),
                   "image_classification": ("accuracy", "macro_f1")}
#: Metrics whose ``metrics.csv`` column is not ``val_<name>``.
_COLUMNS = {"accuracy": "val_acc", "macro_f1": "val_f1", "multilabel_accuracy": "val_acc",
            "multilabel_f1": "val_f1"}
#: The metric a multi-label text classification computes for each single-label name (``[task] metrics``).
MULTILABEL_NAMES = {"accuracy": "multilabel_accuracy", "macro_f1": "multilabel_f1"}


def column(name: str) -> str:
    """The ``metrics.csv`` column of validation metric ``name`` (``accuracy`` -> ``val_acc``, ``macro_f1`` -> ``val_f1``)."""
    return _COLUMNS.get(name, f"val_{name}")


class Metric:
    """A validation metric: ``update`` per batch, ``compute`` at the epoch's end.

    Attributes
    ----------
    name : str
        Its name (the ``metrics.csv`` column is :func:`column` of it).
    """

    name = ""

    def update(self, output: Any, target: Any, n: int) -> None:
        """Add one batch: the model's ``output``, the ``target`` and its ``n`` samples."""
        raise NotImplementedError

    def compute(self) -> float:
        """The epoch's value (NaN when it does not apply, e.g. top-5 of 3 classes)."""
        raise NotImplementedError


class _Sums(Metric):
    """Sums kept as 0-d tensors on the batch's device: no host sync until :meth:`compute`."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor | float] = {}
        self.count = 0

    def add(self, **values: torch.Tensor) -> None:
        for k, v in values.items():
            v = v.detach().double() if isinstance(v, torch.Tensor) else float(v)
            self.sums[k] = self.sums[k] + v if k in self.sums else v

    def get(self, k: str) -> float:
        v = self.sums.get(k, math.nan)
        return float(v.item()) if isinstance(v, torch.Tensor) else float(v)


def _logits_and_indices(output: Any, target: Any):
    if not isinstance(output, torch.Tensor) or not isinstance(target, torch.Tensor):
        return None
    if output.dim() != 2 or target.is_floating_point():
        return None
    t = target[:, 0] if target.dim() == 2 and target.shape[1] == 1 else target
    return (output, t) if t.dim() == 1 and t.shape[0] == output.shape[0] else None


class Accuracy(_Sums):
    """Share of samples whose largest logit is the target class; ``(N, C)`` logits, ``(N,)`` class indices."""

    name = "accuracy"

    def update(self, output, target, n):
        pair = _logits_and_indices(output, target)
        if pair is None:
            self.count = -1  # not a classification batch: NaN
            return
        out, t = pair
        self.add(correct=(out.argmax(1) == t).sum())
        self.count += 0 if self.count < 0 else int(t.shape[0])

    def compute(self):
        return self.get("correct") / self.count if self.count > 0 else math.nan


class TopK(_Sums):
    """Share of samples whose target is among the ``k`` largest logits (NaN with ``k`` classes or fewer)."""

    def __init__(self, k: int = 5):
        super().__init__()
        self.k = k
        self.name = f"top{k}"

    def update(self, output, target, n):
        pair = _logits_and_indices(output, target)
        if pair is None or pair[0].shape[1] <= self.k:
            self.count = -1
            return
        out, t = pair
        self.add(correct=(out.topk(self.k, dim=1).indices == t[:, None]).any(1).sum())
        self.count += 0 if self.count < 0 else int(t.shape[0])

    def compute(self):
        return self.get("correct") / self.count if self.count > 0 else math.nan


def _regression_pair(output, target):
    """``(N, k)`` float64 views of the output and the target (None when their sizes differ)."""
    if not isinstance(output, torch.Tensor) or not isinstance(target, torch.Tensor):
        return None
    if target.numel() != output.numel() or output.dim() == 0:
        return None
    n = output.shape[0]
    return output.detach().double().reshape(n, -1), target.detach().double().reshape(n, -1)


class _Regression(_Sums):
    """Sums of errors over every target element, and per target column (``t``, ``tt``) for ``SS_tot``."""

    def __init__(self):
        super().__init__()
        self.rows = 0

    def update(self, output, target, n):
        pair = _regression_pair(output, target)
        if pair is None:
            self.count = -1
            return
        o, t = pair
        d = o - t
        self.add(abs=d.abs().sum(), sq=(d * d).sum(), t=t.sum(0), tt=(t * t).sum(0))
        if self.count >= 0:
            self.count += int(t.numel())
            self.rows += int(t.shape[0])


class MAE(_Regression):
    """Mean absolute error over every target element (target units)."""

    name = "mae"

    def compute(self):
        return self.get("abs") / self.count if self.count > 0 else math.nan


class RMSE(_Regression):
    """Root mean squared error over every target element (target units)."""

    name = "rmse"

    def compute(self):
        return math.sqrt(self.get("sq") / self.count) if self.count > 0 else math.nan


class R2(_Regression):
    """Coefficient of determination ``1 - SS_res / SS_tot`` (NaN when the targets do not vary)."""

    name = "r2"

    def compute(self):
        if self.count <= 1 or self.rows <= 1:
            return math.nan
        t, tt = self.sums["t"], self.sums["tt"]
        ss_tot = float((tt - t * t / self.rows).sum().item())
        return 1.0 - self.get("sq") / ss_tot if ss_tot > 0 else math.nan


class F1(_Sums):
    """Micro-averaged F1 of multi-hot targets ``(N, L)`` against logits ``(N, L)`` thresholded at 0."""

    name = "f1"

    def update(self, output, target, n):
        if not isinstance(output, torch.Tensor) or not isinstance(target, torch.Tensor) \
                or output.shape != target.shape:
            self.count = -1
            return
        pred, t = output > 0, target > 0.5
        self.add(tp=(pred & t).sum(), fp=(pred & ~t).sum(), fn=(~pred & t).sum())
        self.count += 0 if self.count < 0 else int(t.shape[0])

    def compute(self):
        if self.count <= 0:
            return math.nan
        tp, fp, fn = self.get("tp"), self.get("fp"), self.get("fn")
        return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn > 0 else math.nan


class MeanAveragePrecision(Metric):
    """Macro mean average precision over labels (torchmetrics ``MultilabelAveragePrecision``).

    NaN when torchmetrics is not installed (``pip install workbench[metrics]``)
    or the batches are not ``(N, L)`` logits against ``(N, L)`` multi-hot targets.
    """

    name = "map"

    def __init__(self):
        self.scores: list[torch.Tensor] = []
        self.targets: list[torch.Tensor] = []
        self.bad = False

    def update(self, output, target, n):
        if not isinstance(output, torch.Tensor) or not isinstance(target, torch.Tensor) \
                or output.shape != target.shape or output.dim() != 2:
            self.bad = True
            return
        self.scores.append(output.detach().float().cpu())
        self.targets.append((target > 0.5).long().cpu())

    def compute(self):
        if self.bad or not self.scores:
            return math.nan
        try:
            from torchmetrics.functional.classification import multilabel_average_precision
        except ImportError:
            return math.nan
        scores, targets = torch.cat(self.scores), torch.cat(self.targets)
        return float(multilabel_average_precision(scores, targets, num_labels=scores.shape[1]))


class MacroF1(Metric):
    """Macro-averaged F1 of ``(N, C)`` logits against ``(N,)`` class indices (torchmetrics; NaN without it).

    The predictions and targets are kept on the CPU (one int64 each per sample) and scored once.
    """

    name = "macro_f1"

    def __init__(self):
        self.preds: list[torch.Tensor] = []
        self.targets: list[torch.Tensor] = []
        self.classes = 0
        self.bad = False

    def update(self, output, target, n):
        pair = _logits_and_indices(output, target)
        if pair is None:
            self.bad = True
            return
        out, t = pair
        self.classes = max(self.classes, int(out.shape[1]))
        self.preds.append(out.argmax(1).cpu())
        self.targets.append(t.long().cpu())

    def compute(self):
        if self.bad or not self.preds or self.classes < 2:
            return math.nan
        try:
            from torchmetrics.functional.classification import multiclass_f1_score
        except ImportError:
            return math.nan
        return float(multiclass_f1_score(torch.cat(self.preds), torch.cat(self.targets), num_classes=self.classes,
                                         average="macro"))


def _multi_hot(output: Any, target: Any):
    """``(predictions, targets)`` as ``(N, K)`` bools of ``(N, K)`` logits (at 0) and 0/1 targets; None otherwise."""
    if not isinstance(output, torch.Tensor) or not isinstance(target, torch.Tensor) or output.dim() != 2 \
            or output.shape != target.shape:
        return None
    return output.detach() > 0, target.detach() > 0.5


class MultilabelAccuracy(_Sums):
    """Share of the (row, label) decisions right: ``(N, K)`` logits thresholded at 0 against ``(N, K)`` 0/1
    targets (torchmetrics' ``multilabel_accuracy(average="micro")``)."""

    name = "multilabel_accuracy"

    def update(self, output, target, n):
        pair = _multi_hot(output, target)
        if pair is None:
            self.count = -1
            return
        pred, t = pair
        self.add(correct=(pred == t).sum())
        self.count += 0 if self.count < 0 else int(t.numel())

    def compute(self):
        return self.get("correct") / self.count if self.count > 0 else math.nan


class MultilabelF1(Metric):
    """Macro F1 over labels of ``(N, K)`` logits (at 0) against ``(N, K)`` 0/1 targets (torchmetrics'
    ``multilabel_f1_score(average="macro")``; NaN without it). Kept on the CPU as bools, scored once."""

    name = "multilabel_f1"

    def __init__(self):
        self.preds: list[torch.Tensor] = []
        self.targets: list[torch.Tensor] = []
        self.bad = False

    def update(self, output, target, n):
        pair = _multi_hot(output, target)
        if pair is None:
            self.bad = True
            return
        self.preds.append(pair[0].cpu())
        self.targets.append(pair[1].cpu())

    def compute(self):
        if self.bad or not self.preds:
            return math.nan
        try:
            from torchmetrics.functional.classification import multilabel_f1_score
        except ImportError:
            return math.nan
        preds, targets = torch.cat(self.preds).long(), torch.cat(self.targets).long()
        return float(multilabel_f1_score(preds, targets, num_labels=preds.shape[1], average="macro"))


class Perplexity(_Sums):
    """``exp`` of the sample-weighted mean loss; the task passes each batch's mean loss (0-d) as ``output``."""

    name = "perplexity"

    def update(self, output, target, n):
        if not isinstance(output, torch.Tensor) or output.dim() != 0:
            self.count = -1
            return
        self.add(loss=output * int(n))
        self.count += 0 if self.count < 0 else int(n)

    def compute(self):
        if self.count <= 0:
            return math.nan
        mean = self.get("loss") / self.count
        return math.exp(mean) if mean < 700 else math.inf  # exp overflows a float past ~709


class Mean(Metric):
    """The sample-weighted mean of a number per batch (a user metric, or a value a step returns).

    The values are kept as they come (0-d tensors stay on their device) and summed
    once in :meth:`compute`: one ``detach`` per step instead of several small ops.
    """

    def __init__(self, name: str, fn: Callable[[Any, Any], Any] | None = None):
        self.name = name
        self.fn = fn
        self.values: list = []
        self.weights: list[int] = []

    def update(self, output, target, n):
        self.add_value(self.fn(output, target), n)

    def add_value(self, value: Any, n: int) -> None:
        """Add a batch's ``value`` (a number or a tensor, averaged) for its ``n`` samples."""
        self.values.append(value.detach() if isinstance(value, torch.Tensor) else float(value))
        self.weights.append(int(n))

    def compute(self):
        total = sum(self.weights)
        if total == 0:
            return math.nan
        values = [v.double().mean() if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=torch.float64)
                  for v in self.values]
        stacked = torch.stack([v.cpu() for v in values]) if len({v.device for v in values}) > 1 \
            else torch.stack(values)
        weights = torch.tensor(self.weights, dtype=torch.float64, device=stacked.device)
        return float((stacked * weights).sum().item()) / total


BUILTIN_METRICS: dict[str, Callable[[], Metric]] = {
    "accuracy": Accuracy, "top5": TopK, "mae": MAE, "rmse": RMSE, "r2": R2, "f1": F1, "map": MeanAveragePrecision,
    "macro_f1": MacroF1, "perplexity": Perplexity, "multilabel_accuracy": MultilabelAccuracy,
    "multilabel_f1": MultilabelF1,
}


def build_metric(name: str, fn: Callable[[Any, Any], Any] | None = None) -> Metric:
    """A fresh metric: built-in ``name``, or ``Mean(name, fn)`` of a user's ``fn(output, target)``.

    Raises
    ------
    ValueError
        ``name`` is not built in and no ``fn`` is given.
    """
    if fn is not None:
        return Mean(name, fn)
    if name not in BUILTIN_METRICS:
        raise ValueError(f"unknown metric {name!r}; built-in: {', '.join(BUILTIN_METRICS)}, or give a spec "
                         "(file.py:my_metric)")
    return BUILTIN_METRICS[name]()
