"""core.train.handle: every kind of run is a RunHandle, and SteeredByControl only passes calls on."""

from __future__ import annotations

from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.handle import RunHandle, SteeredByControl
from workbench.core.train.launch.in_thread import ThreadRun


class _Control:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *args))


class _Steered(SteeredByControl):
    def __init__(self):
        self.control = _Control()


def test_steering_goes_to_the_control_under_its_own_names():
    handle = _Steered()
    handle.pause()
    handle.resume()
    handle.queue("command")
    handle.resolve_nonfinite("lower_lr")
    handle.stop()
    assert handle.control.calls == [("pause",), ("resume",), ("queue", "command"), ("resolve_nonfinite", "lower_lr"),
                                    ("request_stop",)]


def test_a_thread_run_is_a_run_handle(tmp_path):
    config = TrainConfig(data=DataConfig(dataset="digits"), epochs=1, run_dir=str(tmp_path / "run"))
    handle = ThreadRun(DigitsCNN(), config)
    assert isinstance(handle, RunHandle)
    assert (handle.kind, handle.ranks, handle.reason, handle.in_this_process, handle.can_end) == (
        "thread", 1, None, True, False)
