"""Batch loading of file-backed datasets: settings from the machine, exact resume, device prefetch.

:class:`EpochLoader` wraps a :class:`torch.utils.data.DataLoader` so that

- its worker count, ``pin_memory`` and ``persistent_workers`` are chosen from
  the machine and the device (:func:`loader_settings`) unless set by hand;
- the order of epoch ``e`` and every sample's augmentation randomness are pure
  functions of ``(seed, e, index)`` (:class:`EpochSampler`, :class:`SeededSamples`):
  a run resumed at any batch, with persistent workers or with a different
  number of workers, sees exactly the batches of the uninterrupted run;
- an image that cannot be read stops the run with its file and class folder
  named, or is skipped and reported (``skip_unreadable``).

:class:`DevicePrefetcher` copies the next batch to a CUDA device on a side
stream while the current step computes. Qt-free.

Why own code: the DataLoader seeds worker RNGs once per worker, so with
persistent workers (kept alive across epochs) a resumed run would draw
different flips and crops than the uninterrupted one; seeding per sample from
the sampler is the one way to keep both speed and exact resume.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler, Subset, default_collate, get_worker_info

from workbench.core.errors import DataError
from workbench.core.train.data.batch import move, tensors

__all__ = ["LoaderSettings", "loader_settings", "epoch_seed", "usable_cores", "EpochSampler", "SeededSamples",
           "Unreadable", "collate_samples", "EpochLoader", "DevicePrefetcher", "sample_path",
           "input_wait_text", "INPUT_BOUND_SHARE", "epoch_batches", "overlong_text",
           "say_overlong"]

log = logging.getLogger(__name__)

#: At most this many workers by default: past 8, more processes rarely load faster and cost memory.
MAX_AUTO_WORKERS = 8


def usable_cores() -> int:
    """CPU cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where absent)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


@dataclass(frozen=True)
class LoaderSettings:
    """What a DataLoader of a run is built with.

    Attributes
    ----------
    num_workers : int
    pin_memory : bool
    persistent_workers : bool
    note : str
        How they were chosen, e.g. ``"1 worker (auto: 2 usable cores - 1), pin_memory off"``.
    """

    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    note: str = ""


def loader_settings(cfg: Any, device: str | torch.device = "cpu", in_memory: bool = False,
                    cores: int | None = None) -> LoaderSettings:
    """Resolve the ``"auto"`` loader settings of a :class:`~workbench.core.train.config.DataConfig`.

    Parameters
    ----------
    cfg : DataConfig
        ``num_workers``, ``pin_memory``, ``persistent_workers``: a value or ``"auto"``.
    device : str or torch.device
        The training device: ``pin_memory="auto"`` is on for CUDA only.
    in_memory : bool
        Digits and fake data are batched by indexing: never any worker.
    cores : int, optional
        Usable cores (default :func:`usable_cores`).

    Returns
    -------
    LoaderSettings
        ``"auto"`` workers = ``min(8, cores - 1)``, at least 0; persistent when
        there are workers.
    """
    if in_memory:
        return LoaderSettings(0, False, False, "in memory: batched by indexing, no workers")
    cores = usable_cores() if cores is None else int(cores)
    if cfg.num_workers == "auto":
        workers = max(0, min(MAX_AUTO_WORKERS, cores - 1))
        why = f"auto: {cores} usable cores - 1" + (f", at most {MAX_AUTO_WORKERS}" if cores - 1 > 8 else "")
    else:
        workers, why = int(cfg.num_workers), "set by hand"
    pin = torch.device(device).type == "cuda" if cfg.pin_memory == "auto" else bool(cfg.pin_memory)
    persistent = workers > 0 and (cfg.persistent_workers == "auto" or bool(cfg.persistent_workers))
    note = (f"{workers} loader worker{'s' if workers != 1 else ''} ({why})"
            f"{', persistent' if persistent else ''}, pin_memory {'on' if pin else 'off'}")
    return LoaderSettings(workers, pin, persistent, note)


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch``'s data order: a pure function of ``(seed, epoch)``."""
    return (int(seed) * 1_000_003 + int(epoch) * 7919 + 12345) % (2**63 - 1)


def batch_count(n: int, batch_size: int, drop_last: bool, world_size: int = 1) -> int:
    """Batches of an epoch of ``n`` samples; a last partial batch too small to give every
    one of ``world_size`` processes a sample is dropped."""
    full, rest = divmod(int(n), int(batch_size))
    return full + (1 if rest and not drop_last and rest >= world_size else 0)


