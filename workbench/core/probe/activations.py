"""Forward-hook activation probes: statistics computed on the device, small results out.

A probe is a ``register_forward_hook`` on one module (its ``RemovableHandle`` is
kept and removed on unprobe). Inside the hook, under ``torch.no_grad()`` and on
``output.detach()``, the statistics are reduced on the output's own device to a
few small tensors; the hook keeps **no reference to the output** once it
returns, so memory stays flat over a long run and in-place modules that follow
(``ReLU(inplace=True)``) cannot change what was measured. The small tensors are
moved to the CPU in one transfer by :meth:`ActivationProbe.collect`.

Modules whose output is a tuple, list or dict (``nn.LSTM``,
``nn.MultiheadAttention``) are probed per tensor leaf; the leaf key is the
dotted path inside the output ("0", "1.0" for ``h_n`` of an LSTM, "logits" for a
dict entry). A plain tensor output has the leaf key "".

This module never imports Qt (DESIGN.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.hooks import RemovableHandle

from workbench.core.model.example_input import example_input, token_embedding
from workbench.core.probe.stats import (
    DEFAULT_BINS,
    N_SCALARS,
    Histogram,
    cpu_fast_stats,
    finite_scalars,
    hist_stride,
    histogram_counts,
    stat_dtype,
)

__all__ = [
    "ActivationProbe",
    "ActivationStats",
    "iter_tensor_leaves",
    "probe_batch",
    "random_input",
    "stats_label",
]

#: At most this many channels of one sample go into a feature-map grid.
DEFAULT_MAX_CHANNELS = 16
#: Each channel (or a heatmap) is average-pooled down to at most this many pixels per side.
DEFAULT_MAX_SIDE = 32
#: 2-D / 3-D heatmaps are pooled down to at most this many pixels per side.
DEFAULT_MAX_HEATMAP_SIDE = 128

#: Histograms of larger tensors count an evenly strided subsample of about this many values.
DEFAULT_HIST_MAX_VALUES = 1 << 12


@dataclass
class ActivationStats:
    """Statistics of one tensor leaf of one module's output, on the CPU.

    ``mean``, ``std`` (unbiased, ``correction=1`` like ``torch.std``), ``min``,
    ``max`` and the histogram are taken over the **finite** values only, so one
    NaN does not hide the rest; ``nonfinite_fraction`` says how many were not.

    Attributes
    ----------
    module : str
        Qualified module name (``"layer1.0.relu"``; ``""`` is the root).
    leaf : str
        Key of the tensor inside a tuple / list / dict output; ``""`` for a plain tensor.
    shape : tuple of int
        Output shape, e.g. ``(N, C, H, W)``.
    dtype : str
        Output dtype name, e.g. ``"float32"``.
    mean, std, min, max : float
        Over the finite values (NaN when there are none; std is NaN for one value).
    zero_fraction : float
        Fraction of elements exactly equal to 0 (dead units after a ReLU), in [0, 1].
    nonfinite_fraction : float
        Fraction of NaN / +-Inf elements, in [0, 1].
    histogram : Histogram
        Counts of the finite values.
    image : numpy.ndarray or None
        A float32 2-D picture: for 4-D ``(N, C, H, W)`` outputs a grid of the
        first channels of sample ``sample`` (each channel pooled to at most
        ``max_side`` pixels and scaled to [0, 1] on its own; NaN between tiles);
        for 2-D ``(N, F)`` and 3-D ``(N, L, E)`` outputs a heatmap (rows: samples
        or sequence positions), raw values. None for other ranks.
    image_kind : str or None
        ``"channels"``, ``"heatmap"`` or None.
    step : int or None
        Training step the values were measured at (None for a probe batch).
    """

    module: str
    leaf: str
    shape: tuple[int, ...]
    dtype: str
    mean: float
    std: float
    min: float
    max: float
    zero_fraction: float
    nonfinite_fraction: float
    histogram: Histogram
    image: np.ndarray | None = None
    image_kind: str | None = None
    step: int | None = None

    @property
    def label(self) -> str:
        """``module`` or ``module[leaf]`` for a leaf of a tuple / dict output."""
        return stats_label(self.module, self.leaf)


def stats_label(module: str, leaf: str = "") -> str:
    """The display key of one probed tensor: ``"layer1"`` or ``"lstm[1.0]"``."""
    return f"{module}[{leaf}]" if leaf else module


def iter_tensor_leaves(obj, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(key, tensor)`` for every floating / complex tensor leaf of a module output.

    Parameters
    ----------
    obj : Tensor, tuple, list, dict or anything else
        A module output. Containers nest; other values (None, ints, packed
        sequences' batch sizes, ...) are skipped. Integer / bool tensors are skipped.
    prefix : str
        Key of ``obj`` itself (``""`` at the top).

    Yields
    ------
    tuple of (str, torch.Tensor)
        ``("", t)`` for a plain tensor, ``("0", t)``, ``("1.h", t)``, ... inside containers.
    """
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() and obj.numel() > 0:
            yield prefix, obj
        return
    if isinstance(obj, Mapping):
        items: Iterable = obj.items()
    elif isinstance(obj, (tuple, list)):
        items = enumerate(obj)
    else:
        return
    for key, value in items:
        yield from iter_tensor_leaves(value, f"{prefix}.{key}" if prefix else str(key))


