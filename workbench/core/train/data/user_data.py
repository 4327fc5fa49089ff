"""The user's own datasets: a factory named by ``[data] dataset`` returns the training and validation sets.

The factory is a registered dataset name (an installed package's entry point,
group ``workbench.datasets``) or a spec, ``"pkg.mod:make"`` or
``"file.py:make"``, called with ``[data] kwargs``. It returns one of::

    (train, val)
    {"train": train, "val": val}                       # "validation" is read as "val"
    {"train": train, "val": val, "collate_fn": fn}     # how samples become a batch

where ``train`` and ``val`` are :class:`torch.utils.data.Dataset` objects
(map-style or iterable). Samples may be tensors, tuples or dicts of tensors,
as ``default_collate`` (or the given ``collate_fn``) batches them.

What the loaders keep and what they cannot (said in :attr:`DataInfo.notes`):
a map-style dataset gets Workbench's seeded, resumable batches
(:class:`~workbench.core.train.data.loaders.EpochLoader`: the same order for the
same seed, a resume continues at the exact batch); an iterable dataset yields
its own order, and a run resumed mid-epoch skips the batches already done by
drawing them again, which replays the same ones only when the dataset itself
is deterministic. An iterable dataset needs ``__len__`` (samples per epoch),
since the schedule and the progress count steps.

A factory named by a file (``"file.py:make"``) is imported under a name of
Workbench's own (``_workbench_factory_<hash>``, :func:`workbench.core.contrib.file_module_name`),
which a DataLoader worker started by *spawn* cannot import by itself: its
datasets then travel as :func:`portable_dataset`, whose pickle imports those
files by path in the worker before the dataset itself is unpickled.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Callable

from torch.utils.data import DataLoader, Dataset, IterableDataset

from workbench.core import contrib
from workbench.core.errors import DataError, WorkbenchError
from workbench.core.train.data.batch import describe

__all__ = ["UserData", "user_datasets", "IterableLoader", "portable_dataset", "file_modules"]


class UserData:
    """What a dataset factory returned, checked.

    Attributes
    ----------
    train, val : Dataset
    collate_fn : callable or None
    """

    def __init__(self, train: Dataset, val: Dataset, collate_fn: Callable | None):
        self.train, self.val, self.collate_fn = train, val, collate_fn


def _check(spec: str, result: Any) -> UserData:
    expected = ('return (train, val) or {"train": train, "val": val} (optionally with "collate_fn") of '
                "torch.utils.data.Dataset objects")
    collate = None
    if isinstance(result, Mapping):
        keys = set(result)
        val_key = "val" if "val" in keys else "validation" if "validation" in keys else None
        if "train" not in keys or val_key is None:
            raise DataError(f"data.dataset {spec!r} returned a dict with keys {', '.join(map(str, keys)) or '(none)'}"
                            f": {expected}")
        train, val, collate = result["train"], result[val_key], result.get("collate_fn")
    elif isinstance(result, (tuple, list)) and len(result) in (2, 3):
        train, val = result[0], result[1]
        collate = result[2] if len(result) == 3 else None
    else:
        raise DataError(f"data.dataset {spec!r} returned {type(result).__name__}: {expected}")
    for split, ds in (("train", train), ("val", val)):
        if not isinstance(ds, Dataset):
            raise DataError(f"data.dataset {spec!r}: its {split} split is a {type(ds).__name__}, not a "
                            f"torch.utils.data.Dataset: {expected}")
        if isinstance(ds, IterableDataset):
            try:
                len(ds)
            except TypeError:
                raise DataError(f"data.dataset {spec!r}: its {split} split is an IterableDataset without "
                                "__len__; give it __len__ (samples per epoch): the schedule and the progress "
                                "count steps") from None
        elif not hasattr(ds, "__getitem__") or not hasattr(ds, "__len__"):
            raise DataError(f"data.dataset {spec!r}: its {split} split needs __len__ and __getitem__ "
                            "(a map-style Dataset) or __iter__ (an IterableDataset)")
    if collate is not None and not callable(collate):
        raise DataError(f"data.dataset {spec!r}: collate_fn is a {type(collate).__name__}, not a function")
    if len(train) == 0:
        raise DataError(f"data.dataset {spec!r}: the train split is empty")
    return UserData(train, val, collate)


def user_datasets(spec: str, kwargs: dict | None = None) -> UserData:
    """Call the dataset factory ``spec`` with ``kwargs`` and check what it returns.

    The trust rule was applied where the spec was read
    (:func:`workbench.core.train.task.specs.check_trust`); here it is imported and called.

    Raises
    ------
    DataError
        The factory cannot be imported, raises (its error is named with the
        spec), or returns something else than two datasets; the message says
        what to return.
    """
    try:
        factory = contrib.resolve("dataset", spec)
    except WorkbenchError as e:
        raise DataError(f"data.dataset: {e}") from e
    try:
        result = factory(**(kwargs or {}))
    except Exception as e:  # noqa: BLE001 - the user's code: named, with what it raised
        raise DataError(f"data.dataset {spec!r} raised {type(e).__name__}: {e}; fix the factory or its "
                        "[data] kwargs") from e
    return _check(spec, result)


def sample_text(ds: Dataset) -> str:
    """Shapes and dtypes of the first sample of a map-style dataset, for messages (``""`` if unreadable)."""
    if isinstance(ds, IterableDataset):
        return ""
    try:
        return describe(ds[0])
    except Exception:  # noqa: BLE001 - only a description
        return ""


class IterableLoader:
    """A DataLoader over an :class:`~torch.utils.data.IterableDataset`, with the loaders' ``len`` and
    ``iter_epoch`` (the dataset's own order; ``start_batch`` batches are drawn and dropped).

    Parameters
    ----------
    dataset : IterableDataset
        With ``__len__`` (samples per epoch).
    batch_size : int
    drop_last : bool
    collate_fn : callable, optional
    num_workers : int
        Each worker must yield its own share (``torch.utils.data.get_worker_info``),
        as for any DataLoader over an iterable dataset.
    """

    def __init__(self, dataset: IterableDataset, batch_size: int, drop_last: bool = False,
                 collate_fn: Callable | None = None, num_workers: int = 0, pin_memory: bool = False):
        self.dataset = dataset
        self.loader = DataLoader(dataset, batch_size=batch_size, drop_last=drop_last, collate_fn=collate_fn,
                                 num_workers=num_workers, pin_memory=pin_memory)
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (passed on to the dataset when it has ``set_epoch``)."""
        self.epoch = int(epoch)
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(self.epoch)

    def __iter__(self):
        return self.iter_epoch(self.epoch)

    def iter_epoch(self, epoch: int, start_batch: int = 0):
        """The batches of epoch ``epoch`` from ``start_batch`` on (those before are drawn and dropped)."""
        self.set_epoch(epoch)
        it = iter(self.loader)
        for _ in range(start_batch):
            if next(it, None) is None:
                return
        yield from it


# --------------------------------------------------------------------------- datasets defined in a file, in workers


def file_modules() -> dict[str, str]:
    """``{module name: file}`` of every module imported from a file path (``"file.py:make"`` specs), sorted by name."""
    out = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.startswith(contrib.FILE_MODULE_PREFIX) and path:
            out[name] = str(path)
    return dict(sorted(out.items()))


def _import_then_empty(cls: type, modules: dict[str, str]):
    """Unpickling a :func:`portable_dataset`: import ``modules`` by path first, then an empty wrapper of ``cls``.

    Its state (the user's dataset) is unpickled after this returns, so the
    classes and functions of those files resolve by their module names.
    """
    for name, path in modules.items():
        contrib.import_file_module(name, path)
    return cls.__new__(cls)


class _Reimporting:
    """The wrapped dataset's attributes, and a pickle that imports its files by path first (see :func:`portable_dataset`)."""

    dataset: Dataset
    modules: dict[str, str]

    def __reduce__(self):
        return _import_then_empty, (type(self), dict(self.modules)), {"dataset": self.dataset, "modules": self.modules}

    def __getattr__(self, name: str):
        if name.startswith("__") or "dataset" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["dataset"], name)

    def __len__(self) -> int:
        return len(self.dataset)


