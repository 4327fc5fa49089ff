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
