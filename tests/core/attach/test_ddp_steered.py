"""A DistributedDataParallel script (two CPU ranks, gloo) attaches through rank 0; commands reach both ranks
at the same step."""

from __future__ import annotations

import json

import pytest
import torch

import workbench
from tests.attach_scripts.common import finish, start_script, until
from workbench.core.train.events import CommandApplied, Finished, Metrics, Paused

pytestmark = pytest.mark.timeout(300)


def test_ddp_ranks_freeze_set_lr_pause_and_stop_together(tmp_path):
    run_dir = tmp_path / "run"
    proc, info = start_script("ddp_loop", run_dir)
    try:
        run = workbench.connect(info["address"], info["token"])
        until(run, Metrics, lambda e: len(e.values["step"]) > 0)
        run.freeze("layer1")
        frozen_at = until(run, CommandApplied).step
        run.set_lr(0.02)
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
    r0, r1 = (torch.load(run_dir / f"final{r}.pt", weights_only=True) for r in (0, 1))
    at_save = torch.load(run_dir / "last.pt", weights_only=True)["model_state_dict"]
    params = [n for n in r0 if n.endswith(("weight", "bias")) and "running" not in n]
    assert all(torch.equal(r0[n], r1[n]) for n in params)  # the replicas stayed the same model
    frozen = [n for n in params if n.startswith("layer1.")]
    assert frozen and all(torch.equal(r0[n], at_save[n]) for n in frozen)
    assert not torch.equal(r0["fc.weight"], at_save["fc.weight"])
    steps = [json.loads((run_dir / f"final{r}.json").read_text()) for r in (0, 1)]
    assert steps[0]["steps"] == steps[1]["steps"]  # both stopped after the same step
    assert steps[0]["lrs"] == steps[1]["lrs"] == [pytest.approx(0.02)]
