"""Datasets, transforms, loaders and the optimizer/scheduler factories."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from workbench.core.errors import DataError
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.data.datasets import (
    EpochLoader,
    TensorBatchLoader,
    build_datasets,
    build_loaders,
    epoch_seed,
    image_transforms,
)
from workbench.core.train.trainer.optim import default_head, lr_schedule_preview, param_groups


def test_digits_split_and_normalization():
    train, val, info = build_datasets(DataConfig())
    assert info.num_classes == 10 and info.input_shape == (1, 8, 8)
    assert (info.train_size, info.val_size) == (1438, 359)
    x = torch.cat([train.tensors[0], val.tensors[0]])
    assert abs(float(x.mean())) < 0.05 and abs(float(x.std()) - 1) < 0.05
    # same split every time, independent of the training seed
    train2, _, _ = build_datasets(DataConfig())
    assert torch.equal(train.tensors[1], train2.tensors[1])
    _, val3, _ = build_datasets(DataConfig(val_fraction=0.5))
    assert len(val3) == 898 or len(val3) == 899


def test_digits_transforms():
    _, _, info = build_datasets(DataConfig(channels="rgb", image_size=16, center_crop=12, normalize="imagenet"))
    assert info.input_shape == (3, 12, 12)


def test_tensor_batch_loader_is_deterministic_and_resumable():
    x, y = torch.arange(50.).view(50, 1, 1, 1).expand(50, 1, 4, 4).contiguous(), torch.arange(50)
    loader = TensorBatchLoader(x, y, batch_size=8, seed=3, random_flip=True, random_crop=1)
    assert len(loader) == 7
    e1 = list(loader.iter_epoch(1))
    assert sorted(torch.cat([b[1] for b in e1]).tolist()) == list(range(50))
    again = list(loader.iter_epoch(1))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(e1, again))
    tail = list(loader.iter_epoch(1, start_batch=4))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(e1[4:], tail)) and len(tail) == 3
    e2 = list(loader.iter_epoch(2))
    assert not torch.equal(e1[0][1], e2[0][1])
    assert len(TensorBatchLoader(x, y, 8, drop_last=True)) == 6
    plain = TensorBatchLoader(x, y, 8, shuffle=False)
    assert torch.equal(next(iter(plain))[1], torch.arange(8))
    assert epoch_seed(0, 1) != epoch_seed(1, 0)


def test_fake_data_shape_and_loaders():
    cfg = DataConfig(dataset="fake", fake_shape=[3, 10, 12], fake_size=40, num_classes=4, batch_size=16)
    train, val, info = build_loaders(cfg)
    assert isinstance(train, TensorBatchLoader)
    xb, yb = next(iter(train))
    assert xb.shape == (16, 3, 10, 12) and int(yb.max()) < 4
    assert info.train_size == 32 and info.val_size == 8
    with pytest.raises(DataError, match="fake_shape"):
        build_datasets(DataConfig(dataset="fake", fake_shape=[3, 10]))


@pytest.mark.parametrize("name", ["mnist", "fashionmnist", "cifar10"])
def test_missing_torchvision_root_names_folder(tmp_path, name):
    missing = tmp_path / "not-here"
    with pytest.raises(DataError) as e:
        build_datasets(DataConfig(dataset=name, root=str(missing)))
    assert str(missing) in str(e.value) and "Download" in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="Download"):
        build_datasets(DataConfig(dataset=name, root=str(tmp_path / "empty")))


def _write_images(folder, classes=("cat", "dog"), n=6, size=(12, 10)):
    from PIL import Image

    for c in classes:
        (folder / c).mkdir(parents=True)
        for i in range(n):
            arr = (np.random.default_rng(i).random((size[1], size[0], 3)) * 255).astype(np.uint8)
            Image.fromarray(arr).save(folder / c / f"{i}.png")


def test_imagefolder_train_val_and_split(tmp_path):
    _write_images(tmp_path / "tv" / "train")
    _write_images(tmp_path / "tv" / "val", n=2)
    cfg = DataConfig(dataset="imagefolder", root=str(tmp_path / "tv"), image_size=8, center_crop=8,
                     random_flip=True, random_crop=2, batch_size=4)
    train, val, info = build_loaders(cfg)
    assert isinstance(train, EpochLoader)
    assert info.classes == ["cat", "dog"] and info.input_shape == (3, 8, 8)
    assert (info.train_size, info.val_size) == (12, 4)
    xb, yb = next(iter(train))
    assert xb.shape == (4, 3, 8, 8) and xb.dtype == torch.float32
    # the epoch order is a function of (seed, epoch) and resumable
    a = [b[1] for b in train.iter_epoch(1)]
    b = [b[1] for b in train.iter_epoch(1, start_batch=1)]
    assert all(torch.equal(x, y) for x, y in zip(a[1:], b))
    _write_images(tmp_path / "flat", n=5)
    _, _, info = build_datasets(DataConfig(dataset="imagefolder", root=str(tmp_path / "flat"), val_fraction=0.2,
                                           channels="grayscale"))
    assert (info.train_size, info.val_size) == (8, 2) and info.input_shape[0] == 1
    with pytest.raises(DataError, match="folder not found"):
        build_datasets(DataConfig(dataset="imagefolder", root=str(tmp_path / "nope")))


def test_image_transforms_pipeline():
    from PIL import Image

    t, channels = image_transforms(DataConfig(channels="rgb", image_size=16, normalize="mnist"), False, 1)
    out = t(Image.new("L", (20, 20), color=128))
    assert channels == 3 and out.shape == (3, 16, 16)
    assert torch.allclose(out[0, 0, 0], torch.tensor((128 / 255 - 0.1307) / 0.3081), atol=1e-3)


def test_param_groups_and_head():
    from workbench.core.model.demo import DigitsCNN

    model = DigitsCNN()
    assert default_head(model) == "classifier"
    groups = param_groups(model, TrainConfig(backbone_lr_mult=0.1, lr=1.0))
    by_role = {g["wb_role"]: g for g in groups}
    assert by_role["head"]["wb_names"] == ["classifier.weight", "classifier.bias"]
    assert by_role["backbone"]["lr"] == pytest.approx(0.1)
    model.features.requires_grad_(False)
    groups = param_groups(model, TrainConfig(backbone_lr_mult=0.1))
    assert [g["wb_role"] for g in groups] == ["head"]


def test_lr_preview_shapes():
    for sched in ["none", "step", "multistep", "cosine", "onecycle", "plateau"]:
        c = TrainConfig(epochs=3, lr=0.1, scheduler=sched, step_size=1, milestones=[2], gamma=0.5)
        lr = lr_schedule_preview(c, 10)
        assert lr.shape == (30,) and np.all(lr >= 0)
    c = TrainConfig(epochs=3, lr=0.1, scheduler="step", step_size=1, gamma=0.5)
    lr = lr_schedule_preview(c, 10)
    assert lr[0] == pytest.approx(0.1) and lr[10] == pytest.approx(0.05) and lr[29] == pytest.approx(0.025)
    cos = lr_schedule_preview(TrainConfig(epochs=2, lr=0.1, scheduler="cosine"), 5)
    assert cos[0] == pytest.approx(0.1) and cos[-1] < 0.01
    one = lr_schedule_preview(TrainConfig(epochs=2, lr=0.1, scheduler="onecycle"), 5)
    assert one.max() == pytest.approx(0.1, rel=1e-3) and one[0] < 0.01


def test_config_toml_round_trip_and_validation(tmp_path):
    c = TrainConfig(epochs=3, grad_clip=1.0, milestones=[1, 2], head="classifier",
                    data=DataConfig(dataset="fake", fake_shape=[1, 8, 8]))
    path = tmp_path / "c.toml"
    c.to_toml(path)
    assert TrainConfig.from_toml(path) == c
    assert TrainConfig.from_toml(c.to_toml()) == c
    with pytest.raises(ValueError, match="scheduler"):
        TrainConfig.from_dict({"scheduler": "warm"})
    with pytest.raises(ValueError, match="unknown setting"):
        TrainConfig.from_dict({"data": {"datset": "digits"}})


def test_resnet18_trains_on_grayscale_digits_through_channel_fitting(tmp_path):
    """A user opens resnet18 (conv1 takes 3 channels) and presses Start on the demo digits."""
    import torchvision

    from workbench.core.train.config import DataConfig, TrainConfig
    from workbench.core.train.data.datasets import fit_channels_to_model, model_input_channels
    from workbench.core.train.trainer.loop import Trainer

    model = torchvision.models.resnet18(weights=None, num_classes=10)
    assert model_input_channels(model) == 3
    # a 10 % training split keeps this to a few resnet18 steps
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=32, val_fraction=0.9), epochs=1,
                      run_dir=str(tmp_path / "run"))
    trainer = Trainer(model, cfg)
    assert trainer.fit() == "completed", trainer.error
    assert cfg.data.channels == "rgb" and "rgb" in trainer.data_note
    assert trainer.history and math.isfinite(trainer.history[-1]["train_loss"])

    explicit = DataConfig(dataset="digits", channels="grayscale")
    assert fit_channels_to_model(explicit, model) is None and explicit.channels == "grayscale"
    fake = DataConfig(dataset="fake", fake_shape=[3, 16, 16])
    from workbench.core.model.demo import DigitsCNN

    assert fit_channels_to_model(fake, DigitsCNN()) is not None and fake.fake_shape[0] == 1


def _write_idx(raw, prefix, n, rng):
    import struct

    images = rng.integers(0, 255, (n, 28, 28), dtype=np.uint8)
    (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.tobytes())


@pytest.mark.parametrize("name, folder", [("mnist", "MNIST"), ("fashionmnist", "FashionMNIST")])
def test_torchvision_dataset_from_a_local_root_with_transforms(tmp_path, name, folder):
    # tiny files in torchvision's raw idx layout: root/<Class>/raw/{train,t10k}-{images,labels}-idx*-ubyte
    raw = tmp_path / folder / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    _write_idx(raw, "train", 12, rng)
    _write_idx(raw, "t10k", 6, rng)
    cfg = DataConfig(dataset=name, root=str(tmp_path), image_size=16, center_crop=12, channels="rgb",
                     random_flip=True, random_crop=2, batch_size=4)
    train, val, info = build_loaders(cfg, seed=0)
    assert (info.train_size, info.val_size, info.input_shape) == (12, 6, (3, 12, 12))
    xb, yb = next(iter(train))
    assert xb.shape == (4, 3, 12, 12) and yb.dtype == torch.int64
    assert abs(float(xb.mean())) < 3.0  # normalized with the dataset's preset, not raw 0..255
