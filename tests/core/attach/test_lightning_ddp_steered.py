"""A Lightning fit on two CPU processes (gloo) attaches through rank 0; the WorkbenchCallback of every rank
applies the window's commands at the same step (tests/attach_scripts/lightning_fit.py). With plain
``strategy="ddp"`` a freeze would stop every rank at its next backward: it is refused, the fit goes on."""

from __future__ import annotations

import json

import pytest
import torch

import workbench
from tests.attach_scripts.common import finish, output, start_script, until
from workbench.core.train.events import CommandApplied, Finished, Metrics, Paused

pytestmark = pytest.mark.timeout(300)


def _finals(run_dir):
    """Both ranks' final state_dicts and ``final<rank>.json``."""
    states = [torch.load(run_dir / f"final{r}.pt", weights_only=True) for r in (0, 1)]
    done = [json.loads((run_dir / f"final{r}.json").read_text()) for r in (0, 1)]
    return states, done


def test_lightning_ddp_ranks_freeze_set_lr_pause_and_stop_together(tmp_path):
    run_dir = tmp_path / "run"
    proc, info = start_script("lightning_fit", run_dir, "-1", "ddp_find_unused_parameters_true")
    try:
        run = workbench.connect(info["address"], info["token"])
        assert run.steering and run.info["model_class"] == "SmallCNN"
        until(run, Metrics, lambda e: len(e.values["step"]) > 0)
        run.freeze("features")
        applied = until(run, CommandApplied)
        assert applied.command.error is None and applied.command.changed, output(proc)
        frozen_at = applied.step
        run.set_lr(0.0123)
        until(run, CommandApplied)
        run.pause()
        until(run, Paused)
        run.save_now()
        until(run, CommandApplied, lambda e: getattr(e.command, "saved_to", None))
        run.resume()
        until(run, Metrics, lambda e: e.values["step"][-1] > frozen_at + 3)
        run.stop()
        assert until(run, Finished).reason == "stopped"
        run.close()
    finally:
        code, out = finish(proc, timeout=120)
    assert code == 0, out
    (r0, r1), done = _finals(run_dir)
    at_save = torch.load(run_dir / "last.pt", weights_only=True)["model_state_dict"]
    params = [n for n in r0 if n.endswith(("weight", "bias")) and "running" not in n]
    assert all(torch.equal(r0[n], r1[n]) for n in params)  # the replicas stayed the same model
    frozen = [n for n in params if n.startswith("features.")]
    assert frozen and all(torch.equal(r0[n], at_save[n]) for n in frozen)
    assert not torch.equal(r0["head.weight"], at_save["head.weight"])  # the head trained on after the save
    assert done[0]["steps"] == done[1]["steps"]  # both stopped after the same step
    assert done[0]["lrs"] == done[1]["lrs"] == [pytest.approx(0.0123), pytest.approx(0.0246)]


def test_a_freeze_plain_ddp_cannot_follow_is_refused_and_the_fit_goes_on(tmp_path):
    run_dir = tmp_path / "run"
    proc, info = start_script("lightning_fit", run_dir, "-1", "ddp")
    try:
        run = workbench.connect(info["address"], info["token"])
        until(run, Metrics, lambda e: len(e.values["step"]) > 0)
        run.freeze("features")
        refused = until(run, CommandApplied)
        assert "find_unused_parameters=True" in (refused.command.error or ""), refused.command
        assert not refused.command.changed
        until(run, Metrics, lambda e: e.values["step"][-1] > refused.step + 5)  # both ranks train on
        run.stop()
        assert until(run, Finished).reason == "stopped"
        run.close()
    finally:
        code, out = finish(proc, timeout=120)
    assert code == 0, out
    (r0, r1), done = _finals(run_dir)
    assert all(torch.equal(r0[n], r1[n]) for n in r0)
    assert done[0]["steps"] == done[1]["steps"] and done[0]["steps"] > refused.step
    log = run_dir / "edits.jsonl"
    edits = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert not any(e.get("op") == "set_trainable" for e in edits), edits  # refused: no edit to replay
