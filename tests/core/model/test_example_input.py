"""core.model.example_input: what a model is called with for the tree, the probes and the warm-up."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.core.model.demo import DEMO_INPUT_SHAPE, DigitsCNN
from workbench.core.model.example_input import (
    TOKEN_INPUT_SHAPE,
    ExampleInput,
    default_input_shape,
    example_input,
    from_batch,
    token_embedding,
)
from workbench.core.model.tree import InputShapeError, annotate_shapes_and_flops, build_summary


class Mean(nn.Module):
    """Average over the sequence: ``(N, L, D)`` -> ``(N, D)``."""

    def forward(self, x):
        return x.mean(dim=1)


def tiny_transformer() -> nn.Sequential:
    """Embedding -> one encoder layer -> mean -> linear head: a BERT-like classifier in miniature."""
    return nn.Sequential(
        nn.Embedding(100, 32),
        nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True),
        Mean(),
        nn.Linear(32, 3),
    )


class DictModel(nn.Module):
    """Called the Hugging Face way: ``model(input_ids=..., attention_mask=...)``."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)  # a leaf without parameters registered first: no hint, skipped
        self.embed = nn.Embedding(50, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, input_ids, attention_mask=None):
        h = self.drop(self.embed(input_ids))
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1)
        return self.head(h.mean(dim=1))


def test_an_embedding_model_gets_int64_ids_below_its_vocabulary():
    model = tiny_transformer()
    assert token_embedding(model) is model[0]
    assert default_input_shape(model) == TOKEN_INPUT_SHAPE == (1, 16)
    ex = example_input(model)
    (x,) = ex.args
    assert x.dtype == torch.int64 and tuple(x.shape) == (1, 16)
    assert 0 <= int(x.min()) and int(x.max()) < 100
    typed = example_input(model, "4,7").args[0]
    assert typed.dtype == torch.int64 and tuple(typed.shape) == (4, 7)
    assert ex.call(model.eval()).shape == (1, 3)


def test_ids_come_from_a_private_generator_and_leave_the_global_rng_alone():
    model = tiny_transformer()
    state = torch.get_rng_state()
    a, b = example_input(model).args[0], example_input(model).args[0]
    assert torch.equal(a, b)
    assert torch.equal(torch.get_rng_state(), state)


def test_a_float_model_gets_zeros_or_randn_of_the_typed_shape_in_its_dtype():
    model = DigitsCNN().double()
    assert token_embedding(model) is None and default_input_shape(model) is None
    zeros = example_input(model, DEMO_INPUT_SHAPE).args[0]
    assert zeros.dtype == torch.float64 and tuple(zeros.shape) == DEMO_INPUT_SHAPE and not zeros.any()
    noise = example_input(model, DEMO_INPUT_SHAPE, fill="randn").args[0]
    assert noise.dtype == torch.float64 and noise.std() > 0
    with pytest.raises(ValueError, match="set an input shape"):
        example_input(model)
    with pytest.raises(ValueError, match="fill"):
        example_input(model, DEMO_INPUT_SHAPE, fill="ones")


def test_a_real_batch_wins_tensor_tuple_and_dict():
    model = DictModel()
    ids = torch.randint(0, 50, (2, 5))
    mask = torch.ones(2, 5)
    assert example_input(model, (9, 9), batch=ids).args[0] is ids
    assert from_batch((ids, torch.tensor([0, 1]))).args[0] is ids  # (input, target): the input
    ex = example_input(model, batch={"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 1])})
    assert ex.args == () and list(ex.kwargs) == ["input_ids", "attention_mask"]  # forward names no labels
    assert ex.shape == (2, 5) and ex.describe() == "input_ids=(2, 5) int64, attention_mask=(2, 5) float32"
    assert ex.call(model).shape == (2, 2)
    with pytest.raises(ValueError):
        from_batch(())
    with pytest.raises(ValueError, match="name no argument"):
        from_batch({"pixels": ids}, model)


def test_the_tree_of_a_transformer_has_shapes_and_flops():
    model = tiny_transformer()
    root = build_summary(model, TOKEN_INPUT_SHAPE)
    assert root.find("0").output_shape == (1, 16, 32)
    assert root.find("1").output_shape == (1, 16, 32)
    assert root.find("1.self_attn").output_shape == "tuple of 2: [1, 16, 32], ..."
    assert root.find("2").output_shape == (1, 32)
    assert root.output_shape == (1, 3)
    assert root.flops > 0 and root.find("1").flops > 0 and root.find("3").flops == 2 * 32 * 3
    # no shape typed: the model's own hint, ids (1, 16)
    again = build_summary(model)
    assert annotate_shapes_and_flops(again) == root.flops


def test_the_tree_of_a_dict_model_from_an_example():
    model = DictModel()
    root = build_summary(model)
    ex = from_batch({"input_ids": torch.randint(0, 50, (3, 6)), "attention_mask": torch.ones(3, 6)}, model)
    assert annotate_shapes_and_flops(root, example=ex) > 0
    assert root.find("embed").output_shape == (3, 6, 8)
    assert root.find("head").output_shape == (3, 2) and root.find("head").flops == 2 * 3 * 8 * 2
    # the input_shape path builds ids for it too
    annotate_shapes_and_flops(root, (2, 4))
    assert root.find("embed").output_shape == (2, 4, 8)


def test_an_example_that_does_not_fit_names_what_it_holds():
    model = DictModel()
    root = build_summary(model)
    bad = ExampleInput((), {"input_ids": torch.zeros(2, 3)})  # float ids
    with pytest.raises(InputShapeError) as info:
        annotate_shapes_and_flops(root, example=bad, label="dicty")
    assert str(info.value).startswith("example input input_ids=(2, 3) float32 does not fit dicty:")
    assert info.value.input_shape == (2, 3)
    assert model.training and not any(m._forward_hooks for m in model.modules())


def test_the_warm_up_of_an_embedding_model_takes_its_hinted_shape():
    from workbench.core.train.config import DataConfig, TrainConfig
    from workbench.core.train.launch.training_process import make_warm_up

    config = TrainConfig(data=DataConfig(dataset="digits", batch_size=4))
    assert make_warm_up(tiny_transformer(), config, None)["input_shape"] == [16]
    assert make_warm_up(tiny_transformer(), config, (1, 32))["input_shape"] == [32]
    assert make_warm_up(DigitsCNN(), config, None) is None  # no hint, no typed shape: nothing to warm
