"""Checkpoint figures: opening and saving a 512 MB checkpoint.

``open_checkpoint_512mb_s``: a vgg11 state_dict (133 M float32 parameters, 531 MB,
about 506 MiB) saved by Workbench (``save_checkpoint``: with the digest of its
tensors) from file to a loaded module with its summary tree, warm page cache; the
read verifies every byte against the digest. Median of 5. Target <= 0.5 s.
``open_checkpoint_512mb_undigested_s`` is the same for a plain ``torch.save`` of
the state_dict (a foreign file: nothing to verify, pages read lazily), and
``checkpoint_verify_512mb_s`` the digest check alone (``verify_checkpoint``).

``checkpoint_digest_overhead``: the time of ``save_checkpoint`` of that payload
(``torch.save`` into a temporary file, fsync, ``os.replace``) with the digest over
the time without it, for interleaved pairs (the order inside a pair alternates);
the median pair ratio, with ``_min`` / ``_max`` the range of the pairs. Target
<= 1.10. ``checkpoint_save_512mb_s`` is the median save without the digest and
``checkpoint_digest_512mb_s`` the median time of computing the digest alone
(``add_digest``): single pairs scatter widely with the disk's fsync times, the
digest's own cost does not.

``detect_arch_s`` and ``detect_arch_warm_s`` (ranking through the architecture
index, torchvision and timm) are measured by ``bench_arch_index``; :func:`bench_detect`
is kept for a quick in-process check.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from workbench.core.model.detection import clear_signature_cache, detect_architecture
from workbench.core.model.loading import load_model
from workbench.core.model.meta_build import build_module
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.formats.intact import verify_checkpoint
from workbench.core.digest import add_digest
from workbench.core.model.saving import save_checkpoint

#: Interleaved (with digest, without) save pairs for ``checkpoint_digest_overhead``.
SAVE_PAIRS = 15


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _vgg11_state_dict() -> dict[str, torch.Tensor]:
    """A vgg11 state_dict of random float32 tensors (531 MB), built without a download."""
    gen = torch.Generator().manual_seed(0)
    meta = build_module("vgg11", device="meta").state_dict()
    return {k: torch.randn(v.shape, generator=gen) if v.is_floating_point() else torch.zeros(v.shape, dtype=v.dtype)
            for k, v in meta.items()}


def _write_vgg11(path: Path, *, digest: bool = True) -> int:
    """Save a vgg11 checkpoint: Workbench's (digest) or a plain ``torch.save`` state_dict; its size in bytes."""
    sd = _vgg11_state_dict()
    if digest:
        save_checkpoint(path, {"model_state_dict": sd})
    else:
        torch.save(sd, path)
    return path.stat().st_size


def _open_once(path: Path) -> None:
    ckpt = read_checkpoint(path)
    model, report = load_model(ckpt, "vgg11")
    assert report.ok
    try:
        from workbench.core.model.tree import build_summary
    except ImportError:  # summary.py belongs to another part of the issue
        return
    build_summary(model)


def bench_open(repeats: int = 5, *, digest: bool = True) -> float:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "vgg11.pt"
        size = _write_vgg11(path, digest=digest)
        assert size > 500 * 2**20, size
        path.read_bytes()  # warm the page cache
        _open_once(path)
        if digest:
            assert read_checkpoint(path).metadata.verified
        return _median_time(lambda: _open_once(path), repeats)


def bench_verify(repeats: int = 5) -> float:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "vgg11.pt"
        _write_vgg11(path)
        path.read_bytes()
        assert verify_checkpoint(path).ok
        return _median_time(lambda: verify_checkpoint(path), repeats)


def bench_digest_overhead(pairs: int = SAVE_PAIRS) -> dict[str, float]:
    """Interleaved saves of one vgg11 payload with and without the digest (see the module docstring)."""
    payload = {"model_state_dict": _vgg11_state_dict()}
    ratios, plain = [], []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "last.pt"
        save_checkpoint(path, payload)  # warm up: the file exists, as a run's last.pt does

        def timed(digest: bool) -> float:
            t0 = time.perf_counter()
            save_checkpoint(path, payload, digest=digest)
            return time.perf_counter() - t0

        for i in range(pairs):
            if i % 2:
                without, with_ = timed(False), timed(True)
            else:
                with_, without = timed(True), timed(False)
            ratios.append(with_ / without)
            plain.append(without)
    return {"checkpoint_digest_overhead": statistics.median(ratios),
            "checkpoint_digest_overhead_min": min(ratios), "checkpoint_digest_overhead_max": max(ratios),
            "checkpoint_save_512mb_s": statistics.median(plain),
            "checkpoint_digest_512mb_s": _median_time(lambda: add_digest(payload), 5)}


def bench_detect(repeats: int = 3) -> tuple[float, float]:
    torch.manual_seed(0)
    sd = build_module("resnet18").state_dict()

    def cold() -> None:
        clear_signature_cache()
        assert detect_architecture(sd)[0].spec.name == "resnet18"

    cold_s = _median_time(cold, repeats)
    warm_s = _median_time(lambda: detect_architecture(sd), repeats)
    return cold_s, warm_s


def run() -> dict[str, float]:
    """Return the open, verify and save figures (seconds; ``checkpoint_digest_overhead*``: ratios)."""
    figures = {"open_checkpoint_512mb_s": bench_open(),
               "open_checkpoint_512mb_undigested_s": bench_open(digest=False),
               "checkpoint_verify_512mb_s": bench_verify()}
    figures.update(bench_digest_overhead())
    return figures
