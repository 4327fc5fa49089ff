"""Counting FLOPs of a forward pass: what runs, fused kernels included.

PyTorch's ``torch.utils.flop_counter.FlopCounterMode`` counts 2 FLOPs per
multiply-add (the convention of torchvision's ``_ops`` x 2, of papers that say
"FLOPs" and of ``torch.utils.flop_counter``). It sees only the aten ops that
run, and two kinds of fused kernels escape it:

- ``nn.MultiheadAttention`` (and ``nn.TransformerEncoderLayer``) in eval mode
  under ``no_grad`` take PyTorch's fused "fast path"
  (``torch._native_multi_head_attention``), which has no FLOP formula: a
  vit_b_16 counted 22.5 G instead of 35.1 G. :func:`flop_counter` turns the
  fast path off while counting (``torch.backends.mha.set_fastpath_enabled``),
  so the unfused projections run and are counted; the outputs are the same.
- Scaled dot-product attention on CPU dispatches to
  ``aten._scaled_dot_product_flash_attention_for_cpu``, which has no formula
  either (the CUDA flash / efficient / cuDNN kernels do): every transformer on
  CPU lost its ``Q K^T`` and ``A V`` products. :func:`sdpa_flops` gives it the
  formula torch uses for the CUDA kernels.

Multiply-adds (torchvision's and many papers' "GFLOPS") are FLOPs / 2
(:data:`FLOPS_PER_MAC`).

A model whose weights are on ``meta`` (a lazily opened folder,
:mod:`workbench.core.model.lazy`) is counted by a forward on ``meta`` inputs:
shapes only, no weight read, the same FLOPs. Reading a ``meta`` scalar
(``Tensor.item()``, ``bool(mask.all())``: a data-dependent branch such as
transformers' "is the attention mask all ones" check) gives the value the
example input has -- ``True`` / ``1`` -- instead of failing (:class:`MetaScalars`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["FLOPS_PER_MAC", "FLOPS_CONVENTION", "flop_counter", "sdpa_flops", "macs", "MetaScalars"]

#: FLOPs per multiply-add in every count Workbench shows (``torch.utils.flop_counter``'s convention).
FLOPS_PER_MAC = 2
#: How the tree, ``workbench inspect`` and their exports name the convention.
FLOPS_CONVENTION = "FLOPs (2 per multiply-add)"


def macs(flops: int | None) -> int | None:
    """Multiply-adds of a FLOP count (torchvision's ``_ops`` convention): ``flops // 2``; None stays None."""
    return None if flops is None else int(flops) // FLOPS_PER_MAC


def sdpa_flops(query_shape: Sequence[int], key_shape: Sequence[int], value_shape: Sequence[int],
               *_args, out_shape=None, **_kwargs) -> int:
    """FLOPs of scaled dot-product attention: ``Q K^T`` then ``softmax(.) V``.

    Parameters
    ----------
    query_shape : sequence of int
        ``(B, H, L, E)``: batch, heads, query length, head size.
    key_shape : sequence of int
        ``(B, H, S, E)``.
    value_shape : sequence of int
        ``(B, H, S, Ev)``.

    Returns
    -------
    int
        ``2 B H L S E + 2 B H L S Ev`` (two batched matrix products at 2 FLOPs
        per multiply-add; the softmax and scaling are not counted), the formula
        ``torch.utils.flop_counter`` registers for the CUDA attention kernels.
    """
    b, h, q_len, e = query_shape
    s_len = key_shape[-2]
    ev = value_shape[-1]
    return FLOPS_PER_MAC * b * h * q_len * s_len * (e + ev)


def _custom_mapping() -> dict:
    """Formulas for the fused ops FlopCounterMode has none for (absent ops are skipped: older torch)."""
    aten = torch.ops.aten
    ops = ["_scaled_dot_product_flash_attention_for_cpu"]
    return {getattr(aten, name): sdpa_flops for name in ops if hasattr(aten, name)}


class MetaScalars(TorchDispatchMode):
    """Reading a scalar of a ``meta`` tensor gives ``True`` / ``1`` / ``1.0`` instead of raising.

    The example inputs Workbench builds are ones where a branch asks
    (an attention mask of ones, ids in range), so the forward on ``meta`` takes
    the branch the same forward on real tensors takes. Every other op runs as is.
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and args and args[0].is_meta:
            t = args[0]
            return True if t.dtype == torch.bool else (1.0 if t.is_floating_point() else 1)
        return func(*args, **(kwargs or {}))


@contextmanager
def flop_counter() -> Iterator[FlopCounterMode]:
    """A ``FlopCounterMode`` (entered) that also counts attention's fused kernels.

    Inside it the ``nn.MultiheadAttention`` fast path is off (restored on exit,
    also on an exception), CPU flash attention has a formula, and a ``meta``
    scalar reads as ``True`` / ``1`` (:class:`MetaScalars`), so a model on
    ``meta`` is counted from shapes alone.

    Yields
    ------
    FlopCounterMode
        Read ``get_total_flops()`` / ``get_flop_counts()`` after the block.
    """
    mha = torch.backends.mha
    was = mha.get_fastpath_enabled()
    counter = FlopCounterMode(display=False, custom_mapping=_custom_mapping())
    mha.set_fastpath_enabled(False)
    try:
        with counter, MetaScalars():
            yield counter
    finally:
        mha.set_fastpath_enabled(was)
