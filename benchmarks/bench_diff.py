"""Diff figures: the memory ``workbench diff`` needs for two 2 GiB checkpoints.

What is measured: the peak anonymous memory (``RssAnon`` of ``/proc/PID/status``,
sampled every 2 ms by this process) of a fresh ``python -m workbench diff A B``
process, in MiB. The checkpoints are memory-mapped: their pages are file-backed
(``RssFile``), as are the shared libraries', so they are not in it; it is the
memory *over* the two files' mapped size.

``diff_2gb_anon_peak_mb``: that peak for A and B Workbench checkpoints
(``save_checkpoint``, with their digest) of one float32 tensor of 512 Mi
elements (2 GiB each), B with its first 1 % scaled by 1.01, in the page cache.
``diff_small_anon_peak_mb``: the same for two 4 KiB checkpoints: the interpreter,
torch and the CLI alone (``import torch`` of a CUDA build is ~290 MiB of
anonymous memory by itself, whatever the files).
``diff_2gb_peak_mb`` = the first minus the second: what two 2 GiB files cost over
their mapped size. Target <= 256 MiB.

``diff_2gb_hwm_mb`` is the process's ``VmHWM`` (peak resident memory, mapped
file pages included) and ``diff_2gb_s`` its wall time, for context.

Needs about 4.3 GB of free disk in the temporary folder (checked first).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from workbench.core.model.saving import save_checkpoint

#: Elements of the tensor in each big checkpoint (float32: 2 GiB).
BIG = 512 * 2**20
#: Seconds between two samples of the diff process's memory.
SAMPLE_S = 0.002


def _status(pid: int) -> dict[str, int]:
    """``/proc/PID/status`` memory lines in KiB (``RssAnon``, ``VmHWM``...); empty once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            out[key] = int(value.split()[0])
    return out


def measure_diff(a: Path, b: Path) -> dict[str, float]:
    """Run ``workbench diff a b`` in a fresh process; its peak RssAnon and VmHWM (MiB), wall time (s) and output."""
    root = Path(__file__).resolve().parent.parent
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "diff", str(a), str(b)], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    anon = hwm = 0
    while proc.poll() is None:
        status = _status(proc.pid)
        anon = max(anon, status.get("RssAnon", 0))
        hwm = max(hwm, status.get("VmHWM", 0))
        time.sleep(SAMPLE_S)
    elapsed = time.perf_counter() - t0
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"workbench diff failed ({proc.returncode}): {err.strip()[-2000:]}")
    return {"peak_mb": anon / 1024, "hwm_mb": hwm / 1024, "s": elapsed, "out": out}


def _write_pair(folder: Path, n: int) -> tuple[Path, Path]:
    """Two checkpoints of one float32 tensor of ``n`` elements; the second has its first 1 % scaled by 1.01."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(n, generator=gen)
    a = save_checkpoint(folder / f"a{n}.pt", {"model_state_dict": {"w": w}})
    w[: max(1, n // 100)] *= 1.01
    b = save_checkpoint(folder / f"b{n}.pt", {"model_state_dict": {"w": w}})
    del w
    return a, b


def run() -> dict[str, float]:
    """Return the figures of the module docstring (MiB; ``diff_2gb_s`` in seconds)."""
    if not sys.platform.startswith("linux"):
        raise RuntimeError("bench_diff reads /proc/PID/status: Linux only")
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        free = shutil.disk_usage(folder).free
        if free < 6 * 2**30:
            raise RuntimeError(f"bench_diff needs 6 GiB of free disk in {folder}, {free / 2**30:.1f} GiB free")
        small = measure_diff(*_write_pair(folder, 1024))
        a, b = _write_pair(folder, BIG)
        for p in (a, b):  # warm the page cache, as after a run wrote them
            with open(p, "rb") as f:
                while f.read(64 * 2**20):
                    pass
        big = measure_diff(a, b)
        assert big["out"].startswith("(root)  params "), big["out"]
        for p in (a, b):
            os.unlink(p)
    return {"diff_2gb_peak_mb": big["peak_mb"] - small["peak_mb"], "diff_2gb_anon_peak_mb": big["peak_mb"],
            "diff_small_anon_peak_mb": small["peak_mb"], "diff_2gb_hwm_mb": big["hwm_mb"], "diff_2gb_s": big["s"]}
