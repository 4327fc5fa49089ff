"""A data-parallel ``workbench train`` listens on its rank 0 (:mod:`workbench.core.attach.torchrun_rank`): a real
launcher, torchrun and two Gloo ranks, the window's client (``workbench.connect``); and the entry's arguments,
without processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import workbench
from tests.attach_scripts.common import first_event
from workbench.core.attach import torchrun_rank as entry
from workbench.core.probe.callback import ProbeCallback
from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig

ROOT = Path(__file__).resolve().parents[3]
ATTACH_LINE = re.compile(r"^attach: (\S+) token (\S+) ")


def _until(run, pred, timeout: float = 60.0):
    return first_event(run, pred, timeout)


def _applied(kind: str):
    return lambda e: type(e).__name__ == "CommandApplied" and type(e.command).__name__ == kind


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torchrun's Gloo ranks, as the DDP launcher tests")
def test_a_two_rank_run_prints_one_address_and_every_rank_follows_the_window_probe_pause_freeze_lr_stop(tmp_path):
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=300, lr=3e-3, seed=7,
                      run_dir=str(tmp_path / "run"), tensorboard=False, model=ModelConfig(arch="digits_cnn"),
                      pause_lease_s=30.0, pause_lease="hold")
    cfg.to_toml(tmp_path / "run.toml")
    disc = tmp_path / "disc"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WORKBENCH_ATTACH_DIR": str(disc)}
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "train", str(tmp_path / "run.toml"),
                             "--nproc-per-node", "2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    lines: list[str] = []
    try:
        for line in proc.stdout:  # rank 0 prints the address once, before its first step
            lines.append(line)
            if m := ATTACH_LINE.match(line):
                address, token = m.groups()
                break
        else:
            raise AssertionError("".join(lines[-40:]))
        rest = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        rest.start()
        found = [json.loads(p.read_text()) for p in disc.glob("*.json")]
        assert len(found) == 1 and found[0]["address"] == address and found[0]["pid"] != proc.pid  # rank 0's

        reports: list = []
        run = workbench.connect(address, token, callbacks=[ProbeCallback(reports.extend, every=1, flush_ms=0)])
        assert run.steering and run.info["run_dir"] == str(tmp_path / "run")
        assert (run.info["pause_lease_s"], run.info["pause_lease"]) == (30.0, "hold")  # from run.toml
        assert run.wait_ack()["ok"]  # the window's live probe, on rank 0's replica alone
        _until(run, lambda e: bool(reports))
        assert "features.0.weight" in next(r.grads for r in reports if r.grads is not None).params
        assert run.wait_ack(run.pause())["ok"]
        paused = _until(run, lambda e: type(e).__name__ == "Paused")
        assert run.wait_ack(run.resume())["ok"]
        _until(run, lambda e: type(e).__name__ == "Metrics" and e.values["step"][-1] > paused.step)
        assert run.wait_ack(run.freeze("features.0"))["ok"]
        frozen = _until(run, _applied("SetTrainable"))
        assert frozen.command.changed == ["features.0.weight", "features.0.bias"]
        assert run.wait_ack(run.set_lr(1e-3))["ok"]
        _until(run, _applied("SetLR"))
        assert run.wait_ack(run.stop())["ok"]
        assert _until(run, lambda e: type(e).__name__ == "Finished").reason == "stopped"
        run.close()
        assert proc.wait(timeout=90) == 130
        rest.join(10)
    finally:
        proc.kill()
    out = "".join(lines)
    assert len([ln for ln in lines if ATTACH_LINE.match(ln)]) == 1, out  # rank 1 does not listen
    assert "all 2 ranks end with identical weights" in out, out[-3000:]  # rank 1 froze and set the LR too
    folder = tmp_path / "run"
    edits = [json.loads(ln) for ln in (folder / "edits.jsonl").read_text().splitlines()]
    assert [e["op"] for e in edits] == ["pause", "resume", "set_trainable", "set_lr"], edits
    assert edits[2]["names"] == ["features.0.weight", "features.0.bias"] and edits[3]["lr"] == 1e-3
    assert json.loads((folder / "status.json").read_text())["state"] == "stopped"
    last = torch.load(folder / "last.pt", weights_only=True)
    assert last["step"] >= edits[3]["step"]
    assert not list(disc.glob("*.json"))  # the discovery file went with the run


def test_the_attach_options_are_taken_out_of_a_rank_s_arguments():
    assert entry.split_attach_args(["run.toml", "--trust"]) == (["run.toml", "--trust"], True, 0)
    assert entry.split_attach_args(["run.toml", "--no-attach", "--trust"]) == (["run.toml", "--trust"], False, 0)
    assert entry.split_attach_args(["run.toml", "--attach-port", "8765"]) == (["run.toml"], True, 8765)
    assert entry.split_attach_args(["--attach-port=0", "run.toml"]) == (["run.toml"], True, 0)
    for bad in (["run.toml", "--attach-port"], ["run.toml", "--attach-port", "70000"], ["--attach-port=x"]):
        with pytest.raises(ValueError, match="--attach-port .*: a port is 1 to 65535"):
            entry.split_attach_args(bad)


def test_rank_0_alone_gets_the_attach_server_with_the_run_file_s_lease(monkeypatch):
    from workbench.core.attach.trainer_attach import TrainerAttach
    from workbench.core.train.launch import torchrun_rank

    cfg = TrainConfig(pause_lease_s=7.5, pause_lease="hold")
    assert entry.attach_callbacks(1, cfg) == []
    [attach] = entry.attach_callbacks(0, cfg, port=0)
    assert isinstance(attach, TrainerAttach) and (attach.lease.seconds, attach.lease_mode) == (7.5, "hold")

    calls = []
    monkeypatch.setattr(torchrun_rank, "main", lambda argv, life, callbacks_for=None: calls.append(
        (argv, callbacks_for)) or 0)
    assert entry.main(["run.toml", "--no-attach"]) == 0 and calls[-1] == (["run.toml"], None)
    assert entry.main(["--job", "job.pkl"]) == 0 and calls[-1] == (["--job", "job.pkl"], None)  # the window's
    assert entry.main(["run.toml", "--trust", "--attach-port", "0"]) == 0
    argv, factory = calls[-1]
    assert argv == ["run.toml", "--trust"] and factory(1, cfg) == [] and len(factory(0, cfg)) == 1
    assert entry.main(["run.toml", "--attach-port", "99999"]) == 2 and len(calls) == 3  # said, nothing trains
