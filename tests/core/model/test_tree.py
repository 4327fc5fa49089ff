"""core.model.tree: the module tree as data, counts, shapes, FLOPs, exports."""

from __future__ import annotations

import csv
import io

import pytest
import torch
import torchvision
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from workbench.core.errors import WorkbenchError
from workbench.core.model.demo import DEMO_INPUT_SHAPE, DigitsCNN
from workbench.core.model.tree import (
    InputShapeError,
    ModuleNode,
    annotate_shapes_and_flops,
    build_summary,
    refresh_trainable,
    summary_rows,
    to_csv,
    to_markdown,
    train_state,
)


class TiedLM(nn.Module):
    """Embedding tied to the output projection; one block used twice under two names."""

    def __init__(self, vocab: int = 11, dim: int = 6):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.block = nn.Sequential(nn.Linear(dim, dim), nn.Tanh())
        self.again = self.block  # same module, second name
        self.head = nn.Linear(dim, vocab)
        self.head.weight = self.embed.weight  # tied

    def forward(self, x):
        return self.head(self.again(self.block(self.embed(x))))


def _unique_numel(model):
    return sum(p.numel() for p in model.parameters())


def _flop_counts(model, shape):
    model.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(torch.zeros(shape))
    return fc


def test_resnet18_counts_and_tree():
    model = torchvision.models.resnet18()
    root = build_summary(model)
    assert root.name == "" and root.short_name == "ResNet" and root.type_name == "ResNet"
    assert root.total_params == 11_689_512 == _unique_numel(model)
    assert root.trainable_params == root.total_params
    assert [c.short_name for c in root.children][:4] == ["conv1", "bn1", "relu", "maxpool"]
    conv = root.find("layer1.0.conv1")
    assert conv is not None and conv.type_name == "Conv2d" and conv.depth == 3
    assert conv.parent is root.find("layer1.0")
    w = conv.params[0]
    assert (w.name, w.short_name, w.shape, w.dtype, w.device, w.numel) == (
        "layer1.0.conv1.weight", "weight", (64, 64, 3, 3), "float32", "cpu", 36864)
    bn = root.find("bn1")
    assert [b.short_name for b in bn.buffers] == ["running_mean", "running_var", "num_batches_tracked"]
    assert bn.buffers[2].dtype == "int64" and bn.buffers[0].is_buffer
    # bytes: every parameter and buffer, by element size
    expected_bytes = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
    assert root.total_bytes == expected_bytes
    # index_in_parent agrees with the children list everywhere
    for node in root.walk():
        for i, child in enumerate(node.children):
            assert child.index_in_parent() == i and child.parent is node
    # pre-order walk == named_modules order
    assert [n.name for n in root.walk()] == [name for name, _ in model.named_modules()]
    assert root.find("nope") is None
    assert root.find("layer1").find("0.conv1") is conv


def test_subtree_totals_are_sums_of_children():
    model = torchvision.models.mobilenet_v3_small()
    root = build_summary(model, (1, 3, 64, 64))
    counter = _flop_counts(torchvision.models.mobilenet_v3_small(), (1, 3, 64, 64))
    assert root.flops == counter.get_total_flops() > 0
    assert root.total_params == _unique_numel(model) == 2_542_856
    se = root.find("features.1.block.1")  # SqueezeExcitation: its FLOPs include its children's
    assert se.type_name == "SqueezeExcitation"
    assert se.flops == sum(counter.get_flop_counts()["MobileNetV3.features.1.block.1"].values()) > 0
    assert se.flops >= sum(c.flops for c in se.children)
    for node in root.walk():
        assert node.total_params == node.own_params + sum(c.total_params for c in node.children)
        assert node.total_bytes == sum(t.nbytes for t in node.params + node.buffers) + sum(
            c.total_bytes for c in node.children)


def test_tied_and_shared_counted_once():
    model = TiedLM()
    root = build_summary(model)
    assert root.total_params == _unique_numel(model) == 11 * 6 + (6 * 6 + 6) + 11
    head = root.find("head")
    assert [t.short_name for t in head.params] == ["bias"]
    assert [(short, info.name) for short, info in head.tied] == [("weight", "embed.weight")]
    # the shared block appears once, at its first name
    assert root.find("block") is not None and root.find("again") is None
    # a module whose only parameter is tied reports the tied parameter's state
    model.embed.weight.requires_grad_(False)
    refresh_trainable(root)
    assert train_state(root.find("embed")) == 0
    assert root.trainable_params == _unique_numel(model) - 66


def test_refresh_trainable_and_train_state():
    model = DigitsCNN()
    root = build_summary(model)
    assert train_state(root) == 2
    assert train_state(root.find("features.2")) is None  # ReLU: no parameters, no checkbox
    model.classifier.weight.requires_grad_(False)
    assert root.trainable_params == root.total_params  # stale until refreshed
    refresh_trainable(root)
    assert root.trainable_params == root.total_params - 64 * 10
    assert train_state(root.find("classifier")) == 1
    assert train_state(root) == 1
    for p in model.parameters():
        p.requires_grad_(False)
    refresh_trainable(root)
    assert train_state(root) == 0 and root.trainable_params == 0
    assert root.find("classifier").params[0].requires_grad is False  # read live


