"""The tasks: how a batch becomes a loss (and metrics), for the built-in kinds and for a user's step.

Every part of a run that puts a batch through the model asks the run's
:class:`Task`: the training step, validation, the LR finder, the NaN trace and
the pre-flight check. So freezing, probes, the NaN trace, staged unfreezing,
replay and data parallelism work for any task: they act on the model and on
what the task returns, never on the batch's structure.

The shapes of code accepted are those of the anchors: Lightning's
``training_step(batch, batch_idx)`` returning a loss or a dict with ``"loss"``
(here ``step(model, batch)``, the model passed since it is not ``self``), and a
Hugging Face model that returns its own loss when the batch holds ``labels``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from workbench.core.errors import StepError
from workbench.core.train.data.batch import batch_size, describe, split_xy
from workbench.core.train.data.text import IGNORE_INDEX
from workbench.core.train.task.class_report import ClassReport, tagged_rows
from workbench.core.train.task.metrics import BUILTIN_METRICS, Metric, build_metric, column

__all__ = ["StepOutput", "Task", "CriterionTask", "ModelLossTask", "TextClassificationTask", "TokenClassificationTask",
           "CausalLMTask", "ImageClassificationTask", "StepTask", "StepError"]

log = logging.getLogger(__name__)


@dataclass
class StepOutput:
    """What one step made of one batch.

    Attributes
    ----------
    loss : Tensor
        0-d float32 tensor: the batch's mean loss (what ``backward()`` is called on).
    n : int
        Samples in the batch (the weight of ``loss`` in an epoch's mean).
    output, target
        The model's output and the batch's target, for the built-in metrics
        (None for a user's step, which reports its own metrics).
    logged : dict
        ``{name: number or 0-d tensor}`` the step returned beside ``"loss"``.
    """

    loss: torch.Tensor
    n: int
    output: Any = None
    target: Any = None
    logged: dict = field(default_factory=dict)


class Task:
    """How a run turns a batch into a loss and validation metrics.

    Attributes
    ----------
    kind : str
        ``"classification"``, ``"regression"``, ``"multilabel"``, ``"model_loss"``, ``"text_classification"``,
        ``"token_classification"``, ``"causal_lm"``, ``"image_classification"`` or ``"step"``.
    metric_names : tuple of str
        The validation metrics made by :meth:`new_metrics` (without the ``val_`` prefix).
    """

    kind = ""
    #: A classifier's confusion matrix and worst rows (:mod:`~workbench.core.train.task.class_report`); None: none.
    report: ClassReport | None = None

    def __init__(self, metrics: tuple = ()):
        #: (name, fn or None) of each validation metric
        self.metric_specs: list[tuple[str, Callable | None]] = list(metrics)

    @property
    def metric_names(self) -> tuple:
        return tuple(name for name, _ in self.metric_specs)

    def train_step(self, model: nn.Module, batch: Any) -> StepOutput:
        """The loss of ``batch`` (on the model's device) under the caller's autocast and grad mode.

        Raises
        ------
        StepError
            The batch does not fit the task or the step returned no loss; the message says what to change.
        """
        raise NotImplementedError

    def eval_step(self, model: nn.Module, batch: Any) -> StepOutput:
        """The validation loss of ``batch`` (called under ``model.eval()`` and ``torch.no_grad()``)."""
        return self.train_step(model, batch)

    def new_metrics(self) -> list[Metric]:
        """Fresh accumulators of the validation metrics of one epoch."""
        return [build_metric(name, fn) for name, fn in self.metric_specs]

    def before_validation(self, trainer: Any) -> None:
        """Called by validation before its first batch: the :attr:`report` starts empty (a pre-flight batch or
        the last evaluation's never counts)."""
        if self.report is not None:
            self.report.start()

    def write_report(self, trainer: Any) -> None:
        """Write the :attr:`report` into the run folder (a failed write is logged; it never ends the run)."""
        if self.report is None:
            return
        try:
            self.report.write(trainer)
        except OSError as e:
            log.warning("the class report cannot be written into %s: %s", getattr(trainer, "run_dir", None), e)


def _float(t: torch.Tensor) -> torch.Tensor:
    return t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float32 else t


class CriterionTask(Task):
    """``loss(model(input), target)`` on ``(input, target)`` batches: classification, regression, multi-label.

    Parameters
    ----------
    kind : str
        ``"classification"``, ``"regression"`` or ``"multilabel"`` (for messages and defaults).
    criterion : callable
        ``criterion(output, target) -> 0-d tensor``, called on the float32 output.
    metrics : sequence of (name, fn or None)
    """

    def __init__(self, kind: str, criterion: Callable, metrics: tuple = ()):
        super().__init__(metrics)
        self.kind = kind
        self.criterion = criterion

    def prediction(self, out: Any) -> torch.Tensor:
        """The tensor the criterion compares with the target, from the model's output.

        Raises
        ------
        StepError
            The output is not a tensor.
        """
        if not isinstance(out, torch.Tensor):
            raise StepError(f"the model returned a {type(out).__name__}, not a tensor, for the {self.kind} task: "
                            "choose the model_loss task (if it returns its own loss) or give a training step")
        return out

    def train_step(self, model, batch):
        try:
            x, y = split_xy(batch, self.kind)
        except ValueError as e:
            raise StepError(str(e)) from None
        out = _float(self.prediction(model(x)))
        try:
            loss = self.criterion(out, y)
        except Exception as e:  # noqa: BLE001 - named with the shapes that met
            raise StepError(f"the {self.kind} loss cannot compare the output {describe(out)} with the target "
                            f"{describe(y)}: {type(e).__name__}: {e}") from e
        return StepOutput(_scalar(loss, "the loss"), batch_size(x), out, y)


class ModelLossTask(Task):
    """The model computes its own loss: ``model(**batch)`` for a dict batch (Hugging Face), else ``model(*batch)``.

    The loss is ``output.loss`` (a ``ModelOutput``), ``output["loss"]`` (a dict)
    or the output itself when it is a 0-d tensor.

    Validation metrics (``[task] metrics``, e.g. ``accuracy``) see the output's
    ``logits`` and the batch's ``labels`` when both are there (a Hugging Face
    classifier's ``(N, C)`` logits and ``(N,)`` labels). When a built-in metric
    cannot be computed from them (no logits, no labels, shapes that are not class
    scores and class indices), its column stays empty and the run says why, once,
    in its log (a warning; the window's progress line).
    """

    kind = "model_loss"

    def __init__(self, metrics: tuple = ()):
        super().__init__(metrics)
        self._why_not = ""  # why this validation's built-in metrics saw no logits and labels ("" : they did)
        self._said = False

    def train_step(self, model, batch):
        _, loss = self.forward(model, batch)
        return StepOutput(loss, batch_size(batch))

    def eval_step(self, model, batch):
        out, loss = self.forward(model, batch)
        if not self.metric_specs:
            return StepOutput(loss, batch_size(batch))
        logits = getattr(out, "logits", None)
        if logits is None and isinstance(out, Mapping):
            logits = out.get("logits")
        labels = batch.get("labels") if isinstance(batch, Mapping) else None
        if not isinstance(logits, torch.Tensor):
            self._why_not = f"the model's output ({type(out).__name__}) has no logits"
        elif not isinstance(labels, torch.Tensor):
            self._why_not = "the batch has no \"labels\"" if isinstance(batch, Mapping) else \
                f"the batch is a {type(batch).__name__}, not a dict with \"labels\""
        elif logits.dim() != 2 or labels.dim() != 1 or labels.is_floating_point():
            self._why_not = f"the logits {describe(logits)} and labels {describe(labels)} are not (N, C) class " \
                            "scores and (N,) class indices"
        return StepOutput(loss, batch_size(batch), _float(logits) if isinstance(logits, torch.Tensor) else None,
                          labels)

    def after_validation(self, trainer: Any) -> None:
        """Say once (log warning and the trainer's ``on_progress``) which built-in metrics cannot be computed."""
        names = [name for name, fn in self.metric_specs if fn is None and name in BUILTIN_METRICS]
        if not self._why_not or self._said or not names:
            return
        self._said = True
        text = (f"metric {', '.join(names)} cannot be computed for the {self.kind} task: {self._why_not}, so "
                f"{', '.join(column(n) for n in names)} stays empty; use a task kind that fits the model "
                "(text_classification, token_classification) or a metric spec of your own")
        log.warning(text)
        call = getattr(trainer, "call", None)
        if call is not None:
            call("on_progress", trainer, text)

    def forward(self, model: nn.Module, batch: Any) -> tuple[Any, torch.Tensor]:
        """``(model output, its loss as a 0-d float32 tensor)``.

        Raises
        ------
        StepError
            The output holds no loss (a Hugging Face batch without ``labels``...).
        """
        if isinstance(batch, Mapping):
            out = model(**batch)
        elif isinstance(batch, (tuple, list)):
            out = model(*batch)
        else:
            out = model(batch)
        loss = getattr(out, "loss", None)
        if loss is None and isinstance(out, Mapping):
            loss = out.get("loss")
        if loss is None and isinstance(out, torch.Tensor) and out.dim() == 0:
            loss = out
        if loss is None:
            hint = " (a Hugging Face model returns its loss only when the batch holds labels)" \
                if isinstance(batch, Mapping) and "labels" not in batch else ""
            raise StepError(f"the model returned {type(out).__name__} without a loss for the batch "
                            f"{describe(batch)}{hint}: the {self.kind} task needs an output with .loss, "
                            "a dict with \"loss\", or a 0-d tensor")
        return out, _scalar(_float(loss), "the model's loss")


class TextClassificationTask(ModelLossTask):
    """A Hugging Face ``*ForSequenceClassification`` on ``{"input_ids", ..., "labels"}`` batches: its own loss.

    The validation metrics see the logits ``(N, C)`` and the ``labels`` ``(N,)``
    (``accuracy``, ``macro_f1`` by default). Multi-label (``multi_label``: ``[data]
    target`` a list of 0/1 columns): the logits ``(N, K)`` and the ``(N, K)`` 0/1
    ``labels`` (``multilabel_accuracy``, ``multilabel_f1``), and no class report
    (its confusion matrix is of single labels).
    """

    kind = "text_classification"

    def __init__(self, metrics: tuple = (), multi_label: bool = False):
        super().__init__(metrics)
        self.multi_label = bool(multi_label)
        self.report = None if self.multi_label else ClassReport()

    def eval_step(self, model, batch):
        if self.multi_label:
            return self._multi_label_eval(model, batch)
        out = super().eval_step(model, batch)
        if isinstance(out.output, torch.Tensor) and isinstance(out.target, torch.Tensor) and out.output.dim() == 2:
            self.report.add(out.output, out.target)
        return out

    def _multi_label_eval(self, model, batch):
        out, loss = self.forward(model, batch)
        logits = getattr(out, "logits", None)
        labels = batch.get("labels") if isinstance(batch, Mapping) else None
        if not isinstance(logits, torch.Tensor) or not isinstance(labels, torch.Tensor) or logits.dim() != 2 \
                or labels.shape != logits.shape:
            self._why_not = f"the logits {describe(logits)} and labels {describe(labels)} are not (N, K) label " \
                            "scores and (N, K) 0/1 labels"
            return StepOutput(loss, batch_size(batch))
        return StepOutput(loss, batch_size(batch), _float(logits), labels)

    def after_validation(self, trainer: Any) -> None:
        """Say which metrics cannot be computed (once), and write the class report."""
        super().after_validation(trainer)
        self.write_report(trainer)

    def train_step(self, model, batch):
        out, loss = self.forward(model, batch)
        logits = getattr(out, "logits", None)
        target = batch.get("labels") if isinstance(batch, Mapping) else None
        return StepOutput(loss, batch_size(batch), _float(logits) if isinstance(logits, torch.Tensor) else None,
                          target)


class TokenClassificationTask(ModelLossTask):
    """A Hugging Face ``*ForTokenClassification`` on ``{"input_ids", ..., "labels": (N, L)}`` batches: its own loss.

    The validation metrics see the logits and labels of the labelled tokens only
    (``labels != -100``: each word's first sub-token), flattened to ``(M, C)`` and
    ``(M,)``: ``accuracy`` is token accuracy, ``macro_f1`` the macro F1 over tags.
    """

    kind = "token_classification"

    def __init__(self, metrics: tuple = ()):
        super().__init__(metrics)
        self.report = ClassReport()

    def after_validation(self, trainer: Any) -> None:
        """Say which metrics cannot be computed (once), and write the class report (rows: sentences)."""
        super().after_validation(trainer)
        self.write_report(trainer)

    def eval_step(self, model, batch):
        out, loss = self.forward(model, batch)
        logits = getattr(out, "logits", None)
        labels = batch.get("labels") if isinstance(batch, Mapping) else None
        if not isinstance(logits, torch.Tensor) or not isinstance(labels, torch.Tensor) or logits.dim() != 3 \
                or labels.shape != logits.shape[:2]:
            self._why_not = f"the logits {describe(logits)} and labels {describe(labels)} are not (N, L, C) tag " \
                            "scores and (N, L) tag indices"
            return StepOutput(loss, batch_size(batch))
        keep = labels != IGNORE_INDEX
        self.report.add(logits[keep], labels[keep], tagged_rows(logits, labels, IGNORE_INDEX))
        return StepOutput(loss, batch_size(batch), _float(logits[keep]), labels[keep])


class CausalLMTask(ModelLossTask):
    """A Hugging Face ``*ForCausalLM`` on ``{"input_ids", "attention_mask", "labels"}`` blocks: its own loss.

    The validation metric ``perplexity`` sees each batch's mean loss. With a
    :class:`~workbench.core.train.task.samples.Samples` writer, every evaluation
    also completes its prompts into the run folder's ``samples.jsonl``
    (:meth:`after_validation`).
    """

    kind = "causal_lm"

    def __init__(self, metrics: tuple = (), samples: Any = None):
        super().__init__(metrics)
        self.samples = samples

    def eval_step(self, model, batch):
        out = self.train_step(model, batch)
        if self.samples is not None and isinstance(batch, Mapping):
            self.samples.see_batch(batch)
        return StepOutput(out.loss, out.n, out.loss.detach(), None)

    def after_validation(self, trainer: Any) -> None:
        """Complete the prompts with the model in eval mode (called by validation, under ``no_grad``)."""
        if self.samples is not None:
            self.samples.write(trainer)


class ImageClassificationTask(CriterionTask):
    """A transformers ``*ForImageClassification`` on ``(pixel_values (N, C, H, W), class (N,))`` batches.

    The loss is cross-entropy of the output's ``logits`` ``(N, C)`` (a plain tensor output is
    taken as the logits), so the head's ``problem_type`` never decides it; the validation
    metrics (``accuracy``, ``macro_f1`` by default) see the logits and the classes.
    """

    def __init__(self, metrics: tuple = ()):
        super().__init__("image_classification", nn.CrossEntropyLoss(), metrics)
        self.report = ClassReport()

    def eval_step(self, model, batch):
        out = self.train_step(model, batch)
        self.report.add(out.output, out.target)
        return out

    def after_validation(self, trainer: Any) -> None:
        """Write the class report (called by validation)."""
        self.write_report(trainer)

    def prediction(self, out: Any) -> torch.Tensor:
        """The ``(N, C)`` logits of a ``*ForImageClassification`` output (or a plain tensor).

        Raises
        ------
        StepError
            The output holds no ``(N, C)`` logits.
        """
        logits = out if isinstance(out, torch.Tensor) else getattr(out, "logits", None)
        if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
            raise StepError(f"the model returned {type(out).__name__} without (N, C) logits for the "
                            "image_classification task: open a *ForImageClassification folder (or a bare ViTModel, "
                            "which gets a head)")
        return logits


class StepTask(Task):
    """A user's ``step(model, batch) -> loss`` or ``-> {"loss": loss, "<metric>": value, ...}``.

    Parameters
    ----------
    step : callable
        The training step.
    validation_step : callable, optional
        The validation step (default: ``step``, called under ``torch.no_grad()``).
    where : str
        The spec the step came from, for messages (``"my_task.py:training_step"``).
    Every value the step returns beside ``"loss"`` becomes a metric by its
    name: averaged over the epoch's training steps (``train_<name>``) and over
    the validation batches (``val_<name>``).
    """

    kind = "step"

    def __init__(self, step: Callable, validation_step: Callable | None = None, where: str = "the step"):
        super().__init__()
        self.step = step
        self.validation_step = validation_step
        self.where = where

    def train_step(self, model, batch):
        return self._call(self.step, model, batch, self.where)

    def eval_step(self, model, batch):
        if self.validation_step is None:
            return self._call(self.step, model, batch, self.where)
        return self._call(self.validation_step, model, batch, f"{self.where} (validation_step)")

    def new_metrics(self) -> list[Metric]:
        """None: a user's step sees no output and target here; it reports its metrics in its dict."""
        return []

    @staticmethod
    def _call(fn, model, batch, where):
        result = fn(model, batch)
        logged = {}
        if isinstance(result, Mapping):
            if "loss" not in result:
                raise StepError(f"{where} returned a dict without \"loss\" (keys: {', '.join(map(str, result))}): "
                                "return the loss tensor, or a dict with a \"loss\" entry")
            logged = {str(k): v for k, v in result.items() if k != "loss"}
            loss = result["loss"]
        else:
            loss = result
        if not isinstance(loss, torch.Tensor):
            raise StepError(f"{where} returned {type(loss).__name__} as the loss: return a tensor (the batch's "
                            "mean loss, with its graph) so that backward() can run")
        return StepOutput(_scalar(_float(loss), f"the loss of {where}"), batch_size(batch), logged=logged)


def _scalar(loss: Any, what: str) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor):
        raise StepError(f"{what} is a {type(loss).__name__}, not a tensor")
    if loss.dim() != 0:
        if loss.numel() == 1:
            return loss.reshape(())
        raise StepError(f"{what} has shape {tuple(loss.shape)}, not a single number: reduce it (e.g. .mean())")
    return loss
