"""Where an attached loop's time goes with the window attached: ``benchmarks/bench_attach.py``'s blocks, instrumented.

Runs the benchmark's idle and live blocks for one loop (``digits`` or
``resnet18``; ``BLOCKS`` from the environment, default 9) and, over the live
blocks' attached steps, prints the wall time spent inside the script in
``Attached.step``, each probe hook, the row flushes and the encoding of each
event kind on the sending thread (as shares of the attached steps' wall
time), the CPU seconds of each of the script's threads, and the window
process's CPU seconds. ``PIN=1`` pins the script and the window to different
cores (Linux). Not a benchmark (the timing wrappers cost a little themselves):
the figures explain the benchmark's.

Usage: ``QT_QPA_PLATFORM=offscreen python tools/attach_breakdown.py digits``
"""

from __future__ import annotations

import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import torch  # noqa: E402

from benchmarks import bench_attach as B  # noqa: E402
from workbench.core.attach import script as S  # noqa: E402
from workbench.core.attach import server as SV  # noqa: E402

SPENT: collections.Counter = collections.Counter()
CALLS: collections.Counter = collections.Counter()
WINDOWS: list = []


def _timed(fn, key_of):
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            key = key_of(*args)
            SPENT[key] += time.perf_counter() - t
            CALLS[key] += 1
    return wrapper


def _thread_cpu(pid: int | str = "self") -> dict[str, float]:
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[f"{comm}:{tid}"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def _instrument() -> None:
    S.Attached.step = _timed(S.Attached.step, lambda *a: "Attached.step (all)")
    S.Attached._flush = _timed(S.Attached._flush, lambda *a: "row flushes")
    S.Attached._probe_hook = _timed(S.Attached._probe_hook, lambda self, hook, *a: f"probe hook {hook}")
    SV._event_bytes = _timed(SV._event_bytes, lambda event: f"encode {type(event).__name__} (sending thread)")
    init = B.Window.__init__

    def window_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        WINDOWS.append(self)
    B.Window.__init__ = window_init
    interleaved = B.interleaved

    def instrumented(plain, attached, clock, before_plain=None, before_attached=None):
        live = before_plain is not None
        if not live:
            return interleaved(plain, attached, clock)
        if os.environ.get("PIN"):
            for tid in os.listdir(f"/proc/{WINDOWS[-1].proc.pid}/task"):
                os.sched_setaffinity(int(tid), {1})
            for tid in os.listdir("/proc/self/task"):
                os.sched_setaffinity(int(tid), {0})
        SPENT.clear()
        CALLS.clear()
        cpu0, window0, wall = _thread_cpu(), WINDOWS[-1].cpu_s(), [0.0]
        run = attached.run

        def timed_run(n):
            t = time.perf_counter()
            try:
                return run(n)
            finally:
                wall[0] += time.perf_counter() - t
        attached.run = timed_run
        blocks = interleaved(plain, attached, clock, before_plain, before_attached)
        ratios = [p / a for p, a in blocks]
        attached.run = run
        cpu1 = _thread_cpu()
        print(f"live blocks: attached steps {wall[0]:.2f} s; window process "
              f"{WINDOWS[-1].cpu_s() - window0:.2f} s CPU")
        for key in sorted(SPENT, key=lambda k: -SPENT[k]):
            print(f"  {key:44s} {SPENT[key] * 1e3:9.1f} ms  {CALLS[key]:6d} calls  {100 * SPENT[key] / wall[0]:5.2f} %")
        for name, seconds in sorted(cpu1.items()):
            if seconds - cpu0.get(name, 0.0) > 0.01:
                print(f"  thread {name:30s} {seconds - cpu0.get(name, 0.0):.2f} s CPU (plain steps included)")
        print(f"  ratios {[round(r, 3) for r in ratios]}, median {statistics.median(ratios):.3f}")
        return blocks
    B.interleaved = instrumented


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "digits"
    B.BLOCKS = int(os.environ.get("BLOCKS", 9))
    _instrument()
    torch.set_num_threads(B.THREADS)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WORKBENCH_ATTACH_DIR"] = str(Path(tmp) / "attach")
        torch.manual_seed(0)
        print(B.measure(name, B.digits_setup if name == "digits" else B.resnet18_setup, Path(tmp)))


if __name__ == "__main__":
    main()
