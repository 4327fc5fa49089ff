"""A child process under an address-space limit, with its own peak memory: for the tests of hostile files.

:func:`run_limited` runs a command with ``RLIMIT_AS`` set, its output to a file
(so a gigabyte of it can be measured, never held in a pipe), kills it after a
timeout, and measures the peak resident memory of that one process.

The command is started by a small Python wrapper, not by the test process:
``ru_maxrss`` survives ``exec``, so a child forked from a pytest process of
1.7 GB reports 1.7 GB whatever it then does. The wrapper is a few MB, so the
peak its child reports is the child's own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

#: Address space of the child: `workbench` maps torch and pandas in about 4 GB here (3 GB fails to import them).
CHILD_ADDRESS_SPACE = 6 * 2**30

_WRAPPER = """
import os, resource, subprocess, sys, threading, time
limit, timeout, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
with open(out, "wb") as f:
    t0 = time.monotonic()
    proc = subprocess.Popen(sys.argv[4:], stdout=f, stderr=subprocess.STDOUT)
watchdog = threading.Timer(timeout, proc.kill)
watchdog.start()
_, status, usage = os.wait4(proc.pid, 0)
watchdog.cancel()
print(os.waitstatus_to_exitcode(status), time.monotonic() - t0, usage.ru_maxrss * 1024)
"""


def run_limited(argv: list[str], out: Path, timeout: float = 120,
                address_space: int = CHILD_ADDRESS_SPACE) -> tuple[int, float, int]:
    """Run ``argv`` under ``address_space`` bytes of ``RLIMIT_AS``, stdout and stderr to the file ``out``.

    Returns
    -------
    (int, float, int)
        Exit status (``-9`` when killed after ``timeout`` seconds), wall seconds,
        and the command's peak resident bytes (``os.wait4``'s ``ru_maxrss``, KiB on Linux).
    """
    report = subprocess.run([sys.executable, "-c", _WRAPPER, str(address_space), str(timeout), str(out), *argv],
                            capture_output=True, text=True, timeout=timeout + 60, check=True)
    status, elapsed, peak = report.stdout.split()
    return int(status), float(elapsed), int(peak)
