"""Architecture detection over torchvision and timm through the architecture index.

Each figure times ``detect_architecture`` on a timm ``resnet50d`` state_dict
(random init, ``module.`` prefix) in a fresh Python process whose imports are
done (torch, torchvision, Workbench; timm is not imported by a warm query):

``detect_arch_s``: the index on disk (built by an earlier query), the first
detection in a new process; median of 3 processes. Target <= 0.5 s.
``detect_arch_warm_s``: the second detection in that process (in memory); median.
``detect_arch_cold_s``: an empty cache folder: the query builds torchvision's
signatures, timm's family list (one model per timm module) and the timm
families its key names pick, then ranks; one process, reported (built once
per library version). Without timm installed the figures cover torchvision alone.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, sys, time, torch
from workbench.core.model.detection import detect_architecture
sd = torch.load(sys.argv[1], weights_only=True)
t0 = time.perf_counter(); first = detect_architecture(sd); t1 = time.perf_counter()
detect_architecture(sd); t2 = time.perf_counter()
print(json.dumps({"first": t1 - t0, "again": t2 - t1, "top": first[0].spec.name}))
"""


def _write_checkpoint(path: Path) -> str:
    """A ``module.``-prefixed state_dict: timm's resnet50d when timm is installed, else torchvision's resnet50."""
    import torch

    from workbench.core.model.meta_build import build_module

    name = "timm/resnet50d"
    try:
        model = build_module(name)
    except Exception:  # noqa: BLE001 - timm not installed
        name = "resnet50"
        model = build_module(name)
    torch.save({f"module.{k}": v for k, v in model.state_dict().items()}, path)
    return name


def _detect_in_new_process(path: Path, cache: Path) -> dict:
    env = {**os.environ, "WORKBENCH_CACHE_DIR": str(cache)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run() -> dict[str, float]:
    """Return ``detect_arch_s``, ``detect_arch_warm_s`` and ``detect_arch_cold_s`` (seconds)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.pt"
        expected = _write_checkpoint(path)
        cache = Path(folder) / "cache"
        cold = _detect_in_new_process(path, cache)
        assert cold["top"] == expected, cold
        warm = [_detect_in_new_process(path, cache) for _ in range(3)]
        assert all(w["top"] == expected for w in warm), warm
    return {"detect_arch_s": statistics.median(w["first"] for w in warm),
            "detect_arch_warm_s": statistics.median(w["again"] for w in warm),
            "detect_arch_cold_s": cold["first"]}


if __name__ == "__main__":
    print(run())
