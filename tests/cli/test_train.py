"""``workbench train``'s options reach the run: the attach options and run.toml's pause lease, in one process and on
the ranks of a data-parallel run (the launcher and the trainer replaced by recorders: no training here)."""

from __future__ import annotations

import socket

import pytest

from workbench import cli
from workbench.core.train.config import TrainConfig
from workbench.core.train.launch import headless, torchrun


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    """``(run.toml with a 9 s "hold" lease, calls)``: what ``launch`` and ``train_from_toml`` were given."""
    path = tmp_path / "run.toml"
    TrainConfig(pause_lease_s=9.0, pause_lease="hold").to_toml(path)
    calls: list = []
    monkeypatch.setattr(torchrun, "launch", lambda *a, **kw: calls.append(("launch", a, kw)) or 0)
    monkeypatch.setattr(headless, "check_run_trust", lambda *a, **kw: None)
    monkeypatch.setattr(headless, "train_from_toml", lambda path, callbacks=(), **kw: calls.append(
        ("train", path, list(callbacks))) or 0)
    return path, calls


def test_a_data_parallel_run_passes_the_attach_options_to_its_ranks(recorded):
    path, calls = recorded
    assert cli.main(["train", str(path), "--nproc-per-node", "2"]) == 0
    assert cli.main(["train", str(path), "--nproc-per-node", "2", "--no-attach", "--trust"]) == 0
    with socket.create_server(("127.0.0.1", 0)) as free:
        port = free.getsockname()[1]
    assert cli.main(["train", str(path), "--nproc-per-node", "2", "--attach-port", str(port)]) == 0
    assert [c[2]["rank_args"] for c in calls] == [[str(path)], [str(path), "--trust", "--no-attach"],
                                                  [str(path), "--attach-port", str(port)]]


def test_a_port_in_use_or_out_of_range_is_one_line_before_any_rank_starts(recorded, capsys):
    path, calls = recorded
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert cli.main(["train", str(path), "--nproc-per-node", "2", "--attach-port", str(port)]) == 1
    assert capsys.readouterr().out == (f"error: attach: cannot listen on 127.0.0.1:{port} (Address already in use); "
                                       "choose another --attach-port, or --no-attach\n")
    assert cli.main(["train", str(path), "--nproc-per-node", "2", "--attach-port", "70000"]) == 2
    assert "--attach-port 70000: a port is 1 to 65535" in capsys.readouterr().out
    assert calls == []


def test_a_one_process_run_listens_with_the_run_file_s_pause_lease(recorded, tmp_path):
    path, calls = recorded
    assert cli.main(["train", str(path)]) == 0
    [attach] = calls[-1][2]
    assert (type(attach).__name__, attach.lease.seconds, attach.lease_mode) == ("TrainerAttach", 9.0, "hold")
    assert cli.main(["train", str(tmp_path / "missing.toml")]) == 0  # the run says why; the defaults meanwhile
    assert calls[-1][2][0].lease.seconds == 120.0
    assert cli.main(["train", str(path), "--no-attach"]) == 0 and calls[-1][2] == []


def test_the_nodes_options_reach_the_launcher_under_torchrun_s_names(recorded, capsys):
    path, calls = recorded
    assert cli.main(["train", str(path), "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "1",
                     "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.1:29400", "--rdzv-id", "job7"]) == 0
    kw = calls[-1][2]
    assert (kw["nnodes"], kw["node_rank"], kw["rdzv_backend"], kw["rdzv_endpoint"], kw["rdzv_id"]) == \
        (2, 1, "c10d", "10.0.0.1:29400", "job7")
    assert cli.main(["train", str(path), "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "2"]) == 2
    assert "--nnodes 2 --node-rank 2: a node's rank is 0 to nnodes - 1" in capsys.readouterr().out
    assert cli.main(["train", str(path), "--nnodes", "2"]) == 2  # several nodes, one process each: say so
    assert "needs --nproc-per-node" in capsys.readouterr().out
    assert len(calls) == 1
