"""FLOPs count what runs: torchvision's published ``_ops`` for every classifier, attention's fused kernels."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn
from torchvision.models import get_model_weights, list_models

from workbench.core.model.flops import FLOPS_PER_MAC, flop_counter, macs, sdpa_flops
from workbench.core.model.meta_build import build_module
from workbench.core.model.spec import ArchSpec
from workbench.core.model.tree import annotate_shapes_and_flops, build_summary

#: torchvision's ``_ops`` are GFLOPS as multiply-adds at the weights' crop size; ours must be within 5 %.
TOLERANCE = 0.05


def _published(name: str) -> tuple[float, int, dict]:
    """(multiply-adds in G, crop size, kwargs the weights were trained with) of a classifier's default weights."""
    weights = get_model_weights(name).DEFAULT
    crop = getattr(weights.transforms(), "crop_size", [224])[0]
    kwargs = {"image_size": crop} if name.startswith("vit_") and crop != 224 else {}
    return weights.meta["_ops"], crop, kwargs


def _count(name: str) -> int:
    """Workbench's FLOPs of a random-init classifier: on the meta device (no compute), on CPU where meta cannot run."""
    _, crop, kwargs = _published(name)
    spec = ArchSpec(name, kwargs)
    try:
        model = build_module(spec, device="meta")
        return annotate_shapes_and_flops(build_summary(model), (1, 3, crop, crop), "meta")
    except Exception:  # a buffer computed on CPU at build time (swin_v2's coordinate tables): count for real
        model = build_module(spec)
        return annotate_shapes_and_flops(build_summary(model), (1, 3, crop, crop), "cpu")


CLASSIFIERS = list_models(module=torchvision.models)


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_flops_agree_with_torchvision_published_ops(name):
    gmacs, _, _ = _published(name)
    flops = _count(name)
    assert flops / (FLOPS_PER_MAC * gmacs * 1e9) == pytest.approx(1.0, abs=TOLERANCE)


def test_vit_b_16_on_cpu_counts_its_attention():
    """In eval under no_grad nn.MultiheadAttention takes the fused fast path, and CPU attention a fused kernel."""
    gmacs, crop, _ = _published("vit_b_16")
    model = build_module("vit_b_16")
    before = torch.backends.mha.get_fastpath_enabled()
    flops = annotate_shapes_and_flops(build_summary(model), (1, 3, crop, crop), "cpu")
    assert flops / (2 * gmacs * 1e9) == pytest.approx(1.0, abs=TOLERANCE)  # 0.64 before: 22.5 G of 35.1 G
    assert torch.backends.mha.get_fastpath_enabled() == before


def test_multihead_attention_counts_projections_and_products():
    batch, length, width, heads = 2, 10, 16, 4
    mha = nn.MultiheadAttention(width, heads, batch_first=True).eval()
    x = torch.randn(batch, length, width)
    with torch.no_grad(), flop_counter() as counter:
        mha(x, x, x, need_weights=False)
    projections = 2 * batch * length * width * (3 * width) + 2 * batch * length * width * width
    products = 2 * batch * heads * length * length * (width // heads) * 2
    assert counter.get_total_flops() == projections + products


def test_fast_path_is_restored_after_a_failure():
    torch.backends.mha.set_fastpath_enabled(True)
    with pytest.raises(RuntimeError), flop_counter():
        assert not torch.backends.mha.get_fastpath_enabled()
        raise RuntimeError("the forward failed")
    assert torch.backends.mha.get_fastpath_enabled()


def test_sdpa_formula_and_multiply_adds():
    assert sdpa_flops((1, 2, 5, 8), (1, 2, 7, 8), (1, 2, 7, 4)) == 2 * 1 * 2 * 5 * 7 * (8 + 4)
    assert macs(35_000) == 17_500 and macs(None) is None
