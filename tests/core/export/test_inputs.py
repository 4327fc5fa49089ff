"""The example at another batch size, in another dtype, with names and dynamic shapes for torch.export."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.core.export.inputs import as_example, batch_size, cast_example, dynamic_shapes, named_tensors, with_batch
from workbench.core.model.example_input import ExampleInput


class _Text(nn.Module):
    def forward(self, input_ids, attention_mask=None, **extra):
        return input_ids


def test_with_batch_takes_rows_in_turn_and_leaves_other_tensors():
    ids = torch.tensor([[1, 2], [3, 4]])
    table = torch.arange(5)
    ex = with_batch(ExampleInput((ids,), {"table": table}), 3)
    assert ex.args[0].tolist() == [[1, 2], [3, 4], [1, 2]] and ex.kwargs["table"] is table
    assert batch_size(with_batch(ex, 1)) == 1


def test_cast_leaves_integers_and_names_follow_forward():
    ex = as_example({"input_ids": torch.ones(2, 3, dtype=torch.long), "pixel_values": torch.ones(2, 1)})
    cast = cast_example(ex, torch.float16)
    assert (cast.kwargs["input_ids"].dtype, cast.kwargs["pixel_values"].dtype) == (torch.long, torch.float16)
    model = _Text()
    assert [n for n, _ in named_tensors(model, ex)] == ["input_ids", "pixel_values"]
    dim = torch.export.Dim("batch")
    assert dynamic_shapes(model, ex, dim) == {"input_ids": {0: dim}, "extra": {"pixel_values": {0: dim}}}
    assert [n for n, _ in named_tensors(nn.Linear(2, 2), as_example(torch.ones(1, 2)))] == ["input"]


def test_as_example_refuses_what_holds_no_tensor():
    with pytest.raises(ValueError, match="holds no tensor"):
        as_example({"a": 1})
    with pytest.raises(ValueError, match="not str"):
        as_example("1,3,8,8")
