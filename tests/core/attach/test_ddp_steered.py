"""A DistributedDataParallel script (two CPU ranks, gloo) attaches through rank 0; commands reach both ranks
at the same step."""

from __future__ import annotations

import pytest

from tests.attach_scripts.common import check_ddp_replicas, start_script, steer_ddp_run

pytestmark = pytest.mark.timeout(300)


def test_ddp_ranks_freeze_set_lr_pause_and_stop_together(tmp_path):
    run_dir = tmp_path / "run"
    proc, info = start_script("ddp_loop", run_dir)
    steer_ddp_run(proc, info, "layer1", 0.02)
    done = check_ddp_replicas(run_dir, "layer1", "fc.weight")
    assert done[0]["lrs"] == done[1]["lrs"] == [pytest.approx(0.02)]