def test_resnet18_flops_equal_flopcountermode():
    model = torchvision.models.resnet18()
    model.train()
    model.layer1.eval()  # a mixed state that must come back as it was
    modes = {name: m.training for name, m in model.named_modules()}
    shape = (1, 3, 64, 64)
    root = build_summary(model, input_shape=shape)
    expected = _flop_counts(torchvision.models.resnet18(), shape)
    assert root.flops == expected.get_total_flops() > 0
    counts = expected.get_flop_counts()
    assert root.find("layer1.0.conv1").flops == sum(counts["ResNet.layer1.0.conv1"].values()) > 0
    assert root.find("fc").flops == 2 * 512 * 1000
    assert root.find("relu").flops == 0
    assert root.find("layer2").output_shape == (1, 128, 8, 8)
    assert root.output_shape == (1, 1000)
    assert {name: m.training for name, m in model.named_modules()} == modes
    assert not any(m._forward_hooks for m in model.modules())  # hooks removed
    assert all(p.grad is None for p in model.parameters())


def test_shared_module_flops_map_to_first_name():
    model = TiedLM()
    root = build_summary(model)
    x_shape = (2, 3)
    # an embedding first: the example is int64 ids of that shape (core.model.example_input)
    tokens = 2 * 3
    assert annotate_shapes_and_flops(root, x_shape) == 2 * (2 * tokens * 6 * 6) + 2 * tokens * 6 * 11
    assert root.find("embed").output_shape == (2, 3, 6) and root.output_shape == (2, 3, 11)
    # annotate with a model that takes floats: wrap the tail
    tail = nn.Sequential()
    tail.block = model.block
    tail.again = model.block
    r2 = build_summary(tail, (2, 6))
    fc = _flop_counts(tail, (2, 6))
    assert r2.flops == fc.get_total_flops() == 2 * (2 * 2 * 6 * 6)
    assert r2.find("block").flops == 2 * 2 * 6 * 6 * 2  # called twice, both calls attributed


def test_wrong_input_shape_is_a_workbench_error():
    model = torchvision.models.resnet18()
    root = build_summary(model)
    with pytest.raises(InputShapeError) as info:
        annotate_shapes_and_flops(root, (1, 1, 8, 8), label="resnet18")
    msg = str(info.value)
    assert isinstance(info.value, WorkbenchError)
    assert msg.startswith("input shape (1,1,8,8) does not fit resnet18:")
    assert "set the input shape the model expects" in msg
    assert model.training  # restored after the failure
    assert not any(m._forward_hooks for m in model.modules())


def test_container_outputs_described():
    class Pair(nn.Module):
        def forward(self, x):
            return x * 2, x + 1

    class Dicty(nn.Module):
        def forward(self, x):
            return {"logits": x}

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.pair = Pair()
            self.dicty = Dicty()

        def forward(self, x):
            a, _ = self.pair(x)
            return self.dicty(a)

    root = build_summary(M(), "2,3")
    assert root.find("pair").output_shape == "tuple of 2: [2, 3], ..."
    assert root.find("dicty").output_shape == "dict of 1: logits=[2, 3], ..."


def test_rows_markdown_csv():
    root = build_summary(DigitsCNN(), DEMO_INPUT_SHAPE)
    rows = summary_rows(root)
    assert len(rows) == len(list(root.walk()))
    assert rows[0]["name"] == "" and rows[0]["depth"] == 0 and rows[0]["params"] == root.total_params
    cls = next(r for r in rows if r["name"] == "classifier")
    assert cls == {"name": "classifier", "type": "Linear", "depth": 1, "output_shape": [1, 10],
                   "params": 650, "trainable": 650, "bytes": 2600, "flops": 2 * 64 * 10,
                   "macs": 64 * 10}
    assert all(type(r["params"]) is int for r in rows)
    assert [r["name"] for r in summary_rows(root, max_depth=1)] == ["", "features", "classifier"]
    md = to_markdown(root)
    assert "| &nbsp;&nbsp;`classifier` | Linear | [1, 10] | 650 | 650 | 1,280 |" in md
    assert f"- Total parameters: {root.total_params:,}" in md
    table = list(csv.DictReader(io.StringIO(to_csv(root))))
    assert table[-1]["name"] == "classifier" and table[-1]["output_shape"] == "1x10"
    assert int(table[0]["flops"]) == root.flops and int(table[0]["macs"]) == root.flops // 2
    assert f"- FLOPs (2 per multiply-add): {root.flops:,}" in md and f"multiply-adds: {root.flops // 2:,}" in md


def _big_model(outer=50, mid=20, inner=20):
    return nn.Sequential(*[
        nn.Sequential(*[nn.Sequential(*[nn.Linear(4, 4) for _ in range(inner)]) for _ in range(mid)])
        for _ in range(outer)
    ])


def test_20k_leaves_tree_counts_every_node():
    """The 20,000-leaf tree is complete (its build / refresh times are figures in benchmarks/bench_tree.py)."""
    model = _big_model()  # 20,000 Linear leaves, 21,051 modules
    root = build_summary(model)
    assert sum(1 for _ in root.walk()) == 21_051
    assert root.total_params == 20_000 * 20
    model[0][0][0].weight.requires_grad_(False)
    refresh_trainable(root)
    assert root.trainable_params == 20_000 * 20 - 16
    assert isinstance(root, ModuleNode) and not hasattr(root, "__dict__")


def test_failed_annotation_leaves_the_previous_shapes_and_flops():
    """A wrong input shape is all or nothing: the tree keeps the last good annotation."""
    import torchvision

    from workbench.core.model.tree import InputShapeError, annotate_shapes_and_flops, build_summary

    root = build_summary(torchvision.models.resnet18(weights=None), input_shape=(1, 3, 64, 64))
    before = [(n.name, n.output_shape, n.flops) for n in root.walk()]
    assert root.flops and root.output_shape is not None
    with pytest.raises(InputShapeError):
        annotate_shapes_and_flops(root, (1, 1, 64, 64))  # conv1 wants 3 channels
    assert [(n.name, n.output_shape, n.flops) for n in root.walk()] == before
