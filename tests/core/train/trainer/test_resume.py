"""Resume exactness: 2 epochs == 1 epoch + save + NEW trainer resume + 1 epoch (bit-identical on CPU)."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from workbench.core.model.demo import DigitsCNN
from workbench.core.train.trainer.commands import SaveNow, SetTrainable
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer


def make_config(tmp_path, name, epochs, **kw) -> TrainConfig:
    if kw.pop("fake", False):
        data = DataConfig(dataset="fake", fake_shape=[1, 8, 8], fake_size=200, batch_size=kw.pop("batch_size", 32),
                          random_flip=kw.pop("random_flip", False), random_crop=kw.pop("random_crop", 0))
    else:
        data = DataConfig(batch_size=256)
    return TrainConfig(data=data, epochs=epochs, lr=3e-3, seed=7, run_dir=str(tmp_path / name), **kw)


def fresh_model() -> DigitsCNN:
    torch.manual_seed(123)
    return DigitsCNN()


def assert_same_params(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


class StopAfterFirstEpoch(Callback):
    def on_epoch_end(self, trainer, metrics):
        trainer.request_stop()


@pytest.mark.parametrize("kw", [
    {},
    {"fake": True, "optimizer": "sgd", "momentum": 0.9, "nesterov": True, "scheduler": "cosine",
     "random_flip": True, "random_crop": 1},
    {"fake": True, "optimizer": "adamw", "scheduler": "onecycle", "weight_decay": 0.01, "backbone_lr_mult": 0.1},
])
def test_two_epochs_equal_one_plus_resume(tmp_path, kw):
    straight = fresh_model()
    t = Trainer(straight, make_config(tmp_path, "straight", 2, **kw))
    assert t.fit() == "completed"

    first = fresh_model()
    if "scheduler" in kw:
        # A cosine / one-cycle schedule is planned over the run's epochs: the first
        # half is a 2-epoch run stopped after its first epoch.
        t1 = Trainer(first, make_config(tmp_path, "first", 2, **kw), [StopAfterFirstEpoch()])
        assert t1.fit() == "stopped"
    else:
        t1 = Trainer(first, make_config(tmp_path, "first", 1, **kw))
        assert t1.fit() == "completed"
    last = tmp_path / "first" / "last.pt"
    assert torch.load(last, weights_only=True)["epoch"] == 1

    torch.manual_seed(999)  # the RNG state must come from the checkpoint, not from here
    resumed = fresh_model()
    c2 = make_config(tmp_path, "resumed", 2, **kw)
    c2.seed = 8  # the checkpoint's seed wins: the data order must continue the saved run's
    t2 = Trainer(resumed, c2)
    t2.resume_from(last)
    assert t2.config.seed == 7
    assert (t2.epoch, t2.step) == (1, t1.step)
    assert t2.fit() == "completed"
    assert t2.step == t.step
    assert_same_params(straight, resumed)
    assert t2.history[-1]["val_loss"] == t.history[-1]["val_loss"]


def test_mid_epoch_save_now_and_resume_with_frozen_set(tmp_path):
    """SaveNow in the middle of an epoch, after a mid-run freeze; the resumed run matches."""

    class Plan(Callback):
        def __init__(self, save_to=None):
            self.save_to = save_to

        def on_step_end(self, trainer, metrics):
            if metrics["step"] == 3:
                trainer.queue(SetTrainable("features.0", False))
            if metrics["step"] == 5 and self.save_to:
                trainer.queue(SaveNow(self.save_to))

    straight = fresh_model()
    assert Trainer(straight, make_config(tmp_path, "a", 2, fake=True, batch_size=16), [Plan()]).fit() == "completed"

    partial = fresh_model()
    mid = str(tmp_path / "mid.pt")

    class StopAfterSave(Plan):
        def on_command_applied(self, trainer, command):
            if isinstance(command, SaveNow):
                trainer.request_stop()

    t1 = Trainer(partial, make_config(tmp_path, "b", 2, fake=True, batch_size=16), [StopAfterSave(mid)])
    assert t1.fit() == "stopped"
    ck = torch.load(mid, weights_only=True)
    assert ck["step"] == 5 and ck["batch_in_epoch"] == 5
    assert sorted(ck["frozen"]) == ["features.0.bias", "features.0.weight"]

    resumed = fresh_model()
    t2 = Trainer(resumed, make_config(tmp_path, "c", 2, fake=True, batch_size=16))
    t2.resume_from(mid)
    assert not resumed.features[0].weight.requires_grad
    assert t2.fit() == "completed"
    assert_same_params(straight, resumed)


def test_resume_rejects_a_plain_state_dict(tmp_path):
    from workbench.core.errors import TrainingError

    path = tmp_path / "sd.pt"
    torch.save(DigitsCNN().state_dict(), path)
    t = Trainer(DigitsCNN(), make_config(tmp_path, "x", 1))
    with pytest.raises(TrainingError, match="not a training checkpoint"):
        t.resume_from(path)


def test_a_resumed_run_folder_starts_with_the_epochs_it_continues(tmp_path):
    """metrics.csv of a resumed run used to start at the resume step."""
    import csv

    first = Trainer(fresh_model(), make_config(tmp_path, "first", epochs=1))
    assert first.fit() == "completed"
    second = Trainer(fresh_model(), make_config(tmp_path, "second", epochs=2))
    second.resume_from(first.run_dir / "last.pt")
    assert second.fit() == "completed"
    with open(second.run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["epoch"] for r in rows] == ["0", "1"]
    assert float(rows[0]["train_loss"]) == pytest.approx(first.history[0]["train_loss"])


def test_resuming_with_another_optimizer_says_which_instead_of_a_keyerror(tmp_path):
    from workbench.core.errors import TrainingError

    first = Trainer(fresh_model(), make_config(tmp_path, "sgd", epochs=1, optimizer="sgd"))
    assert first.fit() == "completed"
    second = Trainer(fresh_model(), make_config(tmp_path, "adam", epochs=2, optimizer="adam"))
    with pytest.raises(TrainingError, match="optimizer is SGD but the settings build Adam"):
        second.resume_from(first.run_dir / "last.pt")


def test_resume_refuses_a_corrupt_last_pt_and_names_the_intact_best_pt(tmp_path):
    """A bit flipped inside a tensor record of last.pt is caught by its digest before any state is loaded."""
    from tests.core.model.checkpoint_damage import flip_tensor_byte
    from workbench.core.errors import CheckpointCorrupt, TrainingError
    from workbench.core.model.formats import read_checkpoint

    first = Trainer(fresh_model(), make_config(tmp_path, "first", epochs=2))
    assert first.fit() == "completed"
    run = first.run_dir
    last, best = run / "last.pt", run / "best.pt"
    assert {"last.pt", "best.pt", "init.pt"} <= {p.name for p in run.iterdir()}
    assert read_checkpoint(last).metadata.verified and read_checkpoint(best).metadata.verified
    # best.pt of last.pt's step is a hard link to it (issue 42: one write): bytes damaged in place are damaged in
    # both names; here last.pt alone is damaged (a separate file, as after a later epoch's write)
    shutil.copyfile(last, run / "damaged")
    os.replace(run / "damaged", last)
    flip_tensor_byte(last)

    with pytest.raises(CheckpointCorrupt) as info:
        read_checkpoint(last)
    assert info.value.intact == best

    model = fresh_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    second = Trainer(model, make_config(tmp_path, "second", epochs=3))
    with pytest.raises(TrainingError) as info:
        second.resume_from(last)
    text = str(info.value)
    assert f"{last} is corrupt (digest mismatch); best.pt ({best}) is intact" in text, text
    assert isinstance(info.value.__cause__, CheckpointCorrupt) and info.value.__cause__.intact == best
    assert (second.epoch, second.step) == (0, 0) and not second.resumed
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # nothing was loaded

    with pytest.raises(TrainingError, match="is corrupt"):
        second.checkpoints.load_file(last)  # the NaN rollback reads through the same check
    second.resume_from(best)
    assert second.resumed and second.epoch >= 1
