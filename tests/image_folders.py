"""Real JPEG ImageFolders for tests: ``root/train/<class>/<i>.jpg`` and ``root/val/<class>/<i>.jpg``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def jpeg_folder(root: Path, per_class: int = 4, size: tuple[int, int] = (32, 32), *, smooth: bool = False,
                classes: tuple[str, ...] = ("ants", "bees"), quality: int = 90) -> Path:
    """Write ``per_class`` JPEGs of ``size = (W, H)`` per class in both splits; returns ``root``.

    ``smooth``: a colour gradient (a different blue per class) plus a little noise, so that
    resizing is well posed (interpolation tests); otherwise uniform noise.
    """
    rng = np.random.default_rng(0)
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    for split in ("train", "val"):
        for c, cls in enumerate(classes):
            folder = Path(root) / split / cls
            folder.mkdir(parents=True)
            for i in range(per_class):
                if smooth:
                    img = np.stack([xx * 240 / w, yy * 240 / h, np.full_like(xx, 60 + 80 * c)], -1)
                    pixels = (img + rng.integers(0, 30, (h, w, 3))).clip(0, 255).astype(np.uint8)
                else:
                    pixels = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=quality)
    return Path(root)


def cut_short(path: Path) -> None:
    """Keep the first half of a file: a JPEG's header stays intact, only a full decode fails."""
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])
