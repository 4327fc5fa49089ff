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

__all__ = ["save_weights", "save_folder", "save_adapter_folder", "reload"]


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


def save_adapter_folder(model: nn.Module, folder: Path, *, base: str, source: str = "",
                        tokenizer: Any = None) -> list[Path]:
    """Write ``model``'s LoRA adapters apart, in peft's format, with the tokenizer the run used (or ``tokenizer``).

    ``adapter_config.json`` (``base_model_name_or_path`` = ``base``, ``task_type``,
    the trained head as ``modules_to_save``) and ``adapter_model.safetensors``:
    ``peft.PeftModel.from_pretrained(AutoModelFor...from_pretrained(base), folder)`` loads them.

    Raises
    ------
    ExportError
        peft is missing or the folder cannot be written.
    """
    from workbench.core.errors import WorkbenchError
    from workbench.core.model.lora import save_adapters
    from workbench.core.train.task.hf_export import run_tokenizer, save_tokenizer

    try:
        save_adapters(model, folder, base=base)
    except WorkbenchError as exc:
        raise ExportError(str(exc)) from exc
    written = sorted(p for p in folder.iterdir() if p.is_file())
    tok = tokenizer or (run_tokenizer(source) if source else None)
    return written + (save_tokenizer(tok, folder) if tok else [])


def _reload_adapters(path: Path, model: nn.Module) -> nn.Module:
    """An adapter folder loaded as a user would: the model's class ``from_pretrained`` on the base folder (with
    the model's config: its head and labels), then ``peft.PeftModel.from_pretrained``."""
    import json

    try:
        import peft
    except ImportError as exc:
        raise ExportError("peft is not installed: pip install 'workbench[export]' to check adapters") from exc
    base = json.loads((path / "adapter_config.json").read_text(encoding="utf-8"))["base_model_name_or_path"]
    cls = type(model)
    if not hasattr(cls, "from_pretrained"):
        raise ExportError(f"{cls.__name__} is not a transformers model: adapters apart need one")
    config = copy.deepcopy(model.config)
    base_model = cls.from_pretrained(base, config=config, local_files_only=True)
    return peft.PeftModel.from_pretrained(base_model, str(path))


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
        if fmt == "hf" and (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
            back = _reload_adapters(path, model)
        elif fmt == "hf" or spec is not None:
            back = open_model(path).model
        else:
            back = copy.deepcopy(model)
            back.load_state_dict(read_checkpoint(path).state_dict, strict=True)
    except (WorkbenchError, RuntimeError, OSError, ValueError) as exc:
        raise ExportError(f"{path.name}: cannot be loaded back: {str(exc).splitlines()[0]}") from exc
    dtype = next((t.dtype for t in model.parameters() if t.is_floating_point()), None)
    return (back.to(dtype) if dtype is not None else back).eval()
