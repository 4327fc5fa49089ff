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
Tied weights (one parameter under several names) stay one tensor in the
payload, so the file stores them once.

The format follows the file's suffix (:func:`save_model_file`): ``.pt``,
``.pth``, ``.ckpt``, ``.bin``, ``.tar`` are the torch checkpoint above;
``.safetensors`` is a real safetensors file (the weights only, each tied tensor
once, Workbench's entries as JSON strings in its header's ``__metadata__``:
see :func:`safetensors_metadata_entries`), which Workbench reopens with its
architecture, frozen set and edits. A name without a suffix gets ``.pt``; any
other suffix is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from workbench.core.digest import DIGEST_KEY
from workbench.core.errors import CheckpointError
from workbench.core.files import atomic_save, atomic_write
from workbench.core.model.formats.workbench_meta import TIED_KEY
from workbench.core.model.lora import lora_paths, merged_copy
from workbench.core.model.names import frozen_names
from workbench.core.rng import rng_state

_RESERVED = frozenset(
    {"model_state_dict", "optimizer_state_dict", "scheduler_state_dict", "arch", "frozen", "workbench_version",
     "edits", DIGEST_KEY}
)

#: Suffixes written as a torch checkpoint (``torch.save``; a training checkpoint only takes these).
TORCH_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".tar")
#: The suffix written as a safetensors file (weights and Workbench's metadata, no optimizer state).
SAFETENSORS_SUFFIX = ".safetensors"
#: Payload entries that make a training checkpoint: a safetensors file leaves them out (and says so).
_TRAINING_ENTRIES = ("optimizer_state_dict", "scheduler_state_dict")


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


def plain_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state_dict's tensors cloned to CPU, tied tensors (the same data under several names) cloned once.

    ``model.state_dict()`` detaches each name separately, so a weight tied under
    two names comes as two tensor objects over one storage; here they stay one
    tensor, which ``torch.save`` and :func:`save_model_file` store once.

    Parameters
    ----------
    state_dict : mapping of str to Tensor

    Returns
    -------
    dict of str to Tensor
        Same keys; non-tensor values converted by :func:`to_plain`.
    """
    out: dict[str, Any] = {}
    seen: dict[tuple, torch.Tensor] = {}
    for key, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            out[key] = to_plain(value)
            continue
        ident = _tensor_identity(value)
        if ident is None or ident not in seen:
            plain = to_plain(value)
            if ident is not None:
                seen[ident] = plain
            out[key] = plain
        else:
            out[key] = seen[ident]
    return out


def _tensor_identity(t: torch.Tensor) -> tuple | None:
    """What makes two tensor objects the same data (storage, offset, shape, stride, dtype); None for meta / empty."""
    if t.device.type == "meta" or t.numel() == 0:
        return None
    try:
        return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype, t.device)
    except (RuntimeError, NotImplementedError):
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
    payload: dict[str, Any] = {"model_state_dict": plain_state_dict(model.state_dict())}
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
    """Write a payload atomically in the format its suffix names (:func:`save_model_file`); the path written.

    Parameters
    ----------
    path : str or Path
        Target file; its folder is created. A failed save leaves the previous file intact.
    payload : mapping
        Usually from :func:`checkpoint_payload`.
    digest : bool
        Store the digest of its tensors in a torch checkpoint
        (:func:`workbench.core.digest.add_digest`), default True; False only to
        measure what the digest costs.

    Returns
    -------
    Path

    Raises
    ------
    CheckpointError
        The file could not be written (permissions, disk full, ...), or its suffix names no format Workbench writes.
    """
    return save_model_file(path, payload, digest=digest)[0]


def save_model_file(path: str | Path, payload: Mapping, *, digest: bool = True) -> tuple[Path, list[str]]:
    """Write a payload atomically (temporary file + ``os.replace``) in the format the file's suffix names.

    * :data:`TORCH_SUFFIXES` (``.pt``, ``.pth``, ``.ckpt``...): ``torch.save`` of
      the payload with its digest (loads with ``torch.load(weights_only=True)``).
    * ``.safetensors``: the payload's ``model_state_dict`` as a safetensors file
      (``safetensors.torch.load_file`` reads it), each tied tensor once, with
      :func:`safetensors_metadata_entries` in its ``__metadata__``. Optimizer,
      scheduler and RNG state are left out (a training checkpoint is a torch
      file), and the notes say so.
    * No suffix: ``.pt`` is added (said in the notes).

    Parameters
    ----------
    path : str or Path
    payload : mapping
        Usually from :func:`checkpoint_payload`.
    digest : bool
        As :func:`save_checkpoint`.

    Returns
    -------
    (Path, list of str)
        The file written and one line per thing the user should know (a suffix
        added, training state left out); ``[]`` when it was written as asked.

    Raises
    ------
    CheckpointError
        Another suffix (the message names those Workbench writes); a
        ``.safetensors`` payload without ``model_state_dict``; the file could
        not be written (the previous file, if any, is unchanged).
    """
    path = Path(path)
    notes: list[str] = []
    suffix = path.suffix.lower()
    if not suffix:
        path = path.with_name(path.name + ".pt")
        notes.append(f"{path.name}: the name had no suffix; saved as a PyTorch checkpoint (.pt)")
        suffix = ".pt"
    if suffix != SAFETENSORS_SUFFIX and suffix not in TORCH_SUFFIXES:
        raise CheckpointError(
            f"Workbench does not write {suffix} files. Name it .safetensors (the weights, readable by "
            f"safetensors.torch.load_file) or {'/'.join(TORCH_SUFFIXES[:3])} (a PyTorch checkpoint, also for "
            "training state).", path)
    try:
        if suffix == SAFETENSORS_SUFFIX:
            notes += _save_safetensors(path, payload)
        else:
            atomic_save(dict(payload), path, digest=digest)
    except OSError as exc:
        raise CheckpointError(
            f"could not be written ({exc.strerror or exc}). Check that the folder is writable and the disk has space; "
            "the previous file, if any, is unchanged.",
            path,
        ) from exc
    return path, notes


def safetensors_metadata_entries(payload: Mapping, tied: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file Workbench writes: every value a string.

    ``format`` is ``"pt"`` (what Hugging Face libraries expect of a PyTorch
    file); ``arch``, ``frozen``, ``edits``, ``source`` (where an export came
    from) and :data:`TIED_KEY` are JSON;
    ``epoch``, ``global_step``, ``loss`` and ``workbench_version`` are plain
    text. Entries the payload does not have are left out.

    Parameters
    ----------
    payload : mapping
        From :func:`checkpoint_payload`.
    tied : mapping of str to str, optional
        Names stored once: alias -> the name stored.
    """
    meta = {"format": "pt"}
    for key in ("arch", "frozen", "edits", "source"):
        if payload.get(key) is not None:
            meta[key] = json.dumps(payload[key], sort_keys=True)
    for key, out in (("epoch", "epoch"), ("step", "global_step"), ("loss", "loss")):
        if payload.get(key) is not None:
            meta[out] = repr(payload[key]) if isinstance(payload[key], float) else str(payload[key])
    if payload.get("workbench_version"):
        meta["workbench_version"] = str(payload["workbench_version"])
    if tied:
        meta[TIED_KEY] = json.dumps(dict(tied), sort_keys=True)
    return meta


