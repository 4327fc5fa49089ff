"""A data-parallel run from the window: "CPU, 2 processes (DDP, Gloo)" in the device choice.

The real MainWindow trains the digits demo on two Gloo ranks under torchrun; the
tree's checkbox freezes a layer while the run is paused, and both ranks apply it at
that step (rank 0 writes the edit log and the checkpoint, unwrapped). No process is
left behind.
"""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from tests.core.train.launch.test_torchrun import _running
from tests.ui.helpers import pause_and_sync
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.edit_log import read_edits

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


def test_the_window_trains_on_two_gloo_ranks_and_a_freeze_while_paused_applies_on_both(main_window, qtbot, tmp_path):
    window, panel = main_window
    window.open_demo()
    combo = panel.settings.device_combo
    assert combo.findText("CPU, 2 processes (DDP, Gloo)") >= 0
    # 6 epochs (270 steps): on a loaded machine 3 could end before the pause below reached rank 0
    config = TrainConfig(data=DataConfig(dataset="digits", batch_size=32), epochs=6, lr=0.01, tensorboard=False)
    panel.settings.set_config(config)
    combo.setCurrentIndex(combo.findData("ddp:cpu:2"))
    assert panel.settings.config().device == "cpu"
    run_dir = tmp_path / "ddp"
    panel.settings.run_dir_edit.setText(str(run_dir))
    messages = []
    window.session.statusMessage.connect(lambda text, ms: messages.append(text))
    assert panel.start()
    process = panel.run.handle.process
    assert any(m.startswith("Training on 2 processes (DDP, Gloo): the probes show rank 0's replica") for m in messages)
    qtbot.waitUntil(lambda: len(panel.plots.steps) >= 5 and " · 1 step " in panel.ranks_label.text(),
                    timeout=120_000)
    pause_and_sync(qtbot, panel)
    at_pause = {k: v.detach().clone() for k, v in window.session.model.state_dict().items()}
    window.set_trainable("features.3", False)  # the tree's checkbox, mid-run
    qtbot.waitUntil(lambda: not window.session.model.features[3].weight.requires_grad, timeout=30_000)
    panel.resume()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=240_000)
    assert panel.last_reason() == "completed", window.prompts.errors

    edits = read_edits(run_dir / "edits.jsonl")
    assert [e["op"] for e in edits] == ["pause", "set_trainable", "resume"]
    assert len({e["step"] for e in edits}) == 1  # applied at the paused step
    state = torch.load(run_dir / "last.pt", weights_only=True)["model_state_dict"]
    assert not any(k.startswith("module.") for k in state)  # unwrapped: opens and resumes in one process
    assert torch.equal(state["features.3.weight"], at_pause["features.3.weight"])  # frozen since the pause
    assert not torch.equal(state["classifier.weight"], at_pause["classifier.weight"])  # trained on
    shown = window.session.model.state_dict()
    assert all(torch.equal(shown[k], state[k]) for k in state)  # the window shows the trained weights
    assert multiprocessing.active_children() == []
    assert not _running(process.run.proc.pid)
    assert not [r for r, s in process.run.ranks.items() if _running(s.pid)]


def test_killing_one_rank_of_a_window_run_names_it_and_leaves_no_process(main_window, qtbot, tmp_path):
    import os
    import signal

    window, panel = main_window
    window.open_demo()
    panel.settings.set_config(TrainConfig(data=DataConfig(dataset="digits", batch_size=32), epochs=200, lr=0.01,
                                          tensorboard=False))
    combo = panel.settings.device_combo
    combo.setCurrentIndex(combo.findData("ddp:cpu:2"))
    panel.settings.run_dir_edit.setText(str(tmp_path / "killed"))
    assert panel.start()
    process = panel.run.handle.process
    qtbot.waitUntil(lambda: process.run is not None and len(process.run.ranks) == 2
                    and all(s.step >= 3 for s in process.run.ranks.values()),
                    timeout=120_000)
    victim = process.run.ranks[1].pid
    os.kill(victim, signal.SIGKILL)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=60_000)
    assert panel.last_reason() == "crashed"
    assert any(f"rank 1 (pid {victim}) ended without finishing" in e for e in window.prompts.errors), \
        window.prompts.errors
    assert multiprocessing.active_children() == []
    assert not _running(process.run.proc.pid)
    assert not [r for r, s in process.run.ranks.items() if _running(s.pid)]
    assert window.training_panel.start_button.isEnabled()  # the window stays usable
