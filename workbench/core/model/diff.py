"""What changed between two checkpoints of one architecture, module by module.

:func:`module_diff` compares two models' state_dicts and gives, per module, the
relative change ``||a - b|| / ||a||`` of its own parameters and, separately, of
its own buffers (BatchNorm running statistics move even where every parameter
is frozen, unless the frozen BatchNorm layers are kept in ``eval()``). Norms are
summed in quadrature over the module's tensors (L2 of the concatenation).
``workbench diff A B`` prints it; a head-only fine-tune lists only the head.

Memory: tensors are reduced :data:`CHUNK` elements at a time, each chunk copied
into one of two reused float64 buffers on the CPU (4 MiB in all) and the sums kept
in Python floats; never a float64 copy of a whole tensor. Two memory-mapped
2 GiB checkpoints are compared with a few MB of working memory beyond the mapped
files (``diff_2gb_peak_mb`` in ``benchmarks/bench_diff.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import nn

__all__ = ["ModuleChange", "module_diff"]

#: Elements per chunk in :func:`_rel`: two float64 buffers of 2 MiB, small enough to stay in cache.
CHUNK = 1 << 18


@dataclass
class ModuleChange:
    """One module's change from ``a`` to ``b``.

    Attributes
    ----------
    module : str
        Qualified name (``""``: tensors owned by the root).
    params : float
        ``||a - b|| / ||a||`` over its own parameters (NaN: none; Inf: ``a`` is all zeros and ``b`` is not).
    buffers : float
        The same over its own floating-point buffers (NaN: none).
    note : str
        Tensors present on one side only or with different shapes, named.
    """

    module: str
    params: float = math.nan
    buffers: float = math.nan
    note: str = ""

    @property
    def largest(self) -> float:
        """The larger of the two changes (NaN counts as 0; a note counts as Inf), for sorting."""
        if self.note:
            return math.inf
        return max(0.0 if math.isnan(self.params) else self.params, 0.0 if math.isnan(self.buffers) else self.buffers)

    def text(self) -> str:
        """``layer4.1.bn2  params 3.1e-02  buffers 4.0e-03`` (the qualified name first)."""
        parts = [self.module or "(root)"]
        if not math.isnan(self.params):
            parts.append(f"params {self.params:.3e}")
        if not math.isnan(self.buffers):
            parts.append(f"buffers {self.buffers:.3e}")
        if self.note:
            parts.append(self.note)
        return "  ".join(parts)


def _owner(key: str) -> str:
    return key.rpartition(".")[0]


def _chunks(a: torch.Tensor, b: torch.Tensor, n: int = CHUNK) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Aligned 1-D pieces of two tensors of one shape, at most ``n`` elements each, in their own dtype.

    The pieces follow the shape alone, so both sides split alike whatever their
    strides: contiguous (and 1-D) tensors are sliced as views; others in blocks of
    rows along dim 0 (recursing into a row larger than ``n``), each block copied
    on its own (at most ``n`` elements).
    """
    if a.dim() <= 1 or (a.is_contiguous() and b.is_contiguous()):
        fa, fb = a.reshape(-1), b.reshape(-1)
        for i in range(0, fa.numel(), n):
            yield fa[i:i + n], fb[i:i + n]
        return
    per_row = a[0].numel() if a.shape[0] else 0
    if per_row > n:
        for i in range(a.shape[0]):
            yield from _chunks(a[i], b[i], n)
        return
    rows = max(1, n // max(1, per_row))
    for i in range(0, a.shape[0], rows):
        yield a[i:i + rows].reshape(-1), b[i:i + rows].reshape(-1)


def _sums(a: torch.Tensor, b: torch.Tensor, buffers: tuple[torch.Tensor, torch.Tensor]) -> tuple[float, float]:
    """``(sum((a - b)^2), sum(a^2))`` in float64, a chunk at a time through two float64 ``buffers``."""
    d2 = w2 = 0.0
    for ca, cb in _chunks(a, b, buffers[0].numel()):
        x, y = buffers[0][: ca.numel()], buffers[1][: cb.numel()]
        x.copy_(ca)
        y.copy_(cb)
        w2 += float(torch.dot(x, x))
        x.sub_(y)
        d2 += float(torch.dot(x, x))
    return d2, w2


def _rel(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    if not pairs:
        return math.nan
    d2 = w2 = 0.0
    largest = max(1, max(a.numel() for a, _ in pairs))
    buffers = (torch.empty(min(CHUNK, largest), dtype=torch.float64),
               torch.empty(min(CHUNK, largest), dtype=torch.float64))
    with torch.no_grad():
        for a, b in pairs:
            da, wa = _sums(a, b, buffers)
            d2, w2 = d2 + da, w2 + wa
    if d2 == 0:
        return 0.0
    return math.sqrt(d2) / math.sqrt(w2) if w2 > 0 else math.inf


def module_diff(a: nn.Module, b: nn.Module) -> list[ModuleChange]:
    """Modules whose own parameters or buffers differ between ``a`` and ``b``, largest change first.

    Parameters
    ----------
    a, b : nn.Module
        Two models of one architecture (``a`` is the reference: the
        denominator of the relative change).

    Returns
    -------
    list of ModuleChange
        Only modules with a change; integer buffers (``num_batches_tracked``) are left out.
    """
    params = {n for n, _ in a.named_parameters()} | {n for n, _ in b.named_parameters()}
    sa, sb = a.state_dict(), b.state_dict()
    groups: dict[str, dict[str, list]] = {}
    notes: dict[str, list[str]] = {}
    for key in sorted(set(sa) | set(sb)):
        owner = _owner(key)
        ta, tb = sa.get(key), sb.get(key)
        if ta is None or tb is None:
            notes.setdefault(owner, []).append(f"{key} only in {'b' if ta is None else 'a'}")
            continue
        if ta.shape != tb.shape:
            notes.setdefault(owner, []).append(f"{key} shape {tuple(ta.shape)} vs {tuple(tb.shape)}")
            continue
        if not ta.is_floating_point():
            continue
        kind = "params" if key in params else "buffers"
        groups.setdefault(owner, {"params": [], "buffers": []})[kind].append((ta.detach(), tb.detach()))
    out = []
    for owner in sorted(set(groups) | set(notes)):
        g = groups.get(owner, {"params": [], "buffers": []})
        change = ModuleChange(owner, _rel(g["params"]), _rel(g["buffers"]), "; ".join(notes.get(owner, [])))
        if change.largest > 0:
            out.append(change)
    return sorted(out, key=lambda c: -c.largest)
