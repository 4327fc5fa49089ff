"""A checkpoint's :class:`~workbench.core.model.checkpoint.CheckpointMetadata`, from what a file holds. Qt-free."""

from __future__ import annotations

import json
from typing import Any, Mapping

import torch

from workbench.core.model.checkpoint import CheckpointMetadata
from workbench.core.model.formats.optimizer_guess import optimizer_info
from workbench.core.model.formats.plain import as_float, as_int, plain

__all__ = ["tensor_stats", "arch_entry", "metadata_from_raw", "safetensors_metadata"]


def tensor_stats(state_dict: Mapping[str, torch.Tensor]) -> tuple[int, int, dict[str, int]]:
    """Count a state_dict's tensors.

    Returns
    -------
    (num_tensors, total_params, dtypes)
        ``total_params`` is the sum of ``numel`` over unique tensors (same storage,
        offset, shape and stride count once); ``dtypes`` maps ``"float32"`` -> count.
    """
    seen: set[tuple] = set()
    total = 0
    dtypes: dict[str, int] = {}
    for t in state_dict.values():
        name = str(t.dtype).removeprefix("torch.")
        dtypes[name] = dtypes.get(name, 0) + 1
        try:
            ident = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        except (RuntimeError, NotImplementedError):  # meta / exotic tensors
            ident = (id(t),)
        if t.numel() and ident in seen:
            continue
        seen.add(ident)
        total += t.numel()
    return len(state_dict), total, dtypes


def _scalar_extras(raw: Mapping, used: set[str]) -> dict:
    out = {}
    for key, value in raw.items():
        if key in used or not isinstance(key, str):
            continue
        if isinstance(value, (str, int, float, bool)) or (isinstance(value, torch.Tensor) and value.numel() == 1):
            out[key] = plain(value)
    return out


def arch_entry(arch: Any) -> dict | None:
    """A file's ``arch`` entry as ``{"name": str, "kwargs": ...}``; None when it names no architecture.

    A plain string is timm's convention (its ``train.py`` saves ``"arch": "efficientnet_b0"``):
    timm's model of that name when timm has one (``timm/efficientnet_b0``, not
    torchvision's model of the same name), else the name as it is, without kwargs.

    ``kwargs`` is kept as the file gives it (a dict copied, anything else as it
    is, None as ``{}``): :meth:`ArchSpec.from_file` then refuses kwargs that are
    not a table of plain values with an ArchitectureError naming the file.
    """
    if isinstance(arch, str) and arch.strip():
        from workbench.core import contrib

        name = arch.strip()
        timm_name = contrib.TIMM_PREFIX + name
        return {"name": timm_name if contrib.is_registered("architecture", timm_name) else name, "kwargs": {}}
    if not (isinstance(arch, Mapping) and isinstance(arch.get("name"), str)):
        return None
    kwargs = arch.get("kwargs")
    return {"name": arch["name"], "kwargs": {} if kwargs is None else dict(kwargs) if isinstance(kwargs, Mapping)
            else kwargs}


def metadata_from_raw(fmt: str, container: str, key: str | None, raw: Mapping | None) -> CheckpointMetadata:
    """The metadata of a loaded training dict / Lightning checkpoint (``raw``; None for a bare state_dict)."""
    meta = CheckpointMetadata(format=fmt, container=container, state_dict_key=key)
    if raw is None:
        return meta
    meta.epoch = as_int(raw.get("epoch"))
    meta.global_step = as_int(raw.get("global_step", raw.get("step")))
    meta.loss = as_float(raw.get("loss"))
    meta.optimizer_class, meta.optimizer_hparams = optimizer_info(raw)
    meta.arch = arch_entry(raw.get("arch"))
    frozen = raw.get("frozen")
    if isinstance(frozen, (list, tuple)):
        meta.frozen = [str(n) for n in frozen]
    if isinstance(raw.get("edits"), (list, tuple)):  # plain data; apply_edits checks every entry before use
        meta.edits = [plain(dict(e)) for e in raw["edits"] if isinstance(e, Mapping)]
    for lightning_key in ("hyper_parameters", "lr_schedulers"):
        if isinstance(raw.get(lightning_key), (Mapping, list, tuple)):
            meta.extra[lightning_key] = plain(raw[lightning_key])
    used = {"epoch", "global_step", "step", "loss", "optimizer_class", key or ""}
    meta.extra.update(_scalar_extras(raw, used))
    return meta


def safetensors_metadata(meta: CheckpointMetadata, header: Mapping[str, str]) -> None:
    """Fill ``meta`` from a safetensors ``__metadata__`` (Workbench's entries are JSON strings there)."""
    meta.extra["__metadata__"] = dict(header)
    for field_name in ("arch", "frozen"):
        if field_name in header:
            try:
                value = json.loads(header[field_name])
            except (TypeError, ValueError, RecursionError):
                continue
            if field_name == "arch":
                meta.arch = arch_entry(value)
            elif field_name == "frozen" and isinstance(value, list):
                meta.frozen = [str(v) for v in value]
    for field_name, conv in (("epoch", as_int), ("global_step", as_int), ("loss", as_float)):
        text = header.get(field_name)
        if text is not None:
            try:
                setattr(meta, field_name, conv(float(text)))
            except (TypeError, ValueError):
                pass
