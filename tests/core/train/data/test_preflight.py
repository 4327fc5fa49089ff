"""The pre-flight check: bad data and a head that does not fit are caught before any step."""

from __future__ import annotations

import torchvision
from torch import nn

from tests.image_folders import jpeg_folder
from workbench.core.errors import DataError
from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.loop import Trainer
from workbench.core.train.data.preflight import ClassCountMismatch


def _jpeg_folder(root, per_class=4, corrupt=None):
    jpeg_folder(root, per_class)
    if corrupt is not None:
        (root / corrupt).write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG any more")


def test_a_corrupt_image_in_val_is_found_before_the_first_epoch(tmp_path):
    """It was found after a whole training epoch, and the epoch was lost."""
    _jpeg_folder(tmp_path / "photos", corrupt="val/bees/2.jpg")
    cfg = TrainConfig(data=DataConfig(dataset="imagefolder", root=str(tmp_path / "photos"), batch_size=4),
                      epochs=1, run_dir=str(tmp_path / "run"), tensorboard=False)
    trainer = Trainer(torchvision.models.resnet18(num_classes=2), cfg)
    assert trainer.fit() == "error" and trainer.step == 0
    assert isinstance(trainer.error, DataError)
    assert "val/bees/2.jpg" in str(trainer.error) and "1 image file(s) cannot be read" in str(trainer.error)
    assert not (tmp_path / "run").exists()


def test_a_head_with_fewer_outputs_than_classes_is_named_before_any_step(tmp_path):
    """It failed at the first step with "IndexError: Target 9 is out of bounds"."""
    cfg = TrainConfig(data=DataConfig(dataset="digits"), epochs=1, run_dir=str(tmp_path / "run"), tensorboard=False)
    trainer = Trainer(DigitsCNN(num_classes=2), cfg)
    assert trainer.fit() == "error" and trainer.step == 0
    assert isinstance(trainer.error, ClassCountMismatch)
    assert (trainer.error.data_classes, trainer.error.model_outputs) == (10, 2)
    assert "the data has 10 classes but the model has 2 outputs" in str(trainer.error)
    assert not (tmp_path / "run").exists()


def test_more_outputs_than_classes_trains_with_a_note(tmp_path):
    _jpeg_folder(tmp_path / "photos")
    cfg = TrainConfig(data=DataConfig(dataset="imagefolder", root=str(tmp_path / "photos"), batch_size=4),
                      epochs=1, run_dir=str(tmp_path / "run"), tensorboard=False)
    trainer = Trainer(torchvision.models.resnet18(), cfg)
    assert trainer.fit() == "completed"
    assert "1000 outputs for 2 classes" in trainer.data_note


def test_a_batch_the_model_cannot_take_is_named_with_its_shape(tmp_path):
    cfg = TrainConfig(data=DataConfig(dataset="fake", fake_shape=[3, 8, 8], fake_size=64, batch_size=16),
                      epochs=1, run_dir=str(tmp_path / "run"), tensorboard=False)
    model = nn.Sequential(nn.Flatten(), nn.Linear(10, 2))  # takes 10 features; the images have 192
    trainer = Trainer(model, cfg)
    assert trainer.fit() == "error" and trainer.step == 0
    assert ("the first training batch ((16, 3, 8, 8) float32, (16,) int64) does not go through the model"
            in str(trainer.error))
    assert not (tmp_path / "run").exists()


def test_the_image_scan_reports_its_progress(tmp_path):
    from workbench.core.train.trainer.hooks import Callback

    class Heard(Callback):
        def __init__(self):
            self.texts = []

        def on_progress(self, trainer, text):
            self.texts.append(text)

    _jpeg_folder(tmp_path / "photos", per_class=60)  # 240 files
    cfg = TrainConfig(data=DataConfig(dataset="imagefolder", root=str(tmp_path / "photos"), batch_size=8),
                      epochs=1, run_dir=str(tmp_path / "run"), tensorboard=False)
    heard = Heard()
    trainer = Trainer(torchvision.models.resnet18(num_classes=2), cfg, [heard])
    trainer.prepare()
    assert heard.texts == ["checking images 200 / 240"]
    for loader in (trainer.train_loader, trainer.val_loader):
        loader.close()  # prepare() without fit(): the pre-flight batch started the persistent workers


# ------------------------------------------------------------------ before Start: the head against the data
def test_a_1000_output_head_against_a_10_class_image_folder_is_told_before_start(tmp_path):
    """The issue: a 1,000-output fc trained against 10 classes with no warning (Find LR ran at loss ln 1000)."""
    from workbench.core.train.data.preflight import HeadMismatch, data_class_count, head_mismatch

    root = jpeg_folder(tmp_path / "photos", per_class=1, size=(8, 8), classes=tuple(f"c{i}" for i in range(10)))
    cfg = DataConfig(dataset="imagefolder", root=str(root))
    assert data_class_count(cfg) == 10
    model = torchvision.models.resnet18()  # 1,000 outputs
    found = head_mismatch(model, cfg)
    assert found == HeadMismatch("fc", 1000, 10)
    assert "fc has 1,000 outputs but the data has 10 classes" in found.message
    assert head_mismatch(torchvision.models.resnet18(num_classes=10), cfg) is None
    flat = tmp_path / "flat"  # one folder per class at the root (split by val_fraction)
    for i in range(3):
        (flat / f"k{i}").mkdir(parents=True)
    assert data_class_count(DataConfig(dataset="imagefolder", root=str(flat))) == 3
    assert data_class_count(DataConfig(dataset="imagefolder", root=str(tmp_path / "missing"))) is None


def test_class_counts_of_the_other_sources(tmp_path):
    from workbench.core.train.data.preflight import data_class_count, head_mismatch

    assert data_class_count(DataConfig(dataset="cifar10")) == 10
    assert data_class_count(DataConfig(dataset="fake", num_classes=3)) == 3
    assert data_class_count(DataConfig(dataset="digits"), task="regression") is None
    assert data_class_count(DataConfig(dataset="pkg.mod:make")) is None
    table = tmp_path / "t.csv"
    table.write_text("x,y,label\n" + "".join(f"{i},{i * 2},{'abc'[i % 3]}\n" for i in range(30)))
    assert data_class_count(DataConfig(dataset="csv", root=str(table), target="label")) == 3
    assert data_class_count(DataConfig(dataset="csv", root=str(table), target=["label"])) == 3
    assert data_class_count(DataConfig(dataset="csv", root=str(table), target="x")) is None  # a regression
    assert head_mismatch(DigitsCNN(), DataConfig(dataset="digits")) is None
    assert head_mismatch(nn.Sequential(nn.Linear(4, 2), nn.ReLU()), DataConfig(dataset="digits")) is not None
