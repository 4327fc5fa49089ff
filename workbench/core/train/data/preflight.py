"""The pre-flight check of a run: what Start verifies before any step, and before the run folder exists.

A bad image in ``val/`` used to surface after a whole training epoch, and a
head with fewer outputs than the data has classes as "IndexError: Target 9 is
out of bounds" at the first step. :func:`preflight` finds both, and any batch
the model cannot take, in about the time of two forward passes (plus a header
read per image file of an ImageFolder). Qt-free.

Before Start, :func:`head_mismatch` compares the model's head with the
chosen data's class count (:func:`data_class_count`: what can be told without
loading the data: a built-in dataset's count, an ImageFolder's class folders, a
table's target column), so the window can say so before a run at loss ln 1000.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from torch import nn

from workbench.core.errors import DataError, StepError
from workbench.core.model.edits import is_head_candidate, last_layer
from workbench.core.train.config import DataConfig
from workbench.core.train.data.batch import describe, move
from workbench.core.train.data.image_checks import ImageCheckCache

__all__ = ["ClassCountMismatch", "HeadMismatch", "data_class_count", "head_mismatch", "head_outputs", "preflight",
           "image_files", "unreadable_images"]

#: Classes of the built-in datasets (their torchvision tables; nothing is read to know them).
BUILTIN_CLASSES = {"digits": 10, "mnist": 10, "fashionmnist": 10, "cifar10": 10}
#: A table file larger than this is not read before Start to count its target's classes (it is read on the GUI
#: thread, as the settings change: a 16 MB CSV column takes well under a second), bytes.
TABLE_COUNT_MAX_BYTES = 16 * 2**20
#: Task kinds whose targets are class indices (``"auto"``: what the data implies).
_CLASS_TASKS = ("auto", "classification")


class ClassCountMismatch(DataError):
    """The data has more classes than the model has outputs: training would fail at the first step.

    Attributes
    ----------
    data_classes : int
    model_outputs : int
    """

    def __init__(self, data_classes: int, model_outputs: int):
        self.data_classes, self.model_outputs = int(data_classes), int(model_outputs)
        super().__init__(
            f"the data has {data_classes} classes but the model has {model_outputs} outputs: replace the head "
            f"with {data_classes} outputs (right-click the last layer in the tree, Replace head), or choose "
            f"data with at most {model_outputs} classes")


@dataclass(frozen=True)
class HeadMismatch:
    """The model's head and the data's classes differ (said before Start).

    Attributes
    ----------
    head : str
        Qualified name of the head (the last layer with parameters: an ``nn.Linear`` or a 1x1 ``nn.Conv2d``).
    model_outputs : int
    data_classes : int
    """

    head: str
    model_outputs: int
    data_classes: int

    @property
    def message(self) -> str:
        """One line for the user: the counts and what training would do."""
        what = ("training fails at the first step" if self.model_outputs < self.data_classes
                else f"{self.model_outputs - self.data_classes} outputs would never be a right answer")
        return (f"{self.head} has {self.model_outputs:,} outputs but the data has {self.data_classes:,} classes "
                f"({what}): replace the head with {self.data_classes:,} outputs")


def _folder_classes(root: Path) -> int | None:
    """Class folders of an ImageFolder root (``train/`` when it has ``train/`` and ``val/``), or None."""
    from torchvision.datasets.folder import find_classes

    if (root / "train").is_dir() and (root / "val").is_dir():
        root = root / "train"
    try:
        return len(find_classes(str(root))[0]) or None
    except (FileNotFoundError, OSError):
        return None


def _table_classes(cfg: DataConfig, task: str) -> int | None:
    """Classes of a table's single target column (read alone) when it is a class label, else None."""
    from workbench.core.train.data import tabular

    targets = [cfg.target] if isinstance(cfg.target, str) else list(cfg.target or [])
    path = Path(cfg.root).expanduser() if cfg.root else None
    if len(targets) != 1 or path is None or not path.is_file() or path.stat().st_size > TABLE_COUNT_MAX_BYTES:
        return None
    try:
        import pandas as pd

        tabular.check_table_shape(path)  # a 16 MB file of one line or a million columns: not read
        name = path.name.lower()
        if name.endswith((".parquet", ".pq")):
            df = pd.read_parquet(path, columns=targets)
        else:
            df = pd.read_csv(path, usecols=targets, low_memory=False)
        if task != "classification" and tabular.infer_task(df, targets) != "classification":
            return None
        col = df[targets[0]]
        if not tabular._is_numeric(col):  # as the table's encoding sorts it: text, NaN included
            col = col.astype(str)
        return len(pd.factorize(col, sort=True)[1]) or None
    except Exception:  # noqa: BLE001 - no count before Start; the run's own reading says what is wrong
        return None


