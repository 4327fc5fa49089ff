"""Per-step rows of a run (``steps.csv``) from its first step, and every metric a run has offered to the Runs views.

Real runs of the built-in digits demo: one stopped before its first epoch ended draws a curve; a task's own
metric (``val_top5``) is listed, read and exported beside the built-in ones.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.runs.folder import STEP_COLUMNS, StepsCSV
from workbench.core.train.runs.index import (
    STEP_PREFIX,
    export_metrics,
    list_runs,
    metric_names,
    read_curve,
    run_cell,
)
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer


class StopAt(Callback):
    def __init__(self, step: int):
        self.at = step

    def on_step_end(self, trainer, metrics):
        if metrics["step"] == self.at:
            trainer.request_stop()


def _run(root, name, epochs, callbacks=()):
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=epochs, lr=1e-3,
                      run_dir=str(root / name), tensorboard=False)
    return Trainer(DigitsCNN(), cfg, list(callbacks)).fit()


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_run_stopped_before_its_first_epoch_ended_has_step_rows_and_draws(tmp_path):
    root = tmp_path / "runs"
    assert _run(root, "early", 3, [StopAt(7)]) == "stopped"
    run = root / "early"
    assert not (run / "metrics.csv").exists()  # no epoch ended: no epoch row (as before)
    rows = _rows(run / "steps.csv")
    assert [int(r["step"]) for r in rows] == list(range(1, 8))
    assert list(rows[0])[:len(STEP_COLUMNS)] == list(STEP_COLUMNS)
    assert all(float(r["train_loss"]) > 0 and float(r["lr"]) == pytest.approx(1e-3) for r in rows)
    names = metric_names(run)
    assert f"{STEP_PREFIX}train_loss" in names and f"{STEP_PREFIX}lr" in names
    curve = read_curve(run, "step", f"{STEP_PREFIX}train_loss")
    assert curve is not None and curve.x.tolist() == list(range(1, 8))
    epoch_x = read_curve(run, "epoch", f"{STEP_PREFIX}train_loss").x
    assert 0 < epoch_x[0] < epoch_x[-1] < 1  # fractions of the first epoch
    (summary,) = list_runs(root)
    assert (summary.state, summary.epochs_done, summary.epochs, summary.steps) == ("stopped", 0, 3, 7)
    assert run_cell(summary, "steps") == "7" and not summary.problem


def test_a_finished_run_offers_its_task_metrics_and_every_step(tmp_path):
    root = tmp_path / "runs"
    assert _run(root, "done", 1) == "completed"
    run = root / "done"
    names = metric_names(run)
    assert {"train_loss", "val_loss", "val_acc", "lr", "val_top5"} <= set(names)  # val_top5: the task's own
    assert not {"epoch", "step", "time_s", "best"} & set(names)
    assert names.index("train_loss") < names.index("val_top5") < names.index(f"{STEP_PREFIX}train_loss")
    top5 = read_curve(run, "epoch", "val_top5")
    assert top5.x.tolist() == [1.0] and 0 < top5.y[0] <= 1
    steps = _rows(run / "steps.csv")
    assert [int(r["step"]) for r in steps] == list(range(1, 24))  # 1,437 training images / 64
    (summary,) = list_runs(root)
    assert summary.steps == 23 and summary.epochs_done == 1 and "val_top5" in summary.metrics
    out = _rows(export_metrics([run], tmp_path / "x.csv"))
    assert {"val_top5", f"{STEP_PREFIX}train_loss"} <= {r["metric"] for r in out}


def test_steps_redone_after_a_rewind_replace_the_rows_they_redo(tmp_path):
    steps = StepsCSV(tmp_path / "steps.csv")
    steps.append([{"step": s, "epoch": 0, "loss": float(s), "lr": 0.1, "time": s / 10} for s in range(1, 11)])
    again = StepsCSV(tmp_path / "steps.csv")  # a resume from step 5 (a new process)
    again.append([{"step": s, "epoch": 0, "loss": -float(s), "lr": 0.1, "time": s / 10} for s in range(6, 9)])
    rows = _rows(tmp_path / "steps.csv")
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [float(r["train_loss"]) for r in rows][4:] == [5.0, -6.0, -7.0, -8.0]
    again.append([{"step": 9, "epoch": 0, "loss": 9.0, "acc": 0.5}])  # a new column: the file grows one
    rows = _rows(tmp_path / "steps.csv")
    assert rows[-1]["acc"] == "0.5" and rows[0]["acc"] == "" and len(rows) == 9
    curve = read_curve(tmp_path, "step", f"{STEP_PREFIX}acc")
    assert curve.x.tolist() == [9.0] and np.isclose(curve.y[0], 0.5)


def test_a_run_resumed_from_an_earlier_checkpoint_into_its_folder_reads_its_steps_in_order(tmp_path):
    import shutil

    root = tmp_path / "runs"
    assert _run(root, "r", 1) == "completed"  # steps 1-23, last.pt at step 23
    run = root / "r"
    shutil.copy(run / "last.pt", tmp_path / "epoch1.pt")

    def resume(callbacks=()):
        cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=2, lr=1e-3, run_dir=str(run),
                          tensorboard=False)
        t = Trainer(DigitsCNN(), cfg, list(callbacks))
        t.resume_from(tmp_path / "epoch1.pt")
        return t.fit()

    assert resume([StopAt(30)]) == "stopped"  # steps 24-30 written
    assert resume() == "completed"  # from step 23 again: 24-46 redo and replace them
    steps = [int(r["step"]) for r in _rows(run / "steps.csv")]
    assert steps == list(range(1, 47))
    (summary,) = list_runs(root)
    assert (summary.steps, summary.epochs_done) == (46, 2)


def test_a_full_disk_leaves_no_half_row_and_the_rows_after_it_read(small_disk):
    """A short write (ENOSPC) is cut back to the last whole row, the failure is kept, and once there is room
    again the next rows follow whole lines: every row of the file reads."""
    from tests.disk import fill_disk

    steps = StepsCSV(small_disk / "steps.csv")
    steps.append([{"step": 1, "epoch": 0, "loss": 2.0}])
    filler = fill_disk(small_disk)
    wide = [{"step": s, "epoch": 0, "loss": 1.0 / s, "lr": 0.1} for s in range(2, 400)]
    steps.append(wide)  # ~20 KB: fails part way on the full disk
    assert "No space left" in steps.problem
    data = (small_disk / "steps.csv").read_bytes()
    assert data.endswith(b"\n")
    filler.unlink()
    steps.append([{"step": 400, "epoch": 0, "loss": 0.5}])
    rows = list(csv.DictReader(open(small_disk / "steps.csv")))
    assert [int(r["step"]) for r in rows] == [1, 400]
    assert all(r["train_loss"] for r in rows)
