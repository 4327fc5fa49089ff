"""An IterableDataset that says ``__len__ = 320`` but never stops: `workbench train` ends each epoch at 320 samples
and says so, in bounded time (before: the first epoch never ended, and nothing was said)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time

import torch

from workbench.core.train.data.loaders import epoch_batches, overlong_text
from workbench.core.train.data.user_data import IterableLoader

ENDLESS = '''
import itertools

import torch
from torch import nn
from torch.utils.data import IterableDataset


class Endless(IterableDataset):
    """Says 320 samples, yields forever."""

    def __len__(self):
        return 320

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for i in itertools.count():
            x = torch.randn(8, generator=g)
            yield x, int(x.sum() > 0)


def make():
    return Endless(), Endless()


def model():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
'''


def test_an_endless_iterable_ends_each_epoch_at_its_len_and_says_so(tmp_path):
    (tmp_path / "endless.py").write_text(ENDLESS)
    (tmp_path / "run.toml").write_text(textwrap.dedent(f'''\
        epochs = 2
        run_dir = "{tmp_path / 'out'}"
        tensorboard = false
        [data]
        dataset = "endless.py:make"
        batch_size = 32
        num_workers = 0
        [model]
        arch = "endless.py:model"
        [task]
        kind = "classification"
        '''))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "workbench", "train", str(tmp_path / "run.toml"), "--trust"],
                          capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "finished: completed" in out and "epoch 2/2  step 20 " in out  # 320 / 32 = 10 steps an epoch
    said = [ln for ln in out.splitlines() if "yields more than its __len__" in ln]
    assert len(said) == 4 and all("stopped at 320 samples (10 batches)" in ln for ln in said), said  # 2 x train, val
    assert any("the validation data" in ln for ln in said)
    assert elapsed < 90, elapsed  # ~6 s here, most of it imports


class Counted(torch.utils.data.IterableDataset):
    def __init__(self, n: int, says: int):
        self.n, self.says = n, says

    def __len__(self):
        return self.says

    def __iter__(self):
        return iter(torch.arange(self.n, dtype=torch.float32))


def test_an_epoch_is_the_loaders_len_and_a_short_or_exact_one_says_nothing():
    said = []
    exact = IterableLoader(Counted(10, 10), batch_size=4)
    assert len(list(epoch_batches(iter(exact), len(exact), lambda: said.append(1)))) == 3 and not said
    short = IterableLoader(Counted(5, 10), batch_size=4)  # fewer than it says: ends when it ends, as before
    assert len(list(epoch_batches(iter(short), len(short), lambda: said.append(1)))) == 2 and not said
    long = IterableLoader(Counted(100, 10), batch_size=4)
    batches = list(epoch_batches(iter(long), len(long), lambda: said.append(overlong_text(long, "training"))))
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert said == ["the training data yields more than its __len__ says: the epoch stopped at 10 samples "
                    "(3 batches); make __len__ the number of samples one pass yields"]
    resumed = list(epoch_batches(long.iter_epoch(0, start_batch=1), len(long) - 1, lambda: None))
    assert len(resumed) == 2  # a resumed epoch: the batches left


def test_the_trainer_stops_an_endless_loader_of_its_own(tmp_path, caplog):
    """The core Trainer given loaders directly (no run.toml): a plain DataLoader over the endless dataset."""
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from workbench.core.train.config import TrainConfig
    from workbench.core.train.trainer.loop import Trainer

    class Endless(torch.utils.data.IterableDataset):
        def __len__(self):
            return 64

        def __iter__(self):
            while True:
                yield torch.ones(4), 1

    val = DataLoader(TensorDataset(torch.ones(8, 4), torch.ones(8, dtype=torch.long)), batch_size=8)
    cfg = TrainConfig(epochs=1, run_dir=str(tmp_path / "run"), tensorboard=False)
    with caplog.at_level(logging.WARNING):
        reason = Trainer(nn.Linear(4, 2), cfg, data=(DataLoader(Endless(), batch_size=16), val)).fit()
    assert reason == "completed"
    assert "stopped at 64 samples (4 batches)" in caplog.text
