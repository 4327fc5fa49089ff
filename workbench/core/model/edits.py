"""Structural and weight edits on a live model: re-initialization, head replacement, LoRA adapters.

Qt-free helpers behind the model tree's context menu. Each edit returns what it
replaced so that the caller (the UI's undo stack) can put it back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.quoting import short_repr

#: Methods accepted by :func:`reinitialize`: ``reset_parameters`` calls the
#: module's own ``reset_parameters()`` on every submodule that has one; the
#: others are ``torch.nn.init`` functions applied to every parameter.
INIT_METHODS = ("reset_parameters", "xavier_uniform_", "kaiming_normal_", "normal_", "zeros_", "constant_")


def _init_tensor(name: str, tensor: torch.Tensor, method: str, value: float | None) -> None:
    """Apply one ``torch.nn.init`` function in place to parameter ``name``.

    Fan-based initializers (``xavier_uniform_``, ``kaiming_normal_``) need at
    least 2 dimensions. 1-d tensors get what ``reset_parameters`` gives them
    instead: a ``weight`` (the scale of a BatchNorm / LayerNorm / GroupNorm)
    ``ones_``, anything else (biases) ``zeros_``. Zeroing a norm scale would
    silence the layer's output.
    """
    if method == "constant_":
        nn.init.constant_(tensor, 0.0 if value is None else float(value))
    elif method == "normal_":
        nn.init.normal_(tensor, mean=0.0, std=0.01 if value is None else float(value))
    elif method in ("xavier_uniform_", "kaiming_normal_") and tensor.dim() < 2:
        is_scale = name.rpartition(".")[2] == "weight"
        (nn.init.ones_ if is_scale else nn.init.zeros_)(tensor)
    else:
        init: Callable[[torch.Tensor], torch.Tensor] = getattr(nn.init, method)
        init(tensor)


def reinitialize(module: nn.Module, method: str = "reset_parameters", value: float | None = None) -> dict[str, torch.Tensor]:
    """Re-initialize every parameter of ``module`` (recursively), in place.

    Parameters
    ----------
    module : nn.Module
        The module whose parameters are re-initialized. ``requires_grad`` is kept.
    method : str
        One of :data:`INIT_METHODS`. ``"reset_parameters"`` calls each
        submodule's ``reset_parameters()`` (BatchNorm also resets its running
        statistics); the others apply ``torch.nn.init.<method>`` to every parameter
        (fan-based ones give 1-d norm scales ones and biases zeros, see ``_init_tensor``).
    value : float, optional
        The constant for ``constant_`` (default 0) or the standard deviation for
        ``normal_`` (default 0.01).

    Returns
    -------
    dict[str, torch.Tensor]
        ``{name relative to module: detached clone of the old values}`` for every
        parameter and buffer, so the edit can be undone with :func:`restore_tensors`.

    Raises
    ------
    WorkbenchError
        For an unknown method, or a module without parameters.
    """
    if method not in INIT_METHODS:
        raise WorkbenchError(f"Re-initialize: unknown method {method!r}; use one of {', '.join(INIT_METHODS)}.")
    params = dict(module.named_parameters())
    if not params:
        raise WorkbenchError(f"Re-initialize: {type(module).__name__} has no parameters to re-initialize.")
    old = {name: t.detach().clone() for name, t in [*params.items(), *module.named_buffers()]}
    with torch.no_grad():
        if method == "reset_parameters":
            for sub in module.modules():
                reset = getattr(sub, "reset_parameters", None)
                if callable(reset):
                    reset()
        else:
            for name, tensor in params.items():
                _init_tensor(name, tensor, method, value)
    return old


def restore_tensors(module: nn.Module, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copy saved values back into ``module``'s parameters and buffers.

    Parameters
    ----------
    module : nn.Module
        The module the names are relative to.
    tensors : dict[str, torch.Tensor]
        As returned by :func:`reinitialize`.

    Returns
    -------
    dict[str, torch.Tensor]
        Clones of the values that were overwritten (to redo the edit).
    """
    live = dict(module.named_parameters())
    live.update(module.named_buffers())
    replaced = {}
    with torch.no_grad():
        for name, saved in tensors.items():
            target = live[name]
            replaced[name] = target.detach().clone()
            target.copy_(saved)
    return replaced


def get_module(model: nn.Module, path: str) -> nn.Module:
    """Return the submodule at qualified name ``path`` (``""`` is the model).

    Raises
    ------
    WorkbenchError
        When there is no such submodule.
    """
    try:
        return model.get_submodule(path)
    except AttributeError as exc:
        raise WorkbenchError(f"No module named {short_repr(path)} in {type(model).__name__}.") from exc


