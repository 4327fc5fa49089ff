"""Data-parallel on CPU: 2 Gloo ranks of 1 thread each vs 1 process of 1 thread (issue 14).

``ddp_cpu_2proc_speedup``
    Training samples per second of ``workbench train RUN.toml --nproc-per-node 2``
    (torchrun, DistributedDataParallel, Gloo; torchrun gives each rank
    ``OMP_NUM_THREADS=1``) over ``workbench train RUN.toml`` in one process with
    ``OMP_NUM_THREADS=1``. The digits demo (``DigitsCNN``), global batch 64, Adam,
    ``EPOCHS`` epochs; samples/s is the ``samples_per_s`` column of ``metrics.csv``
    (training time of an epoch, validation excluded) averaged over epochs 2..,
    each side in fresh processes, median of ``PAIRS`` interleaved pairs. Expect
    close to 2 on 2 free cores.
``ddp_cpu_samples_per_s_1proc`` / ``_2proc``
    The medians of both sides.
``ddp_shutdown_deaths``
    Of those 2-rank runs, how many had a rank die during its shutdown after every
    rank completed (the launcher names it and still exits 0). A completed run
    used to exit 1 then (rank 1 SIGABRT, ``terminate called without an active
    exception``, in 4 of 116 runs on the 2-core machine).

``python -m benchmarks.bench_ddp --shutdown N`` runs N 2-rank runs of the same
file and prints how many exited non-zero and how many had a shutdown death.
"""

from __future__ import annotations

import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PAIRS = 3
EPOCHS = 6
#: The launcher's sentence for a rank that died after every rank completed.
SHUTDOWN_DEATH = "died during its shutdown"


def _run_file(folder: Path) -> Path:
    from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig

    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=EPOCHS, lr=3e-3, seed=0,
                      run_dir=str(folder / "run"), tensorboard=False, checkpoint_every_epoch=False,
                      model=ModelConfig(arch="digits_cnn"))
    path = folder / "run.toml"
    cfg.to_toml(path)
    return path


def _train(nproc: int) -> tuple[Path, subprocess.CompletedProcess]:
    """One ``workbench train`` of a fresh run file: its folder and the finished process (output captured)."""
    folder = Path(tempfile.mkdtemp(prefix=f"bench-ddp-{nproc}-"))
    path = _run_file(folder)
    args = ["train", str(path)] + (["--nproc-per-node", str(nproc)] if nproc > 1 else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "workbench", *args], env=env, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent, timeout=900)
    return folder, out


def _side(nproc: int, deaths: list | None = None) -> float:
    folder, out = _train(nproc)
    if deaths is not None and SHUTDOWN_DEATH in out.stdout:
        deaths.append(out.stdout.splitlines()[-1])
    if out.returncode != 0:
        raise RuntimeError(f"{nproc} process(es) failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    with open(folder / "run" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return statistics.mean(float(r["samples_per_s"]) for r in rows[1:])


def run() -> dict[str, float]:
    one, two, ratios, deaths = [], [], [], []
    for i in range(PAIRS):
        sides = (1, 2) if i % 2 == 0 else (2, 1)
        got = {n: _side(n, deaths) for n in sides}
        one.append(got[1])
        two.append(got[2])
        ratios.append(got[2] / got[1])
        print(f"ddp pair {i + 1}/{PAIRS}: 1 process {got[1]:.0f}, 2 ranks {got[2]:.0f} samples/s, "
              f"speedup {ratios[-1]:.2f}", flush=True)
    return {
        "ddp_cpu_2proc_speedup": statistics.median(ratios),
        "ddp_cpu_2proc_speedup_min": min(ratios),
        "ddp_cpu_2proc_speedup_max": max(ratios),
        "ddp_cpu_samples_per_s_1proc": statistics.median(one),
        "ddp_cpu_samples_per_s_2proc": statistics.median(two),
        "ddp_shutdown_deaths": float(len(deaths)),
    }


def shutdown(runs: int) -> dict[str, float]:
    """``runs`` 2-rank runs: how many exited non-zero, and how many had a rank die at shutdown."""
    nonzero = deaths = 0
    for i in range(runs):
        _, out = _train(2)
        nonzero += out.returncode != 0
        died = SHUTDOWN_DEATH in out.stdout
        deaths += died
        print(f"run {i + 1}/{runs}: exit {out.returncode}" + (f"; {out.stdout.splitlines()[-1]}" if died else ""),
              flush=True)
    return {"ddp_runs": float(runs), "ddp_nonzero_exits": float(nonzero), "ddp_shutdown_deaths": float(deaths)}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--shutdown"]:
        print(shutdown(int(sys.argv[2]) if len(sys.argv) > 2 else 20))
    else:
        print(run())
