"""Giving a model the weights of the file it was opened from again, keeping its structure edits and frozen set.

After a run in the window the model holds the trained weights; "Start from the
file as opened" puts the file's weights back without opening it again (which
would ask the Partial-load question again and forget the freeze and probe
settings). :func:`reload_weights` copies into the model's own tensors, so
``requires_grad``, hooks (probes) and the module objects stay as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import torch
from torch import nn

from workbench.core.errors import ArchitectureError
from workbench.core.model.checkpoint import Checkpoint
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.formats.safetensors import LazyStateDict
from workbench.core.model.loading import load_state_dict_into
from workbench.core.model.prefixes import strip_prefixes

__all__ = ["reload_weights", "edited_paths"]


def edited_paths(edits: list[dict]) -> list[str]:
    """The module paths structural ``edits`` replaced or wrapped (a new head, LoRA adapters), in order.

    Parameters
    ----------
    edits : list of dict
        What ``Session.edits`` / a run file's ``[model] edits`` lists
        (``{"op": "replace_head", "path": "fc", ...}``, ``{"op": "add_lora", "paths": [...], ...}``).
    """
    paths: list[str] = []
    for edit in edits or []:
        if not isinstance(edit, Mapping):
            continue
        if edit.get("op") == "replace_head" and edit.get("path"):
            paths.append(str(edit["path"]))
        elif edit.get("op") == "add_lora":
            paths.extend(str(p) for p in edit.get("paths") or [])
    return paths


def _under(key: str, paths: list[str]) -> bool:
    return any(path == "" or key == path or key.startswith(path + ".") for path in paths)


def reload_weights(model: nn.Module, source: str | Path | Checkpoint, edits: list[dict] = (),
                   *, trust: bool = False) -> list[str]:
    """Copy the weights of the file ``source`` into ``model`` again, as far as they fit.

    The file is read afresh from disk (:func:`~workbench.core.model.formats.read_checkpoint`:
    a ``Checkpoint`` gives its ``path``; its in-memory tensors may be the trained
    ones), its key prefixes aligned with the model's as opening does
    (:func:`~workbench.core.model.prefixes.strip_prefixes`), then every tensor of
    matching name and shape is copied in (``strict=False``), except those under a
    module the ``edits`` replaced or wrapped (:func:`edited_paths`): a replaced
    head keeps its current weights. Tensors are copied into the model's own
    parameters, so ``requires_grad`` and forward hooks stay as they are.

    Parameters
    ----------
    model : nn.Module
        The window's model (on CPU), changed in place.
    source : str, Path or Checkpoint
        The file (or model folder) the model was opened from.
    edits : list of dict
        The structural edits made since it was opened (``Session.edits``).
    trust : bool
        Passed to ``read_checkpoint``: allow a file that needs code to load. Default False.

    Returns
    -------
    list of str
        The model's ``state_dict`` keys kept as they were (under an edited module,
        absent from the file, or of another shape there), in the model's order.

    Raises
    ------
    CheckpointError
        The file is missing, damaged or unreadable now.
    TrustRequired
        The file needs code to load and ``trust`` is False.
    ArchitectureError
        No tensor of the file fits the model (it is not the file this model came from).
    """
    path = source.path if isinstance(source, Checkpoint) else source
    ckpt = read_checkpoint(path, trust=trust)
    state = ckpt.state_dict.read() if isinstance(ckpt.state_dict, LazyStateDict) else ckpt.state_dict
    own = model.state_dict(keep_vars=True)
    renamed, _ = strip_prefixes(state, list(own))
    skip = edited_paths(list(edits))
    usable = {k: v for k, v in renamed.items() if not _under(k, skip)}
    if not any(k in own and tuple(own[k].shape) == tuple(v.shape) for k, v in usable.items()):
        raise ArchitectureError(f"{Path(path).name}: none of its tensors fits the model shown; "
                                "open the file again with File > Open.")
    with torch.no_grad():
        report = load_state_dict_into(model, usable, strict=False)
    loaded = set(usable) - set(report.unexpected) - {name for name, _, _ in report.mismatched}
    return [key for key in own if key not in loaded]
