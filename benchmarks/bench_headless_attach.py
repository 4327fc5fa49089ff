"""What listening for a window costs a headless ``workbench train`` run that no window attaches to.

``headless_attach_idle_overhead_ratio``
    The training time of ``workbench train RUN.toml`` (it listens: 127.0.0.1, a
    token, a discovery file, the attach server's threads idle) against the same
    run with ``--no-attach``: the plain run's seconds over the listening run's,
    for the epochs after the first (start-up, imports and the first epoch's
    warm-up left out), read from each run's ``metrics.csv`` (``time_s`` at each
    epoch's end). Target >= 0.99.

How: the digits demo (``digits_cnn``, batch 64, Adam 1e-3), :data:`EPOCHS` epochs,
each run a fresh ``workbench train`` process with one torch thread (``OMP_NUM_THREADS=1``: the attach
server's idle threads then have a core of their own, as beside a GPU run); :data:`PAIRS` pairs interleaved in ABBA
order (plain, listening, listening, plain, ...) so that a drift of the machine's
speed falls on both sides; the figure is the median pair ratio, with the range of the
pairs (``_min``, ``_max``).
"""

from __future__ import annotations

import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig

#: Epochs of each run (the first is left out: warm-up); ~0.2 s each on this machine, one thread, alone. Ten
#: (2 s measured a run) spread the pairs from 0.86 to 1.36 on the shared machine: thirty.
EPOCHS = 30
#: Interleaved pairs (each pair: one run with the attach server, one with --no-attach).
PAIRS = 5
#: Seconds one run may take before the benchmark gives up on it.
RUN_TIMEOUT_S = 600

ROOT = Path(__file__).resolve().parent.parent


def _train_seconds(folder: Path, listen: bool) -> float:
    """Seconds from the end of the first epoch to the end of the last, of one ``workbench train`` run."""
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=EPOCHS, lr=1e-3, seed=0,
                      optimizer="adam", run_dir=str(folder), tensorboard=False, model=ModelConfig(arch="digits_cnn"))
    path = folder.parent / f"{folder.name}.toml"
    cfg.to_toml(path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_DATA_DIR": str(folder.parent / "data"),
           "OMP_NUM_THREADS": "1"}  # one torch thread a side: a shared machine's other load stalls fewer
    cmd = [sys.executable, "-m", "workbench", "train", str(path), *([] if listen else ["--no-attach"])]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    if listen and "token" not in done.stdout + done.stderr:
        raise RuntimeError("the listening run printed no attach address: it did not listen")
    with open(folder / "metrics.csv", newline="") as f:
        times = [float(row["time_s"]) for row in csv.DictReader(f)]
    return times[-1] - times[0]


def run() -> dict[str, float]:
    ratios = []
    with tempfile.TemporaryDirectory(prefix="bench-headless-") as tmp:
        for i in range(PAIRS):
            order = (False, True) if i % 2 == 0 else (True, False)  # ABBA
            seconds = {listen: _train_seconds(Path(tmp) / f"run{i}-{int(listen)}", listen) for listen in order}
            ratios.append(seconds[False] / seconds[True])
            print(f"  pair {i + 1}: --no-attach {seconds[False]:.2f} s, listening {seconds[True]:.2f} s "
                  f"(epochs 2-{EPOCHS}): {ratios[-1]:.3f}", flush=True)
    key = "headless_attach_idle_overhead_ratio"
    print(f"{key}: median {statistics.median(ratios):.3f} over {PAIRS} pairs "
          f"({min(ratios):.3f}-{max(ratios):.3f})", flush=True)
    return {key: statistics.median(ratios), f"{key}_min": min(ratios), f"{key}_max": max(ratios)}


if __name__ == "__main__":
    print(run())
