"""Child processes for the tests of process identity (``/proc/PID/cmdline``), each started until it says it runs.

``Popen`` returns once the kernel closed the child's close-on-exec pipe, which it
does in the middle of ``execve``, before it has set up the new program's
arguments: for that moment ``/proc/PID/cmdline`` reads empty, and a check of the
process's identity would see no program at all (237 of 300 fresh children read
empty here under load; a CI run failed on it). So every child here prints
:data:`READY` once its program runs, and :func:`started` returns after reading
that line: the exec is over. A recorded pid in a real ``status.json`` is written
by the process itself, long after its exec, so only tests meet this window.
"""

from __future__ import annotations

import subprocess
import sys
import time

#: The line a child prints once its program runs.
READY = "ready"
#: Python statement that prints it.
SAY_READY = f"print({READY!r}, flush=True)"


def started(argv: list[str], **kwargs) -> subprocess.Popen:
    """Start ``argv`` (a program that prints :data:`READY` first) and return once it did.

    Raises
    ------
    RuntimeError
        It ended, or printed something else first (killed then).
    """
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kwargs)
    line = proc.stdout.readline()
    if line.strip() != READY:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{argv[:3]} did not start (it printed {line!r}, exit code {proc.returncode})")
    return proc


def python_sleeper(seconds: int = 60) -> subprocess.Popen:
    """A plain ``python -c`` that sleeps (alive, not Workbench)."""
    return started([sys.executable, "-c", f"{SAY_READY}; import time; time.sleep({seconds})"])


def program_sleeper(seconds: int = 60) -> subprocess.Popen:
    """A program other than Python (``sh`` that becomes ``sleep``: alive, not Workbench, in either state)."""
    return started(["sh", "-c", f"echo {READY}; exec sleep {seconds}"])


def workbench_module_child(seconds: int = 60) -> subprocess.Popen:
    """A live process whose command line is a Workbench module's, as a data-parallel rank's is
    (``python -m workbench.core.train.launch.parent_watch timeit ...``: sleeps, ends with this process)."""
    return started([sys.executable, "-u", "-m", "workbench.core.train.launch.parent_watch", "timeit", "-n", "1",
                    "-r", "1", "-s", SAY_READY, f"import time; time.sleep({seconds})"])


def ready_then_sleep(ready, seconds: float) -> None:
    """A ``multiprocessing`` child's target: set the ``ready`` event, then sleep ``seconds``."""
    ready.set()
    time.sleep(seconds)
