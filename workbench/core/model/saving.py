"""Write Workbench training checkpoints that load with ``torch.load(weights_only=True)``.

The layout follows the PyTorch tutorial "Saving and loading a general checkpoint"
(https://pytorch.org/tutorials/recipes/recipes/saving_and_loading_a_general_checkpoint.html)::

    {
        "model_state_dict": {...},          # tensors on CPU
        "optimizer_state_dict": {...},      # when there is an optimizer
        "optimizer_class": "AdamW",
        "scheduler_state_dict": {...},      # when there is a scheduler
        "scheduler_class": "StepLR",
        "epoch": 3, "step": 1200, "loss": 0.41,
        "arch": {"name": "resnet18", "kwargs": {"num_classes": 10}},   # or None
        "frozen": ["conv1.weight", ...],    # qualified names of parameters with requires_grad False
        "edits": [{"op": "add_lora", ...}], # structural edits to replay before loading (when given)
        "workbench_version": "0.1.0",
        "rng_state": {...},                # workbench.core.rng.rng_state()
        "workbench_digest": {...},         # added by save_checkpoint: workbench.core.digest
    }

Every file :func:`save_checkpoint` writes carries a digest of its tensors
(:mod:`workbench.core.digest`), checked by every read
(:func:`workbench.core.model.checkpoint.read_checkpoint`).

A model with LoRA adapters (:mod:`workbench.core.model.lora`) is saved three
ways: as it is (``lora="keep"``: the adapters' tensors in the state_dict, the
``add_lora`` edit in ``"edits"``), merged (``lora="merge"``: ``W + (alpha/r) B A``
folded into each base weight, the original structure and keys, the ``add_lora``
edits dropped), or adapters only in peft's format
(:func:`workbench.core.model.lora.save_adapters`).

Only tensors, dicts, lists, tuples, str, int, float, bool and None are stored, so
the weights-only unpickler accepts the file and opening it never runs code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from workbench.core.digest import DIGEST_KEY
from workbench.core.errors import CheckpointError
from workbench.core.files import atomic_save
from workbench.core.model.lora import lora_paths, merged_copy
from workbench.core.model.names import frozen_names
from workbench.core.rng import rng_state

_RESERVED = frozenset(
    {"model_state_dict", "optimizer_state_dict", "scheduler_state_dict", "arch", "frozen", "workbench_version",
     "edits", DIGEST_KEY}
)


def to_plain(value: Any, *, copy: bool = True) -> Any:
    """Convert a value to what ``torch.load(weights_only=True)`` accepts.

    Parameters
    ----------
    value : Any
        Tensors are detached and moved to CPU (cloned when ``copy``); numpy arrays
        become tensors, numpy scalars Python numbers; sets become sorted lists;
        mappings become dicts with the same keys; callables (e.g. ``LambdaLR``
        lambdas) and other objects become None.
    copy : bool
        Clone tensors so later in-place updates (the next optimizer step) do not
        change what is saved.

    Returns
    -------
    Any
        A value made of tensors, dict, list, tuple, str, int, float, bool and None.
    """
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        return t.clone() if copy and t.data_ptr() == value.data_ptr() else t
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {k: to_plain(v, copy=copy) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(to_plain(v, copy=copy) for v in value)
    if isinstance(value, list):
        return [to_plain(v, copy=copy) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_plain(v, copy=copy) for v in value), key=repr)
    return _numpy_to_plain(value)


def _numpy_to_plain(value: Any) -> Any:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return None
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy()) if value.dtype != object else [to_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return None


def _arch_dict(arch: Any) -> dict | None:
    if arch is None:
        return None
    if hasattr(arch, "to_dict"):
        return arch.to_dict()
    if isinstance(arch, Mapping):
        return {"name": str(arch["name"]), "kwargs": dict(arch.get("kwargs") or {})}
    return {"name": str(arch), "kwargs": {}}


def checkpoint_payload(
    model: nn.Module,
    *,
    arch: Any = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    epoch: int | None = None,
    step: int | None = None,
    loss: float | torch.Tensor | None = None,
    extra: Mapping | None = None,
    include_rng: bool = True,
    edits: list[dict] | None = None,
    lora: str = "keep",
) -> dict:
    """Collect everything a Workbench checkpoint holds (see the module docstring for the layout).

    Parameters
    ----------
    model : nn.Module
        Its ``state_dict`` is cloned to CPU (safe to hand to another thread).
    arch : ArchSpec, dict, str or None
        The architecture, stored as ``{"name", "kwargs"}`` so the file reopens
        without asking.
    optimizer, scheduler : optional
        Their ``state_dict()`` (tensors cloned) and class names.
    epoch, step : int, optional
    loss : float or 0-d Tensor, optional
    extra : mapping, optional
        More top-level entries (converted with :func:`to_plain`); they may not
        replace the reserved keys.
    include_rng : bool
        Store :func:`rng_state` under ``"rng_state"``. Default True.
    edits : list of dict, optional
        The model's structural edits (``session.edits``), stored under ``"edits"``
        so the file reopens with them replayed before its weights load.
    lora : {"keep", "merge"}
        What to do with LoRA adapters: keep them as they are, or save a merged
        copy (``model`` itself keeps its adapters; ``add_lora`` edits are left
        out of ``"edits"``). A model without adapters is saved the same either way.

    Returns
    -------
    dict
        Loadable with ``torch.load(path, weights_only=True)`` once saved.

    Raises
    ------
    ValueError
        ``extra`` uses a reserved key, ``arch`` kwargs are not plain values, or
        ``lora`` is neither "keep" nor "merge".
    WorkbenchError
        A merged weight is not finite.
    """
    import workbench

    if lora not in ("keep", "merge"):
        raise ValueError(f"lora must be 'keep' or 'merge', not {lora!r}")
    if lora == "merge" and lora_paths(model):
        model = merged_copy(model)
        edits = [e for e in edits or [] if e.get("op") != "add_lora"]
    payload: dict[str, Any] = {"model_state_dict": to_plain(model.state_dict())}
    if optimizer is not None:
        payload["optimizer_state_dict"] = to_plain(optimizer.state_dict())
        payload["optimizer_class"] = type(optimizer).__name__
    if scheduler is not None:
        payload["scheduler_state_dict"] = to_plain(scheduler.state_dict())
        payload["scheduler_class"] = type(scheduler).__name__
    payload["epoch"] = None if epoch is None else int(epoch)
    payload["step"] = None if step is None else int(step)
    payload["loss"] = None if loss is None else float(loss)
    payload["arch"] = _arch_dict(arch)
    payload["frozen"] = frozen_names(model)
    if edits:
        payload["edits"] = to_plain([dict(e) for e in edits])
    payload["workbench_version"] = workbench.__version__
    if include_rng:
        payload["rng_state"] = rng_state()
    for key, value in (extra or {}).items():
        if key in _RESERVED:
            raise ValueError(f"extra entry {key!r} would replace a reserved checkpoint entry")
        payload[key] = to_plain(value)
    return payload


def save_checkpoint(path: str | Path, payload: Mapping, *, digest: bool = True) -> Path:
    """Write a payload atomically with ``torch.save`` (temporary file + ``os.replace``), with its digest.

    Parameters
    ----------
    path : str or Path
        Target file; its folder is created. A failed save leaves the previous file intact.
    payload : mapping
        Usually from :func:`checkpoint_payload`.
    digest : bool
        Store the digest of its tensors (:func:`workbench.core.digest.add_digest`),
        default True; False only to measure what the digest costs.

    Returns
    -------
    Path

    Raises
    ------
    CheckpointError
        The file could not be written (permissions, disk full, ...).
    """
    path = Path(path)
    try:
        return atomic_save(dict(payload), path, digest=digest)
    except OSError as exc:
        raise CheckpointError(
            f"could not be written ({exc.strerror or exc}). Check that the folder is writable and the disk has space; "
            "the previous file, if any, is unchanged.",
            path,
        ) from exc
