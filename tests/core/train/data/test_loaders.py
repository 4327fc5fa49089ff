"""Loader settings from the machine, exact batches with persistent workers, device prefetch,
unreadable images, the input-bound meter and channels_last."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torchvision
from torch.utils.data import Dataset

from tests.image_folders import cut_short, jpeg_folder
from workbench.core.errors import DataError
from workbench.core.train.trainer.commands import SaveNow
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.data.datasets import build_loaders
from workbench.core.train.launch.headless import PrintProgress
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.data.loaders import (
    DevicePrefetcher,
    EpochLoader,
    LoaderSettings,
    input_wait_text,
    loader_settings,
    usable_cores,
)
from workbench.core.train.trainer.loop import Trainer


def _photos(root):
    return jpeg_folder(root, per_class=8, size=(20, 16))


def _data(root, **kw) -> DataConfig:
    base = dict(dataset="imagefolder", root=str(root), image_size=16, center_crop=16, batch_size=4,
                random_flip=True, random_crop=2)
    return DataConfig(**{**base, **kw})


# ---------------------------------------------------------------- settings
@pytest.mark.parametrize("cores, device, want", [
    (2, "cpu", (1, False, True)),
    (1, "cpu", (0, False, False)),
    (16, "cuda", (8, True, True)),
    (6, "cuda:1", (5, True, True)),
])
def test_auto_loader_settings_follow_the_machine_and_device(cores, device, want):
    s = loader_settings(DataConfig(dataset="imagefolder"), device, cores=cores)
    assert (s.num_workers, s.pin_memory, s.persistent_workers) == want
    assert "auto" in s.note


def test_loader_settings_set_by_hand_win_and_in_memory_data_has_no_workers():
    cfg = DataConfig(dataset="imagefolder", num_workers=3, pin_memory=False, persistent_workers=False)
    s = loader_settings(cfg, "cuda", cores=16)
    assert (s.num_workers, s.pin_memory, s.persistent_workers) == (3, False, False)
    assert loader_settings(DataConfig(), "cuda", in_memory=True).num_workers == 0


def test_an_imagefolder_run_gets_the_machines_workers_by_default(tmp_path):
    train, val, _ = build_loaders(_data(_photos(tmp_path / "p")), seed=0)
    want = max(0, min(8, usable_cores() - 1))
    assert isinstance(train, EpochLoader)
    assert train.settings.num_workers == want == val.settings.num_workers
    assert train.settings.persistent_workers == (want > 0)


def test_auto_settings_round_trip_through_run_toml_and_bad_values_are_named():
    cfg = TrainConfig()
    back = TrainConfig.from_toml(cfg.to_toml())
    assert (back.data.num_workers, back.data.pin_memory, back.channels_last) == ("auto", "auto", "auto")
    assert TrainConfig.from_toml("[data]\nnum_workers = 2\npin_memory = true\n").data.num_workers == 2
    with pytest.raises(ValueError, match="num_workers = 'many'.*\"auto\" or a whole number"):
        TrainConfig.from_toml('[data]\nnum_workers = "many"\n')
    with pytest.raises(ValueError, match="num_workers = -1"):
        TrainConfig.from_toml("[data]\nnum_workers = -1\n")


# ---------------------------------------------------------------- exact batches
def _epoch_batches(loader, epoch, start=0):
    return [(x.clone(), y.clone()) for x, y in loader.iter_epoch(epoch, start)]


def test_batches_do_not_depend_on_workers_persistence_or_resuming(tmp_path):
    """Flips and crops are seeded per (seed, epoch, sample): 0 workers == 2 persistent workers,
    epoch after epoch, and a resumed epoch yields the rest of the same batches."""
    root = _photos(tmp_path / "p")
    plain, _, _ = build_loaders(_data(root, num_workers=0), seed=3)
    pooled, _, _ = build_loaders(_data(root, num_workers=2), seed=3)
    assert pooled.settings.persistent_workers
    try:
        for epoch in (0, 1):
            a, b = _epoch_batches(plain, epoch), _epoch_batches(pooled, epoch)
            assert len(a) == len(b) == 4
            for (xa, ya), (xb, yb) in zip(a, b):
                assert torch.equal(xa, xb) and torch.equal(ya, yb)
        rest = _epoch_batches(pooled, 1, start=2)
        assert all(torch.equal(x, xa) for (x, _), (xa, _) in zip(rest, a[2:])) and len(rest) == 2
        assert not torch.equal(_epoch_batches(plain, 0)[0][0], a[0][0])  # epochs differ
    finally:
        pooled.close()


class _SaveAtStep(Callback):
    def __init__(self, step, path):
        self.step, self.path = step, path

    def on_step_end(self, trainer, metrics):
        if metrics["step"] == self.step:
            trainer.queue(SaveNow(self.path))

    def on_command_applied(self, trainer, command):
        if isinstance(command, SaveNow):
            trainer.request_stop()


def _resnet():
    torch.manual_seed(5)
    return torchvision.models.resnet18(num_classes=2)


def test_a_run_with_persistent_workers_resumes_bit_identical_mid_epoch(tmp_path):
    root = _photos(tmp_path / "p")

    def config(name):
        return TrainConfig(data=_data(root, num_workers=2), epochs=2, lr=1e-3, seed=11,
                           run_dir=str(tmp_path / name), tensorboard=False)

    straight = _resnet()
    t = Trainer(straight, config("straight"))
    assert t.fit() == "completed" and t.train_loader.settings.persistent_workers

    mid = tmp_path / "mid.pt"
    first = _resnet()
    assert Trainer(first, config("first"), [_SaveAtStep(6, str(mid))]).fit() == "stopped"
    assert torch.load(mid, weights_only=True)["batch_in_epoch"] == 2  # 4 steps per epoch: inside epoch 2

    resumed = _resnet()
    t2 = Trainer(resumed, config("resumed"))
    t2.resume_from(mid)
    assert t2.fit() == "completed" and t2.step == t.step == 8
    for k, v in straight.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k


# ---------------------------------------------------------------- device prefetch
class _Counting:
    """Batches ``(i, i)`` with a record of how many were pulled."""

    def __init__(self, n):
        self.n, self.pulled = n, 0

    def __iter__(self):
        for i in range(self.n):
            self.pulled += 1
            yield torch.full((2, 3), float(i)), torch.tensor([i, i])


def test_the_prefetcher_keeps_the_order_and_stays_one_batch_ahead():
    source = _Counting(5)
    seen = []
    for xb, yb in DevicePrefetcher(source, torch.device("cpu")):
        seen.append(int(yb[0]))
        assert source.pulled == min(5, len(seen) + 1)  # the next batch is already loaded
    assert seen == [0, 1, 2, 3, 4]
    assert list(DevicePrefetcher(_Counting(0), torch.device("cpu"))) == []


def test_the_prefetcher_applies_channels_last_to_images_only():
    batches = [(torch.rand(2, 3, 4, 5), torch.tensor([0, 1]))]
    ((x, y),) = list(DevicePrefetcher(batches, torch.device("cpu"), torch.channels_last))
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    assert torch.equal(x, batches[0][0]) and torch.equal(y, batches[0][1])


# ---------------------------------------------------------------- unreadable images
def test_an_image_cut_short_stops_the_run_naming_the_file_and_its_class_folder(tmp_path):
    root = _photos(tmp_path / "p")
    cut_short(root / "train" / "bees" / "3.jpg")
    cfg = TrainConfig(data=_data(root, num_workers=1), epochs=1, run_dir=str(tmp_path / "run"), tensorboard=False)
    t = Trainer(_resnet(), cfg)
    assert t.fit() == "error"
    assert isinstance(t.error, DataError)
    msg = str(t.error)
    assert "train/bees/3.jpg (class folder bees)" in msg and "truncated" in msg.lower()
    assert "Skip unreadable images" in msg


def test_skip_unreadable_images_trains_on_and_names_the_skipped_files(tmp_path):
    root = _photos(tmp_path / "p")
    cut_short(root / "train" / "bees" / "3.jpg")
    (root / "val" / "ants" / "1.jpg").write_bytes(b"not an image at all")
    lines = []
    cfg = TrainConfig(data=_data(root, num_workers=1, skip_unreadable=True), epochs=2,
                      run_dir=str(tmp_path / "run"), tensorboard=False)
    t = Trainer(_resnet(), cfg, [PrintProgress(lines.append)])
    assert t.fit() == "completed"
    assert "2 unreadable image file(s) will be skipped" in (t.data_note or "")
    for epoch in t.history:
        assert len(epoch["skipped"]) == 2
        assert any("train/bees/3.jpg (class folder bees)" in s for s in epoch["skipped"])
        assert any("val/ants/1.jpg (class folder ants)" in s for s in epoch["skipped"])
    assert t.samples == 2 * 15  # 16 training images, one skipped
    assert lines.count("skipped 2 unreadable image(s) in epoch 1:") == 1
    assert any(line.strip().startswith(str(root / "train" / "bees" / "3.jpg")) for line in lines)


# ---------------------------------------------------------------- the input-bound meter
class _SlowSamples(Dataset):
    """48 small images, each taking ``delay`` seconds to 'load' (the sleep stands for slow storage:
    it is what the meter measures, not a wait for a condition)."""

    def __init__(self, delay):
        self.delay = delay
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.rand(48, 3, 32, 32, generator=g), torch.randint(0, 2, (48,), generator=g)

    def __len__(self):
        return 48

    def __getitem__(self, i):
        time.sleep(self.delay)
        return self.x[i], self.y[i]


class _Metrics(Callback):
    def __init__(self):
        self.rows = []

    def on_metrics(self, trainer, batch):
        self.rows.extend(batch)


def _meter_run(tmp_path, delay):
    settings = LoaderSettings(0, False, False)
    # the training loader loads slowly; validation (not metered) at once
    loaders = tuple(EpochLoader(_SlowSamples(d), 16, 0, True, False, settings) for d in (delay, 0.0))
    rec = _Metrics()
    cfg = TrainConfig(epochs=1, emit_every_ms=0, run_dir=str(tmp_path / f"run{delay}"), tensorboard=False)
    t = Trainer(torchvision.models.squeezenet1_1(num_classes=2), cfg, [rec], data=loaders)
    assert t.fit() == "completed", t.error
    return t, rec.rows


def test_the_input_bound_meter_tells_a_data_bound_run_from_a_compute_bound_one(tmp_path):
    # 16 x 100 ms of loading per step: a squeezenet step on 2 busy cores (two test workers) took ~1 s, and
    # 16 x 40 ms then read as 37 % waiting
    slow, rows = _meter_run(tmp_path, 0.1)
    assert all(0.0 <= r["input_wait"] <= 1.0 for r in rows) and len(rows) == 3
    assert rows[-1]["input_wait"] > 0.5  # past the first step (which also warms up the compute)
    assert input_wait_text(rows[-1]["input_wait"]).startswith("input-bound")
    fast, _ = _meter_run(tmp_path, 0.0)
    assert fast.history[0]["input_wait"] < slow.history[0]["input_wait"] / 2
    text = (tmp_path / "run0.1" / "metrics.csv").read_text().splitlines()
    column = text[0].split(",").index("input_wait")
    assert float(text[1].split(",")[column]) == pytest.approx(slow.history[0]["input_wait"])


def test_input_wait_text():
    assert input_wait_text(math.nan) == ""
    assert input_wait_text(0.12) == "data wait 12%"
    assert input_wait_text(0.83, "cuda") == "input-bound 83%: more loader workers or Decode on GPU"
    assert input_wait_text(0.83, "cpu") == "input-bound 83%: more loader workers"


# ---------------------------------------------------------------- channels_last
def test_channels_last_on_request_converts_the_model_and_trains(tmp_path):
    cfg = TrainConfig(data=DataConfig(dataset="fake", fake_shape=[3, 32, 32], fake_size=64, batch_size=16),
                      epochs=1, channels_last=True, run_dir=str(tmp_path / "run"), tensorboard=False)
    model = torchvision.models.resnet18(num_classes=10)
    t = Trainer(model, cfg)
    assert t.fit() == "completed" and t.channels_last
    assert model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert not model.conv1.weight.is_contiguous()
    auto = Trainer(torchvision.models.resnet18(num_classes=10),
                   TrainConfig(data=cfg.data, epochs=0, run_dir=str(tmp_path / "auto"), tensorboard=False))
    auto.prepare()
    assert not auto.channels_last  # "auto" is for CUDA only


def test_close_ends_the_worker_processes_at_once(tmp_path):
    import multiprocessing

    train, _, _ = build_loaders(_data(_photos(tmp_path / "p"), num_workers=2), seed=0)
    batches = train.iter_epoch(0)
    next(batches)  # a half-run epoch keeps its iterator (and its workers) alive
    assert len(multiprocessing.active_children()) >= 2
    train.close()
    assert multiprocessing.active_children() == []
    assert len(list(train.iter_epoch(1))) == 4  # new workers for the next epoch
    train.close()
    assert multiprocessing.active_children() == []
