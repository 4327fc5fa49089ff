"""The training process's scheduling priority: ``"normal"`` or ``"lower"`` (nice +10), and which to choose.

A training process at a lower priority leaves the window a core whenever it
needs one, but with anything else busy the same loop ran 5-15x slower than at
normal priority. :func:`default_priority` picks normal when the machine has
:data:`HEADROOM_CORES` cores beyond what the run itself keeps busy (its
intra-op threads and loader workers), else lower. Qt-free.
"""

from __future__ import annotations

import os

from workbench.core.train.launch.training_process_main import NICE_INCREMENT

__all__ = ["PRIORITIES", "LOWER_NICE", "HEADROOM_CORES", "IN_MEMORY_DATASETS", "niceness", "default_priority",
           "run_cores"]

#: The choices, in the order the window lists them.
PRIORITIES = ("normal", "lower")
#: The nice value a "lower" training process adds to the window's (0-19: 10 leaves the window a core on a
#: contended machine, and the run still gets every idle one); the training process's own default.
LOWER_NICE = NICE_INCREMENT
#: Cores the window and the rest of the desktop need beside a run for "normal" to be the default: the GUI
#: thread, the plots' redraws, the event reader and the system itself.
HEADROOM_CORES = 4
#: Datasets batched by indexing tensors in memory: no loader workers.
IN_MEMORY_DATASETS = ("digits", "fake")


def niceness(priority: str) -> int:
    """The nice value to add for ``priority`` (``"normal"``: 0, ``"lower"``: :data:`LOWER_NICE`).

    Raises
    ------
    ValueError
        ``priority`` is not one of :data:`PRIORITIES`.
    """
    if priority not in PRIORITIES:
        raise ValueError(f"process priority must be one of {', '.join(PRIORITIES)}, not {priority!r}")
    return 0 if priority == "normal" else LOWER_NICE


def run_cores(config, threads: int | None = None) -> int:
    """The cores a run of ``config`` keeps busy: its intra-op threads and its loader workers.

    Parameters
    ----------
    config : TrainConfig
        ``data`` (``dataset``, ``num_workers``) and ``device``.
    threads : int, optional
        The run's intra-op threads (default: ``torch.get_num_threads()``, what a training process uses).
    """
    import torch

    from workbench.core.train.data.loaders import loader_settings

    threads = torch.get_num_threads() if threads is None else int(threads)
    data = config.data
    workers = loader_settings(data, config.device, in_memory=data.dataset in IN_MEMORY_DATASETS).num_workers
    return max(1, threads) + max(0, workers)


def default_priority(config, cores: int | None = None, threads: int | None = None) -> str:
    """``"normal"`` when ``cores`` (default ``os.cpu_count()``) >= the run's threads + loader workers +
    :data:`HEADROOM_CORES`, else ``"lower"`` (a small machine: the window keeps a core).

    Parameters
    ----------
    config : TrainConfig
    cores : int, optional
    threads : int, optional
        See :func:`run_cores`.
    """
    cores = (os.cpu_count() or 1) if cores is None else int(cores)
    return "normal" if cores >= run_cores(config, threads) + HEADROOM_CORES else "lower"
