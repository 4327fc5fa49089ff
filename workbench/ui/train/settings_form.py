"""The training settings form: data, device, optimizer, schedule, and an LR preview.

:class:`TrainingSettings` edits a :class:`workbench.core.train.config.TrainConfig`:
:meth:`TrainingSettings.config` builds one from the widgets and
:meth:`TrainingSettings.set_config` fills the widgets from one. A small pyqtgraph
plot previews the planned learning-rate schedule (``core.train.trainer.optim.lr_schedule_preview``)
and is recomputed, debounced by 150 ms, whenever a setting changes.
"""

from __future__ import annotations

import copy
from pathlib import Path
import dataclasses
import importlib.util
import math

import pyqtgraph as pg
from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from workbench.core.train.config import (TEXT_KINDS, DataConfig, TaskConfig, TrainConfig, format_unfreeze,
                                        parse_unfreeze)
from workbench.core.train.data.loaders import loader_settings
from workbench.ui.train.collapsible import CollapsibleSection, compact_form
from workbench.ui.train.data_source import SPEC, DataSourceFields
from workbench.ui.train.task_fields import TaskFields

#: (label, DataConfig.channels).
CHANNELS = [("Keep", "keep"), ("Grayscale (1)", "grayscale"), ("RGB (3)", "rgb")]
#: (label, DataConfig.normalize): "auto" is the dataset's own preset.
NORMALIZE = [("Dataset's own", "auto"), ("ImageNet", "imagenet"), ("MNIST", "mnist"),
             ("CIFAR10", "cifar10"), ("Digits", "digits"), ("None", "none")]

#: (label, DataConfig.dataset) in combo order; the demo digits come first (default).
DATASETS = [
    ("Demo digits (built in)", "digits"),
    ("MNIST", "mnist"),
    ("FashionMNIST", "fashionmnist"),
    ("CIFAR10", "cifar10"),
    ("ImageFolder", "imagefolder"),
    ("FakeData", "fake"),
    ("CSV table", "csv"),
    ("Text (CSV, JSON Lines, Parquet, .txt)", "text"),
    ("Your own (spec)…", SPEC),
]
#: Datasets of images: the Transforms and augmentation section applies to them only.
IMAGE_DATASETS = ("digits", "mnist", "fashionmnist", "cifar10", "imagefolder", "fake")
OPTIMIZERS = [("Adam", "adam"), ("AdamW", "adamw"), ("SGD", "sgd"), ("RMSprop", "rmsprop")]
LOSSES = [("CrossEntropyLoss", "cross_entropy"), ("MSELoss", "mse"),
          ("BCEWithLogitsLoss", "bce_with_logits"), ("L1Loss", "l1")]
SCHEDULERS = [("None", "none"), ("StepLR", "step"), ("MultiStepLR", "multistep"),
              ("CosineAnnealingLR", "cosine"), ("OneCycleLR", "onecycle"),
              ("ReduceLROnPlateau", "plateau")]
#: Tooltip of the LR field while idle, and during a run (when a typed value is sent to the run).
LR_TIP = "Learning rate (the peak LR for OneCycleLR); type e.g. 3e-4"
LR_LIVE_TIP = ("Live: type a learning rate (e.g. 1e-4) and press Enter; the run uses it from the next step "
               "(marked on the loss plot, recorded in edits.jsonl)")
#: Tooltip of a settings section (and its widgets) that a run uses and cannot change.
FIXED_TIP = "Fixed for this run; stop to change."
#: Tooltip of the Optimization section during a run (the LR in it is live).
OPTIMIZATION_RUN_TIP = "The learning rate is live: type a value and press Enter. The rest is " + FIXED_TIP[0].lower() + FIXED_TIP[1:]
#: Training samples per dataset (for the LR preview's steps per epoch), before the val split.
_TRAIN_SIZES = {"digits": 1797, "mnist": 60000, "fashionmnist": 60000, "cifar10": 50000}


class LogSpinBox(QDoubleSpinBox):
    """A QDoubleSpinBox for learning rates: 3 significant digits, steps multiply.

    Shows ``1e-05`` / ``0.001``; accepts typed scientific notation; the arrow keys
    multiply or divide by ``10 ** (1/4)`` (four steps per decade, rounded to 2 digits).
    A typed value outside the range is refused, never replaced: the field keeps
    its previous value and ``outOfRange`` carries a message with the allowed range.

    Signals
    -------
    outOfRange(str)
        ``"1e-09 is outside 1e-08 to 10; the value stays 0.001"``.
    """

    outOfRange = Signal(str)

    def __init__(self, minimum: float = 1e-8, maximum: float = 10.0, allow_zero: bool = False,
                 parent: QWidget | None = None):
        self._allow_zero = allow_zero
        self._min_positive = minimum
        super().__init__(parent)
        self.setDecimals(10)
        self.setRange(0.0 if allow_zero else minimum, maximum)
        # the value changes on Enter / focus-out only: a prefix typed on the way ("1" of "1e-9")
        # must not become the "previous value" that an out-of-range entry falls back to
        self.setKeyboardTracking(False)
        self.setCorrectionMode(QDoubleSpinBox.CorrectionMode.CorrectToPreviousValue)
        self.setToolTip(f"{self.range_text()}; scientific notation works (3e-4)")

    def range_text(self) -> str:
        """The allowed values, e.g. ``"1e-08 to 10"`` (``"0 or 1e-08 to 1"`` when 0 is allowed)."""
        low = f"0 or {self._min_positive:.3g}" if self._allow_zero else f"{self.minimum():.3g}"
        return f"{low} to {self.maximum():.3g}"

    def fixup(self, text: str) -> str:  # noqa: D102 - Qt calls this for text that is not Acceptable
        try:
            value = float(text.strip())
        except ValueError:
            value = None
        if value is not None:
            self.outOfRange.emit(f"{value:.3g} is outside {self.range_text()}; the value stays {self.value():.3g}")
        return text

    def textFromValue(self, value: float) -> str:  # noqa: N802 (Qt override)
        return f"{value:.3g}"

    def valueFromText(self, text: str) -> float:  # noqa: N802
        try:
            return float(text)
        except ValueError:
            return self.value()

    def validate(self, text: str, pos: int):  # noqa: D102
        stripped = text.strip()
        try:
            value = float(stripped)
        except ValueError:
            ok = all(c in "0123456789.eE+-" for c in stripped)
            return (QValidator.State.Intermediate if ok else QValidator.State.Invalid), text, pos
        if self.minimum() <= value <= self.maximum() and (value == 0.0 or value >= self._min_positive):
            return QValidator.State.Acceptable, text, pos
        return QValidator.State.Intermediate, text, pos

    def stepBy(self, steps: int) -> None:  # noqa: N802
        value = self.value()
        if value <= 0.0:
            self.setValue(self._min_positive if steps > 0 else 0.0)
            return
        new = value * 10.0 ** (steps / 4.0)
        digits = 1 - int(math.floor(math.log10(new)))
        new = round(new, digits)
        if self._allow_zero and new < self._min_positive:
            new = 0.0
        self.setValue(new)


