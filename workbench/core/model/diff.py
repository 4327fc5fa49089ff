"""What changed between two checkpoints of one architecture, module by module.

:func:`module_diff` compares two models' state_dicts and gives, per module, the
relative change ``||a - b|| / ||a||`` of its own parameters and, separately, of
its own buffers (BatchNorm running statistics move even where every parameter
is frozen, unless the frozen BatchNorm layers are kept in ``eval()``). Norms are
summed in quadrature over the module's tensors (L2 of the concatenation).
``workbench diff A B`` prints it; a head-only fine-tune lists only the head.

Alignment (:func:`compare_models`): the keys of the two sides are aligned as
opening aligns a checkpoint with an architecture
(:func:`~workbench.core.model.prefixes.strip_prefixes`: ``module.``,
``_orig_mod.``, a leading wrapper such as ``bert.`` of a
``BertForSequenceClassification`` against its ``BertModel``), on either side.
A module with LoRA adapters on one side only (``base_layer.weight``,
``lora_A``, ``lora_B``: :func:`~workbench.core.model.lora.add_lora`) is compared
merged: ``W + (alpha / r) B @ A`` against the other side's plain weight; a
module with adapters on both sides is compared by adapter (``lora_A`` with
``lora_A``...). Tensors a partial load did not take from a file (``skip``) are
left out and listed. :func:`subtree_changes` gives each parent module the
largest change at or below it (the window's Change column).

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
from typing import Iterable, Iterator

import torch
from torch import nn

from workbench.core.errors import CheckpointError
from workbench.core.model.lora import lora_paths
from workbench.core.model.prefixes import strip_prefixes

__all__ = ["ModuleChange", "Comparison", "SubtreeChange", "module_diff", "compare_models",
           "subtree_changes", "change_value"]

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
    how : str
        How its tensors were matched when not key by key: ``"LoRA merged in a"``
        (``W + (alpha / r) B @ A`` of ``a`` against ``b``'s plain weight), ``""`` otherwise.
    """

    module: str
    params: float = math.nan
    buffers: float = math.nan
    note: str = ""
    how: str = ""

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
        if self.how:
            parts.append(f"({self.how})")
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


@dataclass
class Comparison:
    """What :func:`compare_models` found and how it matched the two sides.

    Attributes
    ----------
    changes : list of ModuleChange
        Modules with a change, largest first (module names are ``a``'s).
    stripped : dict
        ``{"a": [...], "b": [...]}``: the key prefixes removed from each side to
        align them (``["bert."]``), as opening removes them.
    merged : dict
        ``{"a": [...], "b": [...]}``: modules whose LoRA adapters were merged
        (``W + (alpha / r) B @ A``) to compare with the other side's plain weight.
    by_adapter : list of str
        Modules with adapters on both sides, compared adapter by adapter.
    left_out : dict
        ``{"a": [...], "b": [...]}``: keys not compared because a partial load did
        not take them from that side's file.
    """

    changes: list[ModuleChange]
    stripped: dict[str, list[str]]
    merged: dict[str, list[str]]
    by_adapter: list[str]
    left_out: dict[str, list[str]]

    def summary(self) -> list[str]:
        """One line per way the sides were matched (empty when key by key), for the command line."""
        lines = [f"aligned by removing {', '.join(p)} from {side}'s keys (as opening does)"
                 for side, p in self.stripped.items() if p]
        lines += [f"LoRA: {side}'s adapters merged (W + alpha/r * B@A) to compare with the plain weights of "
                  f"{len(paths)} module(s): {_listed(paths)}" for side, paths in self.merged.items() if paths]
        if self.by_adapter:
            lines.append(f"LoRA: adapters on both sides compared by adapter (lora_A, lora_B) in "
                         f"{len(self.by_adapter)} module(s): {_listed(self.by_adapter)}")
        lines += [f"left out (not loaded from {side}'s file, partial load): {len(keys)} tensor(s): {_listed(keys)}"
                  for side, keys in self.left_out.items() if keys]
        return lines


def _listed(items: list[str], at_most: int = 6) -> str:
    shown = ", ".join(items[:at_most])
    return shown + (f" and {len(items) - at_most} more" if len(items) > at_most else "")