def _pool_to(img: torch.Tensor, max_side: int) -> torch.Tensor:
    """Average-pool the last two dims of ``img`` (``(..., H, W)``) to at most ``max_side``."""
    h, w = img.shape[-2:]
    if h <= max_side and w <= max_side:
        return img
    size = (min(h, max_side), min(w, max_side))
    lead = img.shape[:-2]
    pooled = F.adaptive_avg_pool2d(img.reshape(-1, 1, h, w), size)
    return pooled.reshape(*lead, *size)


def _image_of(x: torch.Tensor, sample: int, max_channels: int, max_side: int, max_heatmap_side: int):
    """On-device picture of one output: ``(kind, (rows, cols, tile_h, tile_w), tensor)`` or None."""
    if x.dim() == 4:
        s = min(sample, x.shape[0] - 1)
        ch = _pool_to(x[s, :max_channels], max_side)  # (C', h, w)
        ch = torch.nan_to_num(ch, nan=0.0, posinf=0.0, neginf=0.0)
        flat = ch.reshape(ch.shape[0], -1)
        lo = flat.amin(dim=1).view(-1, 1, 1)
        hi = flat.amax(dim=1).view(-1, 1, 1)
        ch = (ch - lo) / torch.clamp(hi - lo, min=1e-12)
        c = ch.shape[0]
        cols = math.ceil(math.sqrt(c))
        rows = math.ceil(c / cols)
        return "channels", (rows, cols, ch.shape[1], ch.shape[2]), ch
    if x.dim() == 2:
        return "heatmap", None, _pool_to(x, max_heatmap_side)
    if x.dim() == 3:
        s = min(sample, x.shape[0] - 1)
        return "heatmap", None, _pool_to(x[s], max_heatmap_side)
    return None


