"""Decode on GPU: ImageFolder JPEGs decoded and transformed as whole batches on the training device.

The loader workers only read file bytes (:func:`read_encoded`) and draw each
sample's augmentation (:class:`DrawAugment`, under the sample's seeded RNG,
so resume stays exact); the main process decodes the batch with
``torchvision.io.decode_jpeg(list, device=...)`` (nvjpeg on CUDA, one call per
batch) and resizes, crops, flips and normalizes the ``uint8`` tensors there
(:class:`BatchImageTransform`, ``torchvision.transforms.v2.functional``). Files
that are not JPEG are decoded on the CPU in the worker, one by one.

The transforms follow :func:`workbench.core.train.data.datasets.image_transforms` in
order (channels, resize of the shorter side with antialiasing, center crop,
random crop after zero padding, random horizontal flip, scale to [0, 1],
normalize), so the two paths agree within interpolation tolerance.

Why own code: torchvision gives the decoder and the per-image functions; a
batched pipeline that keeps the per-sample randomness of a resumable run is
what Workbench adds. ``decode_jpeg`` is deprecated from torchvision 0.29 in
favour of TorchCodec; its warning is silenced here until TorchCodec is a
dependency.
"""

from __future__ import annotations

import warnings

import torch

from workbench.core.train.data.loaders import Unreadable

__all__ = ["read_encoded", "DrawAugment", "collate_encoded", "BatchImageTransform", "JPEG_MAGIC"]

#: The first bytes of every JPEG file (SOI marker + the next marker's 0xFF).
JPEG_MAGIC = b"\xff\xd8\xff"


def _io():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import torchvision.io as tvio
    return tvio


def read_encoded(path: str) -> tuple[torch.Tensor, str]:
    """ImageFolder ``loader``: ``(data, path)``.

    ``data`` is the file's bytes as a 1-D ``uint8`` tensor for a JPEG, or the
    image decoded on the CPU as ``(3, H, W)`` ``uint8`` (RGB) for other formats.

    Raises
    ------
    RuntimeError, OSError
        The file cannot be read or (not a JPEG) decoded.
    """
    tvio = _io()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        data = tvio.read_file(str(path))
        if bytes(data[:3].tolist()) != JPEG_MAGIC:
            data = tvio.decode_image(data, mode=tvio.ImageReadMode.RGB)
    return data, str(path)


class DrawAugment:
    """ImageFolder ``transform`` on the worker: draw the sample's flip and crop offsets.

    Called under the sample's seeded RNG (:class:`~workbench.core.train.data.loaders.SeededSamples`).

    Parameters
    ----------
    flip : bool
        Random horizontal flip (probability 0.5).
    pad : int
        Random crop after ``pad`` pixels of zero padding; 0 = off.

    Returns (when called)
    ---------------------
    (data, path, aug)
        ``aug`` is an ``int64`` tensor ``[flip, dy, dx]`` (offsets in ``0..2*pad``).
    """

    def __init__(self, flip: bool, pad: int):
        self.flip, self.pad = bool(flip), int(pad)

    def __call__(self, loaded: tuple[torch.Tensor, str]):
        data, path = loaded
        flip = int(torch.rand(()) < 0.5) if self.flip else 0
        dy, dx = torch.randint(0, 2 * self.pad + 1, (2,)).tolist() if self.pad else (0, 0)
        return data, path, torch.tensor([flip, dy, dx])


def collate_encoded(samples: list) -> tuple[torch.Tensor, torch.Tensor, list[str], torch.Tensor, torch.Tensor]:
    """One batch of ``((data, path, aug), target)`` samples as a few tensors.

    Returns
    -------
    (buffer, meta, paths, aug, targets)
        ``buffer``: every sample's bytes (JPEG) or ``uint8`` pixels (decoded on the
        CPU) end to end, 1-D ``uint8``; ``meta``: ``(N, 4)`` int64 rows ``[offset,
        length, H, W]`` (``H = W = 0`` for a JPEG); ``aug``: ``(N, 3)``;
        ``targets``: ``(N,)`` int64. One buffer, not N tensors: a worker hands a
        batch to the main process through shared memory, one segment per tensor.
    """
    datas = [s[0][0] for s in samples]
    meta, offset = [], 0
    for d in datas:
        n = d.numel()
        meta.append([offset, n, 0, 0] if d.dim() == 1 else [offset, n, d.shape[1], d.shape[2]])
        offset += n
    buffer = torch.cat([d.reshape(-1) for d in datas]) if datas else torch.empty(0, dtype=torch.uint8)
    aug = torch.stack([s[0][2] for s in samples])
    targets = torch.tensor([int(s[1]) for s in samples], dtype=torch.int64)
    return buffer, torch.tensor(meta, dtype=torch.int64), [s[0][1] for s in samples], aug, targets


def _unpack(buffer: torch.Tensor, meta: torch.Tensor) -> list[torch.Tensor]:
    """The per-sample tensors of :func:`collate_encoded`: 1-D JPEG bytes or ``(3, H, W)`` pixels."""
    out = []
    for offset, length, h, w in meta.tolist():
        piece = buffer[offset:offset + length]
        out.append(piece if h == 0 else piece.view(3, h, w))
    return out