def module_diff(a: nn.Module, b: nn.Module, *, names: tuple[str, str] = ("a", "b")) -> list[ModuleChange]:
    """Modules whose own parameters or buffers differ between ``a`` and ``b``, largest change first.

    :func:`compare_models`' ``changes`` (keys aligned, LoRA merged where one side has adapters).

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
    return compare_models(a, b, names=names).changes


def _matches(path: str, others: list[str]) -> bool:
    """``path`` names one of ``others`` up to a leading wrapper prefix (``bert.encoder.x`` ~ ``encoder.x``)."""
    return any(path == o or path.endswith("." + o) or o.endswith("." + path) for o in others)


def _delta(layer: nn.Module) -> torch.Tensor:
    """``(alpha / r) B @ A`` of a peft LoRA layer's active adapters, shaped as its base weight (peft's own formula)."""
    weight = layer.get_base_layer().weight
    total = torch.zeros_like(weight, device="cpu")
    for name in getattr(layer, "active_adapters", None) or list(layer.lora_A):
        if name in layer.lora_A:
            total += layer.get_delta_weight(name).detach().to("cpu", weight.dtype)
    return total


def _side(model: nn.Module, merge: list[str], skip: set[str]) -> dict[str, tuple[torch.Tensor, bool]]:
    """``key -> (tensor, is_parameter)`` of one side, the LoRA layers at ``merge`` as plain modules (merged weight)."""
    params = {n for n, _ in model.named_parameters()}
    out = {k: (t.detach(), k in params) for k, t in model.state_dict().items() if k not in skip}
    with torch.no_grad():
        for path in merge:
            layer = model.get_submodule(path)
            prefix = path + "."
            for key in [k for k in out if k.startswith(prefix)]:
                del out[key]
            base = layer.get_base_layer()
            base_params = {n for n, _ in base.named_parameters()}
            for key, t in base.state_dict().items():
                out[prefix + key] = (t.detach(), key in base_params)
            out[prefix + "weight"] = (base.weight.detach().cpu() + _delta(layer), True)
    return out


def _renamed(keys: list[str], reference: list[str]) -> tuple[dict[str, str], list[str]]:
    """``{aligned key: original key}`` and the prefixes removed (:func:`strip_prefixes` against ``reference``)."""
    renamed, stripped = strip_prefixes({k: k for k in keys}, reference_keys=reference)
    return dict(renamed), stripped


def _align(ka: list[str], kb: list[str]) -> tuple[dict[str, str], dict[str, str], dict[str, list[str]]]:
    """Aligned names for both sides (``{aligned: original}``), stripping on whichever side matches more keys."""
    ma, mb = {k: k for k in ka}, {k: k for k in kb}
    stripped: dict[str, list[str]] = {"a": [], "b": []}
    common = len(set(ma) & set(mb))
    new_b, pre_b = _renamed(kb, ka)
    if pre_b and len(set(new_b) & set(ma)) > common:
        mb, stripped["b"], common = new_b, pre_b, len(set(new_b) & set(ma))
    new_a, pre_a = _renamed(ka, list(mb))
    if pre_a and len(set(new_a) & set(mb)) > common:
        ma, stripped["a"] = new_a, pre_a
    return ma, mb, stripped


def compare_models(a: nn.Module, b: nn.Module, *, names: tuple[str, str] = ("a", "b"),
                   skip: tuple[Iterable[str], Iterable[str]] = ((), ())) -> Comparison:
    """Per-module relative change from ``a`` to ``b``, keys aligned and LoRA adapters merged where needed.

    Parameters
    ----------
    a, b : nn.Module
        ``a`` is the reference (the denominator). They may differ by a wrapper
        prefix (``bert.``, ``module.``) and by LoRA adapters (see the module docstring).
    names : (str, str)
        How errors name ``a`` and ``b`` (their files).
    skip : (iterable of str, iterable of str)
        State_dict keys of ``a`` and of ``b`` to leave out, on both sides: what a
        partial load did not take from the file (``LoadReport.missing`` and
        mismatched), which holds fresh initial values, not the file's.

    Returns
    -------
    Comparison

    Raises
    ------
    CheckpointError
        A tensor that reads its storage many times over; checked before any tensor is read.
    """
    skip_a, skip_b = set(skip[0]), set(skip[1])
    la, lb = lora_paths(a), lora_paths(b)
    merge_a = [p for p in la if not _matches(p, lb)]
    merge_b = [p for p in lb if not _matches(p, la)]
    left_out = skip_a | skip_b  # a tensor a load did not take from one file is compared on neither side
    sa, sb = _side(a, merge_a, left_out), _side(b, merge_b, left_out)
    ma, mb, stripped = _align(list(sa), list(sb))
    how = {p: "LoRA merged in a" for p in merge_a}
    merged_b_aligned = {_aligned_path(p, mb) for p in merge_b}
    groups: dict[str, dict[str, list]] = {}
    notes: dict[str, list[str]] = {}
    compared: list[tuple[str, torch.Tensor, torch.Tensor]] = []
    for key in sorted(set(ma) | set(mb)):
        ka, kb = ma.get(key), mb.get(key)
        owner = _owner(ka if ka is not None else key)
        ta, tb = (sa[ka] if ka is not None else None), (sb[kb] if kb is not None else None)
        if ta is None or tb is None:
            notes.setdefault(owner, []).append(f"{ka or kb} only in {'b' if ta is None else 'a'}")
            continue
        (ta, pa), (tb, pb) = ta, tb
        if ta.shape != tb.shape:
            notes.setdefault(owner, []).append(f"{ka} shape {tuple(ta.shape)} vs {tuple(tb.shape)}")
            continue
        if not ta.is_floating_point():
            continue
        if _owner(key) in merged_b_aligned:
            how[owner] = "LoRA merged in b"
        groups.setdefault(owner, {"params": [], "buffers": []})["params" if pa or pb else "buffers"].append((ta, tb))
        compared.append((ka, ta, tb))
    _check_work(compared, (str(names[0]), str(names[1])))
    cache: dict = {}
    out = []
    for owner in sorted(set(groups) | set(notes)):
        g = groups.get(owner, {"params": [], "buffers": []})
        change = ModuleChange(owner, _rel(g["params"], cache), _rel(g["buffers"], cache),
                              "; ".join(notes.get(owner, [])), how.get(owner, ""))
        if change.largest > 0:
            out.append(change)
    both = [p for p in la if _matches(p, lb)]
    return Comparison(sorted(out, key=lambda c: -c.largest), stripped, {"a": merge_a, "b": merge_b}, both,
                      {"a": sorted(skip_a), "b": sorted(skip_b)})


def _aligned_path(path: str, aligned: dict[str, str]) -> str:
    """The aligned module name of ``b``'s module ``path`` (its weight's aligned key, less ``.weight``)."""
    original = path + ".weight"
    for new, old in aligned.items():
        if old == original:
            return _owner(new)
    return path


@dataclass
class SubtreeChange:
    """The largest change at or below one module (what the window's Change column shows on every row).

    Attributes
    ----------
    module : str
        Qualified name (``""``: the root).
    value : float
        The largest relative change (:func:`change_value`) among the module and
        every module below it; NaN when only shapes or keys differ below.
    source : str
        The module that holds it (``module`` itself for a leaf).
    notes : int
        Modules at or below it whose tensors differ in shape or exist on one side only.
    """

    module: str
    value: float
    source: str
    notes: int = 0


def change_value(change: ModuleChange) -> float:
    """A module's own change as one number: its parameters', else its buffers' (NaN: neither compared)."""
    return change.params if not math.isnan(change.params) else change.buffers


def subtree_changes(changes: Iterable[ModuleChange]) -> dict[str, SubtreeChange]:
    """For every module with a change at or below it, the largest change there (aggregated to parents).

    A parent's own parameters count too (a ``MultiheadAttention``'s
    ``in_proj_weight``). The maximum, not a mean: one changed layer deep in an
    encoder shows on the collapsed encoder row as it is.

    Parameters
    ----------
    changes : iterable of ModuleChange
        :func:`compare_models`' changes (module names of ``a``).

    Returns
    -------
    dict of str to SubtreeChange
        Keyed by qualified name, ``""`` for the root; modules without a change
        below are absent.
    """
    out: dict[str, SubtreeChange] = {}
    for change in changes:
        value = change_value(change)
        parts = change.module.split(".") if change.module else []
        for depth in range(len(parts) + 1):
            path = ".".join(parts[:depth])
            row = out.setdefault(path, SubtreeChange(path, math.nan, change.module))
            row.notes += bool(change.note)
            if not math.isnan(value) and (math.isnan(row.value) or value > row.value):
                row.value, row.source = value, change.module
    return out
