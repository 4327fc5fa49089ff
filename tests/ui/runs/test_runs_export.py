"""The Runs dock's row menu has Export… (issue 43): a real run's best.pt exported on a worker thread and checked
on the run's validation data; the verdict in the status bar, a wrong suffix in the error box, nothing written."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime
import pytest
import torch

from tests.ui.helpers import RecordingPrompts
from workbench.core.model.opening import open_model
from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.train.launch.headless import train_from_toml
from workbench.ui.runs.runs_panel import RunsPanel

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    """A runs folder holding ``digits``: one epoch of digits_cnn trained by ``train_from_toml``."""
    root = tmp_path_factory.mktemp("runs")
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=128), model=ModelConfig(arch="digits_cnn"),
                      epochs=1, lr=1e-2, run_dir=str(root / "digits"), tensorboard=False)
    cfg.to_toml(root.parent / "digits.toml")
    lines: list[str] = []
    assert train_from_toml(root.parent / "digits.toml", out=lines.append) == 0, lines
    assert (root / "digits" / "best.pt").is_file()
    return root


def _export_action(panel):
    menu = panel.row_menu()
    assert menu is not None
    return next(a for a in menu.actions() if a.objectName() == "runsExportModelAction")


def test_export_from_the_row_menu_writes_a_checked_onnx_of_best_pt(window, runs_root, tmp_path):
    panel = window.runs_panel
    assert panel.prompts is window.prompts  # the window's prompts ask the file and show the errors
    panel.root_edit.setText(str(runs_root))
    panel.refresh()
    panel.select(["digits"])
    out = tmp_path / "digits.onnx"
    window.prompts.answers["save_path"] = str(out)
    action = _export_action(panel)
    assert action.text() == "Export…" and action.isEnabled()
    action.trigger()
    assert window.errors == []
    asked = [a for a in window.prompts.asked if a[0] == "save_path"]
    assert asked and asked[0][3].endswith("digits.onnx") and ".pt2" in asked[0][2]
    assert "check passed" in window.statusBar().currentMessage()
    assert "check passed" in panel.status.text()
    report = json.loads((tmp_path / "export_report.json").read_text())
    assert report["source"].endswith("best.pt") and "validation data" in report["example"]
    model = open_model(runs_root / "digits" / "best.pt").model.eval()
    x = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), atol=1e-4, rtol=1e-3)


def test_a_suffix_it_cannot_write_is_one_line_and_a_run_without_checkpoint_offers_no_export(qtbot, runs_root,
                                                                                            tmp_path):
    prompts = RecordingPrompts()
    panel = RunsPanel(runs_root, prompts=prompts)
    qtbot.addWidget(panel)
    panel.refresh()
    panel.select(["digits"])
    out = tmp_path / "out"
    out.mkdir()
    assert not panel.export_selected(out / "model.bin")
    assert len(prompts.errors) == 1 and "model.bin: choose a .onnx, .pt2 or .safetensors file" in prompts.errors[0]
    assert list(out.iterdir()) == []

    (runs_root / "empty").mkdir()
    (runs_root / "empty" / "run.toml").write_text("epochs = 1\n")
    panel.refresh()
    panel.select(["empty"])
    assert [r.name for r in panel.selected_runs()] == ["empty"]
    assert not _export_action(panel).isEnabled()
    assert not panel.export_selected(out / "m.onnx") and "best.pt or last.pt" in panel.status.text()
    assert list(out.iterdir()) == []
