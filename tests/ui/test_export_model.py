"""File > Export model… (issue 43): the window exports the model shown to ONNX / .pt2 / safetensors and proves
the artifact on a batch; a wrong suffix is one line and writes nothing."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import torch
import torchvision

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


def test_export_to_onnx_from_the_file_menu_answers_as_the_model(window, tmp_path):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=5).eval()
    window.session.set_model(model, input_shape=(1, 3, 64, 64), source="resnet18")
    out = tmp_path / "model.onnx"
    window.prompts.answers["save_path"] = str(out)
    action = next(a for a in window.menuBar().actions()[0].menu().actions() if a.text() == "Export &model…")
    action.trigger()
    assert window.errors == []
    assert "check passed" in window.statusBar().currentMessage()
    x = torch.randn(3, 3, 64, 64)
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), atol=1e-4, rtol=1e-3)


def test_a_suffix_it_cannot_write_is_one_line_and_nothing_is_written(window, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert not window.file_actions.export_model(out / "model.bin")
    assert len(window.errors) == 1 and ".onnx, .pt2 or .safetensors" in window.errors[0]
    assert list(out.iterdir()) == []
