"""Wrapper prefixes of state_dict keys (``module.``, ``_orig_mod.``, ``model.``...), removed.

A state_dict saved by ``torch.save(model.state_dict())`` carries a ``_metadata``
attribute (each module's version, read by ``_load_from_state_dict``: torchvision's
``mnasnet1_0`` refuses a state_dict without it). Every dict rebuilt here keeps it,
its module paths renamed like the keys
(:func:`copy_metadata`). Qt-free.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Iterable, Mapping

import torch


__all__ = ["ALWAYS_STRIPPED", "WRAPPER_PREFIXES", "strip_prefixes", "common_leading"]

#: Prefixes added by wrappers that never belong to an architecture's own keys:
#: ``module.`` (nn.DataParallel / DistributedDataParallel), ``_orig_mod.`` (torch.compile).
ALWAYS_STRIPPED = ("module.", "_orig_mod.")
#: Wrapper prefixes stripped only when that makes the keys match the architecture.
WRAPPER_PREFIXES = ("model.", "net.", "backbone.", "network.", "encoder.", "student.", "teacher.")


def _without_component(key: str, component: str) -> str:
    parts = key.split(".")
    return ".".join([p for p in parts[:-1] if p != component] + parts[-1:])


def _without_leading(key: str, prefix: str) -> str:
    return key[len(prefix):] if key.startswith(prefix) else key


def _apply(state_dict: Mapping, rename: Callable[[str], str]) -> dict | None:
    """Rename keys (``_metadata`` kept); None if two keys would collide."""
    new = {rename(k): v for k, v in state_dict.items()}
    return copy_metadata(new, state_dict, rename) if len(new) == len(state_dict) else None


def common_leading(keys: list[str], depth: int = 1) -> list[str]:
    """Leading prefixes of up to ``depth`` path components shared by at least half of the keys.

    Most frequent first, e.g. ``["model.", "model.net."]``.
    """
    counts: dict[str, int] = {}
    for k in keys:
        parts = k.split(".")[:-1]
        for n in range(1, min(depth, len(parts)) + 1):
            prefix = ".".join(parts[:n]) + "."
            counts[prefix] = counts.get(prefix, 0) + 1
    half = max(1, len(keys) // 2)
    return [p for p, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c >= half]


def strip_prefixes(
    state_dict: Mapping[str, torch.Tensor], reference_keys: Iterable[str] | None = None
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Remove wrapper prefixes from state_dict keys.

    ``module.`` (``nn.DataParallel`` / DDP) and ``_orig_mod.`` (``torch.compile``)
    are removed wherever they occur as a path component, also nested
    (``module._orig_mod.``), unless ``reference_keys`` use them. A leading wrapper
    prefix (``model.`` as in Lightning, ``net.``, ``backbone.``, or any first
    component shared by at least half of the keys) is removed only when
    ``reference_keys`` are given and more keys match them afterwards.

    Parameters
    ----------
    state_dict : mapping of str to Tensor
        The checkpoint's tensors.
    reference_keys : iterable of str, optional
        The target module's ``state_dict()`` keys.

    Returns
    -------
    (dict, list of str)
        The renamed dict (same tensor objects, ``_metadata`` kept with its
        module paths renamed) and the stripped prefixes in order, e.g.
        ``["module.", "model."]``.
    """
    ref = set(reference_keys) if reference_keys is not None else None
    current = copy_metadata(dict(state_dict), state_dict)
    stripped: list[str] = []

    def score(d: Mapping) -> int:
        return len(ref.intersection(d)) if ref is not None else 0

    for prefix in ALWAYS_STRIPPED:
        comp = prefix[:-1]
        if ref is not None and any(comp in k.split(".")[:-1] for k in ref):
            continue
        if any(comp in k.split(".")[:-1] for k in current):
            new = _apply(current, lambda k, c=comp: _without_component(k, c))
            if new is not None:
                current = new
                stripped.append(prefix)
    if ref is None:
        return current, stripped
    # A leading wrapper, possibly nested ("model.net."): keep the strip that matches most keys.
    best, best_prefix, best_dict = score(current), None, current
    options = dict.fromkeys([*WRAPPER_PREFIXES, *common_leading(list(current), depth=3)])
    for prefix in options:
        if not any(k.startswith(prefix) for k in current):
            continue
        new = _apply(current, lambda k, p=prefix: _without_leading(k, p))
        if new is not None and score(new) > best:
            best, best_prefix, best_dict = score(new), prefix, new
    if best_prefix is not None:
        stripped += [p + "." for p in best_prefix[:-1].split(".")]
    return best_dict, stripped


def copy_metadata(new: dict, old: Mapping, rename: Callable[[str], str] | None = None) -> dict:
    """Give ``new`` the ``_metadata`` attribute of ``old`` (module path -> version info), if it has one.

    Parameters
    ----------
    new : dict
        The rebuilt state_dict (made an ``OrderedDict`` when it has to carry ``_metadata``).
    old : mapping
        The state_dict it was made from.
    rename : callable, optional
        How a key was renamed (``"module.fc.weight" -> "fc.weight"``); module
        paths are renamed the same way (``"module.fc" -> "fc"``, ``"module" -> ""``).

    Returns
    -------
    dict
        ``new`` with ``_metadata`` (or ``new`` itself when ``old`` has none).
    """
    meta = getattr(old, "_metadata", None)
    if meta is None:
        return new
    if not hasattr(new, "__dict__"):  # a plain dict takes no attribute: an OrderedDict, as state_dict() returns
        new = OrderedDict(new)
    if rename is None:
        new._metadata = meta  # type: ignore[attr-defined]
        return new
    renamed = type(meta)() if isinstance(meta, dict) else {}
    for path, info in meta.items():
        key = rename(f"{path}.\0" if path else "\0")
        renamed[key[:-1].rstrip(".")] = info  # a wrapper's root ("module") overrides the wrapper's own ""
    new._metadata = renamed  # type: ignore[attr-defined]
    return new
