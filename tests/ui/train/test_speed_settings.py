"""The settings people fit big models with reach the config and come back from it (issue 42)."""

from __future__ import annotations

import pytest

from workbench.core.train.config import TrainConfig
from workbench.ui.train.settings_form import TrainingSettings


@pytest.fixture
def settings(qtbot):
    s = TrainingSettings()
    qtbot.addWidget(s)
    return s


def test_accumulation_checkpointing_compile_and_step_checkpoints_round_trip(settings):
    for name in ("accumulateSpin", "activationCheckpointCheck", "compileCheck", "checkpointStepsSpin"):
        assert settings.findChild(object, name) is not None, name
    cfg = settings.config()
    assert (cfg.accumulate_grad_batches, cfg.activation_checkpointing, cfg.compile, cfg.checkpoint_every_steps) \
        == (1, False, False, 0)
    planned = settings.steps_per_epoch()
    settings.set_config(TrainConfig(accumulate_grad_batches=4, activation_checkpointing=True, compile=True,
                                    checkpoint_every_steps=500))
    back = settings.config()
    assert (back.accumulate_grad_batches, back.activation_checkpointing, back.compile, back.checkpoint_every_steps) \
        == (4, True, True, 500)
    assert settings.steps_per_epoch() == -(-planned // 4)  # the LR preview counts optimizer steps
    settings.checkpoint_steps_spin.setValue(0)
    assert settings.config().checkpoint_every_steps == 0 and settings.checkpoint_steps_spin.text() == "off"
