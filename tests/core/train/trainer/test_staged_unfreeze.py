"""Staged unfreezing: run.toml's [[unfreeze]] applies before the named epoch; resume keeps the rest."""

from __future__ import annotations

import pytest
import torch

from workbench.core.model.demo import DigitsCNN
from workbench.core.model.freezing import apply_frozen
from workbench.core.train.config import DataConfig, TrainConfig, format_unfreeze, parse_unfreeze
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer


class Snapshots(Callback):
    def __init__(self):
        self.by_epoch = {}
        self.applied = []

    def on_epoch_end(self, trainer, metrics):
        self.by_epoch[trainer.epoch] = trainer.model.features[3].weight.detach().clone()

    def on_command_applied(self, trainer, cmd):
        self.applied.append((trainer.epoch, trainer.batch_in_epoch, list(cmd.changed)))


class StopAfterEpoch(Callback):
    def on_epoch_end(self, trainer, metrics):
        if trainer.epoch == 1:
            trainer.request_stop()


def _config(tmp_path, name, epochs=3):
    return TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=epochs, lr=1e-2,
                       run_dir=str(tmp_path / name), tensorboard=False,
                       unfreeze=[{"epoch": 3, "module": "features.3"}])


def _frozen_backbone():
    torch.manual_seed(0)
    model = DigitsCNN()
    apply_frozen(model, [n for n, _ in model.named_parameters() if n.startswith("features.")])
    return model


def test_a_module_unfreezes_before_its_epoch_and_resume_keeps_the_schedule(tmp_path):
    start = _frozen_backbone()
    initial = start.features[3].weight.detach().clone()
    snaps = Snapshots()
    full = Trainer(start, _config(tmp_path, "full"), [snaps])
    assert full.fit() == "completed"
    assert torch.equal(snaps.by_epoch[1], initial) and torch.equal(snaps.by_epoch[2], initial)  # frozen in 1-2
    assert not torch.equal(snaps.by_epoch[3], initial)  # trained in epoch 3
    assert snaps.applied == [(2, 0, ["features.3.weight", "features.3.bias"])]  # before epoch 3's first step
    assert not (tmp_path / "full" / "edits.jsonl").exists()  # the schedule replays from run.toml, not as edits
    assert TrainConfig.from_toml(tmp_path / "full" / "run.toml").unfreeze == [{"epoch": 3, "module": "features.3"}]

    # the same run stopped after epoch 2 and resumed: the schedule still unfreezes at epoch 3
    first = Trainer(_frozen_backbone(), _config(tmp_path, "part"), [StopAfterEpoch()])
    assert first.fit() == "stopped"
    resumed = Trainer(_frozen_backbone(), _config(tmp_path, "part"))
    resumed.resume_from(tmp_path / "part" / "last.pt")
    assert resumed.fit() == "completed"
    a = torch.load(tmp_path / "full" / "last.pt", weights_only=True)["model_state_dict"]
    b = torch.load(tmp_path / "part" / "last.pt", weights_only=True)["model_state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_schedule_text_round_trips_and_bad_text_names_the_part():
    entries = parse_unfreeze("3: layer4; 5: layer3, layer2")
    assert entries == [{"epoch": 3, "module": "layer4"}, {"epoch": 5, "module": "layer3"},
                       {"epoch": 5, "module": "layer2"}]
    assert parse_unfreeze(format_unfreeze(entries)) == entries
    with pytest.raises(ValueError, match="'zero: layer4'"):
        parse_unfreeze("zero: layer4")
    with pytest.raises(ValueError, match="unfreeze\\[0\\]"):
        TrainConfig(unfreeze=[{"epoch": 0, "module": "x"}]).validate()


def test_an_unknown_module_in_the_schedule_stops_before_the_first_step(tmp_path):
    cfg = _config(tmp_path, "bad")
    cfg.unfreeze = [{"epoch": 2, "module": "layer4"}]
    trainer = Trainer(DigitsCNN(), cfg)
    assert trainer.fit() == "error"
    assert "no module named 'layer4'" in str(trainer.error) and trainer.step == 0


class FactorSeen(Callback):
    """At each epoch end: the LR of features.3's param group over its role's LR at the current head LR."""

    def __init__(self, stop_after=None):
        self.ratio = {}
        self.stop_after = stop_after

    def on_epoch_end(self, trainer, metrics):
        from workbench.core.train.trainer import optim

        opt = trainer.optimizer
        weight = trainer.model.features[3].weight
        group = next((g for g in opt.param_groups if any(p is weight for p in g["params"])), None)
        if group is not None:
            role_lr = optim.lr_for_role(group["wb_role"], optim.head_lr(opt), trainer.config)
            self.ratio[trainer.epoch] = group["lr"] / role_lr
        if trainer.epoch == self.stop_after:
            trainer.request_stop()


def test_an_lr_factor_gives_the_unfrozen_module_that_share_of_the_lr_through_an_lr_change_and_resume(tmp_path):
    from workbench.core.train.trainer.commands import SetLR

    entries = parse_unfreeze("2: features.3*0.1")
    assert entries == [{"epoch": 2, "module": "features.3", "lr_factor": 0.1}]
    assert format_unfreeze(entries) == "2: features.3*0.1"
    cfg = _config(tmp_path, "factor")
    cfg.unfreeze = entries
    cfg.validate()
    seen = FactorSeen(stop_after=2)
    first = Trainer(_frozen_backbone(), cfg, [seen])
    assert first.fit() == "stopped"
    assert 1 not in seen.ratio and seen.ratio[2] == pytest.approx(0.1)
    # resumed from the checkpoint, with the LR changed: the factor stays (wb_lr_factor is in the optimizer state)
    seen = FactorSeen()
    resumed = Trainer(_frozen_backbone(), _config(tmp_path, "factor"), [seen])
    resumed.config.unfreeze = entries
    resumed.resume_from(tmp_path / "factor" / "last.pt")
    resumed.queue(SetLR(2e-3))
    assert resumed.fit() == "completed"
    assert seen.ratio[3] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="layer3\\*0"):
        parse_unfreeze("3: layer3*0")
    with pytest.raises(ValueError, match="lr_factor"):
        TrainConfig(unfreeze=[{"epoch": 2, "module": "x", "lr_factor": -1}]).validate()
