"""``export``: where it writes, that a failure writes nothing, that the caller's model is left as it was,
fp16 with its own tolerance, and a run whose data gives no batch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.export import ExportError, export, target_path
from workbench.core.export.compare import TOLERANCES
from workbench.core.model.saving import checkpoint_payload, save_model_file


def test_target_path_follows_the_suffix_or_names_the_file_in_a_folder(tmp_path):
    assert target_path("onnx", tmp_path / "m.onnx") == tmp_path / "m.onnx"
    assert target_path("pt2", tmp_path) == tmp_path / "model.pt2"
    assert target_path("safetensors", tmp_path / "new") == tmp_path / "new" / "model.safetensors"
    assert target_path("hf", tmp_path / "folder") == tmp_path / "folder"
    with pytest.raises(ExportError, match=r"name it m\.onnx"):
        target_path("onnx", tmp_path / "m.pt")
    with pytest.raises(ExportError, match="unknown export format 'gguf'"):
        target_path("gguf", tmp_path)


def test_an_unwritable_target_or_an_unreadable_file_writes_nothing(tmp_path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ExportError, match="cannot be written"):
        export(nn.Linear(3, 2), "pt2", tmp_path / "a_file" / "m.pt2", example=torch.randn(2, 3))
    with pytest.raises(WorkbenchError, match="missing.pt"):
        export(tmp_path / "missing.pt", "onnx", tmp_path / "out.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_the_callers_model_keeps_its_mode_and_dtype_and_fp16_uses_its_tolerance(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2)).train()
    report = export(model, "pt2", tmp_path / "h.pt2", example=torch.randn(3, 4), dtype="fp16")
    assert report.passed and report.dtype == "fp16"
    assert (report.checks[0].atol, report.checks[0].rtol) == TOLERANCES["fp16"]
    assert model.training and model[1].training and model[0].weight.dtype == torch.float32
    program = torch.export.load(str(tmp_path / "h.pt2"))
    assert {t.dtype for t in program.state_dict.values()} == {torch.float16}


def test_a_run_whose_data_gives_no_batch_is_checked_on_the_example_and_says_so(tmp_path):
    from workbench.core.model.demo import DigitsCNN

    ckpt, _ = save_model_file(tmp_path / "best.pt", checkpoint_payload(DigitsCNN(), arch={"name": "digits_cnn"}))
    (tmp_path / "run.toml").write_text('[data]\ndataset = "csv"\nroot = "no_such.csv"\n')
    report = export(ckpt, "safetensors", tmp_path / "w.safetensors")
    assert report.passed and report.example.startswith("(1, 1, 8, 8) float32")
    assert len(report.notes) == 1 and report.notes[0].startswith("the run's data gave no batch")
