"""Intra-op thread policy for a process whose training runs on a worker thread.

Why this exists (measured on the 2-core reference machine, torch 2.15 with its
OpenMP backend, DigitsCNN, batch 64): a training loop on a secondary thread ran at
0.47-0.69x the speed of the same loop on the main thread, while a process whose
main thread never entered an OpenMP parallel region ran the secondary thread at
full speed (18,900 vs 18,900 samples/s). The cause is libgomp's thread pools: each
thread that starts a parallel region keeps its own pool of worker threads, and
once the process holds more OpenMP-managed threads than CPUs, every pool's
workers stop spin-waiting and sleep on a futex between regions
(``gomp_throttled_spin_count_var``), so each parallel op pays a wake-up. An
elementwise op on 131k floats went from 7 us to 26-36 us.

So the GUI thread computes single-threaded (its pool is never created) and the
worker thread that trains gets every core. Nothing here imports Qt.
"""

from __future__ import annotations

import os

import torch

_worker_threads: int | None = None


def reserve_cores_for_workers() -> int:
    """Make the calling (GUI) thread compute with one intra-op thread.

    Call it once at process start, on the main thread, before any torch
    computation. ``torch.set_num_threads`` sets the calling thread's OpenMP
    thread count only, so worker threads keep the default.

    Returns
    -------
    int
        Intra-op threads that worker threads should use (the default before the
        call: the number of cores, or ``OMP_NUM_THREADS``).
    """
    global _worker_threads
    if _worker_threads is None:
        _worker_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    return _worker_threads


def worker_thread_count() -> int:
    """Intra-op threads for a training or probe worker thread.

    Returns
    -------
    int
        The count saved by :func:`reserve_cores_for_workers`, or the current
        thread's count (torch's default: the number of cores) when it was not called.
    """
    if _worker_threads is not None:
        return _worker_threads
    return max(1, torch.get_num_threads() or (os.cpu_count() or 1))


def lower_current_thread_priority(increment: int = 10) -> bool:
    """Lower the scheduling priority (raise the nice value) of the calling thread.

    A training thread calls this before its first computation, so the OpenMP
    workers it creates inherit the lower priority too: the GUI thread then gets a
    core whenever it needs one (a responsive window), and training takes the rest.
    On Linux the nice value is per thread (``setpriority`` on the thread id); on
    other systems this does nothing.

    Parameters
    ----------
    increment : int
        Nice value to add, 0-19.

    Returns
    -------
    bool
        True when the priority was lowered.
    """
    import threading

    if not hasattr(os, "setpriority") or not os.path.exists("/proc/self/task"):
        return False
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + increment))
    except OSError:
        return False
    return True
