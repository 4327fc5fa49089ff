"""A transformers model's own image processor on an ImageFolder (``[task] kind = "image_classification"``). Qt-free.

The processor is ``AutoImageProcessor.from_pretrained(folder, local_files_only=True,
trust_remote_code=False)`` of ``[data] processor`` (the model folder unless set): the
folder's code never runs and nothing is downloaded. Each image is read as RGB and
put through the processor (its resize, crop, rescale and normalize: the
``pixel_values`` the model was trained on), then flipped at random when
``[data] random_flip`` (training split only). The class names are the ImageFolder's
subfolders (``root/train`` when there is one, else ``root``), sorted as torchvision
sorts them; they become the head's ``id2label`` / ``label2id``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from workbench.core.errors import DataError
from workbench.core.train.config import DataConfig

__all__ = ["PROCESSOR_FILE", "load_image_processor", "ProcessImage", "processor_transforms", "image_classes"]

#: The file ``save_pretrained`` writes for an image processor; ``AutoImageProcessor`` reads it.
PROCESSOR_FILE = "preprocessor_config.json"


def load_image_processor(folder: str | Path, setting: str = "[data] processor") -> Any:
    """``AutoImageProcessor`` of ``folder``: local files only, never the folder's own code.

    Raises
    ------
    DataError
        The folder is missing, has no :data:`PROCESSOR_FILE`, or transformers cannot read it;
        one line naming the folder (and the missing file) and what to set.
    """
    p = Path(folder).expanduser()
    if not str(folder) or not p.is_dir():
        raise DataError(f"{p}: not a folder; set {setting} = \"<the model folder with its image processor>\"")
    if not (p / PROCESSOR_FILE).is_file():
        raise DataError(f"{p}: no image processor in this folder ({PROCESSOR_FILE} is missing); set {setting} = "
                        "\"<a folder with the model's preprocessor_config.json>\" in the run file")
    try:
        import transformers
    except ImportError as exc:
        raise DataError("an image processor needs transformers; install it (pip install 'workbench[hf]')") from exc
    from workbench.core.hub_offline import hub_offline

    try:
        with hub_offline():
            return transformers.AutoImageProcessor.from_pretrained(str(p), local_files_only=True,
                                                                   trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - a folder's content: one line
        raise DataError(f"{p}: transformers cannot read the image processor ({type(exc).__name__}: "
                        f"{str(exc)[:200]}); set {setting} to a folder with the model's image processor") from exc


class ProcessImage:
    """A PIL image -> ``(C, H, W)`` float32 ``pixel_values`` by the processor; a random horizontal flip if ``flip``.

    Picklable (DataLoader workers): the processor is loaded again from ``folder`` in each process.
    """

    def __init__(self, folder: str, flip: bool = False):
        self.folder, self.flip = str(folder), bool(flip)
        self._processor = None

    def __getstate__(self):
        return {"folder": self.folder, "flip": self.flip, "_processor": None}

    def __call__(self, image: Any) -> torch.Tensor:
        if self._processor is None:
            self._processor = load_image_processor(self.folder)
        x = self._processor(images=image.convert("RGB"), return_tensors="pt")["pixel_values"][0]
        x = x.float()
        if self.flip and torch.rand(()) < 0.5:
            x = x.flip(-1)
        return x


def processor_transforms(cfg: DataConfig) -> tuple[ProcessImage, ProcessImage]:
    """``(train, validation)`` transforms of ``[data] processor`` (loaded once here, so a bad folder fails now).

    Raises
    ------
    DataError
        As :func:`load_image_processor`.
    """
    load_image_processor(cfg.processor)
    return ProcessImage(cfg.processor, cfg.random_flip), ProcessImage(cfg.processor)


def image_classes(cfg: DataConfig) -> list[str]:
    """The class names of the ImageFolder ``[data] root`` (its ``train/`` subfolders when there is one).

    Raises
    ------
    DataError
        The folder is missing, has no class subfolders, or fewer than 2.
    """
    from torchvision.datasets.folder import find_classes

    root = Path(cfg.root).expanduser()
    if not cfg.root or not root.is_dir():
        raise DataError(f"{root if cfg.root else '[data] root'}: folder not found; point [data] root at a folder "
                        "holding train/ and val/ (or one subfolder per class)")
    top = root / "train" if (root / "train").is_dir() and (root / "val").is_dir() else root
    try:
        classes, _ = find_classes(str(top))
    except (FileNotFoundError, OSError) as exc:
        raise DataError(f"{top}: {exc}; each class needs its own subfolder of images") from exc
    if len(classes) < 2:
        raise DataError(f"{top}: {len(classes)} class subfolder(s); an image classifier needs 2 or more")
    return list(classes)
