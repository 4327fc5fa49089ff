"""Per-layer statistics of every leaf module, for the layer x time heatmaps.

:class:`LayerStatsProbe` attaches one forward hook to every leaf module for the
measured step only (the other steps run hook-free) and reduces each output to
four numbers on its own device; :meth:`LayerStatsProbe.collect` reads them back
with one host copy. :func:`layer_snapshot` joins them with the per-layer gradient
norms and update ratios into a :class:`LayerSnapshot`: a ``(L, Q)`` float32 table
that crosses the process boundary as one numpy array.

Quantities (the columns, :data:`QUANTITIES`):

``act_mean`` / ``act_std``
    Mean and standard deviation of the module's output (all elements).
``act_zeros``
    Share of output elements that are exactly 0 (dead ReLU units show as 1.0).
``act_saturated``
    Share of output elements within 1 % of the range of a bounded activation
    (Sigmoid, Hardsigmoid: below 0.01 or above 0.99; Tanh, Hardtanh, Softsign:
    ``|y| > 0.99``; ReLU6: above 5.94). NaN for other modules: saturation has no
    meaning for an unbounded output.
``grad_norm``
    L2 norm of the gradients of the module's own parameters (NaN: no trainable parameter).
``update_ratio``
    ``||w_after - w_before|| / ||w_after||`` over the measured step, over the
    module's own trainable parameters (the ``lr * update`` actually applied; the
    reference line practitioners use is 1e-3: Karpathy, "A Recipe for Training
    Neural Networks", 2019).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from workbench.core.probe.activations import ActivationStats, iter_tensor_leaves, leaf_modules
from workbench.core.probe.gradients import aggregate, update_ratio

__all__ = ["QUANTITIES", "QUANTITY_TITLES", "LOG_QUANTITIES", "LayerSnapshot", "LayerStatsProbe", "layer_snapshot"]

#: Column order of :attr:`LayerSnapshot.values`.
QUANTITIES = ("act_mean", "act_std", "act_zeros", "act_saturated", "grad_norm", "update_ratio")
#: Human titles of the quantities (plots, CSV readers).
QUANTITY_TITLES = {"act_mean": "activation mean", "act_std": "activation std", "act_zeros": "dead units (share of 0)",
                   "act_saturated": "saturated share", "grad_norm": "gradient norm (log10)",
                   "update_ratio": "update / weight (log10)"}
#: Quantities shown on a log10 scale.
LOG_QUANTITIES = ("grad_norm", "update_ratio")

#: Bounded activations: (low, high) of the output range; saturated = within 1 % of the range from a bound.
_BOUNDED = {nn.Sigmoid: (0.0, 1.0), nn.Hardsigmoid: (0.0, 1.0), nn.Tanh: (-1.0, 1.0), nn.Softsign: (-1.0, 1.0)}


@dataclass
class LayerSnapshot:
    """Every leaf module's statistics at one measured step (CPU data only).

    Attributes
    ----------
    step : int
        Training step of the measurement.
    names : tuple of str
        Leaf modules in execution order of the measured forward (modules that
        did not run follow in ``named_modules`` order with NaN activations).
    types : tuple of str
        Class name of each module (``"BatchNorm2d"``).
    values : numpy.ndarray
        ``(L, Q)`` float32, columns :data:`QUANTITIES`; NaN = not measured.
    """

    step: int
    names: tuple[str, ...]
    types: tuple[str, ...]
    values: np.ndarray

    def column(self, quantity: str) -> np.ndarray:
        """``(L,)`` values of one quantity."""
        return self.values[:, QUANTITIES.index(quantity)]

    def per_module(self, quantity: str, paths) -> dict[str, float]:
        """One value of ``quantity`` per module of ``paths``: the mean over the finite values of its leaves
        (the module itself when it is a leaf; ``""``: every leaf). A log quantity (:data:`LOG_QUANTITIES`) is
        averaged in log10. Modules without a finite value are left out.

        Raises
        ------
        ValueError
            ``quantity`` is not one of :data:`QUANTITIES`.
        """
        col = np.asarray(self.column(quantity), dtype=np.float64)
        if quantity in LOG_QUANTITIES:
            with np.errstate(divide="ignore", invalid="ignore"):
                col = np.where(col > 0, np.log10(col), np.nan)
        out: dict[str, float] = {}
        for path in paths:
            prefix = f"{path}." if path else ""
            picked = [v for n, v in zip(self.names, col) if (n == path or n.startswith(prefix)) and np.isfinite(v)]
            if picked:
                out[path] = float(np.mean(picked))
        return out


def _bounds(module: nn.Module) -> tuple[float, float] | None:
    if isinstance(module, nn.Hardtanh):  # ReLU6 is a Hardtanh(0, 6)
        return float(module.min_val), float(module.max_val)
    for kind, bounds in _BOUNDED.items():
        if isinstance(module, kind):
            return bounds
    return None


class LayerStatsProbe:
    """Forward hooks on every leaf module of ``model``, attached for measured steps only.

    Each hook reduces the module's first floating-point output on its device
    (sum, L2 norm and a count of non-zero values; one more count for a bounded
    activation), with no host sync; :meth:`collect` stacks every result and
    copies them to the host once, as ``[mean, std, zero share, saturated share]``.
    A module whose output the live activation probe measures on the same step is
    not reduced twice: :meth:`attach` takes those names as ``borrow`` and
    :meth:`collect` fills their rows from the probe's statistics.

    Parameters
    ----------
    model : nn.Module

    Notes
    -----
    Cost: four reductions over each leaf's output on measured steps; the
    :class:`~workbench.core.probe.callback.ProbeCallback` cadence keeps the
    measured steps within its time budget.
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self.names = leaf_modules(model)
        self._modules = {n: model.get_submodule(n) for n in self.names}
        self._handles: list = []
        self._order: list[str] = []
        self._rows: dict[str, torch.Tensor] = {}
        #: seconds spent in this probe's hooks (host time; the caller may reset it)
        self.busy_s = 0.0

    @property
    def attached(self) -> bool:
        """True while the hooks are attached."""
        return bool(self._handles)

    def attach(self, borrow: Iterable[str] = ()) -> None:
        """Attach the hooks for the next forward (no-op when attached).

        Parameters
        ----------
        borrow : iterable of str
            Modules whose plain-tensor output another probe already reduces on this
            forward (the live :class:`~workbench.core.probe.activations.ActivationProbe`):
            their hooks record only the execution order, and :meth:`collect` takes
            their mean, std and zero share from ``borrowed``. Bounded activations are
            always reduced here (the saturated share is this probe's own).

        Notes
        -----
        A module that runs several times in one forward (resnet's shared ReLUs, an
        RNN cell) gets the row of its last call, as in the activation probe, at the
        place of its first call in the execution order.
        """
        if self._handles:
            return
        self._order, self._rows = [], {}
        borrow = set(borrow)
        for name, module in self._modules.items():
            bounds = _bounds(module)
            lend = name in borrow and bounds is None
            self._handles.append(module.register_forward_hook(self._hook(name, bounds, lend)))

    def detach(self) -> None:
        """Remove the hooks (the recorded rows stay until :meth:`collect`)."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def _hook(self, name: str, bounds, lend: bool = False):
        def hook(module, args, output) -> None:
            t0 = time.perf_counter()
            try:
                _reduce_into_row(module, output)
            finally:
                self.busy_s += time.perf_counter() - t0

        def _reduce_into_row(module, output) -> None:
            # a module called several times (resnet's ReLUs, RNN cells): its row is its last call, as in
            # the activation probe; its place in the order is its first
            first = name not in self._rows
            if lend and isinstance(output, torch.Tensor) and output.is_floating_point() and output.numel():
                self._rows[name] = (None, output.numel())  # the activation probe's statistics fill the row
                if first:
                    self._order.append(name)
                return
            t = next((t for _, t in iter_tensor_leaves(output) if t.is_floating_point() and t.numel()), None)
            if t is None:
                return
            with torch.no_grad():  # three reductions (four for a bounded activation), no host sync
                x = t.detach()
                # sum and sum of squares: 6x faster than torch.std_mean (Welford) on CPU; the
                # variance E[x^2] - E[x]^2 loses precision only when |mean| >> std (fine for a heatmap)
                row = [x.sum(), torch.linalg.vector_norm(x), _count_nonzero(x)]
                if bounds is not None:
                    lo, hi = bounds
                    margin = 0.01 * (hi - lo)
                    row.append(torch.count_nonzero((x <= lo + margin) | (x >= hi - margin)))
            self._rows[name] = (row, x.numel())
            if first:
                self._order.append(name)

        return hook

    def collect(self, borrowed: Mapping[str, ActivationStats] | None = None) -> tuple[list[str], np.ndarray]:
        """Detach and read back: (names in execution order, ``(L, 4)`` float32 activation columns).

        Parameters
        ----------
        borrowed : mapping of str to ActivationStats, optional
            The activation probe's statistics of this forward, keyed by module name
            (:meth:`ActivationProbe.collect
            <workbench.core.probe.activations.ActivationProbe.collect>`): the rows of the
            modules passed to :meth:`attach` as ``borrow``. Mean and std are NaN when the
            output held a NaN or Inf, as a sum over all elements would be.
        """
        self.detach()
        ran = list(self._order)
        names = ran + [n for n in self.names if n not in self._rows]
        out = np.full((len(names), 4), np.nan, dtype=np.float32)
        borrowed = borrowed or {}
        for i, n in enumerate(ran):
            stats = borrowed.get(n) if self._rows[n][0] is None else None
            if stats is not None:
                finite = stats.nonfinite_fraction == 0
                out[i, 0], out[i, 1] = (stats.mean, stats.std) if finite else (math.nan, math.nan)
                out[i, 2] = stats.zero_fraction
        ran_here = [(i, n) for i, n in enumerate(ran) if self._rows[n][0] is not None]
        if ran_here:
            flat = [v.float() for _, n in ran_here for v in self._rows[n][0]]
            values = torch.stack(flat).cpu().tolist()  # the one host copy
            k = 0
            for i, n in ran_here:
                row, numel = self._rows[n]
                mean, sq = values[k] / numel, values[k + 1] ** 2 / numel
                var = max(0.0, sq - mean * mean) * numel / max(1, numel - 1)  # unbiased, as torch.std
                out[i, 0], out[i, 1] = mean, math.sqrt(var) if math.isfinite(var) else math.nan
                out[i, 2] = 1.0 - values[k + 2] / numel
                if len(row) == 4:
                    out[i, 3] = values[k + 3] / numel
                k += len(row)
        self._order, self._rows = [], {}
        return names, out

    def type_of(self, name: str) -> str:
        """Class name of leaf module ``name``."""
        return type(self._modules[name]).__name__


def _count_nonzero(x: torch.Tensor) -> torch.Tensor:
    """Number of non-zero elements (NaN and Inf count, as in ``torch.count_nonzero``), as a 0-d float tensor.

    On the CPU ``|sign(x)|`` summed is about 4x faster than ``torch.count_nonzero``
    of a float tensor (51 vs 324 us for 131,072 values, 2 cores); elsewhere the
    library's own count is used.
    """
    if x.device.type != "cpu":
        return torch.count_nonzero(x)
    return torch.nan_to_num(x, nan=1.0).sign_().abs_().sum()  # sign(NaN) is 0 in torch: NaN made 1 first


def layer_snapshot(step: int, names: list[str], types: list[str], acts: np.ndarray,
                   grad_own: dict[str, float] | None, update_norms: dict[str, tuple[float, float]] | None
                   ) -> LayerSnapshot:
    """Join activation rows, own-parameter grad norms and update norms into one snapshot.

    Parameters
    ----------
    step : int
    names, types : list of str
        Leaf modules (execution order) and their class names.
    acts : numpy.ndarray
        ``(L, 4)`` from :meth:`LayerStatsProbe.collect`.
    grad_own : dict of str to float, optional
        :attr:`GradNorms.own <workbench.core.probe.gradients.GradNorms.own>` (module -> norm of its own grads).
    update_norms : dict of str to (float, float), optional
        Parameter -> ``(||dw||, ||w||)`` from :meth:`UpdateTracker.norms
        <workbench.core.probe.gradients.UpdateTracker.norms>`; summed in quadrature per owning module.

    Returns
    -------
    LayerSnapshot
    """
    values = np.full((len(names), len(QUANTITIES)), np.nan, dtype=np.float32)
    values[:, :4] = acts
    grad_own = grad_own or {}
    pairs = update_norms or {}
    deltas = aggregate({p: d for p, (d, _) in pairs.items()}, subtree=False)  # per owning module, in quadrature
    weights = aggregate({p: w for p, (_, w) in pairs.items()}, subtree=False)
    for i, name in enumerate(names):
        if name in grad_own:
            values[i, 4] = grad_own[name]
        if name in deltas:
            values[i, 5] = update_ratio(deltas[name], weights[name])
    return LayerSnapshot(int(step), tuple(names), tuple(types), values)
