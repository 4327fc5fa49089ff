"""core.train.launch.launcher: where the next run trains, and the process started ahead (no Qt).

The three kinds driven end to end by the window's controller are ``tests/ui/train/test_run_kinds.py``.
"""

from __future__ import annotations

import pytest
from torch import nn

from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.launch import ModelNotPortable, RunLauncher, RunRequest
from workbench.core.train.launch.in_thread import ThreadRun
from workbench.core.train.launch.launcher import START_AHEAD_ENV
from workbench.core.train.launch.training_process import ProcessRun


class _Unpicklable(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.hook = lambda x: x  # a lambda does not pickle: the model cannot cross into a process


def _config(tmp_path) -> TrainConfig:
    return TrainConfig(data=DataConfig(dataset="digits", batch_size=16), epochs=1, run_dir=str(tmp_path / "run"))


def test_the_in_process_choice_makes_a_thread_run_on_the_callers_model(tmp_path):
    model = DigitsCNN()
    handle = RunLauncher().make_run(RunRequest(model, _config(tmp_path), in_process=True))
    assert isinstance(handle, ThreadRun) and handle.kind == "thread" and handle.in_this_process
    assert not handle.can_end and handle.end() is False


def test_a_model_that_cannot_cross_trains_on_a_thread_and_the_note_says_why(tmp_path):
    launcher = RunLauncher()
    handle = launcher.make_run(RunRequest(_Unpicklable(), _config(tmp_path)))
    assert isinstance(handle, ThreadRun)
    assert launcher.note.startswith("Training in the window's process: ")


def test_a_data_parallel_run_of_a_model_that_cannot_cross_is_refused(tmp_path):
    with pytest.raises(ModelNotPortable):
        RunLauncher().make_run(RunRequest(_Unpicklable(), _config(tmp_path), processes=2))


def test_nothing_is_started_ahead_when_the_environment_says_0(tmp_path, monkeypatch):
    monkeypatch.setenv(START_AHEAD_ENV, "0")
    launcher = RunLauncher()
    assert launcher.start_ahead() is False and launcher.spare is None
    assert launcher.wait_ready(0.1) is True  # none was started: nothing to wait for
    launcher.warm(DigitsCNN(), _config(tmp_path), (1, 1, 8, 8))  # no spare: nothing happens
    launcher.end_spare()


def test_without_a_spare_a_run_takes_a_cold_process_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv(START_AHEAD_ENV, "0")
    launcher = RunLauncher()
    handle = launcher.make_run(RunRequest(DigitsCNN(), _config(tmp_path)))
    try:
        assert isinstance(handle, ProcessRun) and handle.kind == "process" and not handle.in_this_process
        assert launcher.note == "Starting training process…"
    finally:
        handle.process.end()