def data_class_count(cfg: DataConfig, task: str = "auto") -> int | None:
    """The number of classes ``cfg``'s data has, when it can be told cheaply; None otherwise.

    Built-in datasets from their tables; ``"fake"`` from ``num_classes``; an
    ImageFolder from its class folders (a directory listing, no image read); a
    ``"csv"`` table of at most :data:`TABLE_COUNT_MAX_BYTES` from its single
    target column when that is a class label. A user's dataset, a regression or
    multilabel task, or anything that cannot be read gives None.

    Parameters
    ----------
    cfg : DataConfig
    task : str
        The run's task kind (``TaskConfig.kind``); only ``"auto"`` and ``"classification"`` have classes.
    """
    if task not in _CLASS_TASKS:
        return None
    dataset = cfg.dataset
    if dataset in BUILTIN_CLASSES:
        return BUILTIN_CLASSES[dataset]
    if dataset == "fake":
        return int(cfg.num_classes) if cfg.num_classes else None
    if dataset == "imagefolder":
        return _folder_classes(Path(cfg.root).expanduser()) if cfg.root else None
    if dataset == "csv":
        return _table_classes(cfg, task)
    return None


def head_outputs(model: nn.Module) -> tuple[str, int] | None:
    """``(name, outputs)`` of the model's head (its last layer with parameters) when it is a Linear / 1x1 Conv2d."""
    path = last_layer(model)
    if path is None:
        return None
    module = model.get_submodule(path)
    if not is_head_candidate(module):
        return None
    return path, int(module.out_features if isinstance(module, nn.Linear) else module.out_channels)


def head_mismatch(model: nn.Module | None, cfg: DataConfig, task: str = "auto") -> HeadMismatch | None:
    """The model's head and the data's classes when both are known and differ, else None.

    Cheap (no data loaded, no forward): :func:`head_outputs` and :func:`data_class_count`.
    """
    if model is None:
        return None
    head = head_outputs(model)
    if head is None:
        return None
    classes = data_class_count(cfg, task)
    if classes is None or classes == head[1]:
        return None
    return HeadMismatch(head[0], head[1], classes)


def image_files(dataset: Any) -> list[str]:
    """The image paths of an ImageFolder (or a ``Subset`` of one), ``[]`` for other datasets."""
    indices = None
    if isinstance(dataset, torch.utils.data.Subset):
        dataset, indices = dataset.dataset, list(dataset.indices)
    samples = getattr(dataset, "samples", None)
    if not isinstance(samples, list):
        return []
    rows = samples if indices is None else [samples[i] for i in indices]
    return [str(path) for path, _ in rows]


def unreadable_images(paths: Iterable[str], progress: Callable[[int, int], Any] | None = None,
                      cache: ImageCheckCache | None = None) -> list[str]:
    """``"<file> (class folder <name>): <reason>"`` for each image file PIL cannot open and verify.

    Reads headers (``Image.verify``), not a full decode: a JPEG cut short after
    its header passes here and is caught when it is loaded.

    Parameters
    ----------
    paths : iterable of str
    progress : callable, optional
        ``progress(done, total)`` every 200 files.
    cache : ImageCheckCache, optional
        Files it knows as verified, with the same size and mtime, are not
        opened; files that verify now are added to it (and it is saved).
    """
    from PIL import Image

    paths = list(paths)
    bad = []
    for i, path in enumerate(paths):
        if cache is not None and cache.unchanged(path):
            continue
        try:
            with Image.open(path) as im:
                im.verify()
        except Exception as e:  # noqa: BLE001 - any failure is a file the loader would choke on
            bad.append(f"{path} (class folder {Path(path).parent.name}): {type(e).__name__}: {e}")
        else:
            if cache is not None:
                cache.remember(path)
        if progress is not None and (i + 1) % 200 == 0:
            progress(i + 1, len(paths))
    if cache is not None:
        cache.save()
    return bad


