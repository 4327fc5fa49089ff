"""A run started in the window replays headless, bit-identical: ``workbench train RUN_DIR/run.toml``.

Every run writes what it started from (``init.pt``: the weights, frozen set and
architecture at Start; ``[model] edits``: a replaced head), so the replay (a
subprocess, no Qt) starts from exactly the window's model whatever form the
opened file had and whatever was edited. CPU only; each case trains one short
epoch in the real MainWindow, then compares every tensor of ``last.pt``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision

from tests.core.model.checkpoint_files import save_lightning, save_safetensors
from workbench.core.model.spec import ArchSpec
from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")

ROOT = Path(__file__).resolve().parents[3]
DIGITS = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=1, lr=0.01, tensorboard=False)
FAKE = TrainConfig(data=DataConfig(dataset="fake", fake_shape=[3, 32, 32], fake_size=64, num_classes=2,
                                   batch_size=16), epochs=1, lr=0.01, tensorboard=False)


def _gui_run(qtbot, window, run_dir: Path, config: TrainConfig) -> Path:
    panel = window.training_panel
    panel.settings.set_config(config)
    panel.settings.run_dir_edit.setText(str(run_dir))
    assert panel.start()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=120_000)
    assert panel.last_reason() == "completed", window.prompts.errors
    return run_dir / "run.toml"


def _replay(tmp_path: Path, run_toml: Path) -> Path:
    data = tmp_path / "replay-data"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_DATA_DIR": str(data)}
    proc = subprocess.run([sys.executable, "-m", "workbench", "train", str(run_toml)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    replayed = list(data.rglob("last.pt"))
    assert len(replayed) == 1
    return replayed[0]


def _assert_bit_identical(a_path: Path, b_path: Path) -> None:
    a = torch.load(a_path, weights_only=True)["model_state_dict"]
    b = torch.load(b_path, weights_only=True)["model_state_dict"]
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"the replay differs in {different[:5]}"


def _seeded_digits(seed: int = 123) -> DigitsCNN:
    torch.manual_seed(seed)  # weights no fresh DigitsCNN() in the replay would get by chance
    return DigitsCNN()


def _state_dict_file(tmp_path: Path) -> Path:
    path = tmp_path / "digits_state_dict.pt"
    torch.save({"state_dict": _seeded_digits().state_dict()}, path)
    return path


def _lightning_file(tmp_path: Path) -> Path:
    return save_lightning(_seeded_digits(), tmp_path / "digits.ckpt")


def _safetensors_file(tmp_path: Path) -> Path:
    return save_safetensors(_seeded_digits(), tmp_path / "digits.safetensors")


@pytest.mark.parametrize("make_file", [_state_dict_file, _lightning_file, _safetensors_file],
                         ids=["state_dict-dict", "lightning-ckpt", "safetensors"])
def test_run_from_an_opened_file_replays_bit_identical(main_window, qtbot, tmp_path, make_file):
    window, _panel = main_window
    window.prompts.answers["architecture"] = ArchSpec("digits_cnn")  # the files name no architecture
    path = make_file(tmp_path)
    assert window.open_path(path), window.prompts.errors
    window.set_trainable("features.0", False)
    run_toml = _gui_run(qtbot, window, tmp_path / "gui", DIGITS)
    cfg = TrainConfig.from_toml(run_toml)
    assert cfg.model.init == "init.pt" and Path(cfg.model.source) == path.resolve()
    assert cfg.model.frozen == ["features.0.weight", "features.0.bias"]
    _assert_bit_identical(tmp_path / "gui" / "last.pt", _replay(tmp_path, run_toml))


def test_run_of_the_demo_replays_bit_identical(main_window, qtbot, tmp_path):
    window, _panel = main_window
    window.open_demo()
    run_toml = _gui_run(qtbot, window, tmp_path / "gui", DIGITS)
    _assert_bit_identical(tmp_path / "gui" / "last.pt", _replay(tmp_path, run_toml))


def test_transfer_learning_run_after_replace_head_replays(main_window, qtbot, tmp_path):
    """Bug: run.toml paired num_classes = 2 with the 1000-class file, so the replay exited 1."""
    window, _panel = main_window
    path = tmp_path / "resnet18.pt"
    torch.save(torchvision.models.resnet18().state_dict(), path)
    window.prompts.answers["architecture"] = ArchSpec("resnet18")
    assert window.open_path(path)
    assert window.replace_head("fc", 2)
    window.set_trainable("", False)
    window.set_trainable("fc", True)
    run_toml = _gui_run(qtbot, window, tmp_path / "gui", FAKE)
    cfg = TrainConfig.from_toml(run_toml)
    assert cfg.model.kwargs == {"num_classes": 2}
    assert cfg.model.edits == [{"op": "replace_head", "path": "fc", "num_outputs": 2}]
    _assert_bit_identical(tmp_path / "gui" / "last.pt", _replay(tmp_path, run_toml))


def test_run_after_reinitialize_replays_with_the_reinitialized_weights(main_window, qtbot, tmp_path):
    """Bug: the replay exited 0 but trained from the file's weights, not the re-initialized ones."""
    window, _panel = main_window
    model = torchvision.models.mobilenet_v3_small()
    path = save_safetensors(model, tmp_path / "mobilenet.safetensors")
    window.prompts.answers["architecture"] = ArchSpec("mobilenet_v3_small")
    assert window.open_path(path)
    before = window.model.classifier[3].weight.detach().clone()
    assert window.reinitialize("classifier.3")
    assert not torch.equal(window.model.classifier[3].weight, before)
    run_toml = _gui_run(qtbot, window, tmp_path / "gui", FAKE)
    init = torch.load(tmp_path / "gui" / "init.pt", weights_only=True)["model_state_dict"]
    assert not torch.equal(init["classifier.3.weight"], before)  # the run started from the re-initialized layer
    _assert_bit_identical(tmp_path / "gui" / "last.pt", _replay(tmp_path, run_toml))


