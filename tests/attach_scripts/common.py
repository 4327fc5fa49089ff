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
    threading.Thread(target=lambda: proc.lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = [i for i in list_waiting() if i.get("pid") == proc.pid]
        if found:
            return proc, found[0]
        if proc.poll() is not None:
            raise AssertionError(f"{name}.py exited {proc.returncode} before attaching:\n{output(proc)}")
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise AssertionError(f"{name}.py wrote no discovery file in {timeout} s:\n{output(proc)}")


def output(proc: subprocess.Popen, settle: float = 0.5) -> str:
    """What the script printed so far (stdout and stderr), after up to ``settle`` s for the last lines of an ended one."""
    end = time.monotonic() + settle
    while proc.poll() is not None and time.monotonic() < end and not proc.stdout.closed:
        time.sleep(0.05)
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
