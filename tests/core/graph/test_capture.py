"""capture_graph on real architectures: the dataflow's operations, module paths, skip connections and fallbacks."""

from __future__ import annotations

import pytest
import torch
import torchvision
import transformers
from torch import nn

from tests.core.graph.models import meta_model
from workbench.core.graph import GraphCaptureError, ModelGraph, capture_graph
from workbench.core.model.example_input import example_input


def _preds(graph: ModelGraph, name: str) -> list[str]:
    return [src for src, dst in graph.edges if dst == name]


def _producer(graph: ModelGraph, module_path: str) -> str:
    """The last node inside ``module_path`` (what the module hands on)."""
    return [n.name for n in graph.nodes if n.module_path == module_path][-1]


def _adds(graph: ModelGraph, module_path: str) -> list:
    return [n for n in graph.nodes if n.module_path == module_path and n.op in ("aten.add", "aten.add_")]


def _check_consistent(graph: ModelGraph) -> None:
    names = [n.name for n in graph.nodes]
    assert len(set(names)) == len(names)
    order = {name: i for i, name in enumerate(names)}
    assert all(order[a] < order[b] for a, b in graph.edges)  # execution order is topological
    assert len(set(graph.edges)) == len(graph.edges)
    assert set(graph.inputs) | set(graph.outputs) <= set(names)


def test_resnet18_skip_connections_add_the_block_input_to_its_bn2(resnet18_graph):
    g = resnet18_graph
    _check_consistent(g)
    assert g.method == "export" and g.note == ""
    assert g.inputs == ["x"] and g.node("x").shapes == [(1, 3, 224, 224)]
    assert [g.node(o).shapes for o in g.outputs] == [[(1, 1000)]]
    ops = {n.op for n in g.nodes}
    assert {"aten.conv2d", "aten.batch_norm", "aten.max_pool2d", "aten.linear"} <= ops
    # plumbing is gone: no parameter, buffer or getitem nodes, yet every operation is connected
    assert all(n.op.startswith("aten.") or n.op == "input" for n in g.nodes)
    assert len(g.nodes) == 70 and all(_preds(g, n.name) for n in g.nodes if n.op != "input")

    (add,) = _adds(g, "layer1.0")  # one residual add per BasicBlock, in the block itself
    assert sorted(_preds(g, add.name)) == sorted([_producer(g, "layer1.0.bn2"), _producer(g, "maxpool")])
    assert g.node(_producer(g, "layer1.0.bn2")).op == "aten.batch_norm"
    assert add.shapes == [(1, 64, 56, 56)] and add.module_type == "BasicBlock"
    assert add.scope == ("layer1", "layer1.0")
    # the next block adds its own input: the ReLU after layer1.0's add
    (add1,) = _adds(g, "layer1.1")
    relu_after = [n for n in g.nodes if n.module_path == "layer1.0.relu"][-1]
    assert _preds(g, relu_after.name) == [add.name]
    assert sorted(_preds(g, add1.name)) == sorted([_producer(g, "layer1.1.bn2"), relu_after.name])
    # a downsampling block adds the projection of its input
    (add2,) = _adds(g, "layer2.0")
    assert sorted(_preds(g, add2.name)) == sorted([_producer(g, "layer2.0.bn2"), _producer(g, "layer2.0.downsample.1")])
    assert add2.shapes == [(1, 128, 28, 28)]
    assert len([n for n in g.nodes if n.op in ("aten.add", "aten.add_")]) == 8
    assert g.modules[""] == "ResNet" and g.modules["layer1.0.bn2"] == "BatchNorm2d"


def test_densenet121_concatenates_every_earlier_feature_map():
    g = capture_graph(meta_model("densenet121"), torch.zeros(1, 3, 224, 224, device="meta"))
    _check_consistent(g)
    cats = [n for n in g.nodes if n.op == "aten.cat"]
    assert len(cats) == 58 + 4  # one per dense layer (6+12+24+16), plus each block's output (last layer's cat)
    # the 6th layer of the first block reads the stem and the five layers before it, all in one cat
    cat = next(n for n in cats if n.module_path == "features.denseblock1.denselayer6")
    sources = _preds(g, cat.name)
    assert len(sources) == 6
    assert {g.node(s).module_path for s in sources} == {
        "features.pool0", *(f"features.denseblock1.denselayer{i}.conv2" for i in range(1, 6))}
    assert cat.shapes == [(1, 64 + 5 * 32, 56, 56)]