def test_mid_run_unfreeze_and_lr_change_are_recorded_and_replay_bit_identical(main_window, qtbot, tmp_path):
    """Issue "Experiments": edits made while a run trains go to edits.jsonl with their step, and
    ``workbench train run.toml`` applies them at the same steps."""
    from tests.ui.helpers import pause_and_sync
    from workbench.core.train.trainer.edit_log import read_edits

    window, panel = main_window
    window.open_demo()
    window.set_trainable("features", False)  # start with a frozen backbone
    config = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=2, lr=0.01, tensorboard=False)
    panel.settings.set_config(config)
    run_dir = tmp_path / "gui"
    panel.settings.run_dir_edit.setText(str(run_dir))
    assert panel.start()
    qtbot.waitUntil(lambda: len(panel.plots.steps) >= 5, timeout=60_000)
    pause_and_sync(qtbot, panel)
    window.set_trainable("features.3", True)  # the tree's checkbox, mid-run
    panel.run.queue_lr(0.003)
    panel.resume()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=120_000)
    assert panel.last_reason() == "completed", window.prompts.errors

    edits = read_edits(run_dir / "edits.jsonl")
    ops = [e["op"] for e in edits]
    assert ops[0] == "pause" and sorted(ops) == ["pause", "resume", "set_lr", "set_trainable"]
    step = edits[0]["step"]
    assert step >= 5 and all(e["step"] == step for e in edits)  # all applied at the paused boundary
    unfreeze = next(e for e in edits if e["op"] == "set_trainable")
    assert unfreeze == {"step": step, "op": "set_trainable", "names": ["features.3.weight", "features.3.bias"],
                        "flag": True}
    assert next(e for e in edits if e["op"] == "set_lr")["lr"] == 0.003

    replayed = _replay(tmp_path, run_dir / "run.toml")
    _assert_bit_identical(run_dir / "last.pt", replayed)
    # the replay records the same edits in its own folder (pause / resume are not replayed)
    assert [e for e in read_edits(replayed.parent / "edits.jsonl")] == [e for e in edits if e["op"] not in (
        "pause", "resume")]