def _mix(a: int, b: int) -> int:
    return (a * 6364136223846793005 + b * 1442695040888963407 + 1) % (2**63 - 1)


def epoch_batches(batches: Iterator, count: int, overlong: Callable[[], None]) -> Iterator:
    """At most ``count`` batches of ``batches``: one epoch of a loader that says ``len() == count``.

    A loader's ``len()`` is what an epoch is: an ``IterableDataset`` that says
    ``__len__ = 320`` but never stops would otherwise never end its epoch (no
    step limit, no message). After ``count`` batches one more is asked for; if
    there is one, it is dropped and ``overlong()`` is called (once per epoch) to
    say so. A loader that ends sooner ends the epoch sooner, as before.

    Parameters
    ----------
    batches : iterator
        The epoch's batches (already advanced past any resumed ones).
    count : int
        Batches left in the epoch: ``len(loader)`` minus those done.
    overlong : callable
        Called without arguments when ``batches`` had more than ``count``.
    """
    for _ in range(max(0, count)):
        try:
            yield next(batches)
        except StopIteration:
            return
    if next(batches, _END) is not _END:
        overlong()


_END = object()


def overlong_text(loader: Any, split: str) -> str:
    """The line that says ``loader`` yielded more than its ``len()``: where its epoch stopped, and the fix."""
    batches = len(loader)
    try:
        samples = len(loader.dataset)
    except Exception:  # noqa: BLE001 - no dataset or no length: batches alone
        samples = None
    where = f"{samples:,} samples ({batches:,} batches)" if samples is not None else f"{batches:,} batches"
    return (f"the {split} data yields more than its __len__ says: the epoch stopped at {where}; make __len__ "
            "the number of samples one pass yields")


def say_overlong(trainer: Any, loader: Any, split: str) -> Callable[[], None]:
    """The ``overlong`` of :func:`epoch_batches` for a run: :func:`overlong_text` to the process's log (a warning:
    stderr of ``workbench train``) and to the trainer's ``on_progress`` hook (the window's progress line)."""
    def say() -> None:
        text = overlong_text(loader, split)
        log.warning(text)
        trainer.call("on_progress", trainer, text)

    return say


class EpochSampler(Sampler):
    """Yields one list of ``(sample_seed, index)`` per batch of one epoch, from ``start_batch`` on.

    The order is ``torch.randperm`` under a generator seeded with
    ``epoch_seed(seed, epoch)`` (or ``range(n)`` without shuffle) and each
    sample's seed depends on ``(seed, epoch, index)`` only, so which worker
    loads a sample, or whether the epoch was resumed, changes nothing.
    A DataLoader ``batch_sampler``.

    Parameters
    ----------
    n : int
        Dataset length.
    seed : int
    shuffle : bool
    batch_size : int
        The global batch size: with a ``shard`` each process takes its part of every batch.
    drop_last : bool
    shard : (rank, world_size), optional
        Data parallelism: rank ``r`` takes samples ``r, r + world_size, ...`` of each
        global batch, so N processes see together exactly the batches of one.
    """

    def __init__(self, n: int, seed: int, shuffle: bool, batch_size: int, drop_last: bool = False,
                 shard: tuple[int, int] = (0, 1)):
        self.n, self.seed, self.shuffle, self.batch_size = int(n), int(seed), bool(shuffle), int(batch_size)
        self.drop_last = bool(drop_last)
        self.rank, self.world = int(shard[0]), int(shard[1])
        self.epoch, self.start_batch = 0, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """The epoch the next ``iter()`` yields, skipping its first ``start_batch`` batches."""
        self.epoch, self.start_batch = int(epoch), int(start_batch)

    def __len__(self) -> int:
        # the whole epoch: len(DataLoader) is the steps per epoch, resumed or not
        return batch_count(self.n, self.batch_size, self.drop_last, self.world)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        if self.shuffle:
            order = torch.randperm(self.n, generator=torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch)))
        else:
            order = torch.arange(self.n)
        base = epoch_seed(self.seed + 1, self.epoch)
        order = order.tolist()
        for b in range(self.start_batch, len(self)):
            batch = order[b * self.batch_size:(b + 1) * self.batch_size][self.rank::self.world]
            yield [(_mix(base, i), i) for i in batch]


@dataclass
class Unreadable:
    """A sample that could not be loaded: its file (when known) and why."""

    index: int
    path: str | None
    reason: str

    def describe(self) -> str:
        """``"<file> (class folder <name>): <reason>"``."""
        if self.path is None:
            return f"sample {self.index}: {self.reason}"
        return f"{self.path} (class folder {Path(self.path).parent.name}): {self.reason}"


