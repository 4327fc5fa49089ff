"""A run on an SSH host, from this side: how long until its first step is seen, and how fast it obeys.

The host is the tests' real OpenSSH server on 127.0.0.1 (``tests/hosts/sshd.py``: a test user, its key, a
private sshd, a client config with the alias ``wb-test-host``), reached as a user reaches theirs: the system
``ssh`` through Workbench's shared connection (ControlMaster), ``rsync`` for the copy, a tunnel Workbench opens
for the attach. Starting it needs root and ``openssh-server`` (``tests/hosts/install.sh``); without them the
benchmark says so in one line and gives no figures.

``remote_submit_to_first_step_s``
    Seconds from :func:`workbench.remote.submit` of the demo run (digits, ``digits_cnn``, batch 64,
    :data:`EPOCHS` epochs: ~23 steps each) to the warm host (its shared connection already open) until the
    window (a real ``MainWindow``, offscreen, in this process) holds the run's first step in its loss plot's
    buffer, which it draws at its next redraw: the copy, the detached ``workbench train`` starting there
    (Python, torch, the data, the model), its first step, the discovery file read over ssh, the tunnel, the
    welcome and the history, then ``attach_remote_window`` (File › Attach to a run on a host…, after its
    dialog). Whether the run listens is asked every :data:`POLL_S` s (each time one ssh command), so the
    figure may be up to ~:data:`POLL_S` s late. A fresh window for each run (made before the clock starts).
    Median of :data:`SUBMITS` runs, with the range (``_min``, ``_max``). Target <= 10 s.
``remote_command_latency_ms_p50`` / ``_p95``
    With one run attached through the tunnel and training, milliseconds from sending a command
    (``set_lr``, ``freeze``, ``unfreeze`` of the model's first module, in turn) until its ack
    (``wait_ack``): the tunnel both ways and the run's attach server checking the command and queueing it
    on the run's control (the ack does not wait for the step that applies it). Over :data:`COMMANDS`
    commands, one after the other. Target p95 <= 200 ms.
``remote_command_applied_ms_p50`` / ``_p95``
    The same commands, until the run's ``CommandApplied`` event (sent once the command took effect at the
    run's next step) reaches the handle: what the window shows as done. Not a target of the issue.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from workbench.core.train.events import CommandApplied, Metrics  # noqa: E402

#: Submitted runs the first figure is the median of.
SUBMITS = 5
#: Epochs of each submitted run (~23 steps each: a few hundred steps in all; each is cancelled once seen).
EPOCHS = 12
#: Commands the latency figures are measured over.
COMMANDS = 100
#: Seconds between two asks whether a run listens yet (each ask: one ssh command).
POLL_S = 0.1
#: Seconds a run may take to listen, or a command to be acked, before the benchmark gives up.
WAIT_S = 120.0

RUN_TOML = ("epochs = {epochs}\nlr = 0.001\nseed = 0\noptimizer = \"adam\"\ntensorboard = false\n"
            "[data]\ndataset = \"digits\"\nbatch_size = 64\n[model]\narch = \"digits_cnn\"\n")


def _start_host(tmp: Path):
    """The test host, or None after one line saying why it cannot start here."""
    try:
        from tests.hosts.sshd import start_host

        return start_host(tmp, Path(sys.executable).parent)
    except (ImportError, RuntimeError, OSError) as e:
        print(f"bench_remote: no figures: the SSH test host cannot start here ({e})", flush=True)
        return None


def _close(host, remote_dir: str) -> None:
    """Stop the test host, leaving alone the test user's processes that are not this benchmark's.

    ``SshHost.close`` kills every process of the test user, also those of a test session sharing the user on
    this machine; here the shared connection is closed first (its sessions end with it) and only processes
    that name this benchmark's folder of runs are killed (none, when each run was cancelled).
    """
    import subprocess

    from tests.hosts.sshd import ALIAS
    from workbench.core.remote.ssh import Ssh

    subprocess.run(Ssh(host.config).ssh_argv(ALIAS) + ["-O", "exit", ALIAS], capture_output=True, check=False)
    every = host.user_pids

    def mine() -> list[int]:
        out = []
        for pid in every():
            try:
                if remote_dir.encode() in Path(f"/proc/{pid}/cmdline").read_bytes() \
                        or remote_dir in os.readlink(f"/proc/{pid}/cwd"):
                    out.append(pid)
            except OSError:
                continue
        return out

    host.user_pids = mine
    host.close()


def _attach(run):
    """``run.attach()`` as soon as the run listens (asked every :data:`POLL_S` s)."""
    from workbench.remote import RemoteError

    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return run.attach()
        except RemoteError as e:
            if "does not wait for a window" not in str(e) or time.monotonic() > deadline:
                raise
        time.sleep(POLL_S)


def _first_step(handle) -> None:
    """Return once a Metrics event with a step arrives on ``handle``."""
    for event in handle.events(timeout=WAIT_S):
        if isinstance(event, Metrics) and len(event.values.get("step", ())):
            return
    raise RuntimeError("the remote run's events ended before its first step")


def _cancel(run) -> None:
    from workbench.remote import RemoteError

    with contextlib.suppress(RemoteError):  # already ended: nothing to cancel
        run.cancel()


def _submit_to_first_step(toml: Path, host, remote_dir: str, i: int) -> float:
    """Seconds from submitting ``toml`` until a fresh window's loss plot holds the run's first step."""
    from PySide6.QtWidgets import QApplication

    from tests.hosts.sshd import ALIAS
    from tests.ui.helpers import RecordingPrompts
    from workbench import remote
    from workbench.core.remote.waiting import find_run, read_waiting
    from workbench.ui.attaching import attach_remote_window
    from workbench.ui.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    win = MainWindow(prompts=RecordingPrompts())
    win.resize(1280, 800)
    win.show()
    app.processEvents()
    panel = win.training_panel
    start = time.perf_counter()
    run = remote.submit(toml, ALIAS, name=f"first-step-{i}", remote_dir=remote_dir, ssh_config=host.config)
    try:
        deadline = start + WAIT_S
        while find_run(read_waiting(run.ssh, ALIAS, remote_dir), run.run_dir, run.id) is None:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{run.id} did not listen within {WAIT_S:.0f} s")
            time.sleep(POLL_S)
        if not attach_remote_window(win, run, True):
            raise RuntimeError(f"the window did not attach: {win.prompts.errors}")
        while panel.plots.steps.last("step", 0.0) <= 0:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the window drew no step of {run.id} within {WAIT_S:.0f} s")
            app.processEvents()
            time.sleep(0.002)
        seconds = time.perf_counter() - start
    finally:
        if panel.is_running():
            panel.shutdown(ask=False)  # detaches: the run trains on until cancelled below
        win.close()
        win.deleteLater()
        app.processEvents()
        _cancel(run)
    return seconds


def _command_latencies(toml: Path, host, remote_dir: str) -> tuple[list[float], list[float]]:
    """Milliseconds of each command until its ack, and until its ``CommandApplied`` event."""
    from tests.hosts.sshd import ALIAS
    from workbench import remote

    run = remote.submit(toml, ALIAS, name="commands", remote_dir=remote_dir, ssh_config=host.config)
    try:
        handle = _attach(run)
        try:
            _first_step(handle)
            events = handle.events(timeout=WAIT_S)
            module = handle.info["model"]["params"][0][0].rpartition(".")[0]
            acked, applied = [], []
            for i in range(COMMANDS):
                kind = i % 3
                start = time.perf_counter()
                if kind == 0:
                    cid = handle.set_lr(1e-3 * (1 + i % 2))
                elif kind == 1:
                    cid = handle.freeze(module)
                else:
                    cid = handle.unfreeze(module)
                ack = handle.wait_ack(cid, timeout=WAIT_S)
                acked.append((time.perf_counter() - start) * 1000)
                if not ack or not ack.get("ok"):
                    raise RuntimeError(f"command {i} was not acked ok: {ack!r}")
                if not any(isinstance(e, CommandApplied) for e in events):  # stops at the first one
                    raise RuntimeError(f"the run's events ended before command {i} was applied")
                applied.append((time.perf_counter() - start) * 1000)
            return acked, applied
        finally:
            handle.close()
    finally:
        _cancel(run)


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, linear between the two nearest ranks (numpy's default)."""
    import numpy as np

    return float(np.quantile(values, q))