def _untie(state: Mapping[str, Any], path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(tensors to store, {alias: stored name})``: one name per tied tensor; other shared storage copied."""
    tensors: dict[str, torch.Tensor] = {}
    tied: dict[str, str] = {}
    by_identity: dict[tuple, str] = {}
    storages: set[int] = set()
    for name, t in state.items():
        if not isinstance(t, torch.Tensor):
            raise CheckpointError(f"cannot be written as safetensors: {name!r} is a {type(t).__name__}, not a "
                                  "tensor. Save it as .pt.", path)
        ident = _tensor_identity(t)
        if ident is not None and ident in by_identity:
            tied[name] = by_identity[ident]
            continue
        t = t.detach().cpu()
        ptr = t.untyped_storage().data_ptr() if t.numel() else None
        if ptr is not None and (ptr in storages or not t.is_contiguous() or t.untyped_storage().nbytes()
                                != t.numel() * t.element_size()):
            t = t.contiguous().clone()  # a view of shared or larger memory: safetensors stores whole tensors
        if ptr is not None:
            storages.add(t.untyped_storage().data_ptr())
        if ident is not None:
            by_identity[ident] = name
        tensors[name] = t
    return tensors, tied


def _save_safetensors(path: Path, payload: Mapping) -> list[str]:
    """Write ``payload``'s weights and metadata as safetensors at ``path`` atomically; the notes."""
    from safetensors.torch import save as safetensors_bytes

    state = payload.get("model_state_dict")
    if not isinstance(state, Mapping):
        raise CheckpointError("cannot be written as safetensors: there are no model weights to save.", path)
    tensors, tied = _untie(state, path)
    data = safetensors_bytes(tensors, metadata=safetensors_metadata_entries(payload, tied))
    atomic_write(path, lambda f: f.write(data))
    left = [k for k in _TRAINING_ENTRIES if payload.get(k) is not None]
    if left:
        names = " and ".join(k.replace("_state_dict", "") for k in left)
        return [f"{path.name}: a .safetensors file holds weights only; the {names} state was not saved "
                "(save as .pt to keep it for resuming)"]
    return []
