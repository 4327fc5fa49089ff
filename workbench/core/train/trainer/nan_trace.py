"""Trace the first non-finite value of a failing step to the module that made it.

:func:`trace_nonfinite` re-runs one batch with a forward hook on every module
and a tensor hook on every trainable parameter, and names the first module in
execution order whose output holds NaN/Inf or, when the forward and the loss are
finite, the first parameter whose gradient does. Unlike
``torch.autograd.detect_anomaly`` it covers the forward, costs nothing until a
failure (it runs once, on the failing batch) and need not be switched on
beforehand. The model's buffers (BatchNorm running statistics) and gradients
are put back as they were, so the trace leaves no trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

__all__ = ["NonFiniteTrace", "trace_nonfinite"]


@dataclass
class NonFiniteTrace:
    """Where a failing step's first non-finite value appeared (plain data: crosses processes).

    Attributes
    ----------
    step : int
        The failing global step.
    phase : str
        ``"forward"`` (a module's output), ``"loss"`` (the model's output was
        finite, the loss function's was not), ``"backward"`` (a parameter's
        gradient) or ``"none"`` (the re-run was finite everywhere).
    module : str
        Qualified name of the module (``""``: the model itself); for
        ``"backward"`` the module owning :attr:`parameter`.
    module_type : str
        Its class name (``"BatchNorm2d"``).
    parameter : str
        ``"backward"``: the parameter whose gradient was first non-finite.
    kind : str
        ``"NaN"``, ``"Inf"`` or ``"NaN and Inf"``.
    broken_weights : list of str
        The module's own parameters (and buffers, in ``eval()``) that already
        held NaN/Inf before the re-run (an earlier update broke them).
    exact : bool
        True when the failing step's own batch and pre-step weights were re-run;
        False when the failure was noticed later (CUDA reads the loss at the
        emission cadence) and the latest batch was re-run with the current weights.
    """

    step: int
    phase: str
    module: str = ""
    module_type: str = ""
    parameter: str = ""
    kind: str = ""
    broken_weights: list[str] = field(default_factory=list)
    exact: bool = True

    def text(self) -> str:
        """One line for the dialog, ``workbench train`` and the run's error message."""
        where = f"{self.module or 'the model'} ({self.module_type})"
        at = f"at step {self.step:,}"
        if self.phase == "forward":
            line = f"first non-finite output: {where} {at} ({self.kind})"
            if self.broken_weights:
                shown = ", ".join(self.broken_weights[:3])
                line += f"; its {shown} already held NaN/Inf (an earlier update broke it)"
        elif self.phase == "loss":
            line = f"first non-finite value: the loss function {at} (the model's output was finite)"
        elif self.phase == "backward":
            line = f"first non-finite gradient: {self.parameter} of {where} {at} ({self.kind}; the forward was finite)"
        else:
            line = f"re-running step {self.step:,} gave finite values everywhere (the failure did not repeat)"
        return line if self.exact else line + " [re-run on the latest batch with the current weights]"

    def to_dict(self) -> dict:
        """Plain dict of the fields."""
        return asdict(self)


def _kind(t: torch.Tensor) -> str:
    nan, inf = bool(torch.isnan(t).any()), bool(torch.isinf(t).any())
    return "NaN and Inf" if nan and inf else ("NaN" if nan else "Inf")


def _bad(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


class _Found(Exception):
    """Raised by a forward hook to end the re-run at the first non-finite output."""


def trace_nonfinite(model: nn.Module, batch: Any, loss_of: Callable[[nn.Module, Any], torch.Tensor], step: int,
                    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                    exact: bool = True) -> NonFiniteTrace:
    """Re-run one batch and name where its first non-finite value appeared.

    Parameters
    ----------
    model : nn.Module
        In the mode of the failing step (``train()``); left in that mode.
    batch : object
        The batch, on the model's device: ``(inputs, targets)``, a dict of tensors...
    loss_of : callable
        ``loss_of(model, batch) -> 0-d tensor``: the run's step (its task's
        ``train_step(model, batch).loss``), called under ``autocast``.
    step : int
        The failing global step (for the message).
    autocast : callable
        Returns the autocast context of the run (mixed precision), or a no-op.
    exact : bool
        Whether these are the failing step's own batch and weights (see :class:`NonFiniteTrace`).

    Returns
    -------
    NonFiniteTrace

    Notes
    -----
    The re-run does no optimizer step; buffers and ``.grad`` are restored. With
    dropout the masks differ from the failing step's. The backward runs on the
    unscaled loss, so a GradScaler's expected fp16 overflows (the steps it skips)
    do not show up as a failure. Cost: one forward (and backward) with one
    ``isfinite`` check per module output and per parameter gradient.
    """
    types = {name: type(m).__name__ for name, m in model.named_modules()}
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    grads = {n: (p.grad.detach().clone() if p.grad is not None else None) for n, p in model.named_parameters()}
    found: dict = {}

    def forward_hook(name):
        def hook(module, args, output):
            bad = next((t for t in _tensors(output) if _bad(t)), None)
            if bad is not None:
                found.update(phase="forward", module=name, kind=_kind(bad))
                raise _Found()
        return hook

    handles = [m.register_forward_hook(forward_hook(name)) for name, m in model.named_modules()]
    try:
        for p in model.parameters():
            p.grad = None
        try:
            with autocast():
                loss = loss_of(model, batch)
        except _Found:
            loss = None
        finally:
            for h in handles:
                h.remove()
            handles = []
        if loss is not None:
            if _bad(loss):
                found.update(phase="loss", module="", kind=_kind(loss))
            elif loss.requires_grad:
                names = {id(p): n for n, p in model.named_parameters()}

                def grad_hook(name):
                    def hook(grad):
                        if "phase" not in found and _bad(grad):
                            found.update(phase="backward", parameter=name, module=name.rpartition(".")[0],
                                         kind=_kind(grad))
                    return hook

                handles = [p.register_hook(grad_hook(names[id(p)])) for p in model.parameters() if p.requires_grad]
                loss.backward()
    finally:
        for h in handles:
            h.remove()
        with torch.no_grad():
            for n, b in model.named_buffers():
                if n in buffers:
                    b.copy_(buffers[n])
            for n, p in model.named_parameters():
                p.grad = grads.get(n)
    if "phase" not in found:
        return NonFiniteTrace(int(step), "none", exact=exact)
    module = found.get("module", "")
    broken = []
    if found["phase"] == "forward":
        owner = model.get_submodule(module) if module else model
        # buffers only in eval(): in train() a BatchNorm normalizes with the batch's own statistics
        own = [*owner.named_parameters(recurse=False), *([] if owner.training else owner.named_buffers(recurse=False))]
        broken = [f"{module + '.' if module else ''}{n}" for n, t in own if _bad(t)]
    return NonFiniteTrace(int(step), found["phase"], module, types.get(module, type(model).__name__),
                          found.get("parameter", ""), found.get("kind", ""), broken, exact)
