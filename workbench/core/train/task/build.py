"""Build the :class:`~workbench.core.train.task.tasks.Task` of a run from its ``[task]`` settings."""

from __future__ import annotations

from typing import Any

from workbench.core import contrib
from workbench.core.train.config import TrainConfig
from workbench.core.train.data.batch import split_xy
from workbench.core.train.task.losses import LOSS_NAMES, build_loss
from workbench.core.train.task.metrics import BUILTIN_METRICS, DEFAULT_METRICS, MULTILABEL_NAMES
from workbench.core.train.task.tasks import (CausalLMTask, CriterionTask, ImageClassificationTask, ModelLossTask,
                                             StepTask, Task, TextClassificationTask, TokenClassificationTask)

__all__ = ["build_task", "resolve_kind", "infer_kind"]

#: The criterion of each kind when neither ``[task] loss`` nor the top-level ``loss`` says otherwise.
DEFAULT_LOSS = {"classification": "cross_entropy", "regression": "mse", "multilabel": "bce_with_logits"}


def infer_kind(batch: Any) -> str:
    """The task a batch suggests: ``(x, integer (N,) y)`` classification, ``(x, float y)`` regression,
    a dict without an input/target pair ``model_loss``; ``""`` when it cannot tell."""
    try:
        _, y = split_xy(batch, "")
    except ValueError:
        return "model_loss" if isinstance(batch, dict) else ""
    if not hasattr(y, "is_floating_point"):
        return ""
    if not y.is_floating_point():
        return "classification" if y.dim() <= 1 or (y.dim() == 2 and y.shape[1] == 1) else "multilabel"
    return "regression"


def resolve_kind(cfg: TrainConfig, data_task: str = "", batch: Any = None) -> str:
    """``[task] kind``, with ``"auto"`` settled: the data's own task (a CSV's), else what a batch
    suggests (:func:`infer_kind`), else classification."""
    if cfg.task.kind != "auto":
        return cfg.task.kind
    return data_task or (infer_kind(batch) if batch is not None else "") or "classification"


def _callable_name(spec: str) -> str:
    return spec.rpartition(":")[2].rpartition(".")[2] if ":" in spec else spec


def build_task(cfg: TrainConfig, kind: str) -> Task:
    """The run's task: the user's step, or the built-in ``kind`` with its loss and metrics.

    The specs were checked against the trust rule where they were read
    (:func:`workbench.core.train.task.specs.check_trust`); here they are imported.

    Parameters
    ----------
    cfg : TrainConfig
        ``cfg.task`` (step, validation_step, loss, metrics) and the top-level ``loss``.
    kind : str
        The settled kind (:func:`resolve_kind`).

    Raises
    ------
    ContributionError, ValueError, TypeError
        A spec cannot be imported, an unknown built-in name, a loss class that
        needs arguments; the message names the setting.
    """
    t = cfg.task
    if t.step:
        step = contrib.resolve("step", t.step)
        val = contrib.resolve("step", t.validation_step) if t.validation_step else None
        return StepTask(step, val, where=t.step)
    if kind == "model_loss":
        return ModelLossTask(_metrics(cfg, kind))
    if kind == "text_classification":
        from workbench.core.train.data.text import is_multi_label

        multi = is_multi_label(cfg.data)
        return TextClassificationTask(_metrics(cfg, kind, multi), multi_label=multi)
    if kind == "token_classification":
        return TokenClassificationTask(_metrics(cfg, kind))
    if kind == "image_classification":
        return ImageClassificationTask(_metrics(cfg, kind))
    if kind == "causal_lm":
        from workbench.core.train.task.samples import Samples

        samples = Samples(cfg.data.tokenizer, list(t.prompts), t.max_new_tokens, do_sample=bool(t.do_sample),
                          temperature=float(t.temperature), seed=int(t.sample_seed)) if cfg.data.tokenizer else None
        return CausalLMTask(_metrics(cfg, kind), samples)
    loss = t.loss or (cfg.loss if kind == "classification" or cfg.loss != "cross_entropy" else "")
    loss = loss or DEFAULT_LOSS[kind]
    criterion = build_loss(loss if loss in LOSS_NAMES else contrib.resolve("loss", loss))
    return CriterionTask(kind, criterion, _metrics(cfg, kind))


def _metrics(cfg: TrainConfig, kind: str, multi_label: bool = False) -> tuple:
    """``(name, fn or None)`` of ``[task] metrics`` (or the kind's defaults); ``multi_label``: the
    multi-label text classification's own (``accuracy`` -> ``multilabel_accuracy``...)."""
    names = cfg.task.metrics or DEFAULT_METRICS.get(kind, ())
    if multi_label:
        names = [MULTILABEL_NAMES.get(n, n) for n in names]
    out = []
    for name in names:
        if name in BUILTIN_METRICS:
            out.append((name, None))
        else:
            out.append((_callable_name(name), contrib.resolve("metric", name)))
    return tuple(out)
