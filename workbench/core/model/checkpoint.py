"""A checkpoint read from disk, as data: :class:`Checkpoint` and its :class:`CheckpointMetadata`.

A state_dict saved by ``torch.save(model.state_dict())`` carries a ``_metadata``
attribute (each module's version); every state_dict rebuilt from another keeps
it (:func:`workbench.core.model.prefixes.copy_metadata`).

Reading is the formats' job (:mod:`workbench.core.model.formats`: one module per
file format, :func:`~workbench.core.model.formats.read_checkpoint` asks each in
turn); stripping wrapper prefixes is :mod:`workbench.core.model.prefixes`'s; the
bytes exchanged with the training process are :mod:`workbench.core.model.wire`'s.
Qt-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

__all__ = ["Checkpoint", "CheckpointMetadata"]


@dataclass
class CheckpointMetadata:
    """What a checkpoint file says about itself.

    Attributes
    ----------
    format : str
        ``"state_dict" | "training_dict" | "lightning" | "safetensors" | "torchscript" |
        "pickled_module"``.
    container : str
        ``"zip" | "legacy_pickle" | "safetensors" | "torchscript"``.
    state_dict_key : str or None
        Key of the state_dict inside a training dict (``"model_state_dict"``, ...);
        None for a raw state_dict.
    epoch, global_step : int or None
        Training progress stored in the file (``global_step`` also reads ``step``).
    loss : float or None
        The stored loss value.
    optimizer_class : str or None
        ``"SGD"``, ``"AdamW"``...: stored by Workbench, else inferred from the
        ``param_groups`` keys (Adam and AdamW share keys; ``decoupled_weight_decay``
        tells them apart).
    optimizer_hparams : dict
        ``param_groups[0]`` without ``"params"``, as plain Python values.
    num_tensors : int
        Number of entries of the state_dict.
    total_params : int
        Sum of ``numel`` over unique tensors (tied tensors counted once).
    dtypes : dict of str to int
        dtype name (``"float32"``) -> number of tensors.
    file_size : int
        Size of the file in bytes.
    arch : dict or None
        The ``"arch"`` entry written by Workbench (``{"name": ..., "kwargs": {...}}``).
        ``kwargs`` is what the file holds: not always a dict (``[1, 2]`` in a
        damaged file), which :meth:`ArchSpec.from_file` refuses.
    frozen : list of str
        The ``"frozen"`` entry written by Workbench (qualified parameter names).
    edits : list of dict
        The ``"edits"`` entry written by Workbench: the structural edits its
        weights were saved with (``{"op": "add_lora", ...}``), replayed on open.
    extra : dict
        Anything else worth showing: safetensors ``__metadata__``, Lightning
        ``hyper_parameters``, other scalar entries of a training dict.
    verified : bool or None
        True when the file carried a digest of its tensors and every tensor
        matched it; None when it carries none (or one this version cannot check).
    """

    format: str
    container: str
    state_dict_key: str | None = None
    epoch: int | None = None
    global_step: int | None = None
    loss: float | None = None
    optimizer_class: str | None = None
    optimizer_hparams: dict = field(default_factory=dict)
    num_tensors: int = 0
    total_params: int = 0
    dtypes: dict[str, int] = field(default_factory=dict)
    file_size: int = 0
    arch: dict | None = None
    frozen: list[str] = field(default_factory=list)
    edits: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    verified: bool | None = None


@dataclass
class Checkpoint:
    """A checkpoint read from disk.

    Attributes
    ----------
    path : Path
        The file.
    state_dict : dict of str to torch.Tensor
        The model's tensors, on CPU (memory-mapped for zip files), prefixes not yet stripped.
    metadata : CheckpointMetadata
        Format, progress, optimizer, counts.
    raw : dict or None
        The whole loaded dict (optimizer_state_dict, scheduler_state_dict, rng_state...)
        without its digest entry; None for safetensors, TorchScript and pickled modules.
    module : nn.Module or None
        The model itself for ``pickled_module`` / ``torchscript`` (trusted loads only).
    """

    path: Path
    state_dict: dict[str, torch.Tensor]
    metadata: CheckpointMetadata
    raw: dict | None = None
    module: nn.Module | None = None