def swap_module(model: nn.Module, path: str, new: nn.Module) -> nn.Module:
    """Put ``new`` at qualified name ``path`` and return the module it replaced.

    Raises
    ------
    WorkbenchError
        For the root (``""``) or a path that does not exist.
    """
    if not path:
        raise WorkbenchError("Cannot replace the whole model; choose a submodule.")
    old = get_module(model, path)
    parent_path, _, attr = path.rpartition(".")
    setattr(get_module(model, parent_path), attr, new)
    return old


def _new_head(old: nn.Module, num_outputs: int) -> nn.Module:
    """Build a freshly initialized layer like ``old`` with ``num_outputs`` outputs."""
    ref = next(old.parameters())
    factory = {"device": ref.device, "dtype": ref.dtype}
    if isinstance(old, nn.Linear):
        return nn.Linear(old.in_features, num_outputs, bias=old.bias is not None, **factory)
    if isinstance(old, nn.Conv2d) and old.kernel_size == (1, 1) and old.groups == 1:
        return nn.Conv2d(old.in_channels, num_outputs, kernel_size=1, stride=old.stride,
                         bias=old.bias is not None, **factory)
    raise WorkbenchError(
        f"Replace head: {type(old).__name__} is not a Linear or a 1x1 Conv2d; "
        "choose the final classifier layer.")


def replace_head(model: nn.Module, path: str, num_outputs: int) -> nn.Module:
    """Swap the classifier layer at ``path`` for a new one with ``num_outputs`` outputs.

    The transfer-learning step: the new layer keeps ``in_features`` (or
    ``in_channels`` for a 1x1 ``Conv2d``), bias, device and dtype of the old one,
    is freshly initialized and trainable.

    Parameters
    ----------
    model : nn.Module
        The model, edited in place.
    path : str
        Qualified name of an ``nn.Linear`` or a 1x1 ``nn.Conv2d`` (e.g. ``"fc"``,
        ``"classifier.1"``).
    num_outputs : int
        Number of outputs (classes) of the new layer, >= 1.

    Returns
    -------
    nn.Module
        The old layer (put it back with :func:`swap_module` to undo).

    Raises
    ------
    WorkbenchError
        For an unknown path, a layer type that is not a head, or ``num_outputs < 1``.
    """
    if num_outputs < 1:
        raise WorkbenchError(f"Replace head: the number of outputs must be >= 1, not {num_outputs}.")
    old = get_module(model, path)
    inputs = getattr(old, "in_features", None) or getattr(old, "in_channels", None) or 1
    if int(num_outputs) * int(inputs) > MAX_HEAD_WEIGHTS:  # before the new layer is allocated
        raise WorkbenchError(f"Replace head: {int(num_outputs):,} outputs on the {int(inputs):,} inputs of {path} "
                             f"would be {int(num_outputs) * int(inputs):,} weights, more than {MAX_HEAD_WEIGHTS:,}.")
    new = _new_head(old, int(num_outputs))
    return swap_module(model, path, new)


def is_head_candidate(module: nn.Module) -> bool:
    """True for an ``nn.Linear`` or a 1x1 ``nn.Conv2d``: what :func:`replace_head` accepts."""
    if isinstance(module, nn.Linear):
        return True
    return isinstance(module, nn.Conv2d) and module.kernel_size == (1, 1) and module.groups == 1


#: Weights (outputs x inputs) a replaced head may have: 2**30, 4 GB in float32. The largest heads in use fit
#: (a 128,256-token vocabulary on 8,192 features is 1.05e9); a recorded edit asking for more is damage (10**10
#: outputs on a Linear(64, 10) would be 2.5 TB), refused before anything is allocated.
MAX_HEAD_WEIGHTS = 2**30

#: The ops a ``[model] edits`` entry may name.
EDIT_OPS = ("replace_head", "add_lora")


