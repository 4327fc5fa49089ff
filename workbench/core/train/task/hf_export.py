"""A trained model as a folder people load: ``save_pretrained`` weights and config, with the tokenizer copied.

:func:`save_model_folder` writes a transformers (or timm) model with
:func:`~workbench.core.model.hf_build.save_hf_folder` (config with
``num_labels`` / ``id2label`` / ``label2id``, safetensors weights) and the
tokenizer beside it (``tokenizer.save_pretrained``), so that
``AutoModelForSequenceClassification.from_pretrained(folder)`` /
``AutoModelForCausalLM.from_pretrained(folder)`` and ``AutoTokenizer`` load
it back (an image model's image processor is copied the same way, for
``AutoImageProcessor``), and Workbench reopens it as itself. :func:`export_checkpoint` does it
for a run's ``best.pt`` / ``last.pt``: the tokenizer is the one the run's
``run.toml`` (beside the file) names. ``workbench export`` calls it. Qt-free.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from torch import nn

from workbench.core.errors import CheckpointError

__all__ = ["save_model_folder", "save_tokenizer", "save_image_processor", "run_tokenizer", "export_checkpoint"]


def save_tokenizer(tokenizer_folder: str | Path, folder: str | Path) -> list[Path]:
    """Copy the tokenizer of ``tokenizer_folder`` into ``folder`` (``AutoTokenizer`` then ``save_pretrained``).

    Written into a temporary folder beside ``folder`` and moved in file by file
    (``os.replace``): an interrupted save leaves no half-written file.

    Raises
    ------
    DataError
        No tokenizer in ``tokenizer_folder`` (:func:`~workbench.core.train.data.text_files.load_tokenizer`).
    CheckpointError
        ``folder`` cannot be written.
    """
    from workbench.core.train.data.text_files import load_tokenizer

    return _save_into(load_tokenizer(tokenizer_folder, "the tokenizer"), Path(folder))


def _save_into(saver: Any, folder: Path) -> list[Path]:
    """``saver.save_pretrained`` into a temporary folder beside ``folder``, moved in file by file."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tok", dir=folder.parent))
    except OSError as exc:
        raise CheckpointError(f"cannot be written ({exc.strerror}).", folder) from exc
    try:
        saver.save_pretrained(str(tmp))
        written = sorted(p.name for p in tmp.iterdir() if p.is_file())
        for name in written:
            os.replace(tmp / name, folder / name)
        return [folder / n for n in written]
    except OSError as exc:
        raise CheckpointError(f"cannot be written ({exc.strerror}).", folder) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def save_image_processor(processor_folder: str | Path, folder: str | Path) -> list[Path]:
    """Copy the image processor of ``processor_folder`` into ``folder`` (``AutoImageProcessor``, ``save_pretrained``).

    Raises
    ------
    DataError
        No ``preprocessor_config.json`` there (:func:`~workbench.core.train.data.image_processor.load_image_processor`).
    CheckpointError
        ``folder`` cannot be written.
    """
    from workbench.core.train.data.image_processor import load_image_processor

    return _save_into(load_image_processor(processor_folder, "the image processor"), Path(folder))


def save_model_folder(model: nn.Module, folder: str | Path, tokenizer: str | Path | None = None) -> list[Path]:
    """Write ``model`` as a ``save_pretrained`` folder, with the tokenizer of the folder ``tokenizer`` when given.

    Parameters
    ----------
    model : nn.Module
        A ``transformers.PreTrainedModel`` (or a timm model); its config carries the head's labels.
    folder : str or Path
        Created when missing; files of an earlier save are replaced.
    tokenizer : str or Path, optional
        A folder holding the tokenizer to copy (the model folder the run started from); its image
        processor (``preprocessor_config.json``) is copied too, and alone when it has no tokenizer.

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    ArchitectureError
        The model is neither a transformers nor a timm model.
    CheckpointError
        The folder cannot be written.
    DataError
        ``tokenizer`` holds no tokenizer.
    """
    from workbench.core.model.hf_build import save_hf_folder

    from workbench.core.train.data.image_processor import PROCESSOR_FILE
    from workbench.core.train.data.text_files import TOKENIZER_FILES

    written = save_hf_folder(model, folder)
    if tokenizer:
        has_processor = (Path(tokenizer) / PROCESSOR_FILE).is_file()
        if not has_processor or any((Path(tokenizer) / n).is_file() for n in TOKENIZER_FILES):
            written += save_tokenizer(tokenizer, folder)  # none at all: its one-line DataError
        if has_processor:
            written += save_image_processor(tokenizer, folder)
    return written


def run_tokenizer(checkpoint: str | Path) -> str | None:
    """The tokenizer (or image processor) folder of the run a checkpoint belongs to, from ``run.toml`` beside it.

    ``[data] tokenizer``, ``[data] processor``, or ``[model] source`` or ``checkpoint`` when that is a
    folder with a tokenizer or an image processor; None when there is no run file or it names none.
    """
    from workbench.core.train.config import TrainConfig
    from workbench.core.train.data.image_processor import PROCESSOR_FILE
    from workbench.core.train.data.text_files import TOKENIZER_FILES

    run_toml = Path(checkpoint).with_name("run.toml")
    try:
        cfg = TrainConfig.from_toml(run_toml) if run_toml.is_file() else None
    except (OSError, ValueError, TypeError):
        cfg = None
    if cfg is None:
        return None
    for candidate in (cfg.data.tokenizer, cfg.data.processor, cfg.model.source, cfg.model.checkpoint):
        if candidate and Path(candidate).is_dir() and \
                any((Path(candidate) / n).is_file() for n in (*TOKENIZER_FILES, PROCESSOR_FILE)):
            return str(candidate)
    return None


def export_checkpoint(checkpoint: str | Path, out: str | Path, *, trust: bool = False,
                      tokenizer: str | Path | None = None) -> tuple[Any, list[Path]]:
    """``workbench export CKPT --format hf --out DIR``: open a run's checkpoint and write it as a model folder.

    Parameters
    ----------
    checkpoint : str or Path
        A run's ``best.pt`` / ``last.pt`` (or any file Workbench opens as a transformers model).
    out : str or Path
        The folder to write.
    trust : bool
        As :func:`~workbench.core.model.opening.open_model`.
    tokenizer : str or Path, optional
        The tokenizer folder; default :func:`run_tokenizer` of ``checkpoint`` (none: the folder has no tokenizer).

    Returns
    -------
    (model, files)

    Raises
    ------
    WorkbenchError
        The file cannot be opened, or the model is not a transformers / timm model (the message says so).
    """
    from workbench.core.model.opening import open_model

    opened = open_model(checkpoint, trust=trust)
    tok = tokenizer or run_tokenizer(checkpoint)
    return opened.model, save_model_folder(opened.model, out, tok)