def sample_path(dataset: Dataset, index: int) -> str | None:
    """The file of sample ``index`` of an ImageFolder (or a ``Subset`` of one); None for other datasets."""
    while isinstance(dataset, Subset):
        dataset, index = dataset.dataset, int(dataset.indices[index])
    samples = getattr(dataset, "samples", None)
    if isinstance(samples, list) and 0 <= index < len(samples):
        return str(samples[index][0])
    return None


class SeededSamples(Dataset):
    """``dataset[i]`` loaded under torch's RNG seeded with the sample's seed.

    Indexed by the ``(sample_seed, index)`` pairs of :class:`EpochSampler`.
    A sample that raises comes back as :class:`Unreadable` (the batch is
    sorted out by :func:`collate_samples`), so the main process, not a worker's
    re-raised traceback, says which file failed.
    """

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]):
        seed, index = key
        # the CPU generator alone: torch.manual_seed also seeds every accelerator's (~200 us a call)
        generator = torch.default_generator
        saved = generator.get_state() if get_worker_info() is None else None  # main process: keep its RNG
        try:
            generator.manual_seed(seed)
            return self.dataset[index]
        except Exception as e:  # noqa: BLE001 - reported (or skipped) with the file named
            return Unreadable(index, sample_path(self.dataset, index), f"{type(e).__name__}: {e}")
        finally:
            if saved is not None:
                generator.set_state(saved)


def collate_samples(samples: list, collate=default_collate) -> tuple[Any, list[Unreadable]]:
    """``(collate(readable) or None, unreadable)`` of one batch of :class:`SeededSamples` items."""
    bad = [s for s in samples if isinstance(s, Unreadable)]
    good = [s for s in samples if not isinstance(s, Unreadable)] if bad else samples
    return (collate(good) if good else None), bad


class EpochLoader:
    """A DataLoader whose batches are a pure function of ``(seed, epoch)``, resumable at any batch.

    Parameters
    ----------
    dataset : Dataset
        Yields ``(x, y)`` samples.
    batch_size : int
    seed : int
    shuffle, drop_last : bool
    settings : LoaderSettings
    shard : (rank, world_size)
        Data parallelism: this process's part of every global batch (:class:`EpochSampler`).
    skip_unreadable : bool
        Skip samples that raise (see :attr:`skipped`) instead of raising :class:`DataError`.
    collate : callable, optional
        Collates the readable samples of a batch (default ``default_collate``); a
        module-level function, so that worker processes can pickle it.
    batch_transform : callable, optional
        Called in this process on each collated batch: returns ``(x, y, unreadable)``
        (Decode on GPU: :class:`~workbench.core.train.data.gpu_images.BatchImageTransform`).

    Attributes
    ----------
    skipped : list of str
        ``"<file> (class folder <name>): <reason>"`` of the samples skipped since
        :meth:`take_skipped` was last called.
    """

    def __init__(self, dataset: Dataset, batch_size: int, seed: int, shuffle: bool, drop_last: bool,
                 settings: LoaderSettings, skip_unreadable: bool = False, collate=None, batch_transform=None,
                 shard: tuple[int, int] = (0, 1)):
        self.dataset = dataset
        self.batch_transform = batch_transform
        self.settings = settings
        self.skip_unreadable = bool(skip_unreadable)
        self.skipped: list[str] = []
        self.sampler = EpochSampler(len(dataset), seed, shuffle, batch_size, drop_last, shard)
        self._args = dict(batch_sampler=self.sampler, num_workers=settings.num_workers, pin_memory=settings.pin_memory,
                          persistent_workers=settings.persistent_workers,
                          collate_fn=collate_samples if collate is None else functools.partial(collate_samples,
                                                                                              collate=collate))
        self.loader: DataLoader | None = None
        self._iterator = None  # the DataLoader iterator last started (it owns the worker processes)
        self.epoch = 0

    def _dataloader(self) -> DataLoader:
        if self.loader is None:
            self.loader = DataLoader(SeededSamples(self.dataset), **self._args)
        return self.loader

    def __len__(self) -> int:
        return len(self._dataloader())

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order ``iter()`` yields."""
        self.epoch = int(epoch)

    def __iter__(self):
        return self.iter_epoch(self.epoch)

    def iter_epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Yield ``(x, y)`` batches ``start_batch..`` of epoch ``epoch``.

        Raises
        ------
        DataError
            (while iterating) a sample cannot be loaded and ``skip_unreadable`` is off:
            the message names the file and its class folder.
        """
        self.sampler.set_epoch(epoch, start_batch)
        it = iter(self._dataloader())
        if it is not self._iterator:
            self._shutdown()  # a non-persistent iterator of an earlier epoch that was not run to its end
        self._iterator = it
        return self._batches(it)

    def _batches(self, it) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for batch, bad in it:
            if batch is not None and self.batch_transform is not None:
                x, y, more = self.batch_transform(batch)
                batch, bad = (None if x is None else (x, y)), bad + more
            if bad:
                if not self.skip_unreadable:
                    raise DataError(f"cannot read {bad[0].describe()}; remove or replace the file, or tick "
                                    "Skip unreadable images")
                self.skipped.extend(b.describe() for b in bad)
            if batch is not None:
                yield batch

    def take_skipped(self) -> list[str]:
        """The samples skipped since the last call (and forget them)."""
        out, self.skipped = self.skipped, []
        return out

    def close(self) -> None:
        """End the worker processes now; a later ``iter_epoch`` starts new ones.

        Persistent workers otherwise live as long as the DataLoader's iterator,
        which a traceback or a half-run generator can keep alive long after the run.
        """
        self._shutdown()
        self.loader = None

    def _shutdown(self) -> None:
        it, self._iterator = self._iterator, None
        # As Lightning's _shutdown_workers_and_reset_iterator does: the DataLoader offers no public
        # way to end its workers but dropping the last reference to the iterator.
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


