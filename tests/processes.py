"""Child processes for the tests of process identity (``/proc/PID/cmdline``)."""

from __future__ import annotations

import subprocess
import time


def exec_done(proc: subprocess.Popen | int, timeout: float = 30.0) -> subprocess.Popen | int:
    """Wait until the child's ``/proc/PID/cmdline`` is its new program's; returns ``proc``.

    ``Popen`` returns once the kernel closed the child's close-on-exec pipe, which
    it does in the middle of ``execve``, before it has set up the new program's
    arguments: for that moment ``/proc/PID/cmdline`` reads empty, and a check of
    the process's identity would see no program at all (a CI run under load hit
    it). A recorded pid in a real ``status.json`` is written by the process itself,
    long after its exec, so only tests meet this window.

    Raises
    ------
    TimeoutError
        The child showed no command line within ``timeout`` seconds.
    """
    pid = proc if isinstance(proc, int) else proc.pid
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read(1):
                    return proc
        except FileNotFoundError:
            raise TimeoutError(f"process {pid} ended before its exec was seen") from None
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} showed no command line in {timeout} s")
        time.sleep(0.005)  # the kernel offers no event for "exec finished" that another process can wait on