def test_vit_b_16_attention_and_the_residual_stream(vit_graph):
    g = vit_graph
    _check_consistent(g)
    assert g.method == "export"
    block = "encoder.layers.encoder_layer_0"
    attention = [n for n in g.nodes if n.module_path == f"{block}.self_attention"]
    assert attention and {n.module_type for n in attention} == {"MultiheadAttention"}
    assert "aten.scaled_dot_product_attention" in {n.op for n in attention}
    assert all(n.scope[:3] == ("encoder", "encoder.layers", block) for n in attention)
    first, second = _adds(g, block)  # x = x + attention(ln_1(x)); y = x + mlp(ln_2(x))
    first_in = _preds(g, first.name)
    assert _producer(g, f"{block}.dropout") in first_in
    outside = [s for s in first_in if not g.node(s).module_path.startswith(block)]
    assert len(outside) == 1  # the block's input: the residual stream coming in
    assert first.name in _preds(g, second.name)  # and going on around the MLP
    assert _producer(g, f"{block}.mlp.4") in _preds(g, second.name)
    assert second.shapes == [(1, 197, 768)]
    assert len([n for n in g.nodes if n.module_type == "EncoderBlock" and n.op == "aten.add"]) == 24


class _Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(8, 8)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.shared(self.act(self.shared(x)))


@pytest.mark.parametrize("method", ["export", "fx", "hooks"])
def test_a_module_called_twice_is_two_nodes_with_one_module_path(method):
    g = capture_graph(_Twice(), torch.zeros(2, 8), method=method)
    assert g.method == method
    calls = [n for n in g.nodes if n.module_path == "shared"]
    assert len(calls) == 2 and calls[0].name != calls[1].name
    assert [n.scope for n in calls] == [("shared",), ("shared@1",)]
    act = next(n for n in g.nodes if n.module_path == "act")
    assert _preds(g, act.name) == [calls[0].name] and _preds(g, calls[1].name) == [act.name]
    boxes = g.collapsed({""})  # each call its own box: the dataflow stays a chain
    assert [n.name for n in boxes.nodes] == ["x", "shared", "act", "shared@1"]
    assert boxes.edges == [("x", "shared"), ("shared", "act"), ("act", "shared@1")]


class _DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Linear(4, 4)
        self.neg = nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:
            return self.pos(x)
        return self.neg(x)


def test_data_dependent_control_flow_falls_back_to_the_hook_trace_and_says_why():
    model = _DataDependent()
    g = capture_graph(model, torch.ones(2, 4))
    assert g.method == "hooks"
    assert "torch.export failed" in g.note and "torch.fx.symbolic_trace failed" in g.note
    assert "forward hooks" in g.note and "branch taken" in g.note
    assert [(n.op, n.module_path) for n in g.nodes if n.op == "call_module"] == [("call_module", "pos")]
    assert _preds(g, "pos") == ["x"] and g.outputs == ["pos"]
    assert [n.short_op for n in g.nodes if n.op.startswith("Tensor.")] == ["sum", "gt"]  # the test itself
    other = capture_graph(model, -torch.ones(2, 4))  # the other branch, the other module
    assert [n.module_path for n in other.nodes if n.op == "call_module"] == ["neg"]


def test_the_hook_trace_records_functions_between_modules_and_leaves_the_model_as_it_was():
    model = torchvision.models.resnet18().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    g = capture_graph(model, torch.randn(2, 3, 64, 64), method="hooks")
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # BN statistics did not move
    (add,) = [n for n in g.nodes if n.module_path == "layer1.0" and n.short_op.startswith("add")]
    assert sorted(_preds(g, add.name)) == ["layer1_0_bn2", "maxpool"]
    assert [n.name for n in g.collapsed({""}).nodes][:6] == ["x", "conv1", "bn1", "relu", "maxpool", "layer1"]


class _Options:
    def __init__(self, scale: float):
        self.scale = scale


class _WithOptions(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, options):
        return self.fc(x) * options.scale