class DevicePrefetcher:
    """Iterate batches one ahead, the next one's copy to ``device`` issued before the current is used.

    On CUDA the copy runs on a side stream from (pinned) host memory with
    ``non_blocking=True``, so it overlaps the current step's kernels; the
    consumer's stream waits for it (``wait_stream``) and ``record_stream`` keeps
    the caching allocator from reusing the memory early (the pattern of NVIDIA's
    apex ``data_prefetcher``). On other devices it copies synchronously, one ahead.

    Parameters
    ----------
    batches : iterable
        Batches of any structure (:mod:`workbench.core.train.data.batch`): ``(x, y)``, dicts of tensors...
    device : torch.device
    memory_format : torch.memory_format, optional
        Applied to 4-D inputs ``(N, C, H, W)`` (e.g. ``torch.channels_last``).
    """

    def __init__(self, batches, device: torch.device, memory_format: torch.memory_format | None = None):
        self.batches = iter(batches)
        self.device = torch.device(device)
        self.memory_format = memory_format
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def _copy(self, batch):
        if self.stream is None:
            return move(batch, self.device, False, self.memory_format)
        with torch.cuda.stream(self.stream):
            return move(batch, self.device, True, self.memory_format)

    def _next(self):
        """The next batch on the device, or None at the end.

        On CUDA the loader itself is advanced on the side stream too, so GPU work it
        does (Decode on GPU: nvjpeg decode, resize, normalize) overlaps the step
        the consumer has just enqueued instead of queuing behind it.
        """
        if self.stream is None:
            batch = next(self.batches, None)
            return None if batch is None else self._copy(batch)
        with torch.cuda.stream(self.stream):
            batch = next(self.batches, None)
            return None if batch is None else self._copy(batch)

    def __iter__(self):
        ahead = self._next()
        while ahead is not None:
            current = ahead
            if self.stream is not None:
                main = torch.cuda.current_stream(self.device)
                main.wait_stream(self.stream)
                for t in tensors(current):
                    t.record_stream(main)
            ahead = self._next()
            yield current


#: From this share of step time spent waiting for data on, a run is called input-bound.
INPUT_BOUND_SHARE = 0.5


def input_wait_text(share: float, device_type: str = "cpu") -> str:
    """What the input-bound meter says about a share of wall time spent waiting for batches.

    Parameters
    ----------
    share : float
        0..1 (NaN: not measured yet, gives ``""``).
    device_type : str
        ``"cuda"`` adds "or Decode on GPU" to the hint.

    Returns
    -------
    str
        ``"data wait 12%"``, or from :data:`INPUT_BOUND_SHARE` on
        ``"input-bound 83%: more loader workers or Decode on GPU"``.
    """
    if not share == share:  # NaN
        return ""
    if share >= INPUT_BOUND_SHARE:
        more = " or Decode on GPU" if device_type == "cuda" else ""
        return f"input-bound {share:.0%}: more loader workers{more}"
    return f"data wait {share:.0%}"
