"""A real batch of the chosen dataset, as the example input of a model (its tree's shapes and FLOPs, probes).

The window's tree and probes need something to call the model with. A real
batch of the data the run will train on is the best example there is: it has
the right shapes, dtypes (integer token ids included) and structure (a dict a
Hugging Face model takes as keyword arguments).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import IterableDataset, default_collate

from workbench.core.errors import DataError
from workbench.core.train.config import DATASETS, TrainConfig
from workbench.core.train.data.batch import INPUT_KEYS, TARGET_KEYS

__all__ = ["example_batch", "model_input"]


def model_input(batch: Any, kind: str = "") -> Any:
    """The part of ``batch`` the model is called with.

    ``(input, target)`` pairs give the input; a dict gives itself for
    ``model_loss`` (``model(**batch)``: the labels too, as the run does), else
    itself without its target keys (:data:`~workbench.core.train.data.batch.TARGET_KEYS`)
    when it has no input key, else its input key's value.
    """
    if isinstance(batch, (tuple, list)) and len(batch) >= 2:
        return batch[0]
    if isinstance(batch, Mapping):
        if kind == "model_loss":
            return dict(batch)
        x = next((batch[k] for k in INPUT_KEYS if k in batch and k != "input_ids"), None)
        if x is not None:
            return x
        return {k: v for k, v in batch.items() if k not in TARGET_KEYS}
    return batch


def example_batch(cfg: TrainConfig, n: int = 2) -> Any:
    """The first ``n`` validation samples of ``cfg.data``, collated as the run collates them.

    Parameters
    ----------
    cfg : TrainConfig
        ``cfg.data`` says which dataset (a user's factory is called: the caller
        has applied the trust rule, as for a run).
    n : int
        Samples in the batch.

    Returns
    -------
    object
        A batch of the dataset's own structure (``(x, y)``, a dict of tensors...),
        on the CPU; :func:`model_input` gives what the model takes.

    Raises
    ------
    DataError
        The dataset cannot be built or yields no sample.
    """
    from workbench.core.train.data.datasets import build_datasets
    from workbench.core.train.data.user_data import user_datasets

    collate = default_collate
    if cfg.data.dataset not in DATASETS:
        data = user_datasets(cfg.data.dataset, cfg.data.kwargs)
        ds, collate = data.val if _nonempty(data.val) else data.train, data.collate_fn or default_collate
    else:
        train, val, _ = build_datasets(cfg.data, task=cfg.task.kind)
        ds = val if len(val) else train
    if isinstance(ds, IterableDataset):
        samples = []
        for sample in ds:
            samples.append(sample)
            if len(samples) >= n:
                break
    else:
        samples = [ds[i] for i in range(min(n, len(ds)))]
    if not samples:
        raise DataError(f"data.dataset {cfg.data.dataset!r} yields no sample")
    batch = collate(samples)
    return batch.cpu() if isinstance(batch, torch.Tensor) else batch


def _nonempty(ds) -> bool:
    try:
        return len(ds) > 0
    except TypeError:
        return True