def run() -> dict[str, float]:
    from tests.hosts.sshd import ALIAS
    from workbench.core.remote.ssh import Ssh

    with tempfile.TemporaryDirectory(prefix="bench-remote-") as tmp:
        tmp = Path(tmp)
        os.environ["WORKBENCH_SETTINGS_DIR"] = str(tmp / "settings")  # the windows never write the user's settings
        os.environ["WORKBENCH_START_AHEAD"] = "0"  # no training process started ahead: it would take a core
        (tmp / "sshd").mkdir()
        host = _start_host(tmp / "sshd")
        if host is None:
            return {}
        remote_dir = f"wb-bench-{uuid.uuid4().hex[:8]}"
        try:
            Ssh.from_env(host.config).run(ALIAS, "true", what="open the shared connection")  # the warm host
            short, long = tmp / "short" / "run.toml", tmp / "long" / "run.toml"
            for path, epochs in ((short, EPOCHS), (long, 10000)):
                path.parent.mkdir()
                path.write_text(RUN_TOML.format(epochs=epochs))
            seconds = []
            for i in range(SUBMITS):
                seconds.append(_submit_to_first_step(short, host, remote_dir, i))
                print(f"  submit {i + 1}: first step seen after {seconds[-1]:.2f} s", flush=True)
            ms, applied = _command_latencies(long, host, remote_dir)
        finally:
            _close(host, remote_dir)
            shutil.rmtree(host.home / remote_dir, ignore_errors=True)
    key, cmd, done = "remote_submit_to_first_step_s", "remote_command_latency_ms", "remote_command_applied_ms"
    figures = {key: statistics.median(seconds), f"{key}_min": min(seconds), f"{key}_max": max(seconds),
               f"{cmd}_p50": _quantile(ms, 0.5), f"{cmd}_p95": _quantile(ms, 0.95), f"{cmd}_max": max(ms),
               f"{done}_p50": _quantile(applied, 0.5), f"{done}_p95": _quantile(applied, 0.95),
               f"{done}_max": max(applied)}
    print(f"{key}: median {figures[key]:.2f} s over {SUBMITS} runs ({min(seconds):.2f}-{max(seconds):.2f})\n"
          f"{cmd}: p50 {figures[cmd + '_p50']:.1f} ms, p95 {figures[cmd + '_p95']:.1f} ms, "
          f"max {max(ms):.1f} ms over {COMMANDS} commands\n"
          f"{done}: p50 {figures[done + '_p50']:.1f} ms, p95 {figures[done + '_p95']:.1f} ms, "
          f"max {max(applied):.1f} ms", flush=True)
    return figures


if __name__ == "__main__":
    print(run())
