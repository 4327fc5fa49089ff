"""What the framework callbacks share: picking the plottable numbers out of a framework's metrics."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from workbench.core.attach.script import Attached, attach

@dataclass
class AttachOptions:
    """Where a framework callback's run attaches: the keyword arguments of :func:`workbench.attach`.

    Attributes
    ----------
    run_dir : str or Path or None
        The run folder (``edits.jsonl``, ``metrics.csv``, Save now's ``last.pt``); None: a new folder
        under Workbench's runs folder.
    name : str or None
        Shown in the window's list (None: the script's file name).
    host : str
    port : int
        Where to listen (default: this machine only, a free port).
    """

    run_dir: Any = None
    name: str | None = None
    host: str = "127.0.0.1"
    port: int = 0

    def attach(self, model, optimizer, scheduler=None) -> Attached:
        """:func:`workbench.attach` of ``model`` and ``optimizer`` with these options."""
        return attach(model, optimizer, scheduler=scheduler, run_dir=self.run_dir, name=self.name,
                      host=self.host, port=self.port)


#: Keys :meth:`~workbench.core.attach.script.Attached.step` fills itself (or takes as arguments).
STEP_RESERVED = frozenset({"step", "loss", "batch", "lr", "time", "epoch"})
#: Keys :meth:`~workbench.core.attach.script.Attached.epoch_end` fills itself.
EPOCH_RESERVED = frozenset({"epoch", "step", "train_loss", "lr", "time"})


def scalars(metrics: Mapping, keys: Iterable[str] | None = None, skip: Iterable[str] = ()) -> dict:
    """The scalar entries of ``metrics``: numbers and one-element tensors, detached.

    Parameters
    ----------
    metrics : Mapping
        A framework's metrics (``trainer.callback_metrics``, Hugging Face's ``logs``).
    keys : iterable of str, optional
        Only these keys (default: all).
    skip : iterable of str
        Keys left out.

    Returns
    -------
    dict
        ``{name: float or 0-d Tensor}``; a CPU tensor becomes a float at once, a
        device tensor stays one (read later in a batch, without a sync per step).
    """
    skip = set(skip)
    out = {}
    for k in (metrics if keys is None else keys):
        if k in skip or k not in metrics or not isinstance(k, str):
            continue
        v = metrics[k]
        if isinstance(v, torch.Tensor):
            if v.numel() != 1 or v.is_complex():
                continue
            v = v.detach()
            out[k] = float(v) if v.device.type == "cpu" else v.reshape(())
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(v)
    return out

