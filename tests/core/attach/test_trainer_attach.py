"""``workbench train RUN.toml`` is attachable (:class:`~workbench.core.attach.trainer_attach.TrainerAttach`): a real
process, a real socket, the window's client (``workbench.connect``)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

import workbench
from tests.attach_scripts.common import first_event
from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig

ROOT = Path(__file__).resolve().parents[3]
ATTACH_LINE = re.compile(r"^attach: (\S+) token (\S+) ")


def _start(tmp_path: Path, *extra: str, epochs: int = 500, batch_size: int = 16) -> tuple[subprocess.Popen, Path]:
    cfg = TrainConfig(data=DataConfig(batch_size=batch_size), epochs=epochs, lr=1e-2, run_dir=str(tmp_path / "out"),
                      tensorboard=False, model=ModelConfig(arch="digits_cnn"))
    cfg.to_toml(tmp_path / "run.toml")
    disc = tmp_path / "disc"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_ATTACH_DIR": str(disc)}
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "train", str(tmp_path / "run.toml"), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    return proc, disc


def _until(run, pred, timeout: float = 30.0):
    return first_event(run, pred, timeout)


def test_a_headless_run_is_attached_and_steered_freeze_lr_pause_save_stop(tmp_path):
    proc, disc = _start(tmp_path)
    try:
        lines = []
        for line in proc.stdout:  # the address and token are printed once, before the first step
            lines.append(line)
            if m := ATTACH_LINE.match(line):
                address, token = m.groups()
                break
        else:
            raise AssertionError("".join(lines))
        found = [json.loads(p.read_text()) for p in disc.glob("*.json")]
        assert [(f["address"], f["token"], f["pid"]) for f in found] == [(address, token, proc.pid)]
        assert address.startswith("127.0.0.1:")

        run = workbench.connect(address, token)
        assert run.steering and run.info["lrs"] == [0.01] and run.info["model_class"] == "DigitsCNN"
        assert run.info["pause_lease_s"] > 0 and run.info["run_dir"] == str(tmp_path / "out")

        assert run.wait_ack(run.freeze("features.0"))["ok"]
        frozen = _until(run, lambda e: type(e).__name__ == "CommandApplied" and type(e.command).__name__ == "SetTrainable")
        assert frozen.command.changed == ["features.0.weight", "features.0.bias"] and frozen.command.error is None
        assert run.wait_ack(run.set_lr(1e-3))["ok"]
        _until(run, lambda e: type(e).__name__ == "CommandApplied" and type(e.command).__name__ == "SetLR")
        bad = run.wait_ack(run.set_lr(1e-3, group=7))  # refused before it reaches the Trainer: the run goes on
        assert not bad["ok"] and "param group 7 does not exist" in bad["error"]

        assert run.wait_ack(run.pause())["ok"]
        paused = _until(run, lambda e: type(e).__name__ == "Paused")
        assert run.wait_ack(run.resume())["ok"]
        steps_after = _until(run, lambda e: type(e).__name__ == "Metrics" and e.values["step"][-1] > paused.step)
        assert steps_after.values["step"][-1] > paused.step  # it trains again

        assert run.wait_ack(run.save_now())["ok"]
        saved = _until(run, lambda e: type(e).__name__ == "CommandApplied" and type(e.command).__name__ == "SaveNow")
        assert Path(saved.command.saved_to).is_file()
        assert run.wait_ack(run.sample_now())["ok"]  # a classifier has no prompts: said, the run goes on
        sampled = _until(run, lambda e: type(e).__name__ == "CommandApplied"
                         and type(e.command).__name__ == "SampleNow")
        assert sampled.command.rows == [] and "completes no prompts" in sampled.command.error

        assert run.wait_ack(run.stop())["ok"]
        end = _until(run, lambda e: type(e).__name__ == "Finished")
        assert end.reason == "stopped"
        run.close()
        rest, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "finished: stopped" in rest, rest
    out = tmp_path / "out"
    edits = [json.loads(ln) for ln in (out / "edits.jsonl").read_text().splitlines()]
    assert [e["op"] for e in edits] == ["set_trainable", "set_lr", "pause", "resume", "save_now"]
    assert edits[0]["names"] == ["features.0.weight", "features.0.bias"] and edits[0]["flag"] is False
    assert edits[1]["lr"] == 1e-3
    last = torch.load(out / "last.pt", weights_only=True)
    assert last["step"] > paused.step
    assert json.loads((out / "status.json").read_text())["state"] == "stopped"
    assert not list(disc.glob("*.json"))  # the discovery file went with the run


def test_no_attach_prints_no_address_and_writes_no_discovery_file(tmp_path):
    proc, disc = _start(tmp_path, "--no-attach", epochs=1, batch_size=256)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert "epoch 1/1" in out and "attach:" not in out and "token" not in out
    assert not disc.exists() or not list(disc.iterdir())


def test_probes_run_in_the_trainer_and_a_pause_whose_window_stops_renewing_resumes(tmp_path, monkeypatch):
    """In process: a Trainer with ``TrainerAttach(pause_lease_s=0.5)``; the window's live probe reports come
    back from the Trainer; the window pauses, then stops renewing (a laptop gone to sleep): the run resumes by
    itself and says why."""
    import threading

    from workbench.core.attach.trainer_attach import TrainerAttach
    from workbench.core.probe.callback import ProbeCallback
    from workbench.core.train.launch.headless import trainer_from_toml

    cfg = TrainConfig(data=DataConfig(batch_size=16), epochs=50, lr=1e-2, run_dir=str(tmp_path / "out"),
                      tensorboard=False, model=ModelConfig(arch="digits_cnn"))
    cfg.to_toml(tmp_path / "run.toml")
    listening = threading.Event()
    attach = TrainerAttach(lambda line: listening.set(), pause_lease_s=0.5)
    trainer = trainer_from_toml(tmp_path / "run.toml", print, [attach])
    monkeypatch.setenv("WORKBENCH_ATTACH_DIR", str(tmp_path / "disc"))
    ended: list[str] = []
    thread = threading.Thread(target=lambda: ended.append(trainer.fit()), daemon=True)
    thread.start()
    try:
        assert listening.wait(60)
        reports: list = []
        window_cb = ProbeCallback(reports.extend, every=1, flush_ms=0)
        run = workbench.connect(attach.address, attach.token, callbacks=[window_cb])
        assert run.wait_ack()["ok"]  # the probe callbacks installed
        _until(run, lambda e: bool(reports))  # the reports reach the window's callback as its events are read
        grads = next(r.grads for r in reports if r.grads is not None)  # measured in the Trainer's backward
        assert "features.0.weight" in grads.params and math.isfinite(grads.params["features.0.weight"])
        assert run.wait_ack(run.pause())["ok"]
        paused = _until(run, lambda e: type(e).__name__ == "Paused")
        run._no_renew.set()  # this window stops renewing
        notice = _until(run, lambda e: type(e).__name__ == "Notice")
        assert notice.kind == "lease_lapsed" and "resumed" in notice.text
        _until(run, lambda e: type(e).__name__ == "Metrics" and e.values["step"][-1] > paused.step)
        run.close()
    finally:
        trainer.request_stop()
        thread.join(60)
    assert ended == ["stopped"] and attach.server is not None and attach._closed
    assert not list((tmp_path / "disc").glob("*.json"))


def test_a_port_in_use_is_one_error_line_and_no_training(tmp_path, monkeypatch):
    """``--attach-port`` names a port another program holds: one line says so and what to do; nothing trains."""
    import socket

    from workbench.core.attach.trainer_attach import TrainerAttach
    from workbench.core.train.launch.headless import train_from_toml

    cfg = TrainConfig(data=DataConfig(batch_size=256), epochs=1, lr=1e-2, run_dir=str(tmp_path / "out"),
                      tensorboard=False, model=ModelConfig(arch="digits_cnn"))
    cfg.to_toml(tmp_path / "run.toml")
    monkeypatch.setenv("WORKBENCH_ATTACH_DIR", str(tmp_path / "disc"))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        lines: list[str] = []
        code = train_from_toml(tmp_path / "run.toml", out=lines.append,
                               callbacks=[TrainerAttach(lines.append, port=port)])
    assert code == 1
    assert f"error: attach: cannot listen on 127.0.0.1:{port} (Address already in use); choose another " \
           "--attach-port, or --no-attach" in lines, lines
    assert not any(ln.startswith("epoch ") for ln in lines) and not (tmp_path / "out" / "last.pt").exists()


def test_a_nonfinite_loss_waits_for_the_steering_window_and_stops_when_it_goes_away(tmp_path, monkeypatch):
    """With a window steering, a NaN loss pauses for its answer (the window is told); the window leaving without
    one stops the run. Nobody attached: the run ends on it as before (test_nan_trace's headless test)."""
    import threading

    from workbench.core.attach.trainer_attach import TrainerAttach
    from workbench.core.train.launch.headless import trainer_from_toml
    from workbench.core.train.trainer.hooks import Callback

    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=2, lr=1e10, optimizer="sgd",
                      run_dir=str(tmp_path / "out"), tensorboard=False, model=ModelConfig(arch="digits_cnn"))
    cfg.to_toml(tmp_path / "run.toml")
    monkeypatch.setenv("WORKBENCH_ATTACH_DIR", str(tmp_path / "disc"))
    listening = threading.Event()
    attach = TrainerAttach(lambda line: listening.set())

    class WaitForWindow(Callback):
        def on_fit_start(self, trainer):
            deadline = __import__("time").monotonic() + 60
            while not (attach.server is not None and attach.server.steered):
                assert __import__("time").monotonic() < deadline, "no window steered"
                __import__("time").sleep(0.01)

    trainer = trainer_from_toml(tmp_path / "run.toml", print, [attach, WaitForWindow()])
    ended: list[str] = []
    thread = threading.Thread(target=lambda: ended.append(trainer.fit()), daemon=True)
    thread.start()
    try:
        assert listening.wait(60)
        run = workbench.connect(attach.address, attach.token)
        nonfinite = _until(run, lambda e: type(e).__name__ == "NonFinite", timeout=60)
        assert not math.isfinite(nonfinite.loss) and trainer.control.awaiting_decision
        run.close()  # the window goes away without answering
        thread.join(30)
        assert not thread.is_alive(), "the run still waits for an answer nobody can give"
    finally:
        trainer.request_stop()
        thread.join(60)
    assert ended == ["nonfinite"]
