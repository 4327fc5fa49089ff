"""What a run started from the window records of where its model came from (run.toml's ``[model] source``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from workbench.core.model.demo import DigitsCNN
from workbench.core.model.saving import checkpoint_payload, save_checkpoint
from workbench.core.train.config import TrainConfig
from workbench.core.train.runs.index import config_diff
from workbench.ui.train.run_config import fill_model_source


def _session(path: Path):
    return SimpleNamespace(arch_spec=None, edits=[], checkpoint=SimpleNamespace(path=path), keep_bn_stats_fixed=False)


def test_a_second_run_from_the_first_runs_weights_names_that_runs_checkpoint(tmp_path):
    opened = save_checkpoint(tmp_path / "model.pt", checkpoint_payload(DigitsCNN()))
    run1 = tmp_path / "run1"
    first = TrainConfig(lr=1e-3)
    fill_model_source(first, _session(opened), False, 250)
    assert first.model.source == str(opened.resolve())
    run1.mkdir()
    first.to_toml(run1 / "run.toml")
    torch.save({"model_state_dict": DigitsCNN().state_dict()}, run1 / "last.pt")  # what run 1 left in the window

    second = TrainConfig(lr=3e-3)
    fill_model_source(second, _session(opened), False, 250, trained_in=run1)  # the window's model was trained in run1
    assert second.model.source == str((run1 / "last.pt").resolve())
    assert not second.model.resume and not second.model.checkpoint  # the trained weights: no resume of the file
    (tmp_path / "run2").mkdir()
    second.to_toml(tmp_path / "run2" / "run.toml")
    diff = dict(config_diff([run1, tmp_path / "run2"]))
    assert diff["model.source"] == [str(opened.resolve()), str((run1 / "last.pt").resolve())]
    assert "lr" in diff
