"""A lazily opened model: its weights on ``meta`` until they are needed, then read from unchanged files.

A model folder past :data:`~workbench.core.model.formats.model_folder.LAZY_FOLDER_BYTES`
opens from its safetensors headers only (:class:`~workbench.core.model.formats.safetensors.LazyStateDict`):
its module tree, shapes, dtypes and counts come from ``meta`` tensors and its
FLOPs from a forward on ``meta`` (:func:`workbench.core.model.flops.flop_counter`),
so a 1.1B-parameter folder shows its tree in about a second without reading a
weight. :func:`attach` records where each parameter's bytes are; they are read
(:func:`ensure_loaded`) the first time the model needs them:

* a forward with real (not ``meta``) inputs: training, probes, a warm-up;
* ``model.to(...)`` / ``.cuda()`` / ``.float()`` (anything through ``_apply``);
* ``model.state_dict()``: saving, a training process's copy;

and whoever needs them earlier calls :func:`ensure_loaded`. Before the first
byte, each file's identity (size, modification time, inode) is compared with
the one its header was read from (:meth:`~workbench.core.model.formats.safetensors.FileIdentity.check`):
a file truncated, rewritten or deleted since the open is refused with one line,
never followed; :func:`changed_file` says so ahead of time, for a window that
checks when it regains focus. Loading replaces each ``meta`` parameter by a new
``nn.Parameter`` (the same ``requires_grad``) under every name that held it, so
tied weights stay tied; an optimizer must be built after (``model.to(device)``
loads first). Qt-free.
"""

from __future__ import annotations

import threading
import types
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from workbench.core.errors import CheckpointError
from workbench.core.model.formats.safetensors import FileIdentity, LazyStateDict, TensorSource, read_sources

__all__ = ["LazyWeights", "attach", "is_lazy", "ensure_loaded", "changed_file", "lazy_weights"]

_ATTR = "_workbench_lazy"
#: One read at a time (a window thread and a probe may both ask); a lock in the object would not pickle.
_LOCK = threading.Lock()


@dataclass
class LazyWeights:
    """Where the weights of a lazily opened model are.

    Attributes
    ----------
    sources : dict of str to TensorSource
        Qualified parameter or buffer name (the model's ``state_dict`` key) to its bytes.
    loaded : bool
        True once every tensor was read.
    """

    sources: dict[str, TensorSource]
    loaded: bool = False

    def files(self) -> list[FileIdentity]:
        """The weight files, each once, in the order their tensors appear."""
        return list(dict.fromkeys(s.file for s in self.sources.values()))


def lazy_weights(model: nn.Module) -> LazyWeights | None:
    """The :class:`LazyWeights` of ``model``, or None for a model opened with its weights."""
    found = model.__dict__.get(_ATTR)
    return found if isinstance(found, LazyWeights) else None


def is_lazy(model: nn.Module) -> bool:
    """True while ``model`` holds weights not read yet (:func:`ensure_loaded` reads them)."""
    found = lazy_weights(model)
    return found is not None and not found.loaded


def changed_file(model: nn.Module) -> str | None:
    """The one-line refusal for a lazily opened model whose weight file changed since it was opened, or None.

    Cheap (one ``stat`` per weight file, no read); None also for a model whose
    weights were read already (it owns them) or that was opened with them.

    Returns
    -------
    str or None
        ``"<file>: changed on disk since it was opened (it was rewritten); ..."``.
    """
    if not is_lazy(model):
        return None
    for file in lazy_weights(model).files():
        try:
            file.check()
        except CheckpointError as exc:
            return str(exc)
    return None


def _holders(model: nn.Module) -> dict[str, tuple[nn.Module, str, torch.Tensor]]:
    """``state_dict`` key -> (owning module, attribute, tensor) for every parameter and persistent buffer."""
    out: dict[str, tuple[nn.Module, str, torch.Tensor]] = {}
    for prefix, sub in model.named_modules(remove_duplicate=False):
        dot = f"{prefix}." if prefix else ""
        for name, p in sub._parameters.items():
            if p is not None:
                out.setdefault(dot + name, (sub, name, p))
        for name, b in sub._buffers.items():
            if b is not None and name not in sub._non_persistent_buffers_set:
                out.setdefault(dot + name, (sub, name, b))
    return out