def test_a_forward_taking_a_config_object_falls_back_to_fx():
    g = capture_graph(_WithOptions(), (torch.zeros(2, 4), _Options(2.0)))
    assert g.method == "fx" and g.note.startswith("torch.export failed")
    assert [(n.name, n.op) for n in g.nodes] == [("x", "input"), ("fc", "call_module"), ("mul", "operator.mul")]
    assert g.edges == [("x", "fc"), ("fc", "mul")] and g.node("mul").shapes == [(2, 4)]


def test_fx_on_resnet18_on_meta_shows_modules_as_calls_and_reads_no_weight():
    g = capture_graph(meta_model("resnet18"), torch.zeros(1, 3, 224, 224), method="fx")
    assert g.method == "fx"
    assert g.node("layer1_0_bn2").op == "call_module" and g.node("layer1_0_bn2").module_type == "BatchNorm2d"
    assert g.node("fc").shapes == [(1, 1000)]
    add = next(n for n in g.nodes if n.module_path == "layer1.0" and n.op == "operator.add")
    assert sorted(_preds(g, add.name)) == ["layer1_0_bn2", "maxpool"]


class _TokenModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 16)
        self.encoder = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)).mean(dim=1))


def test_a_model_taking_token_ids_from_its_embedding():
    model = _TokenModel()
    example = example_input(model)  # the project's rule: int64 ids for an embedding model
    g = capture_graph(model, example)
    assert g.method == "export"
    assert g.node("ids").dtypes == ["int64"] and g.node("ids").shapes == [(1, 16)]
    (embedding,) = [n for n in g.nodes if n.op == "aten.embedding"]
    assert embedding.module_path == "embed" and _preds(g, embedding.name) == ["ids"]
    assert embedding.shapes == [(1, 16, 16)] and embedding.dtypes == ["float32"]
    assert any(n.module_path.startswith("encoder.self_attn") for n in g.nodes)
    assert [g.node(o).shapes for o in g.outputs] == [[(1, 3)]]


def test_a_hugging_face_bert_from_its_keyword_inputs():
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=100, max_position_embeddings=64, num_labels=3)
    model = transformers.BertForSequenceClassification(config)
    ids = torch.randint(0, 100, (2, 12))
    g = capture_graph(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    _check_consistent(g)
    assert g.method == "export" and g.inputs == ["input_ids", "attention_mask"]
    assert g.modules[""] == "BertForSequenceClassification"
    word = next(n for n in g.nodes if n.module_path == "bert.embeddings.word_embeddings")
    assert word.op == "aten.embedding" and "input_ids" in _preds(g, word.name)
    attention = [n for n in g.nodes if n.module_path.startswith("bert.encoder.layer.1.attention.self")]
    assert attention and {n.module_type for n in attention} >= {"BertSelfAttention"}
    assert [g.node(o).shapes for o in g.outputs] == [[(2, 3)]]  # the logits
    top = g.collapsed({""})
    assert [n.name for n in top.nodes] == ["input_ids", "attention_mask", "bert", "dropout", "classifier"]


def test_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match="method"):
        capture_graph(_Twice(), torch.zeros(2, 8), method="jit")
    with pytest.raises(TypeError, match="example_input"):
        capture_graph(_Twice(), "x")
    with pytest.raises(GraphCaptureError) as info:  # an input the model cannot take: every method fails
        capture_graph(_Twice(), torch.zeros(2, 5))
    assert set(info.value.reasons) == {"export", "fx", "hooks"}
    assert "_Twice" in str(info.value) and "input" in str(info.value)
    with pytest.raises(GraphCaptureError, match="meta device"):  # a hook trace needs values
        capture_graph(meta_model("resnet18"), torch.zeros(1, 3, 32, 32), method="hooks")


def test_a_failing_trace_prints_no_traceback_and_leaves_torchs_log_levels_as_they_were(capfd):
    import logging

    levels = {name: logging.getLogger(name).level for name in ("torch._subclasses.fake_tensor", "torch._dynamo")}
    with pytest.raises(GraphCaptureError) as info:  # an input the first layer cannot take
        capture_graph(nn.Sequential(nn.Linear(64, 10)), torch.zeros(1, 16))
    assert "export" in info.value.reasons  # the reason is kept, for the note and the message
    err = capfd.readouterr().err
    assert "Traceback" not in err and "failed while attempting to run meta" not in err, err[-2000:]
    assert {name: logging.getLogger(name).level for name in levels} == levels
