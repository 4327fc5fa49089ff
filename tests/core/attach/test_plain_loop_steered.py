"""A plain training loop in another process, steered through workbench.connect (no window)."""

from __future__ import annotations

import json

import pytest
import torch

import workbench
from tests.attach_scripts.common import finish, start_script, until
from workbench.core.train.runs.index import list_runs
from workbench.core.train.events import CommandApplied, EpochEnded, Finished, Metrics, Paused

pytestmark = pytest.mark.timeout(300)


def test_plain_loop_freeze_lr_pause_save_stop(tmp_path):
    run_dir = tmp_path / "run"
    proc, info = start_script("plain_loop", run_dir)
    try:
        run = workbench.connect(info["address"], info["token"])
        assert run.steering
        names = [m[0] for m in run.info["model"]["modules"]]
        assert "layer1" in names and run.info["model_class"] == "ResNet"
        until(run, Metrics, lambda e: len(e.values["step"]) > 0)
        assert [r.state for r in list_runs(tmp_path)] == ["running"]  # the Runs dock's view of the live script
        run.freeze("layer1")
        applied = until(run, CommandApplied)
        assert applied.command.changed and all(n.startswith("layer1.") for n in applied.command.changed)
        run.set_lr(0.0123)
        assert until(run, CommandApplied).command.lr == pytest.approx(0.0123)
        run.pause()
        paused_at = until(run, Paused).step
        run.save_now()
        saved = until(run, CommandApplied)
        assert saved.step == paused_at and saved.command.saved_to.endswith("last.pt")
        run.resume()
        until(run, EpochEnded)  # it trains on after the resume
        run.stop()
        assert until(run, Finished).reason == "stopped"
        run.close()
    finally:
        code, out = finish(proc)
    assert code == 0, out
    assert [r.state for r in list_runs(tmp_path)] == ["stopped"]
    final = torch.load(run_dir / "final.pt", weights_only=True)
    at_save = torch.load(run_dir / "last.pt", weights_only=True)["model_state_dict"]
    frozen = [n for n in final if n.startswith("layer1.") and (n.endswith("weight") or n.endswith("bias"))]
    assert frozen and all(torch.equal(final[n], at_save[n]) for n in frozen)
    assert not torch.equal(final["fc.weight"], at_save["fc.weight"])  # the rest trained on
    assert json.loads((run_dir / "final.json").read_text())["lrs"] == [pytest.approx(0.0123)]
    edits = [json.loads(line) for line in (run_dir / "edits.jsonl").read_text().splitlines()]
    assert [e["op"] for e in edits] == ["set_trainable", "set_lr", "pause", "save_now", "resume"]
    assert edits[1]["lr"] == pytest.approx(0.0123)
