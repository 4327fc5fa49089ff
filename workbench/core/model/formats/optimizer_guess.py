"""The optimizer a training checkpoint was saved with: its class and hyper-parameters. Qt-free."""

from __future__ import annotations

import inspect
from typing import Iterable, Mapping

import torch

from workbench.core.model.formats.plain import plain

__all__ = ["OPTIMIZER_KEYS", "guess_optimizer_class", "optimizer_info"]

#: Keys under which training scripts store an optimizer's state_dict.
OPTIMIZER_KEYS = ("optimizer_state_dict", "optimizer", "optim", "optimizer_state")


def _optimizer_state(raw: Mapping) -> Mapping | None:
    for key in OPTIMIZER_KEYS:
        value = raw.get(key)
        if isinstance(value, Mapping) and "param_groups" in value:
            return value
    states = raw.get("optimizer_states")  # Lightning: a list, one per optimizer
    if isinstance(states, (list, tuple)) and states and isinstance(states[0], Mapping):
        return states[0]
    return None


def guess_optimizer_class(group_keys: Iterable[str], group: Mapping | None = None) -> str | None:
    """Name the ``torch.optim`` class whose constructor arguments match a param group's keys.

    Parameters
    ----------
    group_keys : iterable of str
        Keys of ``param_groups[0]`` (``"params"`` is ignored).
    group : mapping, optional
        The group itself; ``decoupled_weight_decay`` in it tells AdamW from Adam.

    Returns
    -------
    str or None
        The class name with the best Jaccard overlap of keys (at least 0.6), or None.
    """
    keys = set(group_keys) - {"params", "initial_lr", "param_names"}
    if not keys:
        return None
    best, best_score = None, 0.6
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)) or cls is torch.optim.Optimizer:
            continue
        try:
            args = set(inspect.signature(cls.__init__).parameters) - {"self", "params"}
        except (TypeError, ValueError):
            continue
        score = len(keys & args) / len(keys | args) if args else 0.0
        if score > best_score or (score == best_score and best is not None and name < best):
            best, best_score = name, score
    decoupled = group.get("decoupled_weight_decay") if isinstance(group, Mapping) else None
    if best in ("Adam", "AdamW") and isinstance(decoupled, (bool, int)):
        best = "AdamW" if decoupled else "Adam"
    return best


def optimizer_info(raw: Mapping) -> tuple[str | None, dict]:
    """The optimizer's class and ``param_groups[0]`` hyper-parameters; ``(None, {})`` when they cannot be read.

    Parameters
    ----------
    raw : mapping
        A training dict (``optimizer_state_dict``...) or a Lightning checkpoint (``optimizer_states``).
    """
    state = _optimizer_state(raw)
    if state is None:
        return None, {}
    groups = state.get("param_groups")
    group = groups[0] if isinstance(groups, (list, tuple)) and groups and isinstance(groups[0], Mapping) else {}
    hparams = {k: plain(v) for k, v in group.items() if isinstance(k, str) and k not in ("params", "param_names")}
    name = raw.get("optimizer_class")
    if not isinstance(name, str):
        name = guess_optimizer_class([k for k in group if isinstance(k, str)], group) if group else None
    return name, hparams