def _tile(tiles: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Arrange ``(C, h, w)`` tiles into a ``(rows*(h+1)-1, cols*(w+1)-1)`` grid with NaN gaps."""
    c, h, w = tiles.shape
    padded = np.full((rows * cols, h + 1, w + 1), np.nan, dtype=np.float32)
    padded[:c, :h, :w] = tiles
    grid = padded.reshape(rows, cols, h + 1, w + 1).transpose(0, 2, 1, 3).reshape(rows * (h + 1), cols * (w + 1))
    return np.ascontiguousarray(grid[:-1, :-1])


@dataclass
class _Pending:
    """Small on-device results of one hook call, waiting for :meth:`ActivationProbe.collect`."""

    module: str
    leaf: str
    shape: tuple[int, ...]
    dtype: str
    scalars: torch.Tensor  # (8,)
    counts: torch.Tensor  # (bins,)
    image: tuple | None = None  # (kind, layout, tensor)
    stride: int = 1  # histogram subsampling stride


def _reduce(module: str, leaf: str, t: torch.Tensor, probe: ActivationProbe) -> _Pending:
    """Everything the hook measures on one tensor leaf, on its device.

    On an accelerator nothing is read back here (no host synchronisation): the
    masked, branch-free path runs and :meth:`ActivationProbe.collect` copies the
    small results later. On the CPU the all-finite shortcut is taken when it applies.
    The histogram of a tensor larger than ``probe.hist_max_values`` is taken over an
    evenly strided subsample (``Histogram.stride``); every other statistic uses all values.
    """
    x = t.detach()
    flat = x.reshape(-1).to(stat_dtype(x.dtype))
    stride = hist_stride(flat.numel(), probe.hist_max_values)
    fast = None
    if flat.device.type == "cpu":
        fast = cpu_fast_stats(flat, flat[::stride], probe.bins)
    if fast is not None:
        scalars, counts = fast
    else:
        scalars, finite, x0 = finite_scalars(flat)
        counts = histogram_counts(x0[::stride], finite[::stride], scalars[3], scalars[4], probe.bins)
    image = None
    if probe.images:
        img = _image_of(x.to(flat.dtype), probe.sample, probe.max_channels, probe.max_side, probe.max_heatmap_side)
        if img is not None:
            kind, layout, tensor = img
            image = (kind, layout, tensor.float().clone())  # a copy: never a view of the output
    return _Pending(module, leaf, tuple(x.shape), str(x.dtype).removeprefix("torch."), scalars, counts, image, stride)


class ActivationProbe:
    """Forward hooks on chosen modules of one model, with on-device statistics.

    Parameters
    ----------
    model : nn.Module
        The model whose submodules are probed (by qualified name).
    bins : int
        Histogram bins.
    images : bool
        Also compute the feature-map grid / heatmap (set False for the cheapest live probes).
    sample : int
        Which sample of the batch the feature-map grid shows.
    max_channels, max_side, max_heatmap_side : int
        Size limits of the pictures (channels, pixels per side).
    hist_max_values : int
        Histograms of larger outputs count an evenly strided subsample of about this
        many values (``Histogram.stride``); 0 = always every value. Mean, std, min,
        max and the fractions always use every value.

    Notes
    -----
    Hooks run only while :attr:`enabled` is True; a disabled hook returns at
    once. Results accumulate until :meth:`collect`; when a module runs several
    times in one forward (shared modules, RNN cells) the last call wins.

    Examples
    --------
    >>> probe = ActivationProbe(model)
    >>> probe.add("layer1")
    >>> model(x)
    >>> stats = probe.collect()          # {"layer1": ActivationStats(...)}
    >>> probe.close()                    # removes every hook
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        bins: int = DEFAULT_BINS,
        images: bool = True,
        sample: int = 0,
        max_channels: int = DEFAULT_MAX_CHANNELS,
        max_side: int = DEFAULT_MAX_SIDE,
        max_heatmap_side: int = DEFAULT_MAX_HEATMAP_SIDE,
        hist_max_values: int = DEFAULT_HIST_MAX_VALUES,
    ):
        self.model = model
        self.hist_max_values = int(hist_max_values)
        self.bins = int(bins)
        self.images = images
        self.sample = int(sample)
        self.max_channels = int(max_channels)
        self.max_side = int(max_side)
        self.max_heatmap_side = int(max_heatmap_side)
        self.enabled = True
        #: seconds spent in this probe's hooks (host time; the caller may reset it)
        self.busy_s = 0.0
        self._handles: dict[str, RemovableHandle] = {}
        self._pending: dict[tuple[str, str], _Pending] = {}

    # -- which modules -------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """Qualified names of the probed modules, in the order they were added."""
        return list(self._handles)

    def _module(self, name: str) -> nn.Module:
        try:
            return self.model.get_submodule(name)
        except AttributeError as exc:
            raise KeyError(f"no module named {name!r} in {type(self.model).__name__}") from exc

    def add(self, name: str) -> None:
        """Probe module ``name`` (no-op when already probed).

        Raises
        ------
        KeyError
            ``name`` is not a submodule of the model.
        """
        if name in self._handles:
            return
        module = self._module(name)
        self._handles[name] = module.register_forward_hook(self._make_hook(name))

    def remove(self, name: str) -> None:
        """Stop probing ``name``: its hook is removed (no-op when not probed)."""
        handle = self._handles.pop(name, None)
        if handle is not None:
            handle.remove()
        for key in [k for k in self._pending if k[0] == name]:
            del self._pending[key]

    def toggle(self, name: str) -> bool:
        """Probe ``name`` if it is not probed, else unprobe it; return the new state."""
        if name in self._handles:
            self.remove(name)
            return False
        self.add(name)
        return True

    def set_probed(self, names: Iterable[str]) -> None:
        """Probe exactly ``names`` (adds the new ones, removes the others).

        Raises
        ------
        KeyError
            One of ``names`` is not a submodule; nothing is changed then.
        """
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            self._module(name)
        for name in [n for n in self._handles if n not in wanted]:
            self.remove(name)
        for name in wanted:
            self.add(name)

    def close(self) -> None:
        """Remove every hook and drop pending results."""
        for name in list(self._handles):
            self.remove(name)
        self._pending.clear()

    def __enter__(self) -> ActivationProbe:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- measuring -----------------------------------------------------------------------
    def _make_hook(self, name: str):
        def hook(module: nn.Module, args, output) -> None:
            if not self.enabled:
                return None
            t0 = time.perf_counter()
            with torch.no_grad():
                for leaf, t in iter_tensor_leaves(output):
                    self._pending[(name, leaf)] = _reduce(name, leaf, t, self)
            self.busy_s += time.perf_counter() - t0
            return None  # never replaces the output

        return hook

    def collect(self, step: int | None = None) -> dict[str, ActivationStats]:
        """Move the pending results to the CPU (one transfer per device) and clear them.

        Parameters
        ----------
        step : int or None
            Stored in each :class:`ActivationStats` (the training step; None for a probe batch).

        Returns
        -------
        dict of str to ActivationStats
            Keyed by :func:`stats_label` (``"layer1"``, ``"lstm[0]"``), in probe order.
        """
        pending = list(self._pending.values())
        self._pending.clear()
        if not pending:
            return {}
        order = {n: i for i, n in enumerate(self._handles)}
        pending.sort(key=lambda p: order.get(p.module, len(order)))
        host = _to_host(pending)
        out = {}
        for p, (scalars, counts, image) in zip(pending, host):
            out[stats_label(p.module, p.leaf)] = _finish(p, scalars, counts, image, step)
        return out


