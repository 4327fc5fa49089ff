"""A Hugging Face ``Trainer.train`` on two CPU ranks (gloo) attaches through rank 0; the WorkbenchCallback of
every rank applies the window's commands at the same step (tests/attach_scripts/hf_train.py with ``ddp``)."""

from __future__ import annotations

import pytest

from tests.attach_scripts.common import check_ddp_replicas, start_script, steer_ddp_run

pytestmark = pytest.mark.timeout(300)


def test_hugging_face_ddp_ranks_freeze_set_lr_pause_and_stop_together(tmp_path):
    run_dir = tmp_path / "run"
    proc, info = start_script("hf_train", run_dir, "100000", "ddp")
    steer_ddp_run(proc, info, "bert.embeddings", 0.0123)
    done = check_ddp_replicas(run_dir, "bert.embeddings", "classifier.weight")
    assert done[0]["lrs"] == done[1]["lrs"] == [pytest.approx(0.0123), pytest.approx(0.0123)]
