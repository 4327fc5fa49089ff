"""A full disk never ends a Workbench run: each failed write is told once, logged, and retried (``runs.writes``)."""

from __future__ import annotations

import errno
import json
import logging
import os

import pytest
import torch
from torch import nn

from tests.disk import fill_disk
from workbench.core.train.config import TrainConfig
from workbench.core.train.runs.writes import ReportedMetricsCSV, WriteWatch, mount_of
from workbench.core.train.trainer.commands import SaveNow, SetLR, SetTrainable
from workbench.core.train.trainer.edit_log import EDITS_FILE, read_edits
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer

pytestmark = pytest.mark.timeout(60)


def test_a_failed_file_is_said_once_with_where_to_free_space_and_its_recovery_once(tmp_path):
    told: list[tuple[str, str, str]] = []
    watch = WriteWatch(lambda *notice: told.append(notice))
    full = OSError(errno.ENOSPC, "No space left on device")
    watch.failed(tmp_path / "metrics.csv", full)
    watch.failed(tmp_path / "metrics.csv", full)  # still failing: not said again
    assert told == [("write_failed", f"metrics.csv not written: No space left on device ({tmp_path / 'metrics.csv'}); "
                     f"free space on {mount_of(tmp_path)}; training goes on, the next write tries again",
                     str(tmp_path / "metrics.csv"))]
    watch.failed(tmp_path / "last.pt", full, "not written by Save now", kind="save_failed")
    watch.failed(tmp_path / "last.pt", full, "not written by Save now", kind="save_failed")  # each press answered
    assert [k for k, _, _ in told] == ["write_failed", "save_failed", "save_failed"]
    watch.failed(tmp_path / "x.csv", PermissionError(errno.EACCES, "Permission denied"))
    assert "make the run folder writable" in told[-1][1]
    watch.ok(tmp_path / "metrics.csv")
    watch.ok(tmp_path / "metrics.csv")
    assert told[-1] == ("write_ok", f"metrics.csv written again ({tmp_path / 'metrics.csv'})",
                        str(tmp_path / "metrics.csv"))
    assert len(watch.problems()) == 2  # last.pt and x.csv still fail


def test_a_metrics_row_that_failed_is_written_by_the_retry_once_there_is_room(small_disk):
    told: list[tuple[str, str, str]] = []
    watch = WriteWatch(lambda *notice: told.append(notice))
    csv = ReportedMetricsCSV(small_disk / "metrics.csv", watch)
    filler = fill_disk(small_disk)
    csv.append({"epoch": 0, "step": 5, "train_loss": 1.0})  # never raises
    assert told[0][0] == "write_failed" and f"free space on {small_disk}" in told[0][1]
    assert not (small_disk / "metrics.csv").exists() and not list(small_disk.glob(".*.tmp"))  # no half file
    watch.retry_due(force=True)  # still full: nothing new said
    assert len(told) == 1
    filler.unlink()
    watch.retry_due(now=0.0)  # not due yet
    assert len(told) == 1
    watch.retry_due(force=True)
    assert told[-1][0] == "write_ok" and (small_disk / "metrics.csv").read_text().splitlines()[1].startswith("0,5,1.0")


class _FullDiskMidRun(Callback):
    """Fills the disk at step 3 and queues a freeze and Save now; frees it after epoch 2's end and sets the LR."""

    def __init__(self, disk):
        self.disk, self.filler, self.notices = disk, None, []

    def on_notice(self, trainer, kind, text, file):
        self.notices.append((kind, text, os.path.basename(file)))

    def on_step_end(self, trainer, metrics):
        if trainer.step == 3:
            self.filler = fill_disk(self.disk)
            trainer.queue(SetTrainable("0", False))
            trainer.queue(SaveNow())

    def on_epoch_end(self, trainer, metrics):
        if metrics["epoch"] == 1:
            self.filler.unlink()  # room again
            trainer.queue(SetLR(0.01))


@pytest.mark.parametrize("small_disk", ["160k"], indirect=True)  # room again for a new last.pt beside the old one
def test_a_full_disk_never_ends_a_workbench_run_and_every_file_recovers(small_disk, caplog):
    caplog.set_level(logging.WARNING, "workbench.runs")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(5)]
    cfg = TrainConfig(epochs=3, run_dir=str(small_disk / "run"), tensorboard=False, optimizer="sgd", lr=0.05,
                      checkpoint_every_steps=2)
    watch = _FullDiskMidRun(small_disk)
    tr = Trainer(model, cfg, callbacks=[watch], data=(data, data[:2]))
    assert tr.fit() == "completed" and tr.step == 15  # nothing ended the run
    run = tr.run_dir
    failed = {(k, f) for k, _, f in watch.notices if k != "write_ok"}
    assert {("write_failed", EDITS_FILE), ("save_failed", "last.pt"), ("write_failed", "metrics.csv"),
            ("write_failed", "last.pt")} <= failed, watch.notices
    save = next(text for k, text, _ in watch.notices if k == "save_failed")
    assert save.startswith(f"last.pt not written by Save now (the previous file is kept): No space left on device "
                           f"({run / 'last.pt'}); free space on {small_disk}")
    assert not model[0].weight.requires_grad  # the freeze applied though its line could not be written
    recovered = {f for k, _, f in watch.notices if k == "write_ok"}
    assert {EDITS_FILE, "metrics.csv", "last.pt"} <= recovered, watch.notices
    assert read_edits(run / EDITS_FILE) == [{"step": 10, "op": "set_lr", "lr": 0.01}]  # the freeze's line was lost
    rows = (run / "metrics.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["0", "1", "2"]  # the rows that failed came with a later write
    assert torch.load(run / "last.pt", weights_only=True)["step"] == 15
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]  # no half-written file
    assert tr.checkpoints.writes.problems() == []
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "edits.jsonl not written (the set_trainable at step 3 is not recorded): No space left on device" in logged
    assert f"free space on {small_disk}" in logged