class BatchImageTransform:
    """Decode and transform one :func:`collate_encoded` batch on ``device``.

    Parameters
    ----------
    cfg : DataConfig
        ``image_size``, ``center_crop``, ``channels`` (and the random crop /
        flip drawn by :class:`DrawAugment`).
    device : torch.device
        Where to decode (``cuda``: nvjpeg) and transform.
    stats : (mean, std) or None
        Per-channel normalization (``data.normalize_stats``); None = none.

    Returns (when called)
    ---------------------
    (x, y, unreadable)
        ``x``: ``(N, C, H, W)`` float32 on ``device``; ``y``: ``(N,)`` int64 on
        ``device``; ``unreadable``: the :class:`Unreadable` samples left out.
    """

    def __init__(self, cfg, device: torch.device, stats: tuple | None):
        self.size, self.crop, self.pad = int(cfg.image_size), int(cfg.center_crop), int(cfg.random_crop)
        self.gray = cfg.channels == "grayscale"
        self.device = torch.device(device)
        self.mean = self.std = None
        if stats is not None:
            self.mean = torch.tensor(stats[0], device=self.device).view(1, -1, 1, 1)
            self.std = torch.tensor(stats[1], device=self.device).view(1, -1, 1, 1)

    def _decode(self, datas: list[torch.Tensor], paths: list[str]):
        tvio = _io()
        jpeg = [i for i, d in enumerate(datas) if d.dim() == 1]
        images: list[torch.Tensor | None] = [None if d.dim() == 1 else d.to(self.device) for d in datas]
        bad: list[Unreadable] = []
        if jpeg:
            encoded = [datas[i].cpu() for i in jpeg]  # decode_jpeg reads its input from host memory
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                try:
                    decoded = tvio.decode_jpeg(encoded, mode=tvio.ImageReadMode.RGB, device=self.device)
                except RuntimeError:  # one bad file fails the whole batch: find it
                    decoded = []
                    for i, data in zip(jpeg, encoded):
                        try:
                            decoded.append(tvio.decode_jpeg(data, mode=tvio.ImageReadMode.RGB, device=self.device))
                        except RuntimeError as e:
                            decoded.append(None)
                            bad.append(Unreadable(i, paths[i], f"RuntimeError: {e}"))
            for i, image in zip(jpeg, decoded):
                images[i] = image
        return images, bad

    def _shape(self, image: torch.Tensor) -> torch.Tensor:
        from torchvision.transforms.v2 import functional as F

        if self.size:
            image = F.resize(image, [self.size], antialias=True)
        if self.crop:
            image = F.center_crop(image, [self.crop, self.crop])
        return image

    def _shape_all(self, images: list[torch.Tensor]) -> list[torch.Tensor]:
        """:meth:`_shape` applied to ``images``, one batched call per distinct ``(C, H, W)``.

        Photos from one camera mostly share a size: one resize of an ``(n, C, H, W)``
        stack launches a handful of kernels instead of a handful per image.
        """
        groups: dict[tuple, list[int]] = {}
        for i, image in enumerate(images):
            groups.setdefault(tuple(image.shape), []).append(i)
        out: list[torch.Tensor | None] = [None] * len(images)
        for members in groups.values():
            shaped = self._shape(torch.stack([images[i] for i in members]))
            for i, image in zip(members, shaped):
                out[i] = image
        return out

    def __call__(self, batch):
        buffer, meta, paths, aug, targets = batch
        images, bad = self._decode(_unpack(buffer, meta), paths)
        keep = [i for i, image in enumerate(images) if image is not None]
        if not keep:
            return None, None, bad
        shaped = self._shape_all([images[i] for i in keep])
        try:
            x = torch.stack(shaped)  # (N, 3, H, W) uint8
        except RuntimeError as e:
            raise ValueError(f"images of different sizes {sorted({tuple(t.shape) for t in shaped})} cannot be "
                             "batched: set an image size and a center crop") from e
        aug = aug[keep].to(self.device)
        if self.gray:
            from torchvision.transforms.v2 import functional as F

            x = F.rgb_to_grayscale(x)
        if self.pad:
            h, w = x.shape[-2:]
            padded = torch.nn.functional.pad(x, (self.pad,) * 4)
            rows = aug[:, 1].view(-1, 1) + torch.arange(h, device=self.device)  # (N, H)
            cols = aug[:, 2].view(-1, 1) + torch.arange(w, device=self.device)  # (N, W)
            n = torch.arange(len(x), device=self.device).view(-1, 1, 1)
            x = padded.permute(0, 2, 3, 1)[n, rows.unsqueeze(2), cols.unsqueeze(1)].permute(0, 3, 1, 2)
        flips = aug[:, 0].bool()
        x = torch.where(flips.view(-1, 1, 1, 1), x.flip(-1), x)
        x = x.float().div_(255.0)
        if self.mean is not None:
            x = (x - self.mean) / self.std
        return x.contiguous(), targets[keep].to(self.device), bad

