"""The repeated blocks of a model: a transformer's layers, a ResNet stage's blocks.

Activation checkpointing wraps them (:mod:`workbench.core.train.trainer.speed`);
"Freeze embeddings and the first N blocks" counts them
(:func:`workbench.core.model.freezing.freeze_first_blocks`).
"""

from __future__ import annotations

from torch import nn

__all__ = ["repeated_blocks"]


def repeated_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The children of the largest ``nn.ModuleList`` / ``nn.Sequential`` whose children share one class.

    "Largest" counts parameters (ties: more children). A transformer's layers
    (``encoder.layer``, ``h``), a ResNet stage's blocks. At least two children.

    Returns
    -------
    list of (str, nn.Module)
        Qualified names and modules; empty when the model has no such container.
    """
    best: tuple[int, int, str, nn.Module] | None = None
    for name, m in model.named_modules():
        if not isinstance(m, (nn.ModuleList, nn.Sequential)):
            continue
        kids = list(m.children())
        if len(kids) < 2 or len({type(k) for k in kids}) != 1:
            continue
        size = sum(p.numel() for p in m.parameters())
        if size == 0:
            continue
        if best is None or (size, len(kids)) > (best[0], best[1]):
            best = (size, len(kids), name, m)
    if best is None:
        return []
    prefix = f"{best[2]}." if best[2] else ""
    return [(f"{prefix}{n}", k) for n, k in best[3].named_children()]
