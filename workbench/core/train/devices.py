"""The devices torch can train on here, the default choice and CUDA memory use.

Qt-free; re-exported by :mod:`workbench.core.train.loop`.
"""

from __future__ import annotations

import torch

__all__ = ["available_devices", "default_device", "cuda_memory"]


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
