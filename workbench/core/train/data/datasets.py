"""Datasets, transforms and batch loaders for a training run.

``build_datasets(cfg)`` returns ``(train_ds, val_ds, info)``; ``build_loaders(cfg,
seed)`` wraps them in loaders whose order is a pure function of ``(seed, epoch)``,
so a run resumed at an epoch boundary (or at a batch inside an epoch) sees exactly
the batches the uninterrupted run would have seen.

In-memory datasets (the built-in digits, fake data) are batched by tensor
indexing with :class:`TensorBatchLoader` rather than a DataLoader.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, Subset, TensorDataset

from workbench.core.errors import DataError
from workbench.core.train.config import DATASETS, DataConfig
from workbench.core.train.data.loaders import EpochLoader, batch_count, epoch_seed, loader_settings
from workbench.core.train.data.user_data import IterableLoader, UserData, portable_dataset, user_datasets

#: Per-channel ``(mean, std)`` of each normalization preset.
NORMALIZE_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "mnist": ((0.1307,), (0.3081,)),
    "fashionmnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    # load_digits().data / 16: mean 0.3053, std 0.3760 over every pixel.
    "digits": ((0.3053,), (0.3760,)),
}
_AUTO_PRESET = {"digits": "digits", "mnist": "mnist", "fashionmnist": "fashionmnist",
                "cifar10": "cifar10", "imagefolder": "imagenet", "fake": "none"}


@dataclass
class DataInfo:
    """What the model will see.

    Attributes
    ----------
    name : str
        Dataset name.
    input_shape : tuple of int
        ``(C, H, W)`` of one sample after the transforms.
    num_classes : int
        Number of classes (targets are integer class indices).
    classes : list of str
        Class names when known.
    train_size, val_size : int
        Number of samples.
    task : str
        The task the data implies: ``"classification"`` (integer class targets),
        ``"regression"`` (real-valued targets), ``"multilabel"`` (multi-hot targets),
        or ``""`` when the data does not say (a user's dataset).
    target_shape : tuple of int
        Shape of one sample's target (``()`` for a class index, ``(k,)`` for k regression targets).
    notes : list of str
        What the loaders cannot guarantee for this data (e.g. an iterable dataset
        resumes from its epoch's start), said once when the run starts.
    """

    name: str
    input_shape: tuple
    num_classes: int
    classes: list = field(default_factory=list)
    train_size: int = 0
    val_size: int = 0
    task: str = "classification"
    target_shape: tuple = ()
    notes: list = field(default_factory=list)


def normalize_stats(cfg: DataConfig, channels: int) -> tuple[tuple, tuple] | None:
    """``(mean, std)`` for ``cfg.normalize`` fitted to ``channels``; None = no normalization.

    A 1-channel preset is repeated for 3 channels; a 3-channel preset is averaged
    for 1 channel.
    """
    preset = _AUTO_PRESET.get(cfg.dataset, "none") if cfg.normalize == "auto" else cfg.normalize
    if preset == "none":
        return None
    mean, std = NORMALIZE_STATS[preset]
    if len(mean) != channels:
        if len(mean) == 1:
            mean, std = mean * channels, std * channels
        else:
            mean, std = (sum(mean) / len(mean),) * channels, (sum(std) / len(std),) * channels
    return tuple(mean), tuple(std)


# ---------------------------------------------------------------- in-memory data
class TensorBatchLoader:
    """Batches an in-memory ``(x, y)`` pair by tensor indexing.

    Why not a DataLoader: for small models, per-sample ``__getitem__`` plus
    ``default_collate`` costs about 25% of the step time; one ``x[idx]`` per batch
    costs nearly nothing.

    The order of epoch ``e`` is ``torch.randperm`` under a generator seeded with
    :func:`epoch_seed` ``(seed, e)``, so iteration is deterministic and resumable
    without capturing generator state: ``iter_epoch(e, start_batch=k)`` yields
    exactly the batches ``k, k+1, ...`` of that epoch.

    Parameters
    ----------
    x : Tensor
        ``(N, C, H, W)`` inputs.
    y : Tensor
        ``(N,)`` integer targets (or ``(N, ...)`` float targets).
    batch_size : int
    shuffle : bool
    drop_last : bool
    seed : int
    random_flip : bool
        Per-sample random horizontal flip.
    random_crop : int
        Zero padding for a per-sample random crop back to ``(H, W)``; 0 = off.
    shard : (rank, world_size)
        Data parallelism: rank ``r`` takes samples ``r, r + world_size, ...`` of every
        global batch (with their flips and crops), so N processes see together
        exactly the batches of one.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int = 64, shuffle: bool = True,
                 drop_last: bool = False, seed: int = 0, random_flip: bool = False, random_crop: int = 0,
                 shard: tuple[int, int] = (0, 1)):
        if len(x) != len(y):
            raise DataError(f"inputs ({len(x)}) and targets ({len(y)}) differ in length")
        self.x, self.y = x, y
        self.batch_size = int(batch_size)
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, int(seed)
        self.random_flip, self.random_crop = random_flip, int(random_crop)
        self.rank, self.world = int(shard[0]), int(shard[1])
        self.epoch = 0
        self.dataset = TensorDataset(x, y)

    def to(self, device) -> TensorBatchLoader:
        """Move the whole dataset to ``device`` once (then batches need no copy); returns self."""
        self.x, self.y = self.x.to(device), self.y.to(device)
        return self

    def __len__(self) -> int:
        return batch_count(len(self.x), self.batch_size, self.drop_last, self.world)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order ``iter()`` yields."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.iter_epoch(self.epoch)

    def iter_epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Yield ``(x, y)`` batches ``start_batch..`` of epoch ``epoch``."""
        g = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
        n = len(self.x)
        order = torch.randperm(n, generator=g) if self.shuffle else torch.arange(n)
        aug = torch.Generator().manual_seed(epoch_seed(self.seed + 1, epoch))
        # Draw the augmentation randomness for every batch of the epoch, in batch
        # order, before the first yield: a resumed epoch sees the same flips and crops.
        flips, shifts = [], []
        for b in range(len(self)):
            m = len(order[b * self.batch_size:(b + 1) * self.batch_size])
            flips.append(torch.rand(m, generator=aug) < 0.5 if self.random_flip else None)
            shifts.append(torch.randint(0, 2 * self.random_crop + 1, (m, 2), generator=aug)
                          if self.random_crop else None)
        # One host-to-device copy per epoch (the order and the flip masks), none per
        # batch: on CUDA a CPU index or mask would be copied, and wait, every step.
        dev = self.x.device
        order_dev = order.to(dev)
        flips_dev = torch.cat(flips).to(dev) if self.random_flip and flips else None
        for b in range(start_batch, len(self)):
            part = slice(b * self.batch_size, (b + 1) * self.batch_size)
            idx, flip, shift = order_dev[part], flips_dev[part] if flips_dev is not None else None, shifts[b]
            if self.world > 1:
                mine = slice(self.rank, None, self.world)
                idx = idx[mine]
                flip = flip[mine] if flip is not None else None
                shift = shift[mine] if shift is not None else None
            xb = self.x[idx]
            if flip is not None:
                xb = torch.where(flip.view(-1, *([1] * (xb.dim() - 1))), xb.flip(-1), xb)
            if shift is not None:
                xb = _random_crop(xb, self.random_crop, shift)
            yield xb, self.y[idx]


def _random_crop(xb: torch.Tensor, pad: int, shifts: torch.Tensor) -> torch.Tensor:
    h, w = xb.shape[-2:]
    padded = torch.nn.functional.pad(xb, (pad, pad, pad, pad))
    return torch.stack([padded[i, ..., s[0]:s[0] + h, s[1]:s[1] + w] for i, s in enumerate(shifts.tolist())])


# ---------------------------------------------------------------- datasets
def build_datasets(cfg: DataConfig, encoded: bool = False, task: str = "") -> tuple[Dataset, Dataset, DataInfo]:
    """Build the training and validation datasets of ``cfg``.

    Returns
    -------
    (train_ds, val_ds, info)
        For ``"digits"`` and ``"fake"`` both are :class:`TensorDataset` of
        ``(N, C, H, W)`` float32 inputs and ``(N,)`` int64 targets, already
        transformed; for the others, datasets yielding transformed samples.
        With ``encoded`` an ImageFolder yields ``((bytes, path, aug), target)``
        for :mod:`workbench.core.train.data.gpu_images` (Decode on GPU).

    Raises
    ------
    DataError
        A missing or unreadable root folder (the message names it and says to
        tick Download or point at the folder), an unknown dataset, an empty split.
    """
    name = cfg.dataset
    if name == "digits":
        return _digits(cfg)
    if name == "fake":
        return _fake(cfg)
    if name in ("mnist", "fashionmnist", "cifar10"):
        return _torchvision(cfg)
    if name == "imagefolder":
        if cfg.processor:  # a transformers model's own image processor (data.image_processor)
            from workbench.core.train.data.image_processor import processor_transforms

            return _imagefolder(cfg, False, processor_transforms(cfg))
        return _imagefolder(cfg, encoded)
    if name == "csv":
        from workbench.core.train.data.tabular import table_datasets

        train, val, fields = table_datasets(cfg, task=task if task in ("classification", "regression",
                                                                      "multilabel") else "")
        return train, val, DataInfo(**fields)
    if name not in DATASETS:
        data = user_datasets(name, cfg.kwargs)
        return data.train, data.val, _user_info(name, data)
    raise DataError(f"unknown dataset {name!r}; choose {', '.join(DATASETS)}, or give a spec (file.py:make_dataset)")


def build_loaders(cfg: DataConfig, seed: int = 0, device: str | torch.device = "cpu",
                  shard: tuple[int, int] = (0, 1), task: str = ""):
    """Build ``(train_loader, val_loader, info)``.

    In-memory datasets (digits, fake) get :class:`TensorBatchLoader`; the others
    get an :class:`~workbench.core.train.data.loaders.EpochLoader` over a DataLoader
    whose ``"auto"`` settings are chosen for ``device`` and this machine
    (:func:`~workbench.core.train.data.loaders.loader_settings`). All have ``len()``,
    ``set_epoch(e)`` and ``iter_epoch(e, start_batch)``. With a ``(rank,
    world_size)`` shard the training loader yields this process's part of every
    global batch (data parallelism); validation is not sharded.

    Raises
    ------
    DataError
        See :func:`build_datasets`.
    """
    device = torch.device(device)
    on = cfg.decode_on_gpu is True or (cfg.decode_on_gpu == "auto" and device.type == "cuda")
    encoded = cfg.dataset == "imagefolder" and on and not cfg.processor
    if cfg.dataset == "text":  # tokenized text for Hugging Face models (workbench.core.train.data.text)
        from workbench.core.train.data.text import text_loaders

        train, val, fields = text_loaders(cfg, seed, device, shard, task)
        return train, val, DataInfo(**fields)
    if cfg.dataset not in DATASETS:
        return _user_loaders(cfg, seed, device, shard)
    train_ds, val_ds, info = build_datasets(cfg, encoded, task)
    if isinstance(train_ds, TensorDataset):
        (xt, yt), (xv, yv) = train_ds.tensors, val_ds.tensors
        train = TensorBatchLoader(xt, yt, cfg.batch_size, cfg.shuffle, cfg.drop_last, seed,
                                  cfg.random_flip, cfg.random_crop, shard=shard)
        val = TensorBatchLoader(xv, yv, max(cfg.batch_size, 256), shuffle=False, seed=seed)
        return train, val, info
    settings = loader_settings(cfg, device)
    extra = {}
    if encoded:
        from workbench.core.train.data.gpu_images import BatchImageTransform, collate_encoded

        stats = normalize_stats(cfg, 1 if cfg.channels == "grayscale" else 3)
        extra = {"collate": collate_encoded, "batch_transform": BatchImageTransform(cfg, device, stats)}
        settings = dataclasses.replace(settings, note=f"{settings.note}, JPEG decoding on {device}")
    train = EpochLoader(train_ds, cfg.batch_size, seed, cfg.shuffle, cfg.drop_last, settings, cfg.skip_unreadable,
                        shard=shard, **extra)
    val = EpochLoader(val_ds, cfg.batch_size, seed, False, False, settings, cfg.skip_unreadable, **extra)
    return train, val, info


def _user_info(spec: str, data: UserData) -> DataInfo:
    notes = []
    if isinstance(data.train, IterableDataset):
        notes.append("an iterable dataset yields its own order: a run resumed mid-epoch draws the batches done "
                     "again and drops them (the same batches only if the dataset is deterministic)")
    return DataInfo(spec, (), 0, [], len(data.train), len(data.val), task="", notes=notes)


def _user_loaders(cfg: DataConfig, seed: int, device: torch.device, shard: tuple[int, int]):
    """Loaders of a user's datasets: seeded and resumable (:class:`EpochLoader`) when map-style."""
    data = user_datasets(cfg.dataset, cfg.kwargs)
    info = _user_info(cfg.dataset, data)
    settings = loader_settings(cfg, device)
    loaders = []
    for ds, train in ((data.train, True), (data.val, False)):
        if settings.num_workers:  # a spawned worker imports the factory's file by path before the dataset
            ds = portable_dataset(ds)
        if isinstance(ds, IterableDataset):
            if train and shard[1] > 1:
                raise DataError(f"data.dataset {cfg.dataset!r}: an iterable dataset cannot be split between "
                                f"{shard[1]} processes by Workbench; give a map-style dataset for data-parallel runs")
            loaders.append(IterableLoader(ds, cfg.batch_size, cfg.drop_last and train, data.collate_fn,
                                          settings.num_workers, settings.pin_memory))
        else:
            loaders.append(EpochLoader(ds, cfg.batch_size, seed, cfg.shuffle and train, cfg.drop_last and train,
                                       settings, cfg.skip_unreadable, collate=data.collate_fn,
                                       shard=shard if train else (0, 1)))
    return loaders[0], loaders[1], info


def _split(n: int, cfg: DataConfig) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(int(cfg.split_seed))
    perm = torch.randperm(n, generator=g)
    n_val = int(round(n * float(cfg.val_fraction)))
    if n_val <= 0 or n_val >= n:
        raise DataError(f"val_fraction={cfg.val_fraction} leaves an empty split of {n} samples; "
                        "choose a value between 0 and 1")
    return perm[n_val:], perm[:n_val]


def _tensor_transform(x: torch.Tensor, cfg: DataConfig) -> torch.Tensor:
    """Apply channels / resize / center crop / normalize to an ``(N, C, H, W)`` batch in [0, 1]."""
    if cfg.channels == "rgb" and x.shape[1] == 1:
        x = x.expand(-1, 3, -1, -1).contiguous()
    elif cfg.channels == "grayscale" and x.shape[1] == 3:
        x = (0.2989 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]).unsqueeze(1)
    if cfg.image_size:
        x = torch.nn.functional.interpolate(x, size=(cfg.image_size, cfg.image_size), mode="bilinear",
                                            align_corners=False)
    if cfg.center_crop:
        from torchvision.transforms.v2 import functional as TF

        x = TF.center_crop(x, [cfg.center_crop, cfg.center_crop])
    stats = normalize_stats(cfg, x.shape[1])
    if stats is not None:
        mean = torch.tensor(stats[0]).view(1, -1, 1, 1)
        std = torch.tensor(stats[1]).view(1, -1, 1, 1)
        x = (x - mean) / std
    return x.contiguous()


