"""Data-parallel runs on torchrun, CPU (Gloo, 2 processes, the digits demo)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import torch

from workbench.cli import main as cli_main
from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.train.launch.torchrun import DistributedRun
from workbench.core.train.trainer.loop import Trainer

FROZEN = ["features.0.weight", "features.0.bias"]


def _run_file(tmp_path, epochs=2, name="run") -> Path:
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=epochs, lr=3e-3, seed=7,
                      run_dir=str(tmp_path / name), tensorboard=False,
                      model=ModelConfig(arch="digits_cnn", frozen=list(FROZEN)))
    path = tmp_path / f"{name}.toml"
    cfg.to_toml(path)
    return path


def _both_stepping(ranks) -> bool:
    return len(ranks) == 2 and all(s.step >= 3 for s in ranks.values())


def _running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_two_gloo_ranks_train_to_identical_weights_and_the_checkpoint_resumes_in_one_process(tmp_path, capfd):
    path = _run_file(tmp_path)
    assert cli_main(["train", str(path), "--nproc-per-node", "2"]) == 0
    out = capfd.readouterr().out  # rank 0 prints the epoch lines to the terminal it inherited
    assert "launching 2 ranks with torch.distributed.run" in out
    assert "all 2 ranks end with identical weights" in out
    assert "epoch 2/2  step 46" in out  # 1,437 samples in global batches of 64: 23 steps an epoch
    run = tmp_path / "run"
    rows = (run / "metrics.csv").read_text().splitlines()
    val = [float(r.split(",")[3]) for r in rows[1:]]
    assert len(val) == 2 and val[1] < val[0] < 2.3  # the loss falls
    last = torch.load(run / "last.pt", weights_only=True)
    init = torch.load(run / "init.pt", weights_only=True)
    weights = last["model_state_dict"]
    assert not any(k.startswith("module.") for k in weights)  # unwrapped: opens anywhere
    for name in FROZEN:
        assert torch.equal(weights[name], init["model_state_dict"][name]), name  # frozen: bit-identical
    assert not torch.equal(weights["classifier.weight"], init["model_state_dict"]["classifier.weight"])

    model = DigitsCNN()
    cfg = TrainConfig.from_toml(path)
    cfg.epochs, cfg.run_dir = 3, str(tmp_path / "single")
    t = Trainer(model, cfg)
    t.resume_from(run / "last.pt")  # a DDP checkpoint resumes in one process
    assert (t.epoch, t.step) == (2, 46)
    assert t.fit() == "completed" and t.step == 69
    assert not model.features[0].weight.requires_grad


def test_killing_one_rank_ends_the_run_naming_it_and_leaves_no_process(tmp_path):
    lines = []
    run = DistributedRun(_run_file(tmp_path, epochs=200), 2, out=lines.append, timeout_s=60)
    run.start()
    try:
        assert run.wait_until(_both_stepping, timeout=120), lines
        victim = run.ranks[1].pid
        os.kill(victim, signal.SIGKILL)
        assert run.wait(timeout=120) == 1
    finally:
        run.kill()
    assert run.failure is not None and run.failure.startswith(f"rank 1 (pid {victim}) ended without finishing")
    assert run.failure in lines
    pids = [s.pid for s in run.ranks.values()] + [run.proc.pid]
    assert not [p for p in pids if _running(p)]  # torchrun reaps its ranks before it exits


def test_a_stop_reaches_every_rank_at_the_same_step_and_rank_0_saves(tmp_path):
    lines = []
    run = DistributedRun(_run_file(tmp_path, epochs=200), 2, out=lines.append)
    run.start()
    try:
        assert run.wait_until(_both_stepping, timeout=120), lines
        run.stop()
        assert run.wait(timeout=120) == 130
    finally:
        run.kill()
    steps = {s.step for s in run.ranks.values()}
    reasons = {s.reason for s in run.ranks.values()}
    assert reasons == {"stopped"} and len(steps) == 1
    assert {s.exit_code for s in run.ranks.values()} == {130}  # each ended in order (RankLife) and said so
    assert "all 2 ranks end with identical weights" in lines
    saved = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    assert saved["step"] == steps.pop()


def test_a_missing_run_file_is_named_before_any_rank_starts(tmp_path, capsys):
    assert cli_main(["train", str(tmp_path / "nope.toml"), "--nproc-per-node", "2"]) == 1
    assert f"error: {tmp_path / 'nope.toml'}: file not found" in capsys.readouterr().out


def _standing_steps(run, timeout: float, messages: int = 2) -> dict | None:
    """Each rank's step once every rank has sent ``messages`` new messages with its step unchanged
    (paused ranks send only heartbeats); None if that does not happen within ``timeout`` s."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = {r: (s.step, s.last_seen) for r, s in run.ranks.items()}
        for _ in range(messages):
            seen = {r: s.last_seen for r, s in run.ranks.items()}
            if not run.wait_until(lambda r: all(s.last_seen > seen[k] for k, s in r.items()),
                                  timeout=max(0.0, deadline - time.monotonic())):
                return None
        if all(s.step == before[r][0] for r, s in run.ranks.items()):
            return {r: step for r, (step, _) in before.items()}
    return None


