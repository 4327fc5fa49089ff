"""Gradient norms, weight-update ratios and weight histograms, computed in bulk.

Every parameter's gradient L2 norm comes from one ``torch._foreach_norm`` call
per device and one ``.tolist()`` (a single host synchronisation), never a
Python loop of ``.norm().item()``. The parameter list is re-read from the model
each time (``named_parameters()`` is cheap), so a parameter unfrozen mid-run is
tracked from the next call on, and a frozen one is reported as frozen (listed in
:attr:`GradNorms.frozen`, absent from the norms) rather than as a norm of 0.

This module never imports Qt (DESIGN.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from workbench.core.probe.stats import DEFAULT_BINS, Histogram, histogram

__all__ = [
    "GradNorms", "LayerNorm", "UpdateTracker", "aggregate", "bulk_norms", "grad_norms", "layer_norms", "update_ratio",
    "weight_histograms",
]


def _owner(param_name: str) -> str:
    """Qualified name of the module that owns parameter ``param_name`` (``""`` = root)."""
    return param_name.rpartition(".")[0]


def bulk_norms(tensors: Sequence[torch.Tensor]) -> list[float]:
    """L2 norms of many tensors with one ``torch._foreach_norm`` and one host transfer per device.

    Parameters
    ----------
    tensors : sequence of Tensor
        Any shapes, any devices (grouped per device and dtype internally).

    Returns
    -------
    list of float
        ``torch.linalg.vector_norm(t)`` for each tensor, in order (NaN / Inf propagate).
    """
    if not tensors:
        return []
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, t.dtype), []).append(i)
    out = [0.0] * len(tensors)
    with torch.no_grad():
        for idx in groups.values():
            ts = [tensors[i] for i in idx]
            if ts[0].is_sparse:
                norms = [torch.linalg.vector_norm(t.coalesce().values()) for t in ts]
            else:
                norms = torch._foreach_norm(ts)
            values = torch.stack(norms).double().tolist()  # the one host sync for this group
            for i, v in zip(idx, values):
                out[i] = v
    return out


def update_ratio(delta: float, weight: float) -> float:
    """``||dw|| / ||w||`` from the two norms: 0 for no change, Inf for a change of an all-zero tensor."""
    return delta / weight if weight > 0 else (0.0 if delta == 0 else math.inf)


def aggregate(values: dict[str, float], *, subtree: bool) -> dict[str, float]:
    """Per-module L2 aggregates of per-parameter norms: ``sqrt(sum of squares)``.

    Parameters
    ----------
    values : dict of str to float
        Parameter qualified name -> L2 norm.
    subtree : bool
        False: each module's own parameters only (``recurse=False``). True: the
        whole subtree, so ``""`` (the root) holds the global norm.

    Returns
    -------
    dict of str to float
        Module qualified name -> aggregate norm, only for modules with at least one value.
    """
    sq: dict[str, float] = {}
    for name, v in values.items():
        owner = _owner(name)
        targets = [owner]
        if subtree:
            parts = owner.split(".") if owner else []
            targets = [".".join(parts[:k]) for k in range(len(parts) + 1)]
        for t in targets:
            sq[t] = sq.get(t, 0.0) + v * v
    return {k: math.sqrt(v) for k, v in sq.items()}


@dataclass
class GradNorms:
    """Gradient norms of one model at one step (plain floats, CPU).

    Attributes
    ----------
    step : int or None
        Training step (None outside training).
    params : dict of str to float
        Parameter qualified name -> L2 norm of its ``.grad``, for every parameter
        that has a gradient (trainable and used in the backward).
    frozen : list of str
        Parameters with ``requires_grad=False`` (no norm: shown as frozen, not as 0).
    missing : list of str
        Trainable parameters without a ``.grad`` (not used by the loss yet).
    own : dict of str to float
        Module name -> norm of the gradients of the parameters it owns directly.
    modules : dict of str to float
        Module name -> norm over its whole subtree (``""`` is the global norm).
    global_norm : float
        L2 norm over every gradient, as ``torch.nn.utils.get_total_norm`` (NaN when none).
    order : list of str
        Every parameter name in ``named_parameters()`` order (with, frozen and missing alike).
    """

    step: int | None
    params: dict[str, float]
    frozen: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    own: dict[str, float] = field(default_factory=dict)
    modules: dict[str, float] = field(default_factory=dict)
    global_norm: float = math.nan
    order: list[str] = field(default_factory=list)


def grad_norms(model: nn.Module, step: int | None = None) -> GradNorms:
    """L2 norm of every parameter's gradient, per-module aggregates and the global norm.

    Call it after ``loss.backward()`` and before ``optimizer.zero_grad()``. With
    AMP's ``GradScaler`` call it after ``scaler.unscale_(optimizer)``, or the
    norms are multiplied by the scale.

    Parameters
    ----------
    model : nn.Module
    step : int, optional
        Stored in the result.

    Returns
    -------
    GradNorms
        One ``torch._foreach_norm`` per device/dtype and one ``.tolist()`` each.
    """
    names, grads, frozen, missing, order = [], [], [], [], []
    for name, p in model.named_parameters():
        order.append(name)
        if not p.requires_grad:
            frozen.append(name)
        elif p.grad is None:
            missing.append(name)
        else:
            names.append(name)
            grads.append(p.grad)
    params = dict(zip(names, bulk_norms(grads)))
    modules = aggregate(params, subtree=True)
    return GradNorms(
        step=step,
        params=params,
        frozen=frozen,
        missing=missing,
        own=aggregate(params, subtree=False),
        modules=modules,
        global_norm=modules.get("", math.nan),
        order=order,
    )


@dataclass
class LayerNorm:
    """One bar of the per-layer chart: a module that owns parameters directly.

    Attributes
    ----------
    module : str
        Qualified module name (``""`` = the root).
    norm : float
        L2 norm of the gradients of the parameters it owns (``recurse=False``);
        NaN when it has none (all frozen, or not reached by the loss).
    state : str
        ``"trainable"`` (has a norm), ``"frozen"`` (every own parameter has
        ``requires_grad=False``: shown as frozen, never as 0) or ``"no grad"``
        (trainable but no ``.grad`` yet).
    """

    module: str
    norm: float
    state: str


def layer_norms(norms: GradNorms) -> list[LayerNorm]:
    """Per-module rows of one measurement, in ``named_parameters()`` order of first parameter.

    Read only from ``norms`` (the state at the measured step), never from the live
    model, so a freeze applied after the measurement cannot mislabel it.

    Parameters
    ----------
    norms : GradNorms

    Returns
    -------
    list of LayerNorm
        One per module that owns at least one parameter.
    """
    frozen = set(norms.frozen)
    owned: dict[str, list[str]] = {}
    for name in norms.order or [*norms.params, *norms.frozen, *norms.missing]:
        owned.setdefault(_owner(name), []).append(name)
    rows = []
    for module, params in owned.items():
        if module in norms.own:
            rows.append(LayerNorm(module, norms.own[module], "trainable"))
        elif all(p in frozen for p in params):
            rows.append(LayerNorm(module, math.nan, "frozen"))
        else:
            rows.append(LayerNorm(module, math.nan, "no grad"))
    return rows


class UpdateTracker:
    """The update ratio ``||w_after - w_before|| / ||w_after||`` per parameter, over one step.

    A standard health metric: Karpathy's rule of thumb ("A Recipe for Training
    Neural Networks", 2019, and CS231n's "ratio of weights:updates") is that the
    update/data ratio should be around 1e-3; far below means the learning rate is
    too low, far above (1e-1) that it is too high. Only a convention, not a law.

    Call :meth:`snapshot` before an optimizer step (or at the end of the previous
    step) and :meth:`ratios` after it. The snapshot copies the trainable
    parameters (memory: their size), so take it only on the steps you measure.
    """

    def __init__(self) -> None:
        self._names: list[str] = []
        self._before: list[torch.Tensor] = []

    @property
    def has_snapshot(self) -> bool:
        """True between :meth:`snapshot` and :meth:`ratios`."""
        return bool(self._names)

    def snapshot(self, model: nn.Module) -> None:
        """Copy the current values of the trainable parameters (on their device)."""
        pairs = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self._names = [n for n, _ in pairs]
        with torch.no_grad():
            self._before = [p.detach().clone() for _, p in pairs]

    def clear(self) -> None:
        """Drop the snapshot (frees its memory)."""
        self._names, self._before = [], []

    def ratios(self, model: nn.Module) -> dict[str, float]:
        """Per-parameter update ratios since the snapshot; the snapshot is then dropped.

        Returns
        -------
        dict of str to float
            Parameter name -> ``||dw|| / ||w||`` (dimensionless); parameters
            frozen or replaced since the snapshot are left out. Empty without a snapshot.
        """
        return {n: update_ratio(d, w) for n, (d, w) in self.norms(model).items()}

    def norms(self, model: nn.Module) -> dict[str, tuple[float, float]]:
        """Per-parameter ``(||dw||, ||w||)`` since the snapshot (L2, the parameter's units); drops the snapshot.

        The pair lets a caller sum a module's parameters in quadrature
        (:func:`workbench.core.probe.layer_stats.layer_snapshot`). Same exclusions as :meth:`ratios`.
        """
        if not self._names:
            return {}
        current = dict(model.named_parameters())
        names, before, after = [], [], []
        for n, b in zip(self._names, self._before):
            p = current.get(n)
            if p is not None and p.shape == b.shape and p.requires_grad:
                names.append(n)
                before.append(b)
                after.append(p.detach())
        self.clear()
        if not names:
            return {}
        with torch.no_grad():
            deltas = torch._foreach_sub(after, before)
            values = bulk_norms(list(deltas) + after)
        k = len(names)
        return {n: (d, w) for n, d, w in zip(names, values[:k], values[k:])}


def weight_histograms(
    model: nn.Module, names: Iterable[str] | None = None, bins: int = DEFAULT_BINS
) -> dict[str, Histogram]:
    """Histogram of each chosen parameter's values, computed on its device.

    Parameters
    ----------
    model : nn.Module
    names : iterable of str, optional
        Parameter qualified names (default: every parameter).
    bins : int

    Returns
    -------
    dict of str to Histogram

    Raises
    ------
    KeyError
        A name that is not a parameter of the model.
    """
    params = dict(model.named_parameters())
    chosen = list(params) if names is None else list(names)
    out = {}
    for n in chosen:
        if n not in params:
            raise KeyError(f"no parameter named {n!r} in {type(model).__name__}")
        out[n] = histogram(params[n], bins)
    return out
