"""A JPEG ImageFolder: Workbench's default loader settings vs a plain DataLoader loop (issue 11).

Figures:

``imagefolder_throughput_ratio``
    Training samples per second of the core ``Trainer`` (what ``workbench train``
    and the window's training process run) with its DEFAULT data settings
    (``num_workers="auto"``, ``pin_memory="auto"``, ``persistent_workers="auto"``)
    over a plain PyTorch loop written by a careful engineer: ``DataLoader`` with
    the same number of workers (usable cores - 1, at most 8), persistent workers,
    ``pin_memory`` on CUDA, ``non_blocking`` copies. Same generated ImageFolder
    (``IMAGES`` JPEGs of 400x300, 2 classes), same transforms (resize 64, center
    crop 64, random flip, ImageNet normalization), same small CNN, Adam 1e-3,
    batch ``BATCH``, CPU. Each side runs in a fresh Python process; samples/s
    over epochs 2..``EPOCHS`` (steady state: epoch 1 starts the workers on both
    sides); median of ``PAIRS`` interleaved pairs. Target >= 0.95.
``imagefolder_samples_per_s_plain`` / ``_workbench``
    The medians of both sides, samples/s.
``imagefolder_input_wait``
    The Trainer's own input-bound meter over the same epochs (share of step time
    waiting for data), median.
``gpu_imagefolder_ratio`` (CUDA only)
    The same with resnet18 at 224 (resize 256 + center crop 224 of the
    400x300 JPEGs), batch 64, bf16 autocast; plain loop with 8 workers, pinned,
    persistent. Workbench side with defaults (Decode on GPU, channels_last,
    prefetch). Target >= 1.0, aim 2.0.
``gpu_imagefolder_ratio_cpu_decode`` (CUDA only)
    Workbench with Decode on GPU off.
``gpu_channels_last_speedup`` (CUDA only)
    Eager resnet18, bf16, 32x32 inputs on the device, batch 256: steps/s with
    ``channels_last`` over without.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PAIRS = 5
EPOCHS = 3
BATCH = 32
IMAGES = 400


def make_folder(root: Path, images: int = IMAGES) -> Path:
    """``root/train/{ants,bees}`` and ``root/val/...``: 400x300 JPEGs (a colour gradient plus noise)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:300, 0:400]
    for split, n in (("train", images), ("val", max(8, images // 8))):
        for c, cls in enumerate(("ants", "bees")):
            folder = root / split / cls
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n // 2):
                img = np.stack([xx * 0.6, yy * 0.8, np.full_like(xx, 60.0 + 120 * c)], -1)
                img = img + rng.integers(0, 40, (300, 400, 3))
                Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(folder / f"{i}.jpg", quality=85)
    return root


def small_cnn():
    """Four 3x3 conv blocks and a linear head, for 64x64 RGB inputs: light enough that loading matters."""
    from torch import nn

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(2))

    return nn.Sequential(block(3, 16), block(16, 32), block(32, 64), block(64, 64),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 2))


def _model(kind: str):
    import torch
    import torchvision

    torch.manual_seed(0)
    return small_cnn() if kind == "small" else torchvision.models.resnet18(num_classes=2)


def side_plain(root: str, kind: str, device: str, workers: int) -> dict:
    """The plain loop; samples/s of epochs 2..EPOCHS."""
    import torch
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    size, crop = (64, 64) if kind == "small" else (256, 224)
    tf = v2.Compose([v2.ToImage(), v2.RGB(), v2.Resize(size, antialias=True), v2.CenterCrop(crop),
                     v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                     v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    cuda = device.startswith("cuda")
    loader = DataLoader(ImageFolder(f"{root}/train", transform=tf), batch_size=BATCH if kind == "small" else 64,
                        shuffle=True, num_workers=workers, persistent_workers=workers > 0, pin_memory=cuda)
    model = _model(kind).to(device)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    amp = torch.autocast("cuda", torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    rates = []
    for _ in range(EPOCHS):
        t0, n = time.perf_counter(), 0
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            with amp:
                loss = loss_fn(model(x).float(), y)
            loss.backward()
            opt.step()
            loss.item()
            n += len(y)
        rates.append(n / (time.perf_counter() - t0))
    return {"samples_per_s": statistics.mean(rates[1:])}


def side_workbench(root: str, kind: str, device: str, decode: str = "auto", channels_last: str = "auto") -> dict:
    """The core Trainer with default data settings; samples/s of epochs 2..EPOCHS."""
    from workbench.core.train.config import DataConfig, TrainConfig
    from workbench.core.train.trainer.loop import Trainer

    size, crop = (64, 64) if kind == "small" else (256, 224)
    data = DataConfig(dataset="imagefolder", root=root, image_size=size, center_crop=crop, random_flip=True,
                      batch_size=BATCH if kind == "small" else 64, decode_on_gpu=decode if decode == "auto"
                      else decode == "on")
    run_dir = tempfile.mkdtemp(prefix="bench-imagefolder-")
    cfg = TrainConfig(data=data, epochs=EPOCHS, device=device, lr=1e-3, amp=device.startswith("cuda"),
                      run_dir=run_dir, tensorboard=False,
                      channels_last=channels_last if channels_last == "auto" else channels_last == "on")
    t = Trainer(_model(kind), cfg)
    reason = t.fit()
    if reason != "completed":
        raise RuntimeError(f"workbench side ended {reason}: {t.error}")
    later = t.history[1:]
    return {"samples_per_s": statistics.mean(h["samples_per_s"] for h in later),
            "input_wait": statistics.mean(h["input_wait"] for h in later), "note": t.loader_note}


def _side(args: list[str]) -> dict:
    """Run one side in a fresh Python process (as a user's script or ``workbench train`` runs)."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_imagefolder", *args], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parent.parent, timeout=1800)
    for line in out.stdout.splitlines():
        if line.startswith("SIDE "):
            return json.loads(line[5:])
    raise RuntimeError(f"side {args} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def channels_last_speedup(steps: int = 100) -> float:
    """Steps/s of eager resnet18 (bf16, 32x32 on the device, batch 256) with channels_last over without."""
    import torch
    import torchvision

    rates = {}
    for fmt in (torch.contiguous_format, torch.channels_last) * 3:
        torch.manual_seed(0)
        model = torchvision.models.resnet18(num_classes=10).cuda().to(memory_format=fmt)
        opt = torch.optim.Adam(model.parameters(), 1e-3)
        x = torch.randn(256, 3, 32, 32, device="cuda").to(memory_format=fmt)
        y = torch.randint(0, 10, (256,), device="cuda")
        for i in range(steps + 10):
            if i == 10:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x).float(), y)
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
        rates.setdefault(fmt, []).append(steps / (time.perf_counter() - t0))
    return statistics.median(rates[torch.channels_last]) / statistics.median(rates[torch.contiguous_format])


def run() -> dict[str, float]:
    import torch

    from workbench.core.train.config import DataConfig
    from workbench.core.train.data.loaders import loader_settings

    workers = loader_settings(DataConfig(dataset="imagefolder"), "cpu").num_workers
    root = make_folder(Path(tempfile.mkdtemp(prefix="bench-photos-")))
    ratios, plain, wb, waits = [], [], [], []
    for i in range(PAIRS):
        order = ("plain", "workbench") if i % 2 == 0 else ("workbench", "plain")
        got = {}
        for side in order:
            args = ["--side", side, str(root), "small", "cpu"] + ([str(workers)] if side == "plain" else [])
            got[side] = _side(args)
        plain.append(got["plain"]["samples_per_s"])
        wb.append(got["workbench"]["samples_per_s"])
        waits.append(got["workbench"]["input_wait"])
        ratios.append(wb[-1] / plain[-1])
        print(f"imagefolder pair {i + 1}/{PAIRS}: plain {plain[-1]:.0f}, workbench {wb[-1]:.0f} samples/s, "
              f"ratio {ratios[-1]:.3f}, input wait {waits[-1]:.0%} ({got['workbench']['note']})", flush=True)
    figures = {
        "imagefolder_throughput_ratio": statistics.median(ratios),
        "imagefolder_throughput_ratio_min": min(ratios),
        "imagefolder_throughput_ratio_max": max(ratios),
        "imagefolder_samples_per_s_plain": statistics.median(plain),
        "imagefolder_samples_per_s_workbench": statistics.median(wb),
        "imagefolder_input_wait": statistics.median(waits),
        "imagefolder_workers": float(workers),
    }
    if torch.cuda.is_available():
        figures.update(gpu_figures())
    return figures


def gpu_figures(triples: int = 3) -> dict[str, float]:
    """The ``gpu_`` figures (CUDA only): ``triples`` interleaved plain / defaults / CPU-decode runs."""
    gpu_root = make_folder(Path(tempfile.mkdtemp(prefix="bench-photos-gpu-")), images=1200)
    rows = []
    for i in range(triples):
        p = _side(["--side", "plain", str(gpu_root), "resnet18", "cuda", "8"])["samples_per_s"]
        w = _side(["--side", "workbench", str(gpu_root), "resnet18", "cuda"])
        c = _side(["--side", "workbench", str(gpu_root), "resnet18", "cuda", "off"])["samples_per_s"]
        rows.append((w["samples_per_s"] / p, c / p, p, w["samples_per_s"], w["input_wait"]))
        print(f"gpu imagefolder {i + 1}/{triples}: plain {p:.0f}, workbench {w['samples_per_s']:.0f} "
              f"(input wait {w['input_wait']:.0%}), cpu decode {c:.0f} samples/s", flush=True)
    col = list(zip(*rows))
    return {
        "gpu_imagefolder_ratio": statistics.median(col[0]),
        "gpu_imagefolder_ratio_min": min(col[0]),
        "gpu_imagefolder_ratio_max": max(col[0]),
        "gpu_imagefolder_ratio_cpu_decode": statistics.median(col[1]),
        "gpu_imagefolder_samples_per_s_plain": statistics.median(col[2]),
        "gpu_imagefolder_samples_per_s_workbench": statistics.median(col[3]),
        "gpu_imagefolder_input_wait": statistics.median(col[4]),
        "gpu_channels_last_speedup": channels_last_speedup(),
    }


if __name__ == "__main__":
    if len(sys.argv) >= 6 and sys.argv[1] == "--side":
        _, _, side, root, kind, device, *rest = sys.argv
        if side == "plain":
            result = side_plain(root, kind, device, int(rest[0]))
        else:
            result = side_workbench(root, kind, device, *rest)
        print("SIDE " + json.dumps(result), flush=True)
    else:
        print(json.dumps(run(), indent=1))