class _PortableDataset(_Reimporting, Dataset):
    """A map-style dataset of a file-defined factory, as :func:`portable_dataset` returns it."""

    def __init__(self, dataset: Dataset, modules: dict[str, str]):
        self.dataset, self.modules = dataset, modules

    def __getitem__(self, index):
        return self.dataset[index]


class _PortableIterable(_Reimporting, IterableDataset):
    """An iterable dataset of a file-defined factory, as :func:`portable_dataset` returns it."""

    def __init__(self, dataset: IterableDataset, modules: dict[str, str]):
        self.dataset, self.modules = dataset, modules

    def __iter__(self):
        return iter(self.dataset)


def portable_dataset(dataset: Dataset) -> Dataset:
    """``dataset`` as it can travel to any DataLoader worker, spawned or forked.

    A spawned worker unpickles the dataset in a fresh interpreter, where the
    modules Workbench imported from file paths (:func:`file_modules`) do not
    exist: unpickling a class they define fails with ``ModuleNotFoundError:
    _workbench_factory_...``. The wrapper returned here pickles as "import these
    files by path (:func:`workbench.core.contrib.import_file_module`), then the
    dataset", so the classes and functions of those files (the dataset's, its
    transforms', a ``collate_fn`` pickled after it) resolve. A forked worker
    already has the modules: importing them again does nothing.

    Parameters
    ----------
    dataset : Dataset
        Map-style or iterable; its attributes (``set_epoch``...) stay reachable.

    Returns
    -------
    Dataset
        ``dataset`` itself when no module was imported from a file; else a
        wrapper of the same kind (map-style or iterable) with its length and items.
    """
    modules = file_modules()
    if not modules or isinstance(dataset, _Reimporting):
        return dataset
    if isinstance(dataset, IterableDataset):
        return _PortableIterable(dataset, modules)
    return _PortableDataset(dataset, modules)
