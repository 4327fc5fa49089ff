"""The RNG states a training checkpoint stores (torch, CUDA, numpy, random) and seeding.

The states are written as tensors and plain lists so ``torch.load(weights_only=True)``
reads them back; every checkpoint writer stores this one layout. Qt-free.
"""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["rng_state", "set_rng_state", "seed_everything"]


def rng_state() -> dict:
    """RNG states of torch (CPU and every CUDA device), numpy and random.

    Stored as tensors and plain lists so ``torch.load(weights_only=True)`` reads them.
    """
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "python": [int(version), list(internal), gauss_next],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore :func:`rng_state` output (missing entries are left alone)."""
    if "torch" in state:
        torch.set_rng_state(state["torch"].cpu())
    if "numpy" in state:
        kind, keys, pos, has_gauss, cached = state["numpy"]
        keys = keys.numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
        np.random.set_state((str(kind), keys.astype(np.uint32), int(pos), int(has_gauss), float(cached)))
    if "python" in state:
        version, internal, gauss_next = state["python"]
        random.setstate((int(version), tuple(int(v) for v in internal), gauss_next))
    if state.get("cuda") and torch.cuda.is_available():
        states = state["cuda"][: torch.cuda.device_count()]
        torch.cuda.set_rng_state_all([s.cpu() for s in states])


def seed_everything(seed: int) -> None:
    """Seed torch (every device), numpy (``seed % 2**32``) and random with ``seed``."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
