"""The settings form reaches every DataConfig option: transforms, augmentation, loader, FakeData.

Offscreen, CPU. The runs are short (FakeData / digits, one epoch) and each test
fails if it leaves a training QThread running.
"""

from __future__ import annotations

import pytest

from tests.ui.helpers import panel_host
from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.ui.train.settings_form import TrainingSettings

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")

RUN_TIMEOUT_MS = 60_000


@pytest.fixture
def settings(qtbot):
    s = TrainingSettings()
    qtbot.addWidget(s)
    return s


@pytest.fixture
def panel(qtbot, tmp_path):
    win = panel_host(DigitsCNN())
    p = win.panel
    p.settings.run_dir_edit.setText(str(tmp_path / "run"))
    qtbot.addWidget(win)
    win.show()
    return p


def test_transform_and_loader_widgets_reach_the_config(settings):
    for name in ("imageSizeSpin", "centerCropSpin", "channelsCombo", "normalizeCombo", "randomFlipCheck",
                 "randomCropSpin", "shuffleCheck", "pinMemoryCombo", "dropLastCheck", "fakeShapeEdit",
                 "fakeSizeSpin", "numClassesSpin", "tensorboardCheck", "persistentWorkersCombo",
                 "decodeOnGpuCombo", "channelsLastCombo", "skipUnreadableCheck"):
        assert settings.findChild(object, name) is not None, name
    settings.image_size_spin.setValue(32)
    settings.center_crop_spin.setValue(28)
    settings.channels_combo.setCurrentIndex(settings.channels_combo.findData("rgb"))
    settings.normalize_combo.setCurrentIndex(settings.normalize_combo.findData("imagenet"))
    settings.flip_check.setChecked(True)
    settings.random_crop_spin.setValue(4)
    settings.shuffle_check.setChecked(False)
    settings.drop_last_check.setChecked(True)
    settings.fake_shape_edit.setText("1, 12, 10")
    settings.fake_size_spin.setValue(100)
    settings.classes_spin.setValue(3)
    d = settings.config().data
    assert (d.image_size, d.center_crop, d.channels, d.normalize) == (32, 28, "rgb", "imagenet")
    assert (d.random_flip, d.random_crop, d.shuffle, d.drop_last) == (True, 4, False, True)
    assert (d.fake_shape, d.fake_size, d.num_classes) == ([1, 12, 10], 100, 3)


def test_loader_settings_start_on_auto_and_can_be_set_by_hand(settings):
    from workbench.core.train.data.loaders import usable_cores

    d = settings.config()
    assert (d.data.num_workers, d.data.pin_memory, d.data.persistent_workers, d.data.decode_on_gpu,
            d.channels_last, d.data.skip_unreadable) == ("auto", "auto", "auto", "auto", "auto", False)
    assert settings.workers_spin.text() == f"auto ({max(0, min(8, usable_cores() - 1))})"
    settings.workers_spin.setValue(3)
    for combo in (settings.pin_combo, settings.persistent_combo, settings.decode_gpu_combo,
                  settings.channels_last_combo):
        combo.setCurrentIndex(combo.findText("off"))
    settings.skip_check.setChecked(True)
    d = settings.config()
    assert (d.data.num_workers, d.data.pin_memory, d.data.persistent_workers, d.data.decode_on_gpu,
            d.channels_last, d.data.skip_unreadable) == (3, False, False, False, False, True)
    settings.set_config(TrainConfig())
    assert settings.config().data.num_workers == "auto" and settings.pin_combo.currentData() == "auto"


def test_set_config_round_trips_and_keeps_fields_without_widgets(settings):
    cfg = TrainConfig(data=DataConfig(dataset="fake", image_size=20, center_crop=16, channels="grayscale",
                                      normalize="none", random_flip=True, random_crop=2, shuffle=False,
                                      pin_memory=True, drop_last=True, fake_shape=[1, 9, 9], fake_size=64,
                                      num_workers=2, persistent_workers=False, skip_unreadable=True,
                                      num_classes=4, split_seed=7),
                      min_lr=1e-4, amp_dtype="float16", emit_every_ms=80.0, tensorboard=True, channels_last=True)
    settings.set_config(cfg)
    back = settings.config()
    assert back.data == cfg.data
    assert (back.min_lr, back.amp_dtype, back.emit_every_ms) == (1e-4, "float16", 80.0)
    assert back.channels_last is True


