"""ONNX export: resnet18 and a tiny BERT proven equal at two batch sizes; a perturbed layer and a module that
behaves differently when exported are named; the TorchScript fallback is said; a missing extra is one line."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx  # noqa: F401 - the test extra: fails if missing, never skips
import onnxruntime as ort
import pytest
import torch
import transformers
from onnx import numpy_helper
from torch import nn

from workbench.core.export import ExportError, check_artifact, export
from workbench.core.export.onnx_format import require_onnx


def test_resnet18_passes_at_batch_1_and_3(resnet_onnx):
    report, path = resnet_onnx
    assert report.exporter == "torch.onnx dynamo" and report.fallback_reason == ""
    assert [(c.name, c.batch) for c in report.checks] == [("output", 1), ("output", 3)]
    assert report.passed and all(c.max_abs < 1e-4 for c in report.checks)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert not isinstance(session.get_inputs()[0].shape[0], int)  # the batch dimension is symbolic
    saved = json.loads((path.parent / "export_report.json").read_text())
    assert saved["passed"] is True and saved["path"] == str(path) and len(saved["checks"]) == 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["export_report.json", path.name]  # no temporary left


def test_a_perturbed_middle_layer_is_the_first_module_named(resnet, image, resnet_onnx, tmp_path):
    _, path = resnet_onnx
    proto = onnx.load(str(path))
    for init in proto.graph.initializer:
        if init.name == "layer2.0.conv1.weight":
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(1.01), init.name))
    onnx.save(proto, str(tmp_path / "bad.onnx"))
    report = check_artifact(resnet, "onnx", tmp_path / "bad.onnx", image, dynamic_batch=False)
    assert not report.passed
    diff = report.first_difference
    # the ONNX optimizer folds each BatchNorm into the Conv before it: the Conv's own output is gone,
    # so the difference shows at its BatchNorm, and the Conv is named as where it may start
    assert (diff.module, diff.type) == ("layer2.0.bn1", "BatchNorm2d")
    assert diff.not_compared == ["layer2.0.conv1"]
    assert diff.compared >= 10 and diff.max_abs > 1e-3  # every module of layer1 agreed before it
    assert "first module that differs: layer2.0.bn1" in "\n".join(report.lines())


class _DiffersWhenExported(nn.Module):
    """Its exported graph multiplies by 1.5; eager PyTorch does not: a Python-side branch the export fixes."""

    def forward(self, x):
        return x * 1.5 if torch.compiler.is_exporting() else x


def test_a_module_that_behaves_differently_in_the_export_is_named_not_the_ones_after(tmp_path):
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), _DiffersWhenExported(), nn.Linear(16, 4), nn.ReLU())
    report = export(model, "onnx", tmp_path / "m.onnx", example=torch.randn(2, 8))
    assert not report.passed
    assert (report.first_difference.module, report.first_difference.type) == ("2", "_DiffersWhenExported")
    assert report.first_difference.compared == 2  # "0" and "1" agreed; "3" and "4" come after and are not named
    assert (tmp_path / "m.onnx").is_file()  # a failed check still leaves the artifact and its report
    assert json.loads((tmp_path / "export_report.json").read_text())["first_difference"]["module"] == "2"


def test_a_tiny_bert_with_keyword_inputs_passes(tmp_path):
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64)
    model = transformers.BertForSequenceClassification(config).eval()
    ids = torch.randint(0, 100, (1, 8))
    report = export(model, "onnx", tmp_path, example={"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    assert report.passed, report.lines()
    assert [(c.name, c.batch, c.shape) for c in report.checks] == [("logits", 1, [1, 2]), ("logits", 3, [3, 2])]
    assert report.path == str(tmp_path / "model.onnx")


class _Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y * 2 if y.sum() > 0 else y  # data-dependent: torch.export refuses, the TorchScript tracer follows


def test_the_torchscript_fallback_is_named_with_the_reason(tmp_path):
    report = export(_Branchy(), "onnx", tmp_path / "b.onnx", example=torch.ones(2, 4), dynamic_batch=False)
    assert report.exporter == "torch.onnx torchscript (fallback)"
    assert "data-dependent" in report.fallback_reason and "in forward" in report.fallback_reason
    assert any("used the TorchScript exporter" in line for line in report.lines())


def test_a_missing_extra_is_one_line_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ExportError, match=r"onnxruntime.*workbench\[export\]"):
        require_onnx()