@functools.lru_cache(maxsize=1)
def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``(1797, 64)`` float64 pixels in 0..16 and ``(1797,)`` int labels.

    Reads the CSV that ships inside scikit-learn directly (importing sklearn
    costs seconds); falls back to ``sklearn.datasets.load_digits``.

    Raises
    ------
    DataError
        scikit-learn is not installed.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is not None and spec.origin:
        csv = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
        if csv.exists():
            data = np.loadtxt(csv, delimiter=",")
            return data[:, :-1], data[:, -1].astype(np.int64)
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover
        raise DataError("the digits demo needs scikit-learn: pip install scikit-learn") from e
    d = load_digits()
    return d.data, d.target.astype(np.int64)


def _digits(cfg: DataConfig):
    pixels, target = load_digits_arrays()
    x = torch.as_tensor(pixels, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0
    y = torch.as_tensor(target, dtype=torch.int64)
    x = _tensor_transform(x, cfg)
    tr, va = _split(len(x), cfg)
    info = DataInfo("digits", tuple(x.shape[1:]), 10, [str(i) for i in range(10)], len(tr), len(va))
    return TensorDataset(x[tr], y[tr]), TensorDataset(x[va], y[va]), info


def _fake(cfg: DataConfig):
    """Random images of ``cfg.fake_shape`` in [0, 1] with random labels (seeded by ``split_seed``).

    Generated as in-memory tensors (not torchvision's FakeData, which makes one
    PIL image per sample) so it is batched by :class:`TensorBatchLoader`.
    """
    shape = tuple(int(s) for s in cfg.fake_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise DataError(f"fake_shape must be [C, H, W] with positive sizes, got {list(cfg.fake_shape)}")
    g = torch.Generator().manual_seed(int(cfg.split_seed))
    x = torch.rand((int(cfg.fake_size), *shape), generator=g)
    y = torch.randint(0, int(cfg.num_classes), (int(cfg.fake_size),), generator=g)
    x = _tensor_transform(x, cfg)
    tr, va = _split(len(x), cfg)
    info = DataInfo("fake", tuple(x.shape[1:]), int(cfg.num_classes), [], len(tr), len(va))
    return TensorDataset(x[tr], y[tr]), TensorDataset(x[va], y[va]), info


def image_transforms(cfg: DataConfig, train: bool, native_channels: int):
    """The torchvision.transforms.v2 pipeline for PIL-image datasets.

    Order: channels, resize, center crop, [random crop, random flip when
    ``train``], to float tensor in [0, 1], normalize.

    Returns
    -------
    (transform, channels)
        The v2 ``Compose`` and the number of output channels.
    """
    from torchvision.transforms import v2

    ops: list = [v2.ToImage()]
    channels = native_channels
    if cfg.channels == "grayscale":
        ops.append(v2.Grayscale(num_output_channels=1))
        channels = 1
    elif cfg.channels == "rgb":
        ops.append(v2.RGB())
        channels = 3
    if cfg.image_size:
        ops.append(v2.Resize(cfg.image_size, antialias=True))
    if cfg.center_crop:
        ops.append(v2.CenterCrop(cfg.center_crop))
    if train and cfg.random_crop:
        size = cfg.center_crop or cfg.image_size
        if size:
            ops.append(v2.RandomCrop(size, padding=cfg.random_crop))
        else:
            ops.append(_PadCrop(cfg.random_crop))
    if train and cfg.random_flip:
        ops.append(v2.RandomHorizontalFlip())
    ops.append(v2.ToDtype(torch.float32, scale=True))
    stats = normalize_stats(cfg, channels)
    if stats is not None:
        ops.append(v2.Normalize(list(stats[0]), list(stats[1])))
    return v2.Compose(ops), channels


class _PadCrop(torch.nn.Module):
    """Random crop back to the input size after ``pad`` pixels of zero padding."""

    def __init__(self, pad: int):
        super().__init__()
        self.pad = pad

    def forward(self, img):
        from torchvision.transforms import v2

        h, w = img.shape[-2:]
        return v2.RandomCrop((h, w), padding=self.pad)(img)


def _missing_root(cfg: DataConfig, what: str) -> DataError:
    where = cfg.root or "(no folder chosen)"
    return DataError(f"{what} not found in {where}: tick Download to fetch it (needs internet), "
                     "or point the dataset root at the folder that holds it")


def _torchvision(cfg: DataConfig):
    import torchvision.datasets as tvd

    cls, native = {"mnist": (tvd.MNIST, 1), "fashionmnist": (tvd.FashionMNIST, 1),
                   "cifar10": (tvd.CIFAR10, 3)}[cfg.dataset]
    if not cfg.root:
        raise _missing_root(cfg, cls.__name__)
    root = Path(cfg.root).expanduser()
    if not root.exists() and not cfg.download:
        raise _missing_root(cfg, cls.__name__)
    t_train, channels = image_transforms(cfg, True, native)
    t_val, _ = image_transforms(cfg, False, native)
    try:
        train = cls(str(root), train=True, download=cfg.download, transform=t_train)
        val = cls(str(root), train=False, download=cfg.download, transform=t_val)
    except RuntimeError as e:
        raise _missing_root(cfg, cls.__name__) from e
    except OSError as e:
        raise DataError(f"{root}: cannot read {cls.__name__} ({e}); check the folder, "
                        "or tick Download to fetch it again") from e
    shape = tuple(train[0][0].shape)
    classes = list(getattr(train, "classes", []))
    info = DataInfo(cfg.dataset, shape, len(classes) or 10, classes, len(train), len(val))
    return train, val, info


def _imagefolder(cfg: DataConfig, encoded: bool = False, transforms: tuple | None = None):
    from torchvision.datasets import ImageFolder

    if not cfg.root:
        raise DataError("ImageFolder needs a root folder: choose the folder holding train/ and val/ "
                        "(or one subfolder per class)")
    root = Path(cfg.root).expanduser()
    if not root.is_dir():
        raise DataError(f"{root}: folder not found; point the dataset root at a folder holding "
                        "train/ and val/ (or one subfolder per class)")
    extra = {}
    if transforms is not None:  # (train, val) given: an image processor's
        t_train, t_val = transforms
    elif encoded:  # workers read bytes; the batch is decoded and transformed on the device
        from workbench.core.train.data.gpu_images import DrawAugment, read_encoded

        t_train, t_val = DrawAugment(cfg.random_flip, cfg.random_crop), DrawAugment(False, 0)
        extra = {"loader": read_encoded}
    else:
        t_train, _ = image_transforms(cfg, True, 3)
        t_val, _ = image_transforms(cfg, False, 3)
    try:
        if (root / "train").is_dir() and (root / "val").is_dir():
            train = ImageFolder(str(root / "train"), transform=t_train, **extra)
            val = ImageFolder(str(root / "val"), transform=t_val, **extra)
            classes = train.classes
        else:
            full_t = ImageFolder(str(root), transform=t_train, **extra)
            full_v = ImageFolder(str(root), transform=t_val, **extra)
            tr, va = _split(len(full_t), cfg)
            train, val = Subset(full_t, tr.tolist()), Subset(full_v, va.tolist())
            classes = full_t.classes
    except (FileNotFoundError, OSError) as e:
        raise DataError(f"{root}: {e}; each class needs its own subfolder of images") from e
    if encoded:
        from workbench.core.train.data.gpu_images import BatchImageTransform, collate_encoded

        stats = normalize_stats(cfg, 1 if cfg.channels == "grayscale" else 3)
        shape = tuple(BatchImageTransform(cfg, "cpu", stats)(collate_encoded([val[0]]))[0].shape[1:])
    else:
        shape = tuple(train[0][0].shape)
    info = DataInfo("imagefolder", shape, len(classes), list(classes), len(train), len(val))
    return train, val, info


#: Channels each built-in dataset has before any transform.
NATIVE_CHANNELS = {"digits": 1, "mnist": 1, "fashionmnist": 1, "cifar10": 3, "imagefolder": 3}


def model_input_channels(model) -> int | None:
    """Input channels the model expects: ``in_channels`` of its first ``nn.Conv2d``.

    Returns
    -------
    int or None
        None when the model has no 2-D convolution (an MLP, a transformer on tokens).
    """
    from torch import nn

    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            return int(module.in_channels)
    return None


def fit_channels_to_model(cfg: DataConfig, model) -> str | None:
    """Convert grayscale data to RGB (or back) when the model's first conv wants it.

    Only acts when ``cfg.channels == "keep"``: a user's explicit choice wins.
    For FakeData the generated shape's channel count is set instead. So a user
    who opens resnet18 (``conv1`` takes 3 channels) can press Start on the
    built-in 1-channel digits without a shape error.

    Parameters
    ----------
    cfg : DataConfig
        Changed in place.
    model : nn.Module

    Returns
    -------
    str or None
        What was changed, for the status bar / log; None when nothing was.
    """
    want = model_input_channels(model)
    if want is None or cfg.channels != "keep":
        return None
    if cfg.dataset == "fake":
        shape = list(cfg.fake_shape)
        if shape and shape[0] != want:
            cfg.fake_shape = [want, *shape[1:]]
            return f"FakeData generated with {want} channels to fit the model's first convolution"
        return None
    have = NATIVE_CHANNELS.get(cfg.dataset)
    if have is None or have == want:
        return None
    if want == 3 and have == 1:
        cfg.channels = "rgb"
    elif want == 1 and have == 3:
        cfg.channels = "grayscale"
    else:
        return None
    return f"{cfg.dataset} images converted to {cfg.channels} ({want} channels) for the model's first convolution"
