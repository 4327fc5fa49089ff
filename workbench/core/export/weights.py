"""The weights-only exports: a safetensors file and a ``save_pretrained`` folder, and reloading them for the check.

The safetensors file is :func:`~workbench.core.model.saving.save_model_file`'s
(each tied tensor once; the architecture, frozen set, edits and the source it
came from in the header's ``__metadata__``), so ``safetensors.torch.load_file``
reads it and Workbench reopens it as itself. The folder is
:func:`~workbench.core.train.task.hf_export.save_model_folder`'s. Qt-free.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from torch import nn

from workbench.core.export.report import ExportError

__all__ = ["save_weights", "save_folder", "reload"]


def _run_folder(source: str) -> str:
    """The run folder a checkpoint belongs to (the folder holding it and a ``run.toml``), else ``""``."""
    if not source:
        return ""
    folder = Path(source).parent
    return str(folder) if (folder / "run.toml").is_file() else ""


def save_weights(model: nn.Module, path: Path, *, spec: Any = None, edits: list[dict] = (), source: str = "") -> Path:
    """Write ``model``'s weights as a safetensors file with Workbench's metadata.

    Parameters
    ----------
    model : nn.Module
        LoRA already merged (the ``add_lora`` edits are left out of the metadata).
    path : Path
        The ``.safetensors`` file.
    spec : ArchSpec, str or dict, optional
        The architecture; without it the file reopens only with one given.
    edits : list of dict
        Structural edits to replay before loading (a replaced head).
    source : str
        The checkpoint exported; stored with its run folder under ``source``.

    Raises
    ------
    ExportError
        The file cannot be written.
    """
    from workbench.core.model.saving import checkpoint_payload, save_model_file

    kept = [e for e in edits or [] if e.get("op") != "add_lora"]
    origin = {"checkpoint": source, "run": _run_folder(source)} if source else None
    payload = checkpoint_payload(model, arch=spec, edits=kept, include_rng=False,
                                 extra={"source": origin} if origin else None)
    try:
        written, _ = save_model_file(path, payload)
    except Exception as exc:  # noqa: BLE001 - CheckpointError / OSError: one line
        raise ExportError(str(exc)) from exc
    return written


def save_folder(model: nn.Module, folder: Path, *, source: str = "", tokenizer: Any = None) -> list[Path]:
    """Write ``model`` as a ``save_pretrained`` folder with the tokenizer the run used (or ``tokenizer``).

    Raises
    ------
    ArchitectureError
        The model is neither a transformers nor a timm model.
    """
    from workbench.core.train.task.hf_export import run_tokenizer, save_model_folder

    tok = tokenizer or (run_tokenizer(source) if source else None)
    return save_model_folder(model, folder, tok)


def reload(fmt: str, path: Path, model: nn.Module, spec: Any = None) -> nn.Module:
    """The exported weights back in a model, as a user would load them, in eval mode.

    ``hf`` and a safetensors file with its architecture: reopened by Workbench
    (:func:`~workbench.core.model.opening.open_model`: ``from_pretrained`` for a
    folder). A safetensors file without one: loaded strictly into a copy of ``model``.

    Raises
    ------
    ExportError
        The file cannot be read or does not fit the architecture.
    """
    from workbench.core.errors import WorkbenchError
    from workbench.core.model.formats import read_checkpoint
    from workbench.core.model.opening import open_model

    try:
        if fmt == "hf" or spec is not None:
            back = open_model(path).model
        else:
            back = copy.deepcopy(model)
            back.load_state_dict(read_checkpoint(path).state_dict, strict=True)
    except (WorkbenchError, RuntimeError) as exc:
        raise ExportError(f"{path.name}: cannot be loaded back: {str(exc).splitlines()[0]}") from exc
    dtype = next((t.dtype for t in model.parameters() if t.is_floating_point()), None)
    return (back.to(dtype) if dtype is not None else back).eval()
