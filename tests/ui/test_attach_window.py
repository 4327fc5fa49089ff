"""The real window attached to a user's own training script in another process (issue "Attach to your own
training script"): it sees the curves, and its own controls (the tree's Train box, the LR field, Pause,
Save now, Stop) steer the script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

import workbench
from tests.attach_scripts.common import finish, start_script
from tests.ui.helpers import RecordingPrompts
from workbench.core.model.skeleton import is_skeleton
from workbench.core.train.events import CommandApplied, EpochEnded, Finished, Metrics, Paused
from workbench.ui.main_window import MainWindow

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_dangling_qthreads")]

#: each script: (a module the test freezes, a parameter outside it that trains on)
SCRIPTS = {"plain_loop": ("layer1", "fc.weight"),  # a plain loop around a torchvision resnet18
           "lightning_fit": ("features", "head.weight"),  # Lightning's Trainer.fit with WorkbenchCallback
           "hf_train": ("bert.embeddings", "classifier.weight")}  # Hugging Face's Trainer.train


class _Events:
    """Every event the panel relays, and a wait for the next one of a kind."""

    def __init__(self, qtbot, panel):
        self.qtbot = qtbot
        self.seen: list = []
        panel.runEvent.connect(self.seen.append)

    def wait(self, kind, pred=lambda e: True, timeout=90_000):
        start = len(self.seen)
        found: list = []

        def check():
            found[:] = [e for e in self.seen[start:] if isinstance(e, kind) and pred(e)]
            assert found

        self.qtbot.waitUntil(check, timeout=timeout)
        return found[0]


@pytest.fixture
def window(qtbot):
    w = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    yield w
    w.training_panel.shutdown(ask=False)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_window_steers_a_script(qtbot, window, tmp_path, script):
    module, trains_on = SCRIPTS[script]
    run_dir = tmp_path / "run"
    proc, info = start_script(script, run_dir)
    try:
        events = _Events(qtbot, window.training_panel)
        assert window.attach_to(info["address"], info["token"])
        assert is_skeleton(window.model) and window.training_panel.is_attached()
        assert module in dict(window.model.named_modules())
        events.wait(Metrics, lambda e: len(e.values["step"]) > 0)
        qtbot.waitUntil(lambda: window.training_panel.plots.steps.last("step", 0.0) > 0, timeout=30_000)

        window.set_trainable(module, False)  # the tree's Train box
        applied = events.wait(CommandApplied, lambda e: getattr(e.command, "flag", None) is False)
        assert applied.command.changed and all(n.startswith(module + ".") for n in applied.command.changed)
        assert not any(p.requires_grad for p in window.model.get_submodule(module).parameters())

        lr_spin = window.training_panel.settings.lr_spin
        lr_spin.setValue(0.0123)
        lr_spin.editingFinished.emit()
        assert events.wait(CommandApplied, lambda e: hasattr(e.command, "lr")).command.lr == pytest.approx(0.0123)

        window.training_panel.pause_action.trigger()
        paused = events.wait(Paused)
        window.training_panel.save_button.click()
        saved = events.wait(CommandApplied, lambda e: hasattr(e.command, "saved_to"))
        assert saved.step == paused.step and saved.command.saved_to == str(run_dir / "last.pt")
        window.training_panel.pause_action.trigger()  # Resume
        events.wait(Metrics, lambda e: len(e.values["step"]) and e.values["step"][-1] > paused.step)

        window.training_panel.stop_action.trigger()
        assert events.wait(Finished).reason == "stopped"
        qtbot.waitUntil(lambda: not window.training_panel.is_running(), timeout=30_000)
    finally:
        code, out = finish(proc)
    assert code == 0, out
    final = torch.load(run_dir / "final.pt", weights_only=True)
    at_save = torch.load(run_dir / "last.pt", weights_only=True)["model_state_dict"]
    frozen = [n for n in applied.command.changed if n in final]
    assert frozen and all(torch.equal(final[n], at_save[n]) for n in frozen)
    assert not torch.equal(final[trains_on], at_save[trains_on])
    assert json.loads((run_dir / "final.json").read_text())["lrs"][0] == pytest.approx(0.0123)
    edits = [json.loads(line) for line in (run_dir / "edits.jsonl").read_text().splitlines()]
    assert [e["lr"] for e in edits if e["op"] == "set_lr"] == [pytest.approx(0.0123)]
    # nothing of the script's model is trainable here: its structure has no weights
    assert "structure of a script's model" in (window.training_panel.untrainable_reason() or "")


def test_detach_leaves_the_script_training_and_a_second_attach_gets_the_history(qtbot, window, tmp_path):
    proc, info = start_script("plain_loop", tmp_path / "run")
    try:
        events = _Events(qtbot, window.training_panel)
        assert window.attach_to(info["address"], info["token"])
        first = events.wait(EpochEnded)
        assert window.detach()
        assert events.wait(Finished).reason == "detached"
        qtbot.waitUntil(lambda: not window.training_panel.is_running(), timeout=30_000)
        assert proc.poll() is None  # the script trains on
        assert window.attach_to(info["address"], info["token"])
        later = events.wait(EpochEnded, lambda e: e.metrics["epoch"] > first.metrics["epoch"])
        assert later.metrics["step"] > first.metrics["step"]
        history = [e for e in events.seen if isinstance(e, Metrics)]
        assert min(float(m.values["step"][0]) for m in history) <= 2.0  # the curve from the run's beginning
        window.training_panel.stop_action.trigger()
        events.wait(Finished)
    finally:
        code, out = finish(proc)
    assert code == 0, out


def test_a_killed_window_leaves_the_script_training_and_a_new_window_attaches(qtbot, window, tmp_path):
    proc, info = start_script("plain_loop", tmp_path / "run")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    log = open(tmp_path / "window.log", "wb")  # a file, never a pipe nobody reads: a full pipe froze the window
    gui = subprocess.Popen([sys.executable, "-m", "workbench", "--attach", info["address"], "--in-process"],
                           env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        def other_window_steers():  # a read-only watcher (never taking steering ahead of the window) sees it taken
            with workbench.connect(info["address"], info["token"], steer=False) as probe:
                assert probe.steered_elsewhere and not probe.steering

        try:
            qtbot.waitUntil(other_window_steers, timeout=120_000)
        except Exception:  # pytest-qt's TimeoutError
            raise AssertionError(f"the window never attached; its output:\n{(tmp_path / 'window.log').read_text()}")
        gui.send_signal(signal.SIGKILL)
        gui.wait(30)
        assert proc.poll() is None  # the script goes on

        def steering_freed():  # the script dropped the killed window's connection (read-only look: takes nothing)
            with workbench.connect(info["address"], info["token"], steer=False) as probe:
                assert not probe.steered_elsewhere

        qtbot.waitUntil(steering_freed, timeout=30_000)
        events = _Events(qtbot, window.training_panel)
        qtbot.waitUntil(lambda: window.attach_to(info["address"], info["token"]), timeout=30_000)
        events.wait(Metrics)
        with workbench.connect(info["address"], info["token"], steer=False) as watcher:
            assert watcher.steered_elsewhere  # this window steers: the killed window's steering was freed
        window.training_panel.stop_action.trigger()
        assert events.wait(Finished).reason == "stopped"
    finally:
        if gui.poll() is None:
            gui.kill()
        gui.wait()
        log.close()
        code, out = finish(proc)
    assert code == 0, out


def test_attach_dialog_lists_the_waiting_script_and_the_menu_attaches(qtbot, tmp_path):
    from workbench.ui.attach_dialog import AttachDialog

    proc, info = start_script("plain_loop", tmp_path / "run")
    try:
        dialog = AttachDialog()
        qtbot.addWidget(dialog)
        assert dialog.list.count() == 1 and "plain_loop" in dialog.list.item(0).text()
        assert dialog.target() == (info["address"], info["token"])  # the first one is chosen and filled in

        prompts = RecordingPrompts(attach_target=dialog.target())
        w = MainWindow(prompts=prompts)
        qtbot.addWidget(w)
        assert w.attach_action.isEnabled() and not w.detach_action.isEnabled()
        w.attach_action.trigger()
        qtbot.waitUntil(lambda: w.detach_action.isEnabled(), timeout=30_000)
        assert not w.attach_action.isEnabled() and "plain_loop" in w.session.source
        w.detach_action.trigger()
        qtbot.waitUntil(lambda: not w.training_panel.is_running(), timeout=30_000)
        assert proc.poll() is None  # detached: the script trains on

        wrong = RecordingPrompts(attach_target=(info["address"], "not-the-token"))
        w.prompts = wrong
        w.file_actions.prompts = wrong
        assert not w.attach_to(info["address"], "not-the-token")
        assert wrong.errors and "wrong token" in wrong.errors[-1]
    finally:
        proc.kill()
        finish(proc)
