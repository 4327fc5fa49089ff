"""Checkpoints off the step's path: one write per state, best.pt linked, failures reported, every-N-steps saves."""

from __future__ import annotations

import errno
import os

import pytest
import torch
from torch import nn

from workbench.core.files import atomic_save
from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer import checkpoints
from workbench.core.train.trainer.checkpoints import PinnedStage, link_or_copy
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer


class Lines(Callback):
    def __init__(self):
        self.lines: list[str] = []
        self.notices: list[tuple[str, str, str]] = []

    def on_progress(self, trainer, text):
        self.lines.append(text)

    def on_notice(self, trainer, kind, text, file):
        self.notices.append((kind, text, file))


def _data(batches: int = 5):
    g = torch.Generator().manual_seed(0)
    train = [(torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(batches)]
    return train, train[:2]


def _trainer(tmp_path, callbacks=(), **kw) -> Trainer:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    cfg = TrainConfig(epochs=kw.pop("epochs", 1), run_dir=str(tmp_path / "run"), tensorboard=False,
                      optimizer="sgd", lr=0.05, **kw)
    return Trainer(model, cfg, callbacks=callbacks, data=_data())


def test_best_pt_is_a_hard_link_to_last_pt_of_the_same_step(tmp_path):
    tr = _trainer(tmp_path)
    assert tr.fit() == "completed"
    run = tr.run_dir
    assert os.path.samefile(run / "last.pt", run / "best.pt")  # written once
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]
    assert torch.load(run / "best.pt", weights_only=True)["step"] == 5


def test_a_later_write_of_last_pt_leaves_the_linked_best_pt_as_it_was(tmp_path):
    src, dst = tmp_path / "last.pt", tmp_path / "best.pt"
    atomic_save({"model_state_dict": {"w": torch.ones(2)}, "step": 1}, src)
    link_or_copy(src, dst)
    assert os.stat(dst).st_nlink == 2
    atomic_save({"model_state_dict": {"w": torch.zeros(2)}, "step": 2}, src)
    assert torch.load(dst, weights_only=True)["step"] == 1 and os.stat(dst).st_nlink == 1


@pytest.mark.parametrize("code", [errno.EXDEV, errno.EPERM])
def test_a_file_system_that_cannot_link_gets_a_copy(tmp_path, monkeypatch, code):
    src, dst = tmp_path / "last.pt", tmp_path / "best.pt"
    atomic_save({"model_state_dict": {"w": torch.ones(2)}, "step": 3}, src)

    def refuse(a, b):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(checkpoints.os, "link", refuse)
    link_or_copy(src, dst)
    assert not os.path.samefile(src, dst) and dst.read_bytes() == src.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]


def test_another_link_error_is_raised_and_leaves_the_target_alone(tmp_path, monkeypatch):
    src, dst = tmp_path / "last.pt", tmp_path / "best.pt"
    src.write_bytes(b"new")
    dst.write_bytes(b"old")

    def broken(a, b):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(checkpoints.os, "link", broken)
    with pytest.raises(OSError):
        link_or_copy(src, dst)
    assert dst.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]


def test_a_failed_write_is_reported_and_the_run_goes_on(tmp_path, monkeypatch):
    tried = []

    def full(obj, path, **kw):
        tried.append(os.path.basename(path))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoints, "atomic_save", full)
    lines = Lines()
    tr = _trainer(tmp_path, callbacks=[lines], epochs=2)
    assert tr.fit() == "completed" and tr.step == 10
    assert tried == ["init.pt", "last.pt", "last.pt"]  # each epoch tried again (best.pt would be a link to last.pt)
    assert sorted(os.path.basename(f) for f in tr.checkpoints.writes.failing) == ["best.pt", "init.pt", "last.pt"]
    # the window is told each file once while it fails: the file, the error, where to free space
    assert [(kind, os.path.basename(file)) for kind, _, file in lines.notices] == \
        [("write_failed", "init.pt"), ("write_failed", "last.pt"), ("write_failed", "best.pt")]
    text = lines.notices[1][1]
    assert text.startswith(f"last.pt not written (the previous file is kept): No space left on device "
                           f"({tr.run_dir / 'last.pt'}); free space on ") and "training goes on" in text
    assert not (tr.run_dir / "last.pt").exists() and not [p for p in tr.run_dir.iterdir() if p.suffix == ".tmp"]


def test_checkpoint_every_steps_writes_last_pt_mid_epoch(tmp_path):
    tr = _trainer(tmp_path, checkpoint_every_epoch=False, checkpoint_every_steps=2)
    assert tr.fit() == "completed" and tr.step == 5
    ck = torch.load(tr.run_dir / "last.pt", weights_only=True)
    assert (ck["step"], ck["batch_in_epoch"], ck["epoch"]) == (4, 4, 0)  # step 5 ends the epoch: not a step save
    assert not (tr.run_dir / "best.pt").exists()


def test_checkpoint_every_steps_is_a_whole_number():
    with pytest.raises(ValueError, match="checkpoint_every_steps"):
        TrainConfig.from_dict({"checkpoint_every_steps": -1})
    with pytest.raises(ValueError, match="accumulate_grad_batches"):
        TrainConfig.from_dict({"accumulate_grad_batches": 0})
    cfg = TrainConfig.from_toml("checkpoint_every_steps = 100\naccumulate_grad_batches = 8\ncompile = true\n")
    assert (cfg.checkpoint_every_steps, cfg.accumulate_grad_batches, cfg.compile) == (100, 8, True)


def test_pinned_stage_copies_once_keeps_ties_and_reuses_its_buffers():
    w = torch.ones(3, 4)
    state = {"model": {"a.weight": w, "b.weight": w, "n": 3}, "opt": [torch.zeros(2), {"lr": 0.1}]}
    stage = PinnedStage()
    out = stage.copy(state, "x")
    stage.record()()
    assert out["model"]["a.weight"] is out["model"]["b.weight"]  # a tied weight is copied (and saved) once
    assert out["model"]["n"] == 3 and out["opt"][1] == {"lr": 0.1}
    w.add_(1)  # the next step changes the live tensors in place
    assert torch.equal(out["model"]["a.weight"], torch.ones(3, 4))