def test_bad_fake_shape_is_a_setting_error_not_a_crash(panel):
    s = panel.settings
    s.dataset_combo.setCurrentIndex(s.dataset_combo.findData("fake"))
    s.fake_shape_edit.setText("3, 32")
    assert panel.start() is False
    assert panel.errors and "C, H, W" in panel.errors[-1]
    assert not panel.is_running()


def test_fake_size_and_drop_last_drive_the_lr_preview_steps(settings):
    settings.dataset_combo.setCurrentIndex(settings.dataset_combo.findData("fake"))
    settings.val_spin.setValue(0.5)
    settings.batch_spin.setValue(64)
    settings.fake_size_spin.setValue(200)  # 100 training samples
    assert settings.steps_per_epoch() == 2
    settings.drop_last_check.setChecked(True)
    assert settings.steps_per_epoch() == 1


def test_run_with_resize_crop_and_augmentation_from_the_panel(panel, qtbot):
    s = panel.settings
    s.epochs_spin.setValue(1)
    s.image_size_spin.setValue(12)
    s.center_crop_spin.setValue(10)
    s.flip_check.setChecked(True)
    s.random_crop_spin.setValue(2)
    assert panel.start()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert panel.last_reason() == "completed", panel.errors
    run_toml = TrainConfig.from_toml(panel.run_dir() + "/run.toml")
    assert (run_toml.data.image_size, run_toml.data.center_crop) == (12, 10)
    assert run_toml.data.random_flip and run_toml.data.random_crop == 2


def test_fake_data_of_a_chosen_shape_trains_from_the_panel(panel, qtbot):
    s = panel.settings
    s.dataset_combo.setCurrentIndex(s.dataset_combo.findData("fake"))
    s.fake_shape_edit.setText("1, 16, 16")
    s.fake_size_spin.setValue(64)
    s.classes_spin.setValue(4)
    s.epochs_spin.setValue(1)
    assert panel.start()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert panel.last_reason() == "completed", panel.errors
    replay = TrainConfig.from_toml(panel.run_dir() + "/run.toml")
    assert (replay.data.fake_shape, replay.data.fake_size, replay.data.num_classes) == ([1, 16, 16], 64, 4)


@pytest.mark.parametrize("typed", ["1e-9", "1e-10", "20", "1e6"])
def test_an_out_of_range_lr_is_refused_with_the_range_never_replaced(settings, qtbot, typed):
    """Typed "1e-9" became 1.0, "20" became 2, "1e6" became 1, silently."""
    from PySide6.QtCore import Qt

    spin = settings.lr_spin
    spin.setValue(0.001)
    messages: list[str] = []
    spin.outOfRange.connect(messages.append)
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin.lineEdit(), typed)
    qtbot.keyClick(spin.lineEdit(), Qt.Key.Key_Return)
    assert spin.value() == pytest.approx(0.001)
    assert messages and "1e-08 to 10" in messages[-1] and "stays 0.001" in messages[-1]


def test_scientific_notation_over_the_whole_useful_range(settings, qtbot):
    from PySide6.QtCore import Qt

    spin = settings.lr_spin
    for typed, expected in (("3e-4", 3e-4), ("1e-8", 1e-8), ("10", 10.0), ("0.5", 0.5)):
        spin.lineEdit().selectAll()
        qtbot.keyClicks(spin.lineEdit(), typed)
        qtbot.keyClick(spin.lineEdit(), Qt.Key.Key_Return)
        assert spin.value() == pytest.approx(expected), typed


def test_the_unfreeze_schedule_field_reaches_the_config_and_back(settings):
    settings.unfreeze_edit.setText("3: layer4; 5: layer3")
    cfg = settings.config()
    assert cfg.unfreeze == [{"epoch": 3, "module": "layer4"}, {"epoch": 5, "module": "layer3"}]
    settings.unfreeze_edit.setText("")
    settings.set_config(cfg)
    assert settings.unfreeze_edit.text() == "3: layer4; 5: layer3"
    settings.unfreeze_edit.setText("three: layer4")
    with pytest.raises(ValueError, match="expected <epoch>: <module>"):
        settings.config()