def apply_edits(model: nn.Module, edits: list[dict], source: str | Path | None = None) -> None:
    """Replay recorded structural edits (what a run file's ``[model] edits`` lists).

    Parameters
    ----------
    model : nn.Module
        Edited in place.
    edits : list of dict
        In the order they were made, each one of:

        - ``{"op": "replace_head", "path": "fc", "num_outputs": 2}``
          (:func:`replace_head`);
        - ``{"op": "add_lora", "paths": ["bert.encoder.layer.0.attention.self.query", ...],
          "r": 8, "alpha": 16, "dropout": 0.0}`` (:func:`workbench.core.model.lora.add_lora`:
          LoRA adapters on exactly those modules, everything else frozen; needs peft).

        Weight edits (re-initialization) need no replay: a run starts from the
        weights saved in its ``init.pt`` (adapter weights included), and its
        frozen set is applied after the edits.
    source : str or Path, optional
        The file that recorded ``edits`` (a checkpoint): its name starts every
        message (``"last.pt: recorded edit 1 (add_lora): ..."``); without it the
        messages name ``[model] edits`` (a run file's section).

    Raises
    ------
    WorkbenchError
        An edit that is not a table, an unknown op, a missing or mistyped field
        (all checked before the model is touched), a path the model does not have,
        or a size the layer it targets cannot have (a LoRA rank above
        :func:`workbench.core.model.lora.max_rank`, a head above
        :data:`MAX_HEAD_WEIGHTS`), refused before anything is allocated.
    """
    where = f"{Path(source).name}: recorded edit" if source is not None else "[model] edits, entry"
    checked = [_checked_edit(i, edit, where) for i, edit in enumerate(edits, 1)]
    for i, (op, fields) in enumerate(checked, 1):
        try:
            if op == "replace_head":
                replace_head(model, fields["path"], fields["num_outputs"])
            else:
                from workbench.core.model import lora

                lora.add_lora(model, fields["paths"], r=fields["r"], alpha=fields["alpha"],
                              dropout=fields["dropout"])
        except WorkbenchError as exc:
            if type(exc) is not WorkbenchError:  # a subclass (an unknown path) is caught by its type upstream
                raise
            raise WorkbenchError(f"{where} {i} ({op}): {exc}") from exc


def _checked_edit(i: int, edit, where: str = "[model] edits, entry") -> tuple[str, dict]:
    """``(op, fields)`` of the ``i``-th ``[model] edits`` entry (1-based), or WorkbenchError naming it."""
    where = f"{where} {i}"
    if not isinstance(edit, dict):
        raise WorkbenchError(f"{where}: must be a table such as {{op = \"replace_head\", path = \"fc\", "
                             f"num_outputs = 10}}, not {short_repr(edit)}")
    op = edit.get("op")
    if op == "add_lora":
        return op, _checked_lora(where, edit)
    if op != "replace_head":
        raise WorkbenchError(f"{where}: unknown model edit {short_repr(op)}; known: {', '.join(EDIT_OPS)}")
    path, num = edit.get("path"), edit.get("num_outputs")
    if not isinstance(path, str) or not path:
        raise WorkbenchError(f"{where}: 'path' must be a module path such as \"fc\", not {short_repr(path)}")
    if not _is_int(num) or num < 1:
        raise WorkbenchError(f"{where}: 'num_outputs' must be a whole number >= 1, not {short_repr(num)}")
    return op, {"path": path, "num_outputs": num}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _checked_lora(where: str, edit: dict) -> dict:
    """The fields of an ``add_lora`` entry (defaults r 8, alpha 16, dropout 0), or WorkbenchError naming it."""
    paths, r = edit.get("paths"), edit.get("r", 8)
    alpha, dropout = edit.get("alpha", 16), edit.get("dropout", 0.0)
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
        raise WorkbenchError(f"{where}: 'paths' must be a list of module paths such as "
                             f"[\"encoder.layer.0.attention.self.query\"], not {short_repr(paths)}")
    if not _is_int(r) or r < 1:
        raise WorkbenchError(f"{where}: 'r' (the LoRA rank) must be a whole number >= 1, not {short_repr(r)}")
    if not _is_number(alpha) or not alpha > 0:
        raise WorkbenchError(f"{where}: 'alpha' must be a number > 0, not {short_repr(alpha)}")
    if not _is_number(dropout) or not 0 <= dropout < 1:
        raise WorkbenchError(f"{where}: 'dropout' must be a number in [0, 1), not {short_repr(dropout)}")
    return {"paths": list(paths), "r": r, "alpha": alpha, "dropout": float(dropout)}


def last_layer(model: nn.Module) -> str | None:
    """Qualified name of the last module (registration order) holding parameters of its own: the head."""
    last = [name for name, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))]
    return last[-1] if last else None


def is_last_layer(model: nn.Module, path: str) -> bool:
    """True when ``path`` is :func:`last_layer`; a replaced head there changes the architecture's ``num_classes``."""
    return last_layer(model) == path
