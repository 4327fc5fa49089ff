"""Two nodes on this machine: two ``workbench train --nnodes 2`` launchers (CPU, Gloo, a c10d rendezvous on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.train.launch.torchrun import DistributedRun
from workbench.core.train.launch.torchrun_rank import weights_verdict
from workbench.core.train.runs.folder import note_status, write_status

ROOT = Path(__file__).resolve().parents[4]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_file(tmp_path, epochs: int = 1) -> Path:
    """The digits demo, no run_dir: the run folder is made where the run decides (the global rank 0)."""
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=epochs, lr=3e-3, seed=7,
                      tensorboard=False, model=ModelConfig(arch="digits_cnn"))
    path = tmp_path / "run.toml"
    cfg.to_toml(path)
    return path


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_launchers_make_one_run_folder_and_check_the_weights_across_nodes(tmp_path):
    path = _run_file(tmp_path)
    runs = tmp_path / "data" / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_DATA_DIR": str(tmp_path / "data"),
           "OMP_NUM_THREADS": "1"}
    endpoint = f"127.0.0.1:{_free_port()}"
    nodes = [subprocess.Popen([sys.executable, "-m", "workbench", "train", str(path), "--nproc-per-node", "1",
                               "--nnodes", "2", "--node-rank", str(rank), "--rdzv-backend", "c10d",
                               "--rdzv-endpoint", endpoint, "--rdzv-id", "two-nodes", "--no-attach"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    try:
        outs = [p.communicate(timeout=200)[0] for p in nodes]
    finally:
        for p in nodes:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in nodes] == [0, 0], "\n----\n".join(outs)
    both = "\n".join(outs)
    assert both.count("run folder made by the global rank 0") == 2  # neither launcher made one of its own
    folders = [p for p in runs.iterdir()]
    assert len(folders) == 1, folders  # one run: no empty folder from the node without rank 0
    run = folders[0]
    assert {"metrics.csv", "last.pt", "init.pt", "run.toml", "status.json"} <= {p.name for p in run.iterdir()}
    assert len((run / "metrics.csv").read_text().splitlines()) == 2  # the header and the one epoch
    assert both.count("weights: all 2 ranks across 2 nodes end identical (sha256 ") == 1  # said by rank 0 alone
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and "error" not in status


def test_a_weights_mismatch_names_the_ranks_and_goes_into_status_json(tmp_path):
    same, line = weights_verdict(["aa" * 32, "aa" * 32, "bb" * 32], nodes=3)
    assert not same
    assert line == f"error: the ranks end with DIFFERENT weights across 3 nodes: ranks 0, 1 {'a' * 12}; rank 2 {'b' * 12}"
    assert weights_verdict(["cd" * 32] * 2) == (True, f"weights: all 2 ranks end identical (sha256 {'cd' * 6})")
    write_status(tmp_path, "completed", 1.0)
    note_status(tmp_path, error=line.removeprefix("error: "))
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["state"] == "finished" and status["error"].startswith("the ranks end with DIFFERENT weights")


def test_the_torchrun_command_names_the_rendezvous_as_torchrun_does(tmp_path):
    path = _run_file(tmp_path)
    dyn = DistributedRun(path, 2, nnodes=2, node_rank=1, rdzv_backend="c10d", rdzv_endpoint="10.0.0.1:29400",
                         rdzv_id="job7", out=lambda line: None)
    static = DistributedRun(path, 2, nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=29501,
                            out=lambda line: None)
    try:
        assert dyn.run_dir is None and static.run_dir is None  # made by the global rank 0, on its node
        cmd = dyn.command()
        assert ["--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.1:29400", "--rdzv-id=job7"] == \
            cmd[cmd.index("--nnodes=2"):cmd.index("--nnodes=2") + 4] and "--node-rank=1" not in cmd
        cmd = static.command()
        assert ["--nnodes=2", "--node-rank=1", "--master-addr=10.0.0.1", "--master-port=29501"] == \
            cmd[cmd.index("--nnodes=2"):cmd.index("--nnodes=2") + 4]
    finally:
        dyn.close()
        static.close()
    assert not (tmp_path / "data" / "runs").exists() or not any((tmp_path / "data" / "runs").iterdir())