def _to_host(pending: Sequence[_Pending]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """Copy every pending tensor to the CPU with one ``torch.cat(...).cpu()`` per device."""
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for p in pending:
        parts = by_device.setdefault(p.scalars.device, [])
        parts += [p.scalars.double(), p.counts.double()]
        if p.image is not None:
            parts.append(p.image[2].reshape(-1).double())
    flat = {dev: torch.cat(parts).cpu().numpy() for dev, parts in by_device.items()}
    offsets = dict.fromkeys(flat, 0)
    result = []
    for p in pending:
        dev = p.scalars.device
        buf, o = flat[dev], offsets[dev]
        scalars = buf[o : o + N_SCALARS]
        o += N_SCALARS
        counts = buf[o : o + p.counts.numel()]
        o += p.counts.numel()
        image = None
        if p.image is not None:
            n = p.image[2].numel()
            image = buf[o : o + n].astype(np.float32).reshape(tuple(p.image[2].shape))
            o += n
        offsets[dev] = o
        result.append((scalars, counts, image))
    return result


def _finish(p: _Pending, s: np.ndarray, counts: np.ndarray, image: np.ndarray | None, step) -> ActivationStats:
    count, mean, std, lo, hi, zeros, nonfinite, n = (float(v) for v in s)
    if count == 0:
        mean = std = lo = hi = math.nan
    picture, kind = None, None
    if image is not None:
        kind, layout, _ = p.image
        picture = _tile(image, layout[0], layout[1]) if kind == "channels" else image
    return ActivationStats(
        module=p.module,
        leaf=p.leaf,
        shape=p.shape,
        dtype=p.dtype,
        mean=mean,
        std=std,
        min=lo,
        max=hi,
        zero_fraction=zeros / n,
        nonfinite_fraction=nonfinite / n,
        histogram=Histogram(counts=counts.copy(), lo=lo, hi=hi, stride=p.stride),
        image=picture,
        image_kind=kind,
        step=step,
    )


# -- probe batches -----------------------------------------------------------------------
@contextmanager
def eval_mode(model: nn.Module):
    """Put every module in ``eval()`` and restore each one's own train/eval flag afterwards."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, mode in modes:
            m.training = mode


def model_device(model: nn.Module) -> torch.device:
    """Device of the model's first parameter or buffer (CPU for a model without tensors)."""
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


def random_input(
    input_shape: Sequence[int], device="cpu", dtype: torch.dtype = torch.float32, *, model: nn.Module | None = None
) -> torch.Tensor:
    """A random batch of shape ``input_shape``: the probes' "random data".

    Standard-normal values of ``dtype`` (e.g. ``(N, C, H, W)`` images), or, for a
    ``model`` whose first layer is an ``nn.Embedding``, int64 token ids ``(N, L)``
    below its ``num_embeddings`` -- the rule of
    :func:`workbench.core.model.example_input.example_input`. Drawn from the global RNG.

    Parameters
    ----------
    input_shape : sequence of int
        With the batch dimension first.
    device : str or torch.device
    dtype : torch.dtype
        Of a float batch; ids are always int64.
    model : nn.Module, optional
        The model the batch is for (its hints choose ids or floats).

    Raises
    ------
    ValueError
        ``input_shape`` is empty or has a non-positive dimension.
    """
    shape = tuple(int(d) for d in input_shape)
    if not shape or any(d <= 0 for d in shape):
        raise ValueError(f"probe batch: input shape {shape} must be non-empty with positive sizes")
    if model is not None and token_embedding(model) is not None:
        return example_input(model, shape, fill="randn", device=device, seed=None).args[0]
    return torch.randn(shape, device=device, dtype=dtype)


def probe_batch(
    model: nn.Module, inputs, names: Iterable[str], **probe_kwargs
) -> dict[str, ActivationStats]:
    """Run one forward pass in ``eval()`` under ``torch.no_grad()`` and return the probed statistics.

    Each module's train/eval flag is restored afterwards, and the hooks are removed.

    Parameters
    ----------
    model : nn.Module
        The model, on any device.
    inputs : Tensor, tuple of Tensor or ExampleInput
        The batch (moved to the model's device), e.g. ``(N, C, H, W)`` images
        (a tuple: the positional arguments), or an
        :class:`~workbench.core.model.example_input.ExampleInput` (a dict batch's
        keyword arguments, token ids...).
    names : iterable of str
        Qualified names of the modules to probe.
    **probe_kwargs
        Passed to :class:`ActivationProbe` (``bins``, ``max_channels``, ...).

    Returns
    -------
    dict of str to ActivationStats
        As :meth:`ActivationProbe.collect`.

    Raises
    ------
    KeyError
        A name is not a submodule.
    Exception
        Whatever the model's forward raises (a wrong input shape: ``RuntimeError``).
    """
    from workbench.core.model.example_input import ExampleInput

    device = model_device(model)
    if not isinstance(inputs, ExampleInput):
        args = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
        inputs = ExampleInput(tuple(args), {})
    inputs = inputs.to(device)
    with ActivationProbe(model, **probe_kwargs) as probe:
        probe.set_probed(names)
        with eval_mode(model), torch.no_grad():
            inputs.call(model)
        return probe.collect()


def leaf_modules(model: nn.Module) -> list[str]:
    """Qualified names of the modules without children (the default probe candidates)."""
    return [name for name, m in model.named_modules() if name and next(m.children(), None) is None]


__all__ += ["eval_mode", "leaf_modules", "model_device"]


def dataset_batch(config, batch_size: int = 16, split: str = "val", model: nn.Module | None = None):
    """The first ``batch_size`` inputs of a dataset, stacked: e.g. ``(N, C, H, W)``.

    A CSV table or a user's dataset (any sample structure: dicts of token ids...)
    gives an :class:`~workbench.core.model.example_input.ExampleInput` of its
    first validation batch, collated as the run collates it (``model``: a dict's
    keys the model's ``forward`` does not take are left out).

    Parameters
    ----------
    config : workbench.core.train.config.DataConfig
        Which dataset and transforms (the same ones training uses).
    batch_size : int
        Number of samples.
    split : str
        ``"val"`` (default: deterministic, no augmentation) or ``"train"``.

    Raises
    ------
    workbench.core.errors.DataError
        The dataset is missing or broken (from :func:`workbench.core.train.data.datasets.build_datasets`).
    """
    from workbench.core.train.config import DATASETS, TrainConfig
    from workbench.core.train.data.datasets import build_datasets

    if config.dataset not in DATASETS or config.dataset == "csv":
        from workbench.core.model.example_input import from_batch
        from workbench.core.train.data.example_batch import example_batch

        return from_batch(example_batch(TrainConfig(data=config), batch_size), model)
    train_ds, val_ds, _ = build_datasets(config)
    ds = val_ds if split == "val" and len(val_ds) else train_ds
    n = min(int(batch_size), len(ds))
    return torch.stack([torch.as_tensor(ds[i][0]) for i in range(n)])