def _combo(name: str, items: list[tuple[str, str]]) -> QComboBox:
    combo = QComboBox()
    combo.setObjectName(name)
    for text, key in items:
        combo.addItem(text, key)
    return combo


def _set_combo(combo: QComboBox, key) -> None:
    index = combo.findData(key)
    if index >= 0:
        combo.setCurrentIndex(index)


def _auto_combo(name: str, auto_text: str, tip: str) -> QComboBox:
    """A combo of ``"auto"`` / True / False for a setting that ``"auto"`` resolves per machine and device."""
    combo = _combo(name, [(auto_text, "auto"), ("on", True), ("off", False)])
    combo.setToolTip(tip)
    return combo


def _set_auto_combo(combo: QComboBox, value) -> None:
    combo.setCurrentIndex(0 if value == "auto" else 1 if value else 2)


#: The workers spin box's value that stands for "auto".
AUTO_WORKERS = -1


def _spin(name: str, lo: int, hi: int, value: int) -> QSpinBox:
    spin = QSpinBox()
    spin.setObjectName(name)
    spin.setRange(lo, hi)
    spin.setValue(value)
    return spin


def _dspin(name: str, lo: float, hi: float, value: float, step: float, decimals: int = 3) -> QDoubleSpinBox:
    spin = QDoubleSpinBox()
    spin.setObjectName(name)
    spin.setDecimals(decimals)
    spin.setRange(lo, hi)
    spin.setSingleStep(step)
    spin.setValue(value)
    return spin


def device_entries() -> list[tuple[str, str]]:
    """``(label, device id)`` for every device torch can use here (``core.train.devices.available_devices``),
    then the data-parallel choices (``ddp_choices``: ``"CPU, 2 processes (DDP, Gloo)"``...).

    CUDA labels read ``cuda:0 - NVIDIA H100 (85.0 GB)``.
    """
    from workbench.core.train.devices import available_devices, ddp_choices

    single = [(label, dev) for dev, label in available_devices()] or [("CPU", "cpu")]
    return single + [(label, key) for key, label in ddp_choices()]