def test_mid_run_commands_apply_at_the_same_step_on_both_ranks_and_a_pause_keeps_them_in_step(tmp_path):

    from workbench.core.train.trainer.commands import SaveNow, SetLR, SetTrainable

    lines = []
    snapshot = tmp_path / "at_freeze.pt"
    run = DistributedRun(_run_file(tmp_path, epochs=200), 2, out=lines.append, timeout_s=30)
    run.start()
    try:
        assert run.wait_until(_both_stepping, timeout=120), lines
        # a freeze changes the parameters with gradients: the DDP reducer is rebuilt at that step
        assert run.queue(SetTrainable(["features.3"], False))
        assert run.queue(SaveNow(str(snapshot)))
        assert run.wait_until(lambda r: all(len(s.applied) >= 2 for s in r.values()), timeout=60), lines
        assert run.pause()
        assert run.wait_until(lambda r: all(len(s.applied) >= 2 for s in r.values()), timeout=5)
        paused_at = _standing_steps(run, timeout=30)  # the pause reaches both ranks at the next agreed step
        assert paused_at is not None, lines
        assert run.queue(SetLR(1e-3))  # given during the pause: applied at the pause's step on both ranks
        assert run.wait_until(lambda r: all(len(s.applied) >= 3 for s in r.values()), timeout=30), lines
        # paused: both ranks keep sending heartbeats, and their steps stay put
        assert _standing_steps(run, timeout=30) == paused_at, lines
        assert run.resume()
        assert run.wait_until(lambda r: all(s.step > paused_at[k] + 3 for k, s in r.items()), timeout=60), lines
        run.stop()
        assert run.wait(timeout=120) == 130
    finally:
        run.kill()
    applied = {r: [(step, type(cmd).__name__) for step, cmd in s.applied] for r, s in run.ranks.items()}
    assert applied[0] == applied[1], applied
    assert [kind for _, kind in applied[0]] == ["SetTrainable", "SaveNow", "SetLR"]
    assert applied[0][2][0] == paused_at[0] == paused_at[1]
    assert run.ranks[0].applied[0][1].changed == run.ranks[1].applied[0][1].changed == [
        "features.3.weight", "features.3.bias"]
    assert run.ranks[1].applied[1][1].saved_to is None  # rank 0 alone writes
    assert "all 2 ranks end with identical weights" in lines
    at_freeze = torch.load(snapshot, weights_only=True)["model_state_dict"]
    last = torch.load(tmp_path / "run" / "last.pt", weights_only=True)["model_state_dict"]
    for name in ("features.3.weight", "features.3.bias", *FROZEN):  # frozen since: bit-identical
        assert torch.equal(at_freeze[name], last[name]), name
    assert not torch.equal(at_freeze["classifier.weight"], last["classifier.weight"])  # the rest trained on


def test_a_nan_loss_ends_every_rank_at_the_same_step_headless(tmp_path):
    from workbench.core.train.config import ModelConfig as MC

    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=3, lr=1e6, seed=7, optimizer="sgd",
                      run_dir=str(tmp_path / "nan"), tensorboard=False, model=MC(arch="digits_cnn"))
    path = tmp_path / "nan.toml"
    cfg.to_toml(path)
    lines = []
    run = DistributedRun(path, 2, out=lines.append, timeout_s=30)
    run.start()
    try:
        code = run.wait(timeout=180)
    finally:
        run.kill()
    assert code == 1
    reasons = {r: s.reason for r, s in run.ranks.items()}
    assert reasons == {0: "nonfinite", 1: "nonfinite"}, (reasons, lines)
    assert len({s.digest for s in run.ranks.values()}) == 1  # they ended together, with the same weights
