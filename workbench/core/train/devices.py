"""The devices torch can train on here, the default choice and CUDA memory use.

Qt-free.
"""

from __future__ import annotations

import torch

__all__ = ["available_devices", "default_device", "cuda_memory", "ddp_choices", "split_device_choice",
           "CPU_DDP_PROCESSES"]

#: Processes of the window's "CPU, N processes (DDP, Gloo)" choice.
CPU_DDP_PROCESSES = 2


def available_devices() -> list[tuple[str, str]]:
    """Every device torch can use here, as ``(id, label)``.

    Returns
    -------
    list of (str, str)
        ``("cpu", "CPU")``, then ``("cuda:N", "cuda:N - NAME (M.M GB)")`` for each
        CUDA device, then ``("mps", "Apple GPU (mps)")`` when available.
    """
    out = [("cpu", "CPU")]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            out.append((f"cuda:{i}", f"cuda:{i} - {props.name} ({props.total_memory / 1e9:.1f} GB)"))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append(("mps", "Apple GPU (mps)"))
    return out


def default_device() -> str:
    """The best available device id: ``"cuda:0"``, else ``"mps"``, else ``"cpu"``."""
    ids = [d for d, _ in available_devices()]
    for prefix in ("cuda", "mps"):
        for d in ids:
            if d.startswith(prefix):
                return d
    return "cpu"


def cuda_memory(device: str | torch.device = "cuda") -> tuple[int, int]:
    """``(allocated, reserved)`` bytes of a CUDA device; ``(0, 0)`` for other devices."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return 0, 0
    return int(torch.cuda.memory_allocated(device)), int(torch.cuda.memory_reserved(device))


def ddp_choices() -> list[tuple[str, str]]:
    """Data-parallel entries of the device choice, as ``(key, label)``.

    ``("ddp:cpu:2", "CPU, 2 processes (DDP, Gloo)")`` everywhere (the path is testable
    without GPUs), and ``("ddp:cuda:N", "all N GPUs (DDP)")`` when more than one CUDA
    device exists. :func:`split_device_choice` reads a key back.
    """
    out = [(f"ddp:cpu:{CPU_DDP_PROCESSES}", f"CPU, {CPU_DDP_PROCESSES} processes (DDP, Gloo)")]
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n > 1:
        out.append((f"ddp:cuda:{n}", f"all {n} GPUs (DDP)"))
    return out


def split_device_choice(key: str) -> tuple[str, int]:
    """``(device, processes)`` of a device choice: ``"ddp:cpu:2"`` -> ``("cpu", 2)``, ``"cuda:0"`` -> ``("cuda:0", 1)``.

    Raises
    ------
    ValueError
        A ``ddp:`` key without a device and a process count >= 1.
    """
    if not key.startswith("ddp:"):
        return key, 1
    device, _, count = key[4:].rpartition(":")
    if not device or not count.isdigit() or int(count) < 1:
        raise ValueError(f"device choice {key!r}: expected ddp:<device>:<processes>, e.g. ddp:cpu:2")
    return device, int(count)
