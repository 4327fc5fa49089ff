"""Outputs flattened in the exporters' order, and differences measured with the dtype's tolerance."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from workbench.core.export.compare import compare_output, diff_stats, flatten_outputs, tolerance


def test_outputs_are_flattened_with_names_in_order():
    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    assert [n for n, _ in flatten_outputs(a)] == ["output"]
    assert [n for n, _ in flatten_outputs((a, [b, None], 3))] == ["output[0]", "output[1][0]"]
    flat = flatten_outputs({"logits": a, "hidden": (b, c), "loss": None})
    assert [n for n, _ in flat] == ["logits", "hidden[0]", "hidden[1]"] and flat[2][1] is c


def test_differences_pass_within_atol_plus_rtol_and_fail_beyond():
    ref = torch.tensor([[1.0, -2.0, 0.0]])
    ok = compare_output("logits", ref, np.array([[1.0005, -2.0, 5e-5]], dtype=np.float32))
    assert ok.passed and ok.batch == 1 and ok.shape == [1, 3]
    assert ok.max_abs == pytest.approx(5e-4, rel=1e-3)
    bad = compare_output("logits", ref, torch.tensor([[1.01, -2.0, 0.0]]))
    assert not bad.passed and "FAIL" in bad.line()
    assert compare_output("x", ref, ref.half().float(), "fp16").atol == tolerance("fp16")[0]


def test_shapes_nans_and_integers():
    assert diff_stats(torch.zeros(2, 3), torch.zeros(3, 2), 1e-4, 1e-3)[2:] == (False, "shape (3, 2) != (2, 3)")
    nan = torch.tensor([float("nan"), 1.0])
    assert diff_stats(nan, nan.clone(), 1e-4, 1e-3)[2] is True  # NaN where the model gives NaN is equal
    max_abs, _, ok, _ = diff_stats(torch.tensor([1.0, 1.0]), nan, 1e-4, 1e-3)
    assert not ok and math.isinf(max_abs)
    assert diff_stats(torch.tensor([3, 4]), torch.tensor([3, 5]), 1e-4, 1e-3)[2:] == (False, "integer values differ")
    with pytest.raises(ValueError, match="dtype must be one of fp32, fp16, bf16"):
        tolerance("int8")
