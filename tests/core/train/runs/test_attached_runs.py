"""An attached script's run folder in the runs list: what it is (an attached script), its real epochs and steps,
its state; never "unreadable: run.toml: missing" (it has no run.toml by design)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch import nn

import workbench
from workbench.core.train.runs.index import ATTACHED, STEP_PREFIX, list_runs, metric_names, read_curve, run_cell

pytestmark = pytest.mark.timeout(120)


def attached_run(run_dir, epochs: int = 3, steps_per_epoch: int = 3, close: bool = True):
    """A real attached run of a small model: ``epochs`` epochs of ``steps_per_epoch`` steps, a task metric each."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    att = workbench.attach(model, opt, run_dir=run_dir, name="my_loop")
    for _ in range(epochs):
        for _ in range(steps_per_epoch):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            att.step(loss, mae=float((model(x) - y).abs().mean().detach()))
        att.epoch_end(val_loss=float(loss.detach()), val_r2=0.25)
    if close:
        att.close()
    return att


def test_an_attached_run_is_listed_as_an_attached_script_with_its_epochs_and_steps(tmp_path):
    root = tmp_path / "runs"
    attached_run(root / "script", epochs=3)
    assert not (root / "script" / "run.toml").exists()  # by design
    (s,) = list_runs(root)
    assert s.kind == ATTACHED and s.problem == "" and s.state == "finished"
    assert (s.epochs_done, s.steps) == (3, 9)
    assert run_cell(s, "epochs") == "3" and run_cell(s, "steps") == "9"  # no "3/0": it declared no epoch count
    assert run_cell(s, "state") == "finished" and "attached script" in run_cell(s, "dataset")
    assert {"val_r2", f"{STEP_PREFIX}train_loss", f"{STEP_PREFIX}mae"} <= set(metric_names(root / "script"))
    assert read_curve(root / "script", "step", f"{STEP_PREFIX}train_loss").x.tolist() == list(range(1, 10))
    out = subprocess.run([sys.executable, "-m", "workbench", "runs", str(root)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "unreadable" not in out.stdout and "attached script" in out.stdout and "3/0" not in out.stdout
    js = json.loads(subprocess.run([sys.executable, "-m", "workbench", "runs", str(root), "--json"],
                                   capture_output=True, text=True, timeout=120).stdout)
    assert (js[0]["kind"], js[0]["steps"], js[0]["epochs_done"], js[0]["problem"]) == (ATTACHED, 9, 3, None)
    assert "val_r2" in js[0]["metrics"]


def test_an_attached_run_stopped_before_its_first_epoch_draws(tmp_path):
    att = attached_run(tmp_path / "script", epochs=0, close=False)
    for _ in range(4):
        att.step(0.5)
    att.close("stopped")
    (s,) = list_runs(tmp_path)
    assert (s.kind, s.state, s.epochs_done, s.steps, s.problem) == (ATTACHED, "stopped", 0, 4, "")
    assert read_curve(tmp_path / "script", "step", f"{STEP_PREFIX}train_loss").y.tolist() == [0.5] * 4
