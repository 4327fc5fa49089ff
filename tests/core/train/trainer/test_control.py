"""RunControl: the one object a run is steered through, shared by whoever starts it and the loop."""

from __future__ import annotations

import threading

import pytest

from workbench.core.model.demo import DigitsCNN
from workbench.core.train.trainer.commands import SetLR
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.control import RunControl
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer


def _config(tmp_path, epochs=1):
    return TrainConfig(data=DataConfig(dataset="fake", fake_shape=[1, 8, 8], fake_size=200, batch_size=16),
                       epochs=epochs, run_dir=str(tmp_path / "run"), tensorboard=False)


def test_commands_and_a_stop_given_before_the_trainer_exists_are_honoured(tmp_path):
    control = RunControl()
    control.queue(SetLR(0.5))
    control.request_stop()
    trainer = Trainer(DigitsCNN(), _config(tmp_path, epochs=5), control=control)
    assert trainer.control is control
    assert trainer.fit() == "stopped" and trainer.step == 0
    assert not control.stop_requested  # reset for the next run
    assert trainer.fit() == "completed"
    assert trainer.config.lr == 0.5  # the queued command waited for a step boundary


def test_pause_blocks_at_a_step_boundary_and_commands_still_apply(tmp_path):
    control = RunControl()
    trainer = Trainer(DigitsCNN(), _config(tmp_path, epochs=3), control=control)
    applied = threading.Event()

    class Heard(Callback):
        def on_command_applied(self, trainer, command):
            applied.set()

    trainer.callbacks.append(Heard())
    control.pause()
    done = threading.Event()
    threading.Thread(target=lambda: (trainer.fit(), done.set()), daemon=True).start()
    assert control.wait_until_blocked(30)
    assert trainer.step == 0 and control.is_paused
    control.queue(SetLR(0.25))
    assert applied.wait(30) and trainer.config.lr == 0.25
    assert trainer.step == 0  # applied while paused, no step taken
    control.resume()
    assert done.wait(60) and trainer.end_reason == "completed"


def test_an_unknown_nonfinite_answer_is_refused():
    with pytest.raises(ValueError, match="lower_lr"):
        RunControl().resolve_nonfinite("retry")
