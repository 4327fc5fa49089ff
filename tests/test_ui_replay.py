"""A run started from the panel replays headless: ``workbench train RUN_DIR/run.toml``.

The GUI run starts from the weights of an opened checkpoint; its ``run.toml``
must name that checkpoint so the headless replay (a subprocess, no Qt) starts
from the same weights and ends bit-identical on CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from PySide6.QtWidgets import QMainWindow

from tests.ui_helpers import RecordingPanel
from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import TrainConfig

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")

ROOT = Path(__file__).resolve().parents[1]


class _Host(QMainWindow):
    def __init__(self, path: Path):
        super().__init__()
        payload = torch.load(path, weights_only=True)
        self.model = DigitsCNN()
        self.model.load_state_dict(payload["model_state_dict"])
        self.arch_spec = None
        self.checkpoint = SimpleNamespace(path=path, raw=payload)


def test_gui_run_from_an_opened_checkpoint_replays_headless_bit_identical(qtbot, tmp_path):
    torch.manual_seed(123)  # weights no fresh DigitsCNN() would get
    start = tmp_path / "start.pt"
    torch.save({"model_state_dict": DigitsCNN().state_dict()}, start)
    win = _Host(start)
    win.model.features.requires_grad_(False)
    panel = RecordingPanel(win)
    win.setCentralWidget(panel)
    qtbot.addWidget(win)
    panel.settings.run_dir_edit.setText(str(tmp_path / "gui"))
    panel.settings.epochs_spin.setValue(1)
    panel.settings.lr_spin.setValue(0.01)
    assert panel.start()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=60_000)
    assert panel.last_reason() == "completed", panel.errors

    run_toml = tmp_path / "gui" / "run.toml"
    cfg = TrainConfig.from_toml(run_toml)
    assert Path(cfg.model.checkpoint) == start.resolve() and not cfg.model.resume
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.run([sys.executable, "-m", "workbench", "train", str(run_toml)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    replayed = list((tmp_path / "data").rglob("last.pt"))
    assert len(replayed) == 1
    a = torch.load(tmp_path / "gui" / "last.pt", weights_only=True)["model_state_dict"]
    b = torch.load(replayed[0], weights_only=True)["model_state_dict"]
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "the replay did not start from the opened weights"
