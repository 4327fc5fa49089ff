"""Decode on GPU: the batched tensor path (bytes read by workers, decoded and transformed per batch)
agrees with the PIL path; it runs on the CPU too (by hand), so everything but nvjpeg is tested here."""

from __future__ import annotations

import pytest
import torch
import torchvision
from PIL import Image

from tests.image_folders import jpeg_folder
from workbench.core.errors import DataError
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.data.datasets import build_loaders
from workbench.core.train.trainer.loop import Trainer


def _photos(root, per_class=6, png=None):
    """Smooth 40x30 JPEGs (a gradient plus noise: resizing them is well posed), 2 classes; ``png``
    turns one of them into a PNG (decoded on the CPU by the tensor path)."""
    jpeg_folder(root, per_class, size=(40, 30), smooth=True, quality=95)
    if png is not None:
        Image.open(root / png.replace(".png", ".jpg")).save(root / png)
        (root / png.replace(".png", ".jpg")).unlink()
    return root


def _cfg(root, **kw):
    base = dict(dataset="imagefolder", root=str(root), image_size=24, center_crop=20, batch_size=4,
                normalize="imagenet", num_workers=0)
    return DataConfig(**{**base, **kw})


def _val_batches(cfg, device="cpu"):
    _, val, info = build_loaders(cfg, seed=0, device=device)
    return [(x.cpu(), y.cpu()) for x, y in val.iter_epoch(0)], info, val


@pytest.mark.parametrize("png", [None, "val/bees/2.png"])
def test_the_tensor_path_matches_the_pil_path_within_interpolation_tolerance(tmp_path, png):
    root = _photos(tmp_path / "p", png=png)
    pil, info_pil, _ = _val_batches(_cfg(root, decode_on_gpu=False))
    tensor, info_t, loader = _val_batches(_cfg(root, decode_on_gpu=True))
    assert loader.batch_transform is not None and "JPEG decoding on cpu" in loader.settings.note
    assert info_t.input_shape == info_pil.input_shape == (3, 20, 20)
    assert len(pil) == len(tensor) == 3
    for (xp, yp), (xt, yt) in zip(pil, tensor):
        assert torch.equal(yp, yt) and xt.dtype == torch.float32 and xt.shape == xp.shape
        diff = (xt - xp).abs() * 0.225  # back to [0, 1] pixel units (ImageNet std)
        assert diff.mean() < 0.01 and diff.max() < 0.1, (diff.mean(), diff.max())


def test_decoding_is_on_the_device_only_when_asked_or_on_cuda(tmp_path):
    root = _photos(tmp_path / "p")
    train, _, _ = build_loaders(_cfg(root), device="cpu")
    assert train.batch_transform is None  # auto: off on CPU
    train, _, _ = build_loaders(_cfg(root, dataset="imagefolder", decode_on_gpu=True), device="cpu")
    assert train.batch_transform is not None


def test_augmentation_of_the_tensor_path_is_exact_across_workers_and_resume(tmp_path):
    root = _photos(tmp_path / "p")
    cfg0 = _cfg(root, decode_on_gpu=True, random_flip=True, random_crop=3)
    a, _, _ = build_loaders(cfg0, seed=4)
    b, _, _ = build_loaders(_cfg(root, decode_on_gpu=True, random_flip=True, random_crop=3, num_workers=2), seed=4)
    try:
        first = [x for x, _ in a.iter_epoch(1)]
        assert [torch.equal(x, y) for x, y in zip(first, (x for x, _ in b.iter_epoch(1)))] == [True] * 3
        assert torch.equal(next(iter(b.iter_epoch(1, start_batch=2)))[0], first[2])
        plain = [x for x, _ in build_loaders(_cfg(root, decode_on_gpu=True), seed=4)[0].iter_epoch(1)]
        assert not all(torch.equal(x, y) for x, y in zip(first, plain))  # flips and crops happened
    finally:
        b.close()


def test_a_cut_jpeg_in_the_tensor_path_is_named_or_skipped(tmp_path):
    root = _photos(tmp_path / "p")
    path = root / "train" / "ants" / "4.jpg"
    path.write_bytes(path.read_bytes()[:300])
    cfg = TrainConfig(data=_cfg(root, decode_on_gpu=True), epochs=1, run_dir=str(tmp_path / "r1"), tensorboard=False)
    t = Trainer(torchvision.models.resnet18(num_classes=2), cfg)
    assert t.fit() == "error" and isinstance(t.error, DataError)
    assert "train/ants/4.jpg (class folder ants)" in str(t.error)
    cfg.data.skip_unreadable, cfg.run_dir = True, str(tmp_path / "r2")
    t = Trainer(torchvision.models.resnet18(num_classes=2), cfg)
    assert t.fit() == "completed", t.error
    assert any("train/ants/4.jpg (class folder ants)" in s for s in t.history[0]["skipped"])
    assert t.samples == 11


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_nvjpeg_decoding_on_cuda_matches_the_pil_path(tmp_path):
    root = _photos(tmp_path / "p")
    pil, _, _ = _val_batches(_cfg(root, decode_on_gpu=False), device="cuda")
    _, val, _ = build_loaders(_cfg(root), seed=0, device="cuda")  # auto: on for CUDA
    assert val.batch_transform is not None and val.settings.pin_memory
    batches = list(val.iter_epoch(0))
    assert all(x.device.type == "cuda" for x, _ in batches)
    for (xp, _), (xt, _) in zip(pil, batches):
        diff = (xt.cpu() - xp).abs() * 0.225
        assert diff.mean() < 0.01 and diff.max() < 0.12, (diff.mean(), diff.max())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_resnet_trains_on_cuda_with_the_defaults_decode_prefetch_and_channels_last(tmp_path):
    root = _photos(tmp_path / "p", per_class=16)
    cfg = TrainConfig(data=DataConfig(dataset="imagefolder", root=str(root), image_size=32, center_crop=32,
                                      batch_size=8, random_flip=True), epochs=2, device="cuda", amp=True,
                      run_dir=str(tmp_path / "run"), tensorboard=False)
    model = torchvision.models.resnet18(num_classes=2)
    t = Trainer(model, cfg)
    assert t.fit() == "completed", t.error
    assert t.channels_last and model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert "JPEG decoding on cuda" in t.loader_note
    assert 0.0 <= t.history[-1]["input_wait"] <= 1.0
