"""What to call a model with when Workbench runs it for a look: the example input.

The module tree's output shapes and FLOPs, the probes' "random data" and an idle
training process's warm-up each run the model once on an example. This module
says what that example is, in one rule:

1. A real ``batch`` of the chosen dataset, when given (:func:`from_batch`): a
   tensor is the input; a tuple or list gives its first item (the
   ``(input, target)`` convention); a dict (any mapping, e.g. Hugging Face's
   ``BatchEncoding``) is passed as keyword arguments, ``model(**batch)``, keeping
   only the keys ``forward`` names (all of them when it takes ``**kwargs``).
2. Else the model's own hints: a model whose *first leaf module with parameters*
   (in ``model.modules()`` order, which is registration order -- the usual
   forward order, but only a heuristic) is an ``nn.Embedding`` or
   ``nn.EmbeddingBag`` takes integer token ids ``(N, L)`` below its
   ``num_embeddings`` (int64), default shape :data:`TOKEN_INPUT_SHAPE`.
3. Else a float tensor of the typed ``input_shape`` (e.g. ``(N, C, H, W)``) in
   the model's first floating dtype: zeros, or standard-normal values.

Random values come from a private ``torch.Generator`` seeded with ``seed``, so
looking at a model never moves the global RNG (``seed=None`` uses the global one).
This module never imports Qt, and nothing of training or probes.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from workbench.core.formatting import parse_shape

__all__ = [
    "ExampleInput",
    "tensors_in",
    "TOKEN_INPUT_SHAPE",
    "example_input",
    "from_batch",
    "token_embedding",
    "default_input_shape",
    "model_device_dtype",
    "timm_input_shape",
    "spec_input_shape",
    "IMAGE_INPUT_SHAPE",
    "hf_example_input",
    "timm_example",
    "MAX_EXAMPLE_IMAGE_SIDE",
    "MAX_EXAMPLE_CHANNELS",
]

#: Shape ``(N, L)`` of the token ids made for an embedding model without a typed shape.
TOKEN_INPUT_SHAPE = (1, 16)

_EMBEDDINGS = (nn.Embedding, nn.EmbeddingBag)


@dataclass(frozen=True)
class ExampleInput:
    """The arguments of one call of a model: ``model(*args, **kwargs)``.

    Attributes
    ----------
    args : tuple
        Positional arguments, usually one tensor such as ``(N, C, H, W)`` images
        or ``(N, L)`` int64 token ids.
    kwargs : dict
        Keyword arguments, e.g. ``{"input_ids": (N, L), "attention_mask": (N, L)}``.
    """

    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def call(self, model: nn.Module) -> Any:
        """``model(*args, **kwargs)``: the model's output."""
        return model(*self.args, **self.kwargs)

    def to(self, device: str | torch.device) -> ExampleInput:
        """The same example with every tensor on ``device`` (containers rebuilt)."""
        return ExampleInput(_move(self.args, device), _move(dict(self.kwargs), device))

    def tensors(self) -> Iterator[torch.Tensor]:
        """Every tensor of the example, positional ones first, depth first."""
        yield from tensors_in(self.args)
        yield from tensors_in(self.kwargs)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the first tensor (``()`` when there is none): what messages name."""
        first = next(self.tensors(), None)
        return () if first is None else tuple(first.shape)

    def describe(self) -> str:
        """Shapes and dtypes, e.g. ``"(1, 16) int64"`` or ``"input_ids=(2, 16) int64, attention_mask=..."``."""
        parts = [_describe(a) for a in self.args]
        parts += [f"{k}={_describe(v)}" for k, v in self.kwargs.items()]
        return ", ".join(parts) or "no arguments"


def token_embedding(model: nn.Module) -> nn.Embedding | nn.EmbeddingBag | None:
    """The model's input embedding: its first leaf module with parameters when that is an embedding.

    Leaves are visited in ``model.modules()`` order (registration order, the
    usual forward order); leaves without parameters (dropout, activations) are
    skipped, as they say nothing about the input.

    Returns
    -------
    nn.Embedding or nn.EmbeddingBag or None
        None when the first such leaf is anything else, or there is none.
    """
    for module in model.modules():
        if next(module.children(), None) is not None:
            continue
        if next(module.parameters(recurse=False), None) is None:
            continue
        return module if isinstance(module, _EMBEDDINGS) else None
    return None


def default_input_shape(model: nn.Module) -> tuple[int, ...] | None:
    """The input shape a model hints at by itself: :data:`TOKEN_INPUT_SHAPE` for an embedding model, else None."""
    return TOKEN_INPUT_SHAPE if token_embedding(model) is not None else None


def from_batch(batch: Any, model: nn.Module | None = None) -> ExampleInput:
    """The input part of a real batch, as the call to make.

    Parameters
    ----------
    batch : Tensor, tuple, list or mapping
        A tensor (the input itself); a tuple or list (its first item is the
        input, e.g. ``(x, y)``); a mapping of tensors (keyword arguments).
    model : nn.Module, optional
        When given, keys of a mapping that ``model.forward`` does not name are
        left out (``labels`` for a ``forward(input_ids, attention_mask=None)``),
        unless ``forward`` takes ``**kwargs``.

    Returns
    -------
    ExampleInput

    Raises
    ------
    ValueError
        An empty tuple, list or mapping, or a batch holding no tensor.
    """
    if isinstance(batch, (tuple, list)) and not isinstance(batch, torch.Tensor):
        if not batch:
            raise ValueError("an empty batch holds no input")
        batch = batch[0]
    if isinstance(batch, Mapping):
        kwargs = dict(batch) if model is None else _accepted(model, dict(batch))
        if not kwargs:
            raise ValueError(f"the batch's keys {sorted(map(str, batch))} name no argument of the model's forward")
        return ExampleInput((), kwargs)
    if next(tensors_in(batch), None) is None:
        raise ValueError(f"the batch's input is a {type(batch).__name__}, not a tensor")
    return ExampleInput((batch,))


def example_input(
    model: nn.Module,
    input_shape: Sequence[int] | str | None = None,
    *,
    batch: Any = None,
    fill: str = "zeros",
    device: str | torch.device | None = None,
    seed: int | None = 0,
) -> ExampleInput:
    """What to call ``model`` with: a real batch's input, else one built from the model's hints.

    Parameters
    ----------
    model : nn.Module
    input_shape : sequence of int or str, optional
        The typed shape with a batch dimension, ``(N, C, H, W)`` or ``"1,16"``.
        Required for a model without hints; for an embedding model it is the
        shape of the ids (default :data:`TOKEN_INPUT_SHAPE`).
    batch : optional
        A real batch of the chosen dataset; when given it wins (:func:`from_batch`).
    fill : {"zeros", "randn"}
        Values of a float input: zeros (the tree's shapes and FLOPs) or standard
        normal (the probes' random data, the warm-up). Token ids are always
        uniform in ``[0, num_embeddings)``.
    device : str or torch.device, optional
        Device of a built input; default: the model's first parameter or buffer
        (cpu). A batch is returned where it is.
    seed : int or None
        Seed of the private generator for random values; None uses the global RNG.

    Returns
    -------
    ExampleInput
        For an embedding model, one int64 tensor ``(N, L)``; else one float
        tensor of ``input_shape`` in the model's first floating dtype (float32).

    Raises
    ------
    ValueError
        No batch, no hint and no ``input_shape``; a shape that is not positive
        integers; an unknown ``fill``; a batch without an input (:func:`from_batch`).
    """
    if batch is not None:
        return from_batch(batch, model)
    if fill not in ("zeros", "randn"):
        raise ValueError(f"fill must be 'zeros' or 'randn', not {fill!r}")
    embedding = token_embedding(model)
    if input_shape is None and embedding is None:
        raise ValueError("the model gives no hint of its input: set an input shape (e.g. 1,3,224,224)")
    shape = parse_shape(input_shape) if input_shape is not None else TOKEN_INPUT_SHAPE
    model_device, dtype = model_device_dtype(model)
    dev = torch.device(device) if device is not None else model_device
    generator = None if seed is None else torch.Generator().manual_seed(int(seed))
    if embedding is not None:
        x = torch.randint(0, embedding.num_embeddings, shape, generator=generator, dtype=torch.int64)
    elif fill == "zeros":
        x = torch.zeros(shape, dtype=dtype)
    else:
        x = torch.randn(shape, generator=generator).to(dtype)
    return ExampleInput((x.to(dev),))


def model_device_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    """Device of the first parameter/buffer and the first floating dtype (defaults cpu, float32)."""
    device = dtype = None
    for t in itertools.chain(model.parameters(), model.buffers()):
        if device is None:
            device = t.device
        if dtype is None and t.is_floating_point():
            dtype = t.dtype
        if dtype is not None:
            break
    return device or torch.device("cpu"), dtype or torch.float32


def _accepted(model: nn.Module, kwargs: dict) -> dict:
    """The entries of ``kwargs`` that ``model.forward`` names (all when it takes ``**kwargs``)."""
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):  # a builtin or C forward: no signature to read
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return kwargs
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in kwargs.items() if k in names}


def tensors_in(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``obj``: a tensor, or one nested in mappings, tuples and lists (depth first)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from tensors_in(v)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from tensors_in(v)


def _move(obj: Any, device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, Mapping):
        return {k: _move(v, device) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_move(v, device) for v in obj)
    return obj


def _describe(obj: Any) -> str:
    if isinstance(obj, torch.Tensor):
        return f"{tuple(obj.shape)} {str(obj.dtype).removeprefix('torch.')}"
    return type(obj).__name__


def timm_input_shape(name: str) -> tuple[int, ...] | None:
    """``(1, C, H, W)`` from timm's ``pretrained_cfg.input_size`` for a timm architecture name, else None.

    Parameters
    ----------
    name : str
        ``"timm/efficientnet_b3"`` or a bare timm name torchvision lacks
        (:func:`workbench.core.contrib.timm_model`).

    Returns
    -------
    tuple of int or None
        E.g. ``(1, 3, 288, 288)`` for efficientnet_b3 (timm's default
        configuration of that model); None when timm is not installed, the name is
        not timm's, or timm records no input size for it.
    """
    from workbench.core import contrib

    model = contrib.timm_model(name)
    if model is None:
        return None
    try:
        from timm.models import get_pretrained_cfg

        size = getattr(get_pretrained_cfg(model), "input_size", None)
    except Exception:  # noqa: BLE001 - an older timm without it: no hint
        return None
    return (1, *(int(d) for d in size)) if size is not None and len(size) == 3 else None


#: Input shape of image classifiers built from torchvision names.
IMAGE_INPUT_SHAPE = (1, 3, 224, 224)


def spec_input_shape(spec: Any) -> tuple[int, ...] | None:
    """The example input shape an architecture spec implies, or None when unknown.

    The demo's; a Tabular MLP's row ``(1, in_features)``; a timm model's
    :data:`IMAGE_INPUT_SHAPE` for torchvision classification models; or a timm
    model's ``pretrained_cfg`` input size (:func:`timm_input_shape`).

    Parameters
    ----------
    spec : ArchSpec or None
        Anything with ``name`` and ``kwargs``.
    """
    if spec is None:
        return None
    from workbench.core.model.demo import DEMO_INPUT_SHAPE

    if spec.name == "digits_cnn":
        return DEMO_INPUT_SHAPE
    if spec.name == "tabular_mlp" and isinstance(spec.kwargs.get("in_features"), int):
        return (1, spec.kwargs["in_features"])  # one row of the table's features
    try:
        import torchvision

        classifiers = set(torchvision.models.list_models(module=torchvision.models))
    except Exception:  # pragma: no cover - torchvision API drift
        classifiers = set()
    if spec.name in classifiers:  # a torchvision name is torchvision's model, never timm's of the same name
        return IMAGE_INPUT_SHAPE
    return timm_input_shape(spec.name)  # timm's pretrained_cfg (efficientnet_b3: 288 x 288)


#: Shape ``(N, L)`` of a Hugging Face model's example token ids.
HF_EXAMPLE_TOKENS = (1, 16)
#: Largest side (pixels) of an example image built from a file's config (``image_size``, timm's ``input_size``):
#: published models take at most 1,024-1,536 pixels (SAM, detection backbones); a float32 RGB image of 4,096 x
#: 4,096 is 200 MB, while a config's ``image_size = 30000`` would make a 10 GB input before the model ran.
MAX_EXAMPLE_IMAGE_SIDE = 4096
#: Most channels of an example image built from a config (``num_channels``): RGB is 3, multispectral tens.
MAX_EXAMPLE_CHANNELS = 64


def hf_example_input(config: Mapping | Any, *, seq_len: int = HF_EXAMPLE_TOKENS[1], batch: int = 1,
                     seed: int = 0) -> dict[str, torch.Tensor]:
    """What to call a Hugging Face model with for its shapes and FLOPs, from its config.

    * a text config (``vocab_size``): ``input_ids`` int64 ``(batch, L)`` uniform
      in ``[0, vocab_size)`` and ``attention_mask`` int64 ones ``(batch, L)``,
      with ``L = min(seq_len, max_position_embeddings / n_positions)``;
    * a vision config (``image_size``): ``pixel_values`` float32
      ``(batch, num_channels, H, W)`` standard normal (``image_size`` an int or
      ``[H, W]``; ``num_channels`` default 3).

    A config with both gives both; random values come from a private generator
    seeded with ``seed`` (the global RNG does not move).

    Parameters
    ----------
    config : mapping or transformers.PretrainedConfig
    seq_len, batch : int
    seed : int

    Returns
    -------
    dict of str to Tensor
        Keyword arguments, ``model(**example)``; empty when the config has neither key.

    Raises
    ------
    ValueError
        An image past :data:`MAX_EXAMPLE_IMAGE_SIDE` or :data:`MAX_EXAMPLE_CHANNELS`.
    """
    cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    vocab = cfg.get("vocab_size")
    if isinstance(vocab, int) and vocab > 0:
        limits = [cfg.get(k) for k in ("max_position_embeddings", "n_positions", "max_seq_len")]
        length = min([seq_len] + [n for n in limits if isinstance(n, int) and n > 0])
        out["input_ids"] = torch.randint(0, vocab, (batch, length), generator=gen, dtype=torch.long)
        out["attention_mask"] = torch.ones(batch, length, dtype=torch.long)
    size = cfg.get("image_size")
    if isinstance(size, int) or (isinstance(size, (list, tuple)) and len(size) == 2):
        h, w = (size, size) if isinstance(size, int) else size
        channels = cfg.get("num_channels") if isinstance(cfg.get("num_channels"), int) else 3
        _check_image("image_size", (channels, h, w))
        out["pixel_values"] = torch.randn(batch, channels, h, w, generator=gen)
    return out


def _check_image(key: str, chw: Sequence[Any]) -> None:
    """Refuse an example image past :data:`MAX_EXAMPLE_IMAGE_SIDE` / :data:`MAX_EXAMPLE_CHANNELS` before it is made.

    Raises
    ------
    ValueError
        ``"image_size = 30000 is past the largest example image side (4,096 pixels)..."``.
    """
    channels, *sides = chw
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in chw):
        raise ValueError(f"{key} = {list(chw)[:3]} is not positive integers")
    if max(sides) > MAX_EXAMPLE_IMAGE_SIDE or channels > MAX_EXAMPLE_CHANNELS:
        raise ValueError(f"{key} = {list(chw)} is past the largest example image Workbench builds "
                         f"({MAX_EXAMPLE_CHANNELS} channels, {MAX_EXAMPLE_IMAGE_SIDE:,} pixels a side): set the "
                         "size the model was trained at.")


def timm_example(pretrained_cfg: Mapping) -> ExampleInput | None:
    """Zeros ``(1, C, H, W)`` of a timm ``pretrained_cfg["input_size"]``, or None without one.

    Raises
    ------
    ValueError
        An image past :data:`MAX_EXAMPLE_IMAGE_SIDE` or :data:`MAX_EXAMPLE_CHANNELS`.
    """
    size = pretrained_cfg.get("input_size")
    if isinstance(size, list) and len(size) == 3 and all(isinstance(d, int) and d > 0 for d in size):
        _check_image("input_size", size)
        return ExampleInput(args=(torch.zeros(1, *size),))
    return None
