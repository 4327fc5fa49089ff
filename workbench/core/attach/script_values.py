"""What :class:`~workbench.core.attach.script.Attached` reads of the script's own objects: the torch optimizer
inside a framework's wrapper, the process group, the step rows' tensors (one device read per batch), and a
scalar of the model's output for the NaN trace. Qt-free."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["unwrap_optimizer", "read_tensors", "distributed", "output_sum"]


def unwrap_optimizer(optimizer):
    """The torch optimizer inside a framework's wrapper (accelerate's ``AcceleratedOptimizer``,
    Lightning's ``LightningOptimizer``): its ``param_groups`` and step hooks are the real ones."""
    for _ in range(3):
        if optimizer is None or isinstance(optimizer, torch.optim.Optimizer):
            return optimizer
        inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "_optimizer", None)
        if inner is None:
            return optimizer
        optimizer = inner
    return optimizer


def read_tensors(rows: list[dict]) -> None:
    """Replace every tensor value in ``rows`` by its float (a tensor's mean), reading each device once."""
    where: list[tuple[dict, str]] = []
    values: list[torch.Tensor] = []
    for r in rows:
        for k, v in r.items():
            if isinstance(v, torch.Tensor):
                where.append((r, k))
                values.append(v.detach().float().mean())
    if not values:
        return
    by_device: dict = {}
    for i, v in enumerate(values):
        by_device.setdefault(v.device, []).append(i)
    for idx in by_device.values():
        for i, x in zip(idx, torch.stack([values[i] for i in idx]).tolist()):
            r, k = where[i]
            r[k] = x


def distributed() -> tuple[int, int]:
    """``(rank, world_size)`` of an initialized data-parallel process group, else ``(0, 1)``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def output_sum(model: nn.Module, batch: Any) -> torch.Tensor:
    """A scalar of the model's output for the NaN trace (the script's own loss function is not known here)."""
    if isinstance(batch, dict):
        out = model(**{k: v for k, v in batch.items() if k not in ("labels", "label", "target", "targets", "y")})
    elif isinstance(batch, (list, tuple)):
        out = model(batch[0])
    else:
        out = model(batch)
    first = out
    while not isinstance(first, torch.Tensor):
        if isinstance(first, dict):
            first = next(iter(first.values()))
        elif isinstance(first, (list, tuple)):
            first = first[0]
        elif hasattr(first, "logits"):
            first = first.logits
        else:
            raise TypeError(f"cannot find a tensor in the model's output ({type(out).__name__})")
    return first.float().sum()
