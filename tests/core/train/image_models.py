"""A tiny ViT folder with its image processor and an ImageFolder of colour-coded images, for the image tests
(made here, no download)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: The classes of :func:`colour_folder` and the RGB channel each one is bright in.
COLOURS = {"blue": 2, "green": 1, "red": 0}


def tiny_vit_folder(folder: Path, head: bool = False) -> Path:
    """A random-init ``ViTModel`` (or ``ViTForImageClassification`` with 2 labels) for 32x32 images, patch 8,
    hidden 32, 2 layers, with ``ViTImageProcessor(size=32x32)`` saved beside it."""
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=64)
    cls = transformers.ViTForImageClassification if head else transformers.ViTModel
    cls(config).save_pretrained(str(folder))
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(str(folder))
    return folder


def colour_folder(root: Path, per_class: tuple[int, int] = (16, 6), size: int = 40, seed: int = 0) -> Path:
    """``root/train/<class>/*.png`` and ``root/val/<class>/*.png``: noisy images bright in one channel per class.

    ``size`` differs from the model's 32 so that the processor's resize is exercised.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split, n in zip(("train", "val"), per_class):
        for name, channel in COLOURS.items():
            (root / split / name).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                pixels = rng.integers(0, 110, size=(size, size, 3))
                pixels[..., channel] += 120
                Image.fromarray(pixels.astype(np.uint8), "RGB").save(root / split / name / f"{i}.png")
    return root
