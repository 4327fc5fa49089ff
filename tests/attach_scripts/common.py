"""Start an attach script in a subprocess and find it, for the attach tests."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from workbench.core.attach.discovery import list_waiting

SCRIPTS = Path(__file__).parent


def start_script(name: str, run_dir: Path, *args: str, timeout: float = 120.0) -> tuple[subprocess.Popen, dict]:
    """Run ``tests/attach_scripts/<name>.py RUN_DIR *args``; wait for its discovery file; ``(process, info)``.

    The child inherits ``WORKBENCH_ATTACH_DIR`` (set per test by conftest), so only its file is found.

    Raises
    ------
    AssertionError
        The script exited or wrote no discovery file within ``timeout`` seconds (its output in the message).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SCRIPTS.parent.parent), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / f"{name}.py"), str(run_dir), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    proc.lines = []  # its output, read on a thread: a chatty script never blocks on a full pipe
    attached = threading.Event()  # set by the reader at the line the script prints once its file is written

    def read() -> None:
        for line in iter(proc.stdout.readline, ""):
            proc.lines.append(line)
            if line.startswith("workbench: attach to this run at"):
                attached.set()
        attached.set()  # the output ended: the script exited (said below)

    proc.reader = threading.Thread(target=read, daemon=True)
    proc.reader.start()
    attached.wait(timeout)
    found = [i for i in list_waiting() if i.get("pid") == proc.pid]
    if found:
        return proc, found[0]
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    raise AssertionError(f"{name}.py (exit {proc.returncode}) wrote no discovery file in {timeout} s:\n"
                         f"{output(proc)}")


def output(proc: subprocess.Popen) -> str:
    """What the script printed (stdout and stderr); all of it once it has exited (the reader is joined)."""
    if proc.poll() is not None:
        proc.reader.join(5)
    return "".join(proc.lines)


def finish(proc: subprocess.Popen, timeout: float = 60.0) -> tuple[int, str]:
    """Wait for the script to exit; ``(exit code, its output)`` (killed after ``timeout`` seconds)."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9, output(proc)
    return proc.returncode, output(proc)


def until(run, kind, pred=lambda e: True, timeout: float = 60.0):
    """The first event of ``kind`` meeting ``pred`` that ``run.events()`` yields within ``timeout`` seconds in all.

    Raises
    ------
    AssertionError
        None came (the run finished, or the time passed).
    """
    from workbench.core.train.events import Finished

    end = time.monotonic() + timeout
    for event in run.events(timeout=timeout):
        if isinstance(event, kind) and pred(event):
            return event
        if isinstance(event, Finished) or time.monotonic() > end:
            break
    raise AssertionError(f"no {kind.__name__} within {timeout} s")


def steer_ddp_run(proc: subprocess.Popen, info: dict, module: str, lr: float) -> None:
    """Steer a two-rank script as a window would: freeze ``module``, set ``lr``, pause, save now, resume, stop.

    Then the script must exit 0; its ranks' results are checked by :func:`check_ddp_replicas`.
    """
    import workbench
    from workbench.core.train.events import CommandApplied, Finished, Metrics, Paused

    try:
        run = workbench.connect(info["address"], info["token"])
        assert run.steering
        until(run, Metrics, lambda e: len(e.values["step"]) > 0)
        run.freeze(module)
        applied = until(run, CommandApplied)
        assert applied.command.error is None and applied.command.changed, output(proc)
        run.set_lr(lr)
        until(run, CommandApplied)
        run.pause()
        until(run, Paused)
        run.save_now()
        until(run, CommandApplied, lambda e: getattr(e.command, "saved_to", None))
        run.resume()
        until(run, Metrics, lambda e: e.values["step"][-1] > applied.step + 3)
        run.stop()
        assert until(run, Finished).reason == "stopped"
        run.close()
    finally:
        code, out = finish(proc, timeout=120)
    assert code == 0, out


def check_ddp_replicas(run_dir: Path, frozen: str, trained: str) -> list[dict]:
    """Both ranks' ``final<rank>.pt`` are the same model; ``frozen``'s parameters equal their values in the
    save made while paused and ``trained`` moved on after it. Returns both ranks' ``final<rank>.json``
    (``steps`` checked equal: the ranks stopped after the same step)."""
    import json

    import torch

    r0, r1 = (torch.load(run_dir / f"final{r}.pt", weights_only=True) for r in (0, 1))
    at_save = torch.load(run_dir / "last.pt", weights_only=True)["model_state_dict"]
    params = [n for n in r0 if n.endswith(("weight", "bias")) and "running" not in n]
    assert all(torch.equal(r0[n], r1[n]) for n in params)  # the replicas stayed the same model
    held = [n for n in params if n.startswith(frozen + ".")]
    assert held and all(torch.equal(r0[n], at_save[n]) for n in held)
    assert not torch.equal(r0[trained], at_save[trained])
    done = [json.loads((run_dir / f"final{r}.json").read_text()) for r in (0, 1)]
    assert done[0]["steps"] == done[1]["steps"]
    return done


def first_event(run, pred, timeout: float = 60.0):
    """The first event of ``run`` for which ``pred`` holds (the history replay included); AssertionError naming
    the last event types seen when none came within ``timeout`` seconds."""
    seen = []
    for event in run.events(timeout=timeout):
        if pred(event):
            return event
        seen.append(type(event).__name__)
    raise AssertionError(f"no such event; saw {seen[-20:]}")
