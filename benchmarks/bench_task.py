"""A user's training step vs the built-in classification task (issue 26).

``own_step_overhead_ratio``
    Wall-clock time of a 3-epoch digits run (``DigitsCNN``, batch 64, Adam 1e-3,
    CPU, in this process, no TensorBoard) with the built-in classification task,
    divided by the same run through a user's ``training_step(model, batch)``
    from a ``file.py:`` spec computing the same thing (``cross_entropy`` of the
    model's output); both through :class:`~workbench.core.train.trainer.loop.Trainer`.
    What Workbench costs for running the user's step instead of its own: a ratio
    >= 1 means nothing. ``PAIRS`` pairs interleaved in ABBA order, median with
    the range of all pairs. Target >= 0.98.
``own_step_with_metric_ratio``
    The same with a step that also returns an accuracy (``{"loss": ..., "acc": ...}``:
    one more argmax per step, averaged into ``train_acc`` / ``val_acc``); reported.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TaskConfig, TrainConfig
from workbench.core.train.trainer.loop import Trainer

PAIRS = 9
STEP = '''
import torch

def training_step(model, batch):
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)

def with_metric(model, batch):
    x, y = batch
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, y)
    return {"loss": loss, "acc": (logits.argmax(1) == y).float().mean()}
'''


def _run(folder: Path, task: TaskConfig, i: int) -> float:
    cfg = TrainConfig(data=DataConfig(dataset="digits"), task=task, epochs=3, run_dir=str(folder / f"run{i}"),
                      tensorboard=False, checkpoint_every_epoch=False)
    torch.manual_seed(0)
    trainer = Trainer(DigitsCNN(), cfg)
    t0 = time.perf_counter()
    assert trainer.fit() == "completed", trainer.error
    return time.perf_counter() - t0


def _pairs(folder: Path, builtin: TaskConfig, own: TaskConfig, tag: int) -> list[float]:
    ratios = []
    for i in range(PAIRS):
        order = (builtin, own) if i % 2 == 0 else (own, builtin)
        times = {id(t): _run(folder, t, tag + 2 * i + k) for k, t in enumerate(order)}
        ratios.append(times[id(builtin)] / times[id(own)])
    return ratios


def run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        step_file = folder / "my_step.py"
        step_file.write_text(STEP)
        builtin = TaskConfig(kind="classification")
        _run(folder, builtin, -1)  # warm-up: first-run costs (imports, allocator) on neither side
        same = _pairs(folder, builtin, TaskConfig(step=f"{step_file}:training_step"), 0)
        metric = _pairs(folder, builtin, TaskConfig(step=f"{step_file}:with_metric"), 1000)
    figures = {}
    for name, ratios in (("own_step_overhead_ratio", same), ("own_step_with_metric_ratio", metric)):
        print(f"{name}: median {statistics.median(ratios):.3f} over {PAIRS} pairs "
              f"(range {min(ratios):.3f}-{max(ratios):.3f})")
        figures.update({name: statistics.median(ratios), f"{name}_min": min(ratios), f"{name}_max": max(ratios)})
    return figures


if __name__ == "__main__":
    print(run())