def ensure_loaded(model: nn.Module) -> bool:
    """Read the weights of a lazily opened model into it (owned CPU memory); nothing for any other model.

    Each weight file is checked first (size, modification time, inode as when
    its header was read); the tensors of one file are read before the next file
    is opened. Each ``meta`` parameter is replaced by an ``nn.Parameter`` of the
    read data (same ``requires_grad``) under every name holding it: tied weights
    stay tied.

    Parameters
    ----------
    model : nn.Module

    Returns
    -------
    bool
        True when weights were read now.

    Raises
    ------
    CheckpointError
        A weight file changed since the model was opened (truncated, rewritten,
        replaced, deleted) or cannot be read: one line naming it. Nothing of the
        model changed then; it stays lazy.
    """
    lazy = lazy_weights(model)
    if lazy is None or lazy.loaded:
        return False
    with _LOCK:
        if lazy.loaded:
            return False
        holders = _holders(model)
        by_file: dict[FileIdentity, list[str]] = {}
        for key, src in lazy.sources.items():
            if key in holders and holders[key][2].is_meta:
                by_file.setdefault(src.file, []).append(key)
        for file in by_file:  # every file unchanged before any byte goes into the model
            file.check()
        new: dict[int, torch.Tensor] = {}  # id of the meta tensor -> what replaces it under every name
        for file, keys in by_file.items():
            tensors = read_sources(file, [lazy.sources[k] for k in keys], keys)
            for key, value in tensors.items():
                held = holders[key][2]
                if id(held) in new:
                    continue
                value = value.to(held.dtype) if value.dtype != held.dtype else value
                if isinstance(held, nn.Parameter):
                    value = nn.Parameter(value, requires_grad=held.requires_grad)
                new[id(held)] = value
        _replace(model, new)
        lazy.loaded = True
    return True


def _replace(model: nn.Module, new: dict[int, torch.Tensor]) -> None:
    """Put ``new[id(old)]`` in place of each ``old`` parameter or buffer, under every name that holds it (ties)."""
    for sub in model.modules():
        for table in (sub._parameters, sub._buffers):
            for name, held in table.items():
                if held is not None and id(held) in new:
                    table[name] = new[id(held)]


def _pre_forward(module: nn.Module, args: tuple, kwargs: dict) -> None:
    """Read the weights before a forward on real inputs (a forward on ``meta`` inputs counts FLOPs only)."""
    tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
    if tensors and all(t.is_meta for t in tensors):
        return None
    ensure_loaded(module)
    return None


def _pre_state_dict(module: nn.Module, prefix: str, keep_vars: bool) -> None:
    ensure_loaded(module)


def _apply(self: nn.Module, fn: Any, *args: Any, **kwargs: Any) -> nn.Module:
    """``nn.Module._apply`` after the weights are read (``.to``, ``.cuda``, ``.float``... move data, not ``meta``)."""
    ensure_loaded(self)
    return type(self)._apply(self, fn, *args, **kwargs)


def attach(model: nn.Module, state: LazyStateDict, names: dict[str, str] | None = None) -> LazyWeights:
    """Make ``model`` (its weights on ``meta``) read them from ``state``'s files when it needs them.

    Parameters
    ----------
    model : nn.Module
        Built on ``meta`` with the shapes and dtypes of ``state``.
    state : LazyStateDict
        The checkpoint's ``meta`` tensors and their sources.
    names : dict of str to str, optional
        Model ``state_dict`` key -> file key where they differ (default: the same).

    Returns
    -------
    LazyWeights
    """
    names = names or {}
    holders = _holders(model)
    sources = {key: state.sources[names.get(key, key)] for key in holders if names.get(key, key) in state.sources}
    lazy = LazyWeights(sources)
    object.__setattr__(model, _ATTR, lazy)
    model.register_forward_pre_hook(_pre_forward, with_kwargs=True)
    model.register_state_dict_pre_hook(_pre_state_dict)
    object.__setattr__(model, "_apply", types.MethodType(_apply, model))
    return lazy
