"""What a classifier gets wrong: a confusion matrix per evaluation, a per-class report and the worst validation rows.

For text, token and image classification, every validation fills a
:class:`ClassReport` (:meth:`~workbench.core.train.task.tasks.Task.before_validation`
empties it; the task's ``eval_step`` adds each batch) and its end writes into the
run folder:

- ``confusion.jsonl``: one JSON object a line per evaluation,
  ``{"step", "epoch", "labels": [class names], "matrix": [[count]]}``, rows the true
  class and columns the predicted one (torchmetrics' ``MulticlassConfusionMatrix``
  when installed, the same counts by ``torch.bincount`` otherwise);
- ``class_report.json``: per class name ``precision``, ``recall``, ``f1`` and
  ``support`` (validation rows of that class), with ``accuracy`` and the macro means,
  of the latest evaluation (rewritten atomically at each one, so at a run's end it is
  the last evaluation's);
- ``worst_rows.jsonl``: the :data:`WORST_ROWS` validation rows of highest loss at each
  evaluation, one a line: ``{"step", "epoch", "id", "text", "true", "predicted",
  "confidence", "loss"}``. ``id`` is the row's 0-based index in the validation set,
  ``text`` the row's text (its words for token classification; the image file for an
  ImageFolder); for token classification ``true`` / ``predicted`` are the tags of the
  row's words and ``confidence`` their mean probability.

``epoch`` is 0-based, as ``metrics.csv``'s. Only the main process of a data-parallel
run writes. Qt-free.
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path
from typing import Any

import torch

__all__ = ["CONFUSION_FILE", "REPORT_FILE", "WORST_FILE", "WORST_ROWS", "ClassReport", "per_class",
           "read_confusion"]

CONFUSION_FILE = "confusion.jsonl"
REPORT_FILE = "class_report.json"
WORST_FILE = "worst_rows.jsonl"
#: Validation rows kept per evaluation in ``worst_rows.jsonl``: enough to see a pattern, few enough to read.
WORST_ROWS = 10
#: Characters of a row's text kept in ``worst_rows.jsonl`` (a long document is cut, the file stays readable).
TEXT_CHARS = 300


class ClassReport:
    """The confusion matrix and the worst rows of one validation pass (see the module docstring)."""

    def __init__(self):
        self.start()

    def start(self) -> None:
        """Empty the matrix and the rows (a new validation pass)."""
        self._metric = None
        self._counts: torch.Tensor | None = None
        self._worst: list[tuple] = []  # a min-heap of (loss, id, true, predicted, confidence)
        self._seen = 0

    def add(self, logits: torch.Tensor, target: torch.Tensor, rows: list[tuple] | None = None) -> None:
        """Add a batch: ``logits`` ``(M, C)`` and ``target`` ``(M,)`` class indices to the matrix, and its rows.

        Parameters
        ----------
        rows : list of (loss, true, predicted, confidence), optional
            One per validation row of the batch, in order; default one per logits row
            (text and image classification), made here.
        """
        logits, target = logits.detach().float(), target.detach().long()
        n_classes = int(logits.shape[-1])
        pred = logits.argmax(-1)
        if self._counts is None:
            self._counts = torch.zeros(n_classes, n_classes, dtype=torch.long)
            try:
                from torchmetrics.classification import MulticlassConfusionMatrix
                self._metric = MulticlassConfusionMatrix(n_classes).to(logits.device)
            except ImportError:  # the optional extra is missing: the same counts by bincount
                self._metric = None
        if self._metric is not None:
            self._metric.update(pred, target)
        else:
            self._counts += torch.bincount((target * n_classes + pred).cpu(),
                                           minlength=n_classes * n_classes).reshape(n_classes, n_classes)
        if rows is None:
            rows = rows_of(logits, target)
        for i, (loss, true, predicted, confidence) in enumerate(rows):
            item = (float(loss), self._seen + i, true, predicted, float(confidence))
            if len(self._worst) < WORST_ROWS:
                heapq.heappush(self._worst, item)
            elif item[0] > self._worst[0][0]:
                heapq.heapreplace(self._worst, item)
        self._seen += len(rows)

    def matrix(self) -> torch.Tensor | None:
        """``(C, C)`` int64 counts, rows true and columns predicted; None before any batch."""
        if self._metric is not None:
            return self._metric.compute().long().cpu()
        return self._counts

    def write(self, trainer: Any) -> dict | None:
        """Append the matrix and the worst rows, rewrite ``class_report.json``; the report, or None when nothing
        was written (not the main process, no run folder yet, no batch)."""
        matrix = self.matrix()
        run_dir = getattr(trainer, "run_dir", None)
        if matrix is None or run_dir is None or not getattr(trainer, "is_main", True):
            return None
        from workbench.core.files import append_jsonl, atomic_write_text

        labels = class_names(trainer, int(matrix.shape[0]))
        where = {"step": int(trainer.step), "epoch": int(trainer.epoch)}
        report = {**where, **per_class(matrix, labels)}
        dataset = getattr(getattr(trainer, "val_loader", None), "dataset", None)
        worst = []
        for loss, index, true, predicted, confidence in sorted(self._worst, reverse=True):
            name = (lambda c: [labels[int(i)] for i in c]) if isinstance(true, list) else (lambda c: labels[int(c)])
            worst.append({**where, "id": index, "text": row_text(dataset, index), "true": name(true),
                          "predicted": name(predicted), "confidence": round(confidence, 4), "loss": round(loss, 4)})
        run_dir = Path(run_dir)
        append_jsonl(run_dir / CONFUSION_FILE, [{**where, "labels": labels, "matrix": matrix.tolist()}])
        append_jsonl(run_dir / WORST_FILE, worst)
        atomic_write_text(run_dir / REPORT_FILE, json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        return report


def rows_of(logits: torch.Tensor, target: torch.Tensor) -> list[tuple]:
    """``(loss, true, predicted, confidence)`` of each row of ``(N, C)`` logits and ``(N,)`` classes."""
    probs = logits.float().softmax(-1)
    losses = torch.nn.functional.cross_entropy(logits.float(), target.long(), reduction="none")
    conf, pred = probs.max(-1)
    return list(zip(losses.tolist(), target.tolist(), pred.tolist(), conf.tolist()))


def tagged_rows(logits: torch.Tensor, labels: torch.Tensor, ignore: int) -> list[tuple]:
    """``(mean loss, tags, predicted tags, mean confidence)`` of each row of ``(N, L, C)`` logits, ``(N, L)`` tags
    (``ignore`` marks the sub-tokens that carry none)."""
    out = []
    for row_logits, row_labels in zip(logits.float(), labels):
        keep = row_labels != ignore
        if not bool(keep.any()):
            out.append((0.0, [], [], 1.0))
            continue
        lg, lb = row_logits[keep], row_labels[keep]
        conf, pred = lg.softmax(-1).max(-1)
        loss = torch.nn.functional.cross_entropy(lg, lb.long())
        out.append((float(loss), lb.tolist(), pred.tolist(), float(conf.mean())))
    return out


def class_names(trainer: Any, n: int) -> list[str]:
    """The names of ``n`` classes: the data's (``trainer.info.classes``), else the model's ``id2label``, else
    ``"0"``, ``"1"``..."""
    classes = list(getattr(getattr(trainer, "info", None), "classes", None) or [])
    if len(classes) == n:
        return [str(c) for c in classes]
    model = getattr(getattr(trainer, "model", None), "module", getattr(trainer, "model", None))
    id2label = getattr(getattr(model, "config", None), "id2label", None) or {}
    return [str(id2label.get(i, i)) for i in range(n)]


def row_text(dataset: Any, index: int) -> str:
    """What names validation row ``index``: its text (and pair), its words, or its image file; ``""`` if unknown."""
    from torch.utils.data import Subset

    while isinstance(dataset, Subset):
        dataset, index = dataset.dataset, int(dataset.indices[index])
    samples = getattr(dataset, "samples", None)  # an ImageFolder
    if isinstance(samples, list) and 0 <= index < len(samples):
        return str(samples[index][0])
    table = getattr(dataset, "table", None)  # text.ClassificationRows / text.TaggedRows
    if table is None or not 0 <= index < len(table):
        return ""
    row = table[int(index)]
    if hasattr(dataset, "words"):
        value = row[dataset.words]
        text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
    else:
        text = str(row[dataset.text]) + (f" / {row[dataset.pair]}" if getattr(dataset, "pair", "") else "")
    return text[:TEXT_CHARS]


def per_class(matrix: torch.Tensor, labels: list[str]) -> dict:
    """``{"classes": {name: {precision, recall, f1, support}}, "accuracy", "macro_precision", "macro_recall",
    "macro_f1", "support"}`` of a ``(C, C)`` confusion matrix (rows true). A class never predicted has precision 0,
    one never present recall 0 (as scikit-learn's ``zero_division=0``)."""
    m = matrix.double()
    tp, support, predicted = m.diag(), m.sum(1), m.sum(0)
    precision = torch.where(predicted > 0, tp / predicted.clamp(min=1), torch.zeros_like(tp))
    recall = torch.where(support > 0, tp / support.clamp(min=1), torch.zeros_like(tp))
    f1 = torch.where(precision + recall > 0, 2 * precision * recall / (precision + recall).clamp(min=1e-12),
                     torch.zeros_like(tp))
    classes = {name: {"precision": round(float(p), 4), "recall": round(float(r), 4), "f1": round(float(f), 4),
                      "support": int(s)} for name, p, r, f, s in zip(labels, precision, recall, f1, support)}
    total = float(m.sum())
    return {"classes": classes, "accuracy": round(float(tp.sum()) / total, 4) if total else 0.0,
            "macro_precision": round(float(precision.mean()), 4), "macro_recall": round(float(recall.mean()), 4),
            "macro_f1": round(float(f1.mean()), 4), "support": int(total)}


def read_confusion(run_dir: str | Path) -> list[dict]:
    """The rows of ``run_dir/confusion.jsonl`` (a line that is not a JSON object is left out); [] when none."""
    from workbench.core.files import read_jsonl

    return read_jsonl(Path(run_dir) / CONFUSION_FILE)
