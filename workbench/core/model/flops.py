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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["FLOPS_PER_MAC", "FLOPS_CONVENTION", "flop_counter", "sdpa_flops", "macs"]

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


@contextmanager
def flop_counter() -> Iterator[FlopCounterMode]:
    """A ``FlopCounterMode`` (entered) that also counts attention's fused kernels.

    Inside it the ``nn.MultiheadAttention`` fast path is off (restored on exit,
    also on an exception) and CPU flash attention has a formula.

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
        with counter:
            yield counter
    finally:
        mha.set_fastpath_enabled(was)