def first_batch(loader) -> Any:
    """The first batch of epoch 0 of ``loader`` (any structure), or None when it yields none.

    Raises
    ------
    DataError
        The loader cannot make it (an unreadable file...).
    """
    batches = loader.iter_epoch(0) if hasattr(loader, "iter_epoch") else iter(loader)
    for batch in batches:
        return batch
    return None


def _outputs(model: nn.Module, batch: Any) -> int | None:
    """Outputs of ``model`` on an ``(input, target)`` batch's input when it gives ``(N, C)`` logits, else None."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        return None
    try:
        out = model(batch[0])
    except Exception:  # noqa: BLE001 - only a hint for the message
        return None
    return int(out.shape[1]) if isinstance(out, torch.Tensor) and out.dim() == 2 else None


def preflight(model: nn.Module, train_loader, val_loader, device: torch.device, *, num_classes: int | None,
              classification: bool, step: Callable[[nn.Module, Any], Any], datasets: tuple = (),
              progress: Callable[[str], Any] | None = None, skip_unreadable: bool = False) -> str | None:
    """Check a run before its first step; return a note for the user, or None.

    1. Every image file of an ImageFolder opens (``datasets``: the train and
       validation datasets); files that verified at an earlier Start and have
       not changed since (size, mtime) are not opened again (:mod:`image_checks`).
    2. One batch of each split goes through the run's step (``step(model, batch)``:
       its task's ``eval_step``, returning an object with ``.output``), in
       ``eval()`` and without grad; the train/eval mode of every module is put back.
       The message names the split, the batch's shapes and dtypes and what failed
       (a shape, a dtype, a missing ``loss`` key).
    3. For a classification loss, the model has at least as many outputs as the
       data has classes (more outputs only give a note).

    ``progress(text)`` hears how far the image scan is (every 200 files). With
    ``skip_unreadable`` the unreadable files only give a note (the loader skips them).

    Raises
    ------
    DataError
        Unreadable images (named), a batch the model cannot take (with the
        split and the error), or a :class:`ClassCountMismatch`.
    """
    files = [f for ds in datasets for f in image_files(ds)]
    report = None if progress is None else (lambda done, total: progress(f"checking images {done:,} / {total:,}"))
    bad = unreadable_images(files, report, ImageCheckCache(files) if files else None)
    notes = []
    if bad:
        more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
        if not skip_unreadable:
            raise DataError(f"{len(bad)} image file(s) cannot be read; remove or replace them before training, "
                            "or tick Skip unreadable images:\n" + "\n".join(bad[:5]) + more)
        notes.append(f"{len(bad)} unreadable image file(s) will be skipped: " + "; ".join(bad[:3])
                     + (f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""))
    modes = {m: m.training for m in model.modules()}
    outputs = None
    try:
        model.eval()
        with torch.no_grad():
            for split, loader in (("training", train_loader), ("validation", val_loader)):
                try:
                    batch = first_batch(loader) if loader is not None else None
                except DataError as e:
                    raise DataError(f"the first {split} batch: {e}") from e
                if batch is None:
                    continue
                batch = move(batch, device)
                try:
                    out = getattr(step(model, batch), "output", None)
                except torch.OutOfMemoryError:
                    raise  # an out-of-memory error ends the run as one (with its batch-size hint)
                except Exception as e:  # noqa: BLE001 - reported with the split it came from
                    outputs = _outputs(model, batch) if classification and num_classes else None
                    if outputs is not None and outputs < num_classes:
                        raise ClassCountMismatch(num_classes, outputs) from e  # the likely cause, said plainly
                    if isinstance(e, StepError):  # the step's own message: what the batch holds and what to do
                        raise DataError(f"the first {split} batch {describe(batch)}: {e}") from e
                    raise DataError(f"the first {split} batch {describe(batch)} does not go through the "
                                    f"model: {type(e).__name__}: {e}") from e
                if outputs is None and isinstance(out, torch.Tensor) and out.dim() == 2:
                    outputs = int(out.shape[1])
    finally:
        for m, training in modes.items():
            m.train(training)
    if classification and num_classes and outputs is not None:
        if outputs < num_classes:
            raise ClassCountMismatch(num_classes, outputs)
        if outputs > num_classes:
            notes.append(f"the model has {outputs} outputs for {num_classes} classes: replace the head with "
                         f"{num_classes} outputs to train a {num_classes}-class classifier")
    return "; ".join(notes) or None
