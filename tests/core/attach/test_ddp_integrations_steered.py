"""A Lightning fit and a Hugging Face Trainer.train on two CPU processes (gloo) attach through rank 0; the
WorkbenchCallback of every rank applies the window's commands at the same step (tests/attach_scripts/
lightning_fit.py, hf_train.py). With Lightning's plain ``strategy="ddp"`` a freeze would stop every rank at its
next backward: it is refused, the fit goes on."""

from __future__ import annotations

import json

import pytest
import torch

import workbench
from tests.attach_scripts.common import check_ddp_replicas, finish, start_script, steer_ddp_run, until
from workbench.core.train.events import CommandApplied, Finished, Metrics

pytestmark = pytest.mark.timeout(300)


#: script, its arguments, the module frozen, a parameter that trains on, the LRs after set_lr(0.0123)
CASES = {
    "lightning": ("lightning_fit", ("-1", "ddp_find_unused_parameters_true"), "features", "head.weight",
                  [0.0123, 0.0246]),
    # Trainer.train on two ranks (hf_train.py starts rank 1 as torch.distributed.run would)
    "hugging_face": ("hf_train", ("100000", "ddp"), "bert.embeddings", "classifier.weight", [0.0123, 0.0123]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ddp_ranks_freeze_set_lr_pause_and_stop_together(case, tmp_path):
    script, args, frozen, trained, lrs = CASES[case]
    run_dir = tmp_path / "run"
    proc, info = start_script(script, run_dir, *args)
    steer_ddp_run(proc, info, frozen, 0.0123)
    done = check_ddp_replicas(run_dir, frozen, trained)
    assert done[0]["lrs"] == done[1]["lrs"] == [pytest.approx(v) for v in lrs]


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
    r0, r1 = (torch.load(run_dir / f"final{r}.pt", weights_only=True) for r in (0, 1))
    assert all(torch.equal(r0[n], r1[n]) for n in r0)  # the replicas stayed the same model
    done = [json.loads((run_dir / f"final{r}.json").read_text()) for r in (0, 1)]
    assert done[0]["steps"] == done[1]["steps"] > refused.step  # both trained on, and stopped at the same step
    log = run_dir / "edits.jsonl"
    edits = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert not any(e.get("op") == "set_trainable" for e in edits), edits  # refused: no edit to replay
