"""What changed between two checkpoints of one architecture, module by module.

:func:`module_diff` compares two models' state_dicts and gives, per module, the
relative change ``||a - b|| / ||a||`` of its own parameters and, separately, of
its own buffers (BatchNorm running statistics move even where every parameter
is frozen, unless the frozen BatchNorm layers are kept in ``eval()``). Norms are
summed in quadrature over the module's tensors (L2 of the concatenation).
``workbench diff A B`` prints it; a head-only fine-tune lists only the head.

Work: a view that reads its storage many times over costs no more than its
storage. Dimensions along which both tensors are broadcast (stride 0, as
``torch.zeros(1).expand(10**6, 10**6)`` saved by ``torch.save``) are reduced once
and the sums multiplied by their size; a pair that would still read more than
:data:`OVERLAP_FACTOR` times the elements its storages hold (an overlapping
``as_strided`` view, many distinct views of one storage) is refused, before any
tensor is read, with a :class:`~workbench.core.errors.CheckpointError` naming the
tensor and its file (``names``). Keys that share one view (tied weights) are
reduced once.

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

from workbench.core.errors import CheckpointError

__all__ = ["ModuleChange", "module_diff"]

#: Elements per chunk in :func:`_rel`: two float64 buffers of 2 MiB, small enough to stay in cache.
CHUNK = 1 << 18
#: Most elements compared per element stored: a tensor is read at most this many times over its storage.
OVERLAP_FACTOR = 4


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


def _collapse(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Both tensors with their common broadcast dimensions (stride 0 in both) cut to size 1, and the
    number of times each remaining element stands in the whole tensors (the product of those sizes)."""
    times = 1
    for d in range(a.dim()):
        if a.shape[d] > 1 and a.stride(d) == 0 and b.stride(d) == 0:
            times *= a.shape[d]
            a, b = a.narrow(d, 0, 1), b.narrow(d, 0, 1)
    return a, b, times


def _sums(a: torch.Tensor, b: torch.Tensor, buffers: tuple[torch.Tensor, torch.Tensor]) -> tuple[float, float]:
    """``(sum((a - b)^2), sum(a^2))`` in float64, a chunk at a time through two float64 ``buffers``.

    Common broadcast dimensions are reduced once (:func:`_collapse`): exact, as every
    index along them holds the same pair of values.
    """
    a, b, times = _collapse(a, b)
    d2 = w2 = 0.0
    for ca, cb in _chunks(a, b, buffers[0].numel()):
        x, y = buffers[0][: ca.numel()], buffers[1][: cb.numel()]
        x.copy_(ca)
        y.copy_(cb)
        w2 += float(torch.dot(x, x))
        x.sub_(y)
        d2 += float(torch.dot(x, x))
    return d2 * times, w2 * times


def _storage(t: torch.Tensor) -> tuple[tuple, int] | None:
    """``(identity, elements)`` of a tensor's storage; None when it has none (meta, sparse)."""
    try:
        st = t.untyped_storage()
        return (st.device.type, st.data_ptr(), st.nbytes()), st.nbytes() // max(1, t.element_size())
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _view(t: torch.Tensor) -> tuple:
    """What makes two tensors the same view: storage, offset, shape, strides, dtype (a tied weight's keys share it)."""
    s = _storage(t)
    if s is None:
        return ("object", id(t))
    return s[0], t.storage_offset(), tuple(t.shape), t.stride(), t.dtype


def _rel(pairs: list[tuple[torch.Tensor, torch.Tensor]], cache: dict | None = None) -> float:
    """``||a - b|| / ||a||`` over the pairs; ``cache`` holds the sums of views already reduced (tied weights)."""
    if not pairs:
        return math.nan
    cache = {} if cache is None else cache
    d2 = w2 = 0.0
    largest = max(1, max(_collapse(a, b)[0].numel() for a, b in pairs))
    buffers = (torch.empty(min(CHUNK, largest), dtype=torch.float64),
               torch.empty(min(CHUNK, largest), dtype=torch.float64))
    with torch.no_grad():
        for a, b in pairs:
            key = (_view(a), _view(b))
            if key not in cache:
                cache[key] = _sums(a, b, buffers)
            da, wa = cache[key]
            d2, w2 = d2 + da, w2 + wa
    if d2 == 0:
        return 0.0
    return math.sqrt(d2) / math.sqrt(w2) if w2 > 0 else math.inf