class TrainingSettings(QWidget):
    """Every run setting as widgets, plus the LR schedule preview.

    Signals
    -------
    changed()
        Any setting changed (debounced preview refresh is scheduled).
    """

    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("trainingSettings")
        self._base = TrainConfig()
        self._build()
        self._preview_timer = QTimer(self)
        self._preview_timer.setSingleShot(True)
        self._preview_timer.setInterval(150)
        self._preview_timer.timeout.connect(self.update_preview)
        self._connect_changes()
        self._on_dataset_changed()
        self._on_scheduler_changed()
        self.update_preview()

    # ------------------------------------------------------------------ widgets
    def _build(self) -> None:
        self.dataset_combo = _combo("datasetCombo", DATASETS)
        self.dataset_combo.setToolTip("Built-in data, a CSV table (choose the file under Root), or your own "
                                      "dataset factory (file.py:function)")
        self.source_fields = DataSourceFields()
        self.task_fields = TaskFields()
        self._code_origin: str | None = None  # the file the shown settings were read from, while its code waits
        self._code_specs: set[str] = set()
        self.root_edit = QLineEdit()
        self.root_edit.setObjectName("rootEdit")
        self.root_edit.setPlaceholderText("dataset root folder")
        self.root_edit.setMinimumWidth(100)  # a path must stay readable when the dock is narrow
        self.root_edit.textChanged.connect(self.root_edit.setToolTip)
        self.root_button = QPushButton("…")
        self.root_button.setMaximumWidth(28)
        self.root_button.clicked.connect(self._on_browse_root)
        self.download_check = QCheckBox("Download")
        self.download_check.setObjectName("downloadCheck")
        self.download_check.setToolTip("Let torchvision download the dataset into the root folder")
        self.batch_spin = _spin("batchSpin", 1, 65536, DataConfig.batch_size)
        self.workers_spin = _spin("workersSpin", AUTO_WORKERS, 64, AUTO_WORKERS)
        auto = loader_settings(DataConfig(dataset="imagefolder"), "cpu").num_workers
        self.workers_spin.setSpecialValueText(f"auto ({auto})")
        self.workers_spin.setToolTip(f"DataLoader worker processes; auto = usable cores - 1, at most 8 "
                                     f"({auto} here), persistent across epochs")
        self.val_spin = _dspin("valFractionSpin", 0.0, 0.9, 0.2, 0.05, 2)
        self._build_transform_widgets()

        self.device_combo = QComboBox()
        self.device_combo.setObjectName("deviceCombo")
        self.refresh_devices()

        self.optimizer_combo = _combo("optimizerCombo", OPTIMIZERS)
        self.lr_spin = LogSpinBox(1e-8, 10.0)
        self.lr_spin.setObjectName("lrSpin")
        self.lr_spin.setValue(TrainConfig.lr)
        self.lr_spin.setToolTip(LR_TIP)
        self.momentum_spin = _dspin("momentumSpin", 0.0, 0.999, 0.9, 0.05)
        self.nesterov_check = QCheckBox("Nesterov")
        self.nesterov_check.setObjectName("nesterovCheck")
        self.wd_spin = LogSpinBox(1e-8, 1.0, allow_zero=True)
        self.wd_spin.setObjectName("weightDecaySpin")
        self.wd_spin.setValue(0.0)
        self.backbone_spin = _dspin("backboneLrSpin", 0.0, 10.0, 1.0, 0.1, 3)
        self.backbone_spin.setToolTip("LR multiplier of the backbone (everything except the head); 1 = same LR")
        self.loss_combo = _combo("lossCombo", LOSSES)
        self.epochs_spin = _spin("epochsSpin", 1, 100000, TrainConfig.epochs)

        self.scheduler_combo = _combo("schedulerCombo", SCHEDULERS)
        self.step_size_spin = _spin("stepSizeSpin", 1, 10000, 1)
        self.gamma_spin = _dspin("gammaSpin", 0.0, 1.0, 0.1, 0.05)
        self.unfreeze_edit = QLineEdit("")
        self.unfreeze_edit.setObjectName("unfreezeEdit")
        self.unfreeze_edit.setPlaceholderText("e.g. 3: layer4; 5: layer3*0.1")
        self.unfreeze_edit.setToolTip("Staged unfreezing: before epoch k starts, unfreeze these modules; "
                                      "module*f trains it at f times its LR (marked on the loss plot; "
                                      "recorded in run.toml)")
        self.milestones_edit = QLineEdit("2, 4")
        self.milestones_edit.setObjectName("milestonesEdit")
        self.milestones_edit.setToolTip("MultiStepLR milestones, epochs, comma-separated")
        self.pct_start_spin = _dspin("pctStartSpin", 0.01, 0.99, 0.3, 0.05, 2)
        self.patience_spin = _spin("patienceSpin", 0, 1000, 2)

        self.clip_spin = _dspin("gradClipSpin", 0.0, 1e6, 0.0, 0.5, 2)
        self.clip_spin.setSpecialValueText("off")
        self.clip_spin.setToolTip("Clip the global gradient norm to this value (0 = off)")
        self.amp_check = QCheckBox("Mixed precision (AMP)")
        self.amp_check.setObjectName("ampCheck")
        self.amp_check.setToolTip("autocast: bf16 on CPU, bf16/fp16 on CUDA")
        self.accumulate_spin = _spin("accumulateSpin", 1, 4096, TrainConfig.accumulate_grad_batches)
        self.accumulate_spin.setToolTip("accumulate_grad_batches: one optimizer step every N batches (the loss "
                                        "divided by N); the effective batch is N x the batch size")
        self.activation_ckpt_check = QCheckBox("Activation checkpointing")
        self.activation_ckpt_check.setObjectName("activationCheckpointCheck")
        self.activation_ckpt_check.setToolTip("Recompute activations in backward instead of keeping them: less "
                                              "memory, about a third more compute")
        self.compile_check = QCheckBox("torch.compile")
        self.compile_check.setObjectName("compileCheck")
        self.compile_check.setToolTip("torch.compile the model for the training step (the first steps compile; "
                                      "graph breaks are said in the run's log)")
        self.checkpoint_steps_spin = _spin("checkpointStepsSpin", 0, 10_000_000, TrainConfig.checkpoint_every_steps)
        self.checkpoint_steps_spin.setSpecialValueText("off")
        self.checkpoint_steps_spin.setToolTip("Also write last.pt every N optimizer steps (long epochs), in the "
                                              "background")
        self.seed_spin = _spin("seedSpin", 0, 2**31 - 1, 0)
        self.run_dir_edit = QLineEdit()
        self.run_dir_edit.setObjectName("runDirEdit")
        self.run_dir_edit.setPlaceholderText("default: a new folder under the data directory")
        self.run_dir_button = QPushButton("…")
        self.run_dir_button.setMaximumWidth(28)
        self.run_dir_button.clicked.connect(self._on_browse_run_dir)

        self.preview_plot = pg.PlotWidget()
        self.preview_plot.setObjectName("lrPreviewPlot")
        self.preview_plot.setFixedHeight(90)
        item = self.preview_plot.getPlotItem()
        item.hideButtons()
        item.setMenuEnabled(False)
        item.setMouseEnabled(x=False, y=False)
        item.getAxis("left").setWidth(44)
        item.getAxis("left").enableAutoSIPrefix(False)
        item.setTitle("planned LR", size="8pt")
        self.preview_curve = item.plot(pen=pg.mkPen((150, 60, 160), width=2))

        self._lay_out()

    def _build_transform_widgets(self) -> None:
        """Transform, augmentation, loader and FakeData widgets (the rest of :class:`DataConfig`)."""
        self.image_size_spin = _spin("imageSizeSpin", 0, 4096, 0)
        self.image_size_spin.setSpecialValueText("native")
        self.image_size_spin.setToolTip("Resize the shorter side to this many pixels (native = no resize)")
        self.center_crop_spin = _spin("centerCropSpin", 0, 4096, 0)
        self.center_crop_spin.setSpecialValueText("off")
        self.channels_combo = _combo("channelsCombo", CHANNELS)
        self.channels_combo.setToolTip("Keep: converted automatically when the model's first conv needs it")
        self.normalize_combo = _combo("normalizeCombo", NORMALIZE)
        self.flip_check = QCheckBox("Random flip")
        self.flip_check.setObjectName("randomFlipCheck")
        self.flip_check.setToolTip("Random horizontal flip of training images")
        self.random_crop_spin = _spin("randomCropSpin", 0, 256, 0)
        self.random_crop_spin.setSpecialValueText("off")
        self.random_crop_spin.setToolTip("Random crop after this much zero padding, pixels (training only)")
        self.shuffle_check = QCheckBox("Shuffle")
        self.shuffle_check.setObjectName("shuffleCheck")
        self.shuffle_check.setChecked(DataConfig.shuffle)
        self.pin_combo = _auto_combo("pinMemoryCombo", "auto (CUDA)", "pin_memory: page-locked batches for fast "
                                     "copies to a GPU; auto = on when the device is CUDA")
        self.persistent_combo = _auto_combo("persistentWorkersCombo", "auto", "persistent_workers: keep the "
                                            "loader workers alive between epochs; auto = on when there are workers")
        self.decode_gpu_combo = _auto_combo("decodeOnGpuCombo", "auto (CUDA)", "ImageFolder: decode the JPEGs "
                                            "and run the transforms on the GPU; auto = on when the device is CUDA")
        self.channels_last_combo = _auto_combo("channelsLastCombo", "auto (CUDA)", "torch.channels_last memory "
                                               "format for models with 2-D convolutions; auto = on for CUDA")
        self.skip_check = QCheckBox("Skip unreadable images")
        self.skip_check.setObjectName("skipUnreadableCheck")
        self.skip_check.setToolTip("Skip image files that cannot be read and name them at the end of each epoch, "
                                   "instead of stopping the run")
        self.drop_last_check = QCheckBox("Drop last")
        self.drop_last_check.setObjectName("dropLastCheck")
        self.fake_shape_edit = QLineEdit(", ".join(str(v) for v in DataConfig().fake_shape))
        self.fake_shape_edit.setObjectName("fakeShapeEdit")
        self.fake_shape_edit.setToolTip("FakeData image shape C, H, W")
        self.fake_size_spin = _spin("fakeSizeSpin", 2, 10_000_000, DataConfig.fake_size)
        self.classes_spin = _spin("numClassesSpin", 1, 100_000, DataConfig.num_classes)
        self.classes_spin.setToolTip("Classes of FakeData")
        self.tensorboard_check = QCheckBox("TensorBoard log")
        self.tensorboard_check.setObjectName("tensorboardCheck")
        has_tb = importlib.util.find_spec("tensorboard") is not None
        self.tensorboard_check.setProperty("available", has_tb)
        self.tensorboard_check.setChecked(bool(TrainConfig.tensorboard) and has_tb)  # the default, as Reset gives
        self.tensorboard_check.setToolTip("Write TensorBoard scalars into the run folder" if has_tb
                                          else "Install the tensorboard package to enable this")

    def _lay_out(self) -> None:
        """Stack the settings in collapsible sections, the everyday ones open (:attr:`sections`)."""
        data = compact_form()
        data.addRow("Dataset", self.dataset_combo)
        self._root_row = QHBoxLayout()
        self._root_row.addWidget(self.root_edit, 1)
        self._root_row.addWidget(self.root_button)
        data.addRow("Root", self._root_row)
        src = self.source_fields
        data.addRow("Text column", src.text_edit)
        data.addRow("Text pair", src.text_pair_edit)
        data.addRow("Target", src.target_edit)
        data.addRow("Features", src.features_edit)
        data.addRow("Text columns", src.categorical_combo)
        data.addRow("Dataset spec", src.spec_edit)
        data.addRow("Arguments", src.kwargs_edit)
        data.addRow("Validation file", src.val_file_edit)
        data.addRow("Tokenizer", src.tokenizer_edit)
        data.addRow("Max tokens", src.max_length_spin)
        data.addRow("Image processor", src.processor_edit)
        data.addRow(self.download_check)
        data.addRow("Fake C,H,W", self.fake_shape_edit)
        data.addRow("Fake samples", self.fake_size_spin)
        data.addRow("Classes", self.classes_spin)
        data.addRow("Batch size", self.batch_spin)
        data.addRow("Validation share", self.val_spin)
        data.addRow("Epochs", self.epochs_spin)
        data.addRow("Device", self.device_combo)
        self._data_form = data

        task = compact_form()
        self.task_fields.lay_out(task)

        optim = compact_form()
        optim.addRow("Optimizer", self.optimizer_combo)
        self.lr_live_tag = QLabel("live", objectName="lrLiveTag")
        self.lr_live_tag.setToolTip(LR_LIVE_TIP)
        self.lr_live_tag.setStyleSheet("QLabel { color: palette(highlighted-text); background: palette(highlight);"
                                       " border-radius: 3px; padding: 0px 4px; font-weight: bold; }")
        self.lr_live_tag.setVisible(False)  # during a run only
        lr_row = QHBoxLayout()
        lr_row.setSpacing(4)
        lr_row.addWidget(self.lr_spin, 1)
        lr_row.addWidget(self.lr_live_tag)
        optim.addRow("Learning rate", lr_row)
        optim.addRow("Momentum", self.momentum_spin)
        optim.addRow(self.nesterov_check)
        optim.addRow("Weight decay", self.wd_spin)
        optim.addRow("Backbone LR ×", self.backbone_spin)
        optim.addRow("Loss", self.loss_combo)
        optim.addRow("Grad clip", self.clip_spin)
        optim.addRow("Accumulate batches", self.accumulate_spin)
        optim.addRow("Unfreeze at epoch", self.unfreeze_edit)

        sched = compact_form()
        sched.addRow("Scheduler", self.scheduler_combo)
        self._sched_rows = {
            "step_size": ("Step size (epochs)", self.step_size_spin),
            "gamma": ("Gamma", self.gamma_spin),
            "milestones": ("Milestones", self.milestones_edit),
            "pct_start": ("Warm-up share", self.pct_start_spin),
            "patience": ("Patience (epochs)", self.patience_spin),
        }
        for label, widget in self._sched_rows.values():
            sched.addRow(label, widget)
        self._sched_form = sched
        sched.addRow(self.preview_plot)

        tfm = compact_form()
        tfm.addRow("Image size", self.image_size_spin)
        tfm.addRow("Center crop", self.center_crop_spin)
        tfm.addRow("Channels", self.channels_combo)
        tfm.addRow("Normalize", self.normalize_combo)
        tfm.addRow("Random crop pad", self.random_crop_spin)
        tfm.addRow(self.flip_check)

        loader = compact_form()
        loader.addRow("Loader workers", self.workers_spin)
        loader.addRow(self.shuffle_check)
        loader.addRow(self.drop_last_check)
        loader.addRow(self.skip_check)
        loader.addRow("Pin memory", self.pin_combo)
        loader.addRow("Persistent workers", self.persistent_combo)
        loader.addRow("Decode on GPU", self.decode_gpu_combo)
        loader.addRow("channels_last", self.channels_last_combo)
        loader.addRow(self.amp_check)
        loader.addRow(self.activation_ckpt_check)
        loader.addRow(self.compile_check)
        loader.addRow("Checkpoint every N steps", self.checkpoint_steps_spin)

        run = compact_form()
        run_row = QHBoxLayout()
        run_row.addWidget(self.run_dir_edit, 1)
        run_row.addWidget(self.run_dir_button)
        run.addRow("Run folder", run_row)
        run.addRow(self.tensorboard_check)
        run.addRow("Seed", self.seed_spin)

        #: name -> :class:`CollapsibleSection`, top to bottom.
        self.sections: dict[str, CollapsibleSection] = {}
        groups = QVBoxLayout()
        groups.setContentsMargins(0, 0, 0, 0)
        groups.setSpacing(2)
        for title, name, form, expanded in (
                ("Data and device", "data", data, True), ("Task", "task", task, False),
                ("Optimization", "optimization", optim, True),
                ("Schedule", "schedule", sched, True), ("Transforms and augmentation", "transforms", tfm, False),
                ("Loader and speed", "loader", loader, False), ("Run folder and logging", "runFolder", run, False)):
            section = CollapsibleSection(title, name, form, expanded)
            self.sections[name] = section
            groups.addWidget(section)
        groups.addStretch(1)
        self.setLayout(groups)
        for combo in self.findChildren(QComboBox):  # long items ("cuda:0 - NVIDIA H100 (85.0 GB)") elide
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(8)
            combo.setMinimumWidth(combo.sizeHint().width())  # its minimumSizeHint is still its longest item

    def _connect_changes(self) -> None:
        self.dataset_combo.currentIndexChanged.connect(self._on_dataset_changed)
        self.scheduler_combo.currentIndexChanged.connect(self._on_scheduler_changed)
        self.optimizer_combo.currentIndexChanged.connect(self._on_optimizer_changed)
        for combo in (self.dataset_combo, self.device_combo, self.optimizer_combo,
                      self.loss_combo, self.scheduler_combo, self.channels_combo, self.normalize_combo,
                      self.pin_combo, self.persistent_combo, self.decode_gpu_combo, self.channels_last_combo):
            combo.currentIndexChanged.connect(self._on_changed)
        for spin in (self.batch_spin, self.workers_spin, self.epochs_spin, self.seed_spin,
                     self.step_size_spin, self.patience_spin, self.image_size_spin,
                     self.center_crop_spin, self.random_crop_spin, self.fake_size_spin, self.classes_spin):
            spin.valueChanged.connect(self._on_changed)
        for spin in (self.val_spin, self.lr_spin, self.momentum_spin, self.wd_spin, self.backbone_spin,
                     self.gamma_spin, self.pct_start_spin, self.clip_spin):
            spin.valueChanged.connect(self._on_changed)
        src = self.source_fields
        for edit in (self.root_edit, self.milestones_edit, self.run_dir_edit, self.fake_shape_edit,
                     self.unfreeze_edit, src.target_edit, src.features_edit, src.spec_edit, src.kwargs_edit,
                     src.text_edit, src.text_pair_edit, src.val_file_edit, src.tokenizer_edit,
                     src.processor_edit, *self.task_fields.edits()):
            edit.textChanged.connect(self._on_changed)
        src.max_length_spin.valueChanged.connect(self._on_changed)
        for combo in (src.categorical_combo, *self.task_fields.combos()):
            combo.currentIndexChanged.connect(self._on_changed)
        self.task_fields.monitor_combo.editTextChanged.connect(self._on_changed)
        self.task_fields.temperature_spin.valueChanged.connect(self._on_changed)
        for check in (self.download_check, self.nesterov_check, self.amp_check, self.flip_check,
                      self.shuffle_check, self.skip_check, self.drop_last_check, self.tensorboard_check):
            check.toggled.connect(self._on_changed)
        for signal in (self.accumulate_spin.valueChanged, self.checkpoint_steps_spin.valueChanged,
                       self.activation_ckpt_check.toggled, self.compile_check.toggled):
            signal.connect(self._on_changed)
        self._on_optimizer_changed()

    # ------------------------------------------------------------------ devices
    def device_and_processes(self) -> tuple[str, int]:
        """``(device, processes)`` of the device choice: ``("cpu", 2)`` for "CPU, 2 processes (DDP, Gloo)"."""
        from workbench.core.train.devices import split_device_choice

        return split_device_choice(self.device_combo.currentData() or "cpu")

    def refresh_devices(self) -> None:
        """Re-list the devices torch can use; select the best one (``default_device()``)."""
        from workbench.core.train import devices as training

        current = self.device_combo.currentData()
        self.device_combo.blockSignals(True)
        self.device_combo.clear()
        for label, key in device_entries():
            self.device_combo.addItem(label, key)
        best = current or str(training.default_device())
        index = self.device_combo.findData(best)
        self.device_combo.setCurrentIndex(max(index, 0))
        self.device_combo.blockSignals(False)

    # ------------------------------------------------------------------ config
    def config(self) -> TrainConfig:
        """A :class:`TrainConfig` from the widgets (validated).

        Fields the form has no widget for (``min_lr``, ``amp_dtype``, ``split_seed``,
        ``head`` ...) keep the values of the last :meth:`set_config` (defaults before).

        Raises
        ------
        ValueError
            A setting that cannot be used (e.g. unparsable milestones).
        """
        base = copy.deepcopy(self._base)
        choice = self.dataset_combo.currentData()
        source = {"dataset": choice, **self.source_fields.read(choice)}
        if choice != SPEC:
            source["kwargs"] = {}  # arguments of a user dataset only
        data = dataclasses.replace(
            base.data,
            **source,
            root=self.root_edit.text().strip(),
            download=self.download_check.isChecked(),
            val_fraction=self.val_spin.value(),
            batch_size=self.batch_spin.value(),
            num_workers="auto" if self.workers_spin.value() == AUTO_WORKERS else self.workers_spin.value(),
            shuffle=self.shuffle_check.isChecked(),
            pin_memory=self.pin_combo.currentData(),
            persistent_workers=self.persistent_combo.currentData(),
            decode_on_gpu=self.decode_gpu_combo.currentData(),
            skip_unreadable=self.skip_check.isChecked(),
            drop_last=self.drop_last_check.isChecked(),
            image_size=self.image_size_spin.value(),
            center_crop=self.center_crop_spin.value(),
            channels=self.channels_combo.currentData(),
            normalize=self.normalize_combo.currentData(),
            random_flip=self.flip_check.isChecked(),
            random_crop=self.random_crop_spin.value(),
            fake_shape=self._fake_shape(),
            fake_size=self.fake_size_spin.value(),
            num_classes=self.classes_spin.value(),
        )
        clip = self.clip_spin.value()
        cfg = dataclasses.replace(
            base,
            data=data,
            task=self.task_fields.read(base.task),
            epochs=self.epochs_spin.value(),
            device=self.device_and_processes()[0],
            loss=self.loss_combo.currentData(),
            optimizer=self.optimizer_combo.currentData(),
            lr=self.lr_spin.value(),
            momentum=self.momentum_spin.value(),
            nesterov=self.nesterov_check.isChecked(),
            weight_decay=self.wd_spin.value(),
            backbone_lr_mult=self.backbone_spin.value(),
            scheduler=self.scheduler_combo.currentData(),
            step_size=self.step_size_spin.value(),
            milestones=self._milestones(),
            gamma=self.gamma_spin.value(),
            plateau_factor=self.gamma_spin.value(),
            pct_start=self.pct_start_spin.value(),
            plateau_patience=self.patience_spin.value(),
            grad_clip=clip if clip > 0 else None,
            amp=self.amp_check.isChecked(),
            seed=self.seed_spin.value(),
            run_dir=self.run_dir_edit.text().strip() or None,
            tensorboard=self.tensorboard_check.isChecked(),
            channels_last=self.channels_last_combo.currentData(),
            unfreeze=parse_unfreeze(self.unfreeze_edit.text()),
            accumulate_grad_batches=self.accumulate_spin.value(),
            activation_checkpointing=self.activation_ckpt_check.isChecked(),
            compile=self.compile_check.isChecked(),
            checkpoint_every_steps=self.checkpoint_steps_spin.value(),
        )
        cfg.validate()
        return cfg

    def set_config(self, cfg: TrainConfig, origin: str | None = None) -> None:
        """Show ``cfg`` in the widgets; fields without a widget are kept for :meth:`config`.

        Parameters
        ----------
        origin : str, optional
            The file ``cfg`` was read from (a run.toml beside a checkpoint). The code it names
            (``file.py:function`` specs) is shown, marked, and waits for a confirmation at Start
            (:meth:`code_to_confirm`); None: the settings are the user's own (typed or remembered).
        """
        from workbench.core.train.task.specs import code_specs, pin

        if origin is not None:  # its relative file.py specs start at the file's folder, as for workbench train
            cfg = copy.deepcopy(cfg)
            pin(cfg, Path(origin).parent)
        self._base = copy.deepcopy(cfg)
        self._code_specs = {spec for _, _, spec in code_specs(cfg) if ":" in spec} if origin else set()
        self._code_origin = str(origin) if self._code_specs else None
        self.task_fields.set_code_note(self._code_origin, sorted(self._code_specs))
        if cfg.task != TaskConfig() or self._code_specs:
            self.sections["task"].set_expanded(True)
        d = cfg.data
        self.shuffle_check.setChecked(d.shuffle)
        _set_auto_combo(self.pin_combo, d.pin_memory)
        _set_auto_combo(self.persistent_combo, d.persistent_workers)
        _set_auto_combo(self.decode_gpu_combo, d.decode_on_gpu)
        _set_auto_combo(self.channels_last_combo, cfg.channels_last)
        self.skip_check.setChecked(d.skip_unreadable)
        self.drop_last_check.setChecked(d.drop_last)
        self.image_size_spin.setValue(d.image_size)
        self.center_crop_spin.setValue(d.center_crop)
        _set_combo(self.channels_combo, d.channels)
        _set_combo(self.normalize_combo, d.normalize)
        self.flip_check.setChecked(d.random_flip)
        self.random_crop_spin.setValue(d.random_crop)
        self.fake_shape_edit.setText(", ".join(str(v) for v in d.fake_shape))
        self.fake_size_spin.setValue(d.fake_size)
        self.classes_spin.setValue(d.num_classes)
        self.tensorboard_check.setChecked(bool(cfg.tensorboard))
        builtin = self.dataset_combo.findData(cfg.data.dataset) >= 0 and cfg.data.dataset != SPEC
        _set_combo(self.dataset_combo, cfg.data.dataset if builtin else SPEC)
        self.source_fields.spec_edit.setText("" if builtin else cfg.data.dataset)
        self.source_fields.show(cfg.data)
        self.task_fields.show(cfg.task)
        self.root_edit.setText(cfg.data.root)
        self.download_check.setChecked(cfg.data.download)
        self.val_spin.setValue(cfg.data.val_fraction)
        self.batch_spin.setValue(cfg.data.batch_size)
        self.workers_spin.setValue(AUTO_WORKERS if cfg.data.num_workers == "auto" else int(cfg.data.num_workers))
        _set_combo(self.device_combo, cfg.device)
        self.epochs_spin.setValue(cfg.epochs)
        _set_combo(self.loss_combo, cfg.loss)
        _set_combo(self.optimizer_combo, cfg.optimizer)
        self.lr_spin.setValue(cfg.lr)
        self.momentum_spin.setValue(cfg.momentum)
        self.nesterov_check.setChecked(cfg.nesterov)
        self.wd_spin.setValue(cfg.weight_decay)
        self.backbone_spin.setValue(cfg.backbone_lr_mult)
        _set_combo(self.scheduler_combo, cfg.scheduler)
        self.step_size_spin.setValue(cfg.step_size)
        self.milestones_edit.setText(", ".join(str(m) for m in cfg.milestones))
        self.unfreeze_edit.setText(format_unfreeze(cfg.unfreeze))
        self.gamma_spin.setValue(cfg.plateau_factor if cfg.scheduler == "plateau" else cfg.gamma)
        self.pct_start_spin.setValue(cfg.pct_start)
        self.patience_spin.setValue(cfg.plateau_patience)
        self.clip_spin.setValue(cfg.grad_clip or 0.0)
        self.amp_check.setChecked(cfg.amp)
        self.accumulate_spin.setValue(cfg.accumulate_grad_batches)
        self.activation_ckpt_check.setChecked(bool(cfg.activation_checkpointing))
        self.compile_check.setChecked(bool(cfg.compile))
        self.checkpoint_steps_spin.setValue(cfg.checkpoint_every_steps)
        self.seed_spin.setValue(cfg.seed)
        self.run_dir_edit.setText(cfg.run_dir or "")

    def code_to_confirm(self, cfg: TrainConfig) -> tuple[str, list[str]] | None:
        """``(file, specs)``: the code named by the file the settings were read from that ``cfg`` still runs,
        and that nobody has confirmed yet (None when there is none; a spec typed here is the user's own)."""
        from workbench.core.train.task.specs import code_specs

        if self._code_origin is None:
            return None
        specs = list(dict.fromkeys(spec for _, _, spec in code_specs(cfg) if spec in self._code_specs))
        return (self._code_origin, specs) if specs else None

    def confirm_code(self) -> None:
        """The user agreed to run the code the settings' file names: Start no longer asks, the mark goes."""
        self._code_origin = None
        self._code_specs = set()
        self.task_fields.set_code_note(None, [])

    def _fake_shape(self) -> list[int]:
        text = self.fake_shape_edit.text().replace(";", ",").replace("x", ",")
        try:
            shape = [int(p) for p in text.split(",") if p.strip()]
        except ValueError:
            shape = []
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f"FakeData shape {text!r}: expected C, H, W as three positive whole numbers, e.g. 3, 32, 32")
        return shape

    def _milestones(self) -> list[int]:
        text = self.milestones_edit.text().replace(";", ",")
        try:
            return [int(p) for p in text.split(",") if p.strip()]
        except ValueError:
            raise ValueError(f"MultiStepLR milestones {text!r}: expected whole epochs separated by commas, e.g. 2, 4") from None

    def steps_per_epoch(self) -> int:
        """Planned optimizer steps per epoch (known dataset sizes; 100 when unknown)."""
        name = self.dataset_combo.currentData()
        batch = self.batch_spin.value()
        if name not in _TRAIN_SIZES and name not in ("digits", "fake", "imagefolder"):
            return 100  # a table or the user's own data: not read here
        if name in ("digits", "fake", "imagefolder"):
            n = {"digits": 1797, "fake": self.fake_size_spin.value()}.get(name)
            if n is None:
                return 100
            n = int(round(n * (1.0 - self.val_spin.value())))
        else:
            n = _TRAIN_SIZES[name]
        batches = max(1, n // batch) if self.drop_last_check.isChecked() else max(1, math.ceil(n / batch))
        return math.ceil(batches / self.accumulate_spin.value())  # one optimizer step per accumulated group

    def live_widgets(self) -> set[QWidget]:
        """The widgets that stay editable during a run (the LR field, its own line edit included)."""
        return {self.lr_spin, *self.lr_spin.findChildren(QWidget)}

    def set_running(self, running: bool) -> None:
        """Disable the settings that cannot change during a run; the LR stays editable (sent to the run).

        At a run's start, a planned-LR preview still waiting for its 150 ms debounce is drawn at once.

        The LR field keeps its inner ``QLineEdit`` enabled, so a value typed
        during a run (``1e-4`` + Enter) is taken, and its tooltip says it is live.
        """
        if running and self._preview_timer.isActive():
            # a setting changed just before Start: draw its planned LR now, not 150 ms into the run
            # (on 2 cores the preview's optimizer build and repaint, ~4 ms, was taken from the run's first epoch)
            self._preview_timer.stop()
            self.update_preview()
        live = self.live_widgets()
        for widget in self.findChildren(QWidget):
            if widget in live or widget is self.preview_plot or isinstance(widget, pg.GraphicsView):
                continue
            if isinstance(widget, (QComboBox, QSpinBox, QDoubleSpinBox, QLineEdit, QCheckBox, QPushButton)):
                widget.setEnabled(not running)
        for widget in live:
            widget.setEnabled(True)
        self.lr_spin.setToolTip(LR_LIVE_TIP if running else LR_TIP)
        self.lr_live_tag.setVisible(running)
        for name, section in self.sections.items():  # whole sections without a live setting: fixed, saying so
            if not any(section.isAncestorOf(widget) for widget in live):
                section.set_fixed(running, FIXED_TIP)
        self.sections["optimization"].set_note(OPTIMIZATION_RUN_TIP if running else "")
        if not running:
            self._on_dataset_changed()
            self._on_scheduler_changed()
            self._on_optimizer_changed()

    # ------------------------------------------------------------------ preview
    def update_preview(self) -> None:
        """Recompute the planned LR curve (x = epoch) from the current settings."""
        from workbench.core.train.trainer.optim import lr_schedule_preview

        try:
            cfg = self.config()
            # the shape of every schedule scales with steps per epoch: cap the work at ~2,000 steps
            spe = min(self.steps_per_epoch(), max(1, 2000 // max(1, cfg.epochs)))
            lrs = lr_schedule_preview(cfg, spe)
        except Exception as exc:  # a half-typed setting: show why instead of a stale curve
            self.preview_curve.setData([], [])
            self.preview_plot.getPlotItem().setTitle(f"planned LR: {exc}", size="8pt")
            return
        import numpy as np

        y = np.asarray(lrs, dtype=np.float64).ravel()
        x = np.arange(y.shape[0], dtype=np.float64) / spe
        self.preview_curve.setData(x, y)
        finite = y[np.isfinite(y)]
        item = self.preview_plot.getPlotItem()
        if finite.size and finite.min() == finite.max():  # constant: show [0, 1.5 lr], not +-0.5
            item.setYRange(0.0, max(1.5 * finite[0], 1e-12), padding=0)
        else:
            item.enableAutoRange(axis="y")
        title = "planned LR per epoch"
        if cfg.scheduler == "plateau":
            title += " (plateau: drops depend on val loss)"
        self.preview_plot.getPlotItem().setTitle(title, size="8pt")

    # ------------------------------------------------------------------ slots
    def _on_changed(self, *args) -> None:
        self._preview_timer.start()
        self.changed.emit()

    def _on_dataset_changed(self, *args) -> None:
        name = self.dataset_combo.currentData()
        needs_root = name in ("mnist", "fashionmnist", "cifar10", "imagefolder", "csv", "text")
        self.root_edit.setPlaceholderText({"csv": "table file (.csv, .csv.gz, .parquet)",
                                           "text": "text file (.csv, .jsonl, .parquet, .txt) or datasets folder"}
                                          .get(name, "dataset root folder"))
        self.root_edit.setEnabled(needs_root)
        self.root_button.setEnabled(needs_root)
        self.download_check.setEnabled(name in ("mnist", "fashionmnist", "cifar10"))
        self.val_spin.setEnabled(name in ("digits", "fake", "imagefolder", "csv", "text"))
        for widget in (self.fake_shape_edit, self.fake_size_spin, self.classes_spin):
            widget.setEnabled(name == "fake")
        for widget in (self.workers_spin, self.pin_combo, self.persistent_combo, self.skip_check):
            widget.setEnabled(name not in ("digits", "fake"))  # in-memory: batched by indexing
        self.decode_gpu_combo.setEnabled(name == "imagefolder")
        # rows that do not apply to this dataset leave the compact inspector
        self._data_form.setRowVisible(self._root_row, needs_root)
        self._data_form.setRowVisible(self.download_check, name in ("mnist", "fashionmnist", "cifar10"))
        for widget in (self.fake_shape_edit, self.fake_size_spin, self.classes_spin):
            self._data_form.setRowVisible(widget, name == "fake")
        for widget in self.source_fields.csv_widgets():
            self._data_form.setRowVisible(widget, name == "csv" or (name == "text" and widget is self.source_fields.target_edit))
        for widget in self.source_fields.text_widgets():
            self._data_form.setRowVisible(widget, name == "text")
        self._data_form.setRowVisible(self.source_fields.processor_edit, name == "imagefolder")
        kind = self.task_fields.kind_combo
        if name == "text" and kind.currentData() not in TEXT_KINDS:  # text data trains a text task
            kind.setCurrentIndex(kind.findData("text_classification"))
        for widget in self.source_fields.spec_widgets():
            self._data_form.setRowVisible(widget, name == SPEC)
        self.sections["transforms"].setVisible(name in IMAGE_DATASETS)  # image transforms only
        self.tensorboard_check.setEnabled(bool(self.tensorboard_check.property("available")))

    def _on_scheduler_changed(self, *args) -> None:
        name = self.scheduler_combo.currentData()
        visible = {
            "step": {"step_size", "gamma"}, "multistep": {"milestones", "gamma"},
            "onecycle": {"pct_start"}, "plateau": {"patience", "gamma"},
        }.get(name, set())
        for key, (_, widget) in self._sched_rows.items():
            self._sched_form.setRowVisible(widget, key in visible)

    def _on_optimizer_changed(self, *args) -> None:
        name = self.optimizer_combo.currentData()
        self.momentum_spin.setEnabled(name in ("sgd", "rmsprop"))
        self.nesterov_check.setEnabled(name == "sgd")

    def _on_browse_root(self) -> None:
        if self.dataset_combo.currentData() == "csv":
            path, _ = QFileDialog.getOpenFileName(self, "Table file", self.root_edit.text(),
                                                  "Tables (*.csv *.csv.gz *.parquet);;All files (*)")
        elif self.dataset_combo.currentData() == "text":
            path, _ = QFileDialog.getOpenFileName(self, "Text file", self.root_edit.text(),
                                                  "Text data (*.csv *.jsonl *.json *.parquet *.txt);;All files (*)")
        else:
            path = QFileDialog.getExistingDirectory(self, "Dataset root folder", self.root_edit.text())
        if path:
            self.root_edit.setText(path)

    def _on_browse_run_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Run folder", self.run_dir_edit.text())
        if path:
            self.run_dir_edit.setText(path)
