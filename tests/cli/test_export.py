"""``workbench export``: a run's checkpoint to ONNX checked on the run's own validation data; exit 1 and the
first module named when the export differs; one-line errors that write nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.cli import main
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.saving import checkpoint_payload, save_model_file


@pytest.fixture
def run_checkpoint(tmp_path) -> Path:
    """A run folder: ``best.pt`` of the demo DigitsCNN and a ``run.toml`` on the built-in digits data."""
    ckpt, _ = save_model_file(tmp_path / "run" / "best.pt",
                              checkpoint_payload(DigitsCNN(), arch={"name": "digits_cnn", "kwargs": {}}))
    (tmp_path / "run" / "run.toml").write_text('[data]\ndataset = "digits"\n')
    return ckpt


def test_onnx_export_is_checked_on_the_runs_validation_data(run_checkpoint, tmp_path, capsys):
    assert main(["export", str(run_checkpoint), "--format", "onnx", "--out", str(tmp_path / "m.onnx")]) == 0
    out = capsys.readouterr().out
    assert "validation data of" in out and "torch.onnx dynamo" in out
    assert "output (batch 4): max abs" in out and "output (batch 6): max abs" in out and "FAIL" not in out
    assert (tmp_path / "m.onnx").is_file() and (tmp_path / "export_report.json").is_file()


MODEL_PY = '''
import torch
from torch import nn


class Scaled(nn.Module):
    def forward(self, x):
        return x * 1.5 if torch.compiler.is_exporting() else x


def build():
    return nn.Sequential(nn.Linear(6, 6), Scaled(), nn.Linear(6, 2))
'''


def test_a_failed_check_exits_1_and_names_the_module(tmp_path, capsys):
    (tmp_path / "net.py").write_text(MODEL_PY)
    import importlib.util

    spec = importlib.util.spec_from_file_location("net_for_export", tmp_path / "net.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ckpt, _ = save_model_file(tmp_path / "best.pt", checkpoint_payload(
        module.build(), arch={"name": f"{tmp_path / 'net.py'}:build", "kwargs": {}}))
    args = ["export", str(ckpt), "--format", "pt2", "--out", str(tmp_path / "out"), "--input-shape", "2,6"]
    assert main(args) == 1  # the file names code: refused without --trust
    assert "--trust" in capsys.readouterr().err
    assert main(args + ["--trust"]) == 1
    out = capsys.readouterr().out
    assert "first module that differs: 1 (Scaled)" in out and "check FAILED" in out
    assert (tmp_path / "out" / "model.pt2").is_file()


def test_bad_input_is_one_line_and_writes_nothing(run_checkpoint, tmp_path, capsys):
    missing = tmp_path / "nope.pt"
    assert main(["export", str(missing), "--format", "onnx", "--out", str(tmp_path / "a.onnx")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope.pt" in err
    assert main(["export", str(run_checkpoint), "--format", "onnx", "--out", str(tmp_path / "a.pt")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "name it a.onnx" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_no_check_writes_safetensors_unchecked(run_checkpoint, tmp_path, capsys):
    assert main(["export", str(run_checkpoint), "--format", "safetensors", "--out", str(tmp_path / "w"),
                 "--no-check"]) == 0
    assert "written, not checked" in capsys.readouterr().out
    assert (tmp_path / "w" / "model.safetensors").is_file()