def _check_work(pairs: list[tuple[str, torch.Tensor, torch.Tensor]], names: tuple[str, str]) -> None:
    """Refuse comparisons that would read storages many times over (see the module docstring).

    Pairs of the same two views (tied weights) are reduced once and count once.

    Raises
    ------
    CheckpointError
        A tensor whose elements, after common broadcast dimensions, exceed
        :data:`OVERLAP_FACTOR` times its storage's; or tensors that together read
        their storages that many times over (many distinct views of one storage).
    """
    total = 0
    stored: dict[tuple, int] = {}
    views: set[tuple] = set()
    for key, ta, tb in pairs:
        view = (_view(ta), _view(tb))
        if view in views:
            continue
        views.add(view)
        work = _collapse(ta, tb)[0].numel()
        total += work
        sides = [(s, name) for s, name in ((_storage(ta), names[0]), (_storage(tb), names[1])) if s is not None]
        for (ident, elements), _ in sides:
            stored[ident] = elements
        if sides and work > OVERLAP_FACTOR * max(e for (_, e), _ in sides) + CHUNK:
            (_, elements), name = min(sides, key=lambda s: s[0][1])
            raise CheckpointError(
                f"tensor {key!r} of shape {tuple(ta.shape)} is a view that reads its storage of {elements:,} "
                f"elements over and over ({work:,} elements to compare; strides {ta.stride()} vs {tb.stride()}). "
                "Workbench compares a tensor only when that is at most "
                f"{OVERLAP_FACTOR} times its storage: save it with .contiguous() to compare it.", name)
    if total > OVERLAP_FACTOR * sum(stored.values()) + CHUNK * len(views):
        raise CheckpointError(
            f"{names[0]} and {names[1]}: their tensors are many different views of the same storages "
            f"({total:,} elements to compare, {sum(stored.values()):,} stored). Workbench compares at most "
            f"{OVERLAP_FACTOR} times the elements stored: save each tensor with .clone() to compare them.")


def module_diff(a: nn.Module, b: nn.Module, *, names: tuple[str, str] = ("a", "b")) -> list[ModuleChange]:
    """Modules whose own parameters or buffers differ between ``a`` and ``b``, largest change first.

    Parameters
    ----------
    a, b : nn.Module
        Two models of one architecture (``a`` is the reference: the
        denominator of the relative change).
    names : (str, str)
        How errors name ``a`` and ``b`` (their files).

    Returns
    -------
    list of ModuleChange
        Only modules with a change; integer buffers (``num_batches_tracked``) are left out.

    Raises
    ------
    CheckpointError
        A tensor that reads its storage many times over (see the module docstring);
        the message names it and its file. Checked before any tensor is read.
    """
    params = {n for n, _ in a.named_parameters()} | {n for n, _ in b.named_parameters()}
    sa, sb = a.state_dict(), b.state_dict()
    groups: dict[str, dict[str, list]] = {}
    notes: dict[str, list[str]] = {}
    compared: list[tuple[str, torch.Tensor, torch.Tensor]] = []
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
        compared.append((key, ta.detach(), tb.detach()))
    _check_work(compared, (str(names[0]), str(names[1])))
    cache: dict = {}
    out = []
    for owner in sorted(set(groups) | set(notes)):
        g = groups.get(owner, {"params": [], "buffers": []})
        change = ModuleChange(owner, _rel(g["params"], cache), _rel(g["buffers"], cache),
                              "; ".join(notes.get(owner, [])))
        if change.largest > 0:
            out.append(change)
    return sorted(out, key=lambda c: -c.largest)
