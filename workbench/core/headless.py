"""Headless training: ``workbench train RUN.toml`` (:func:`train_from_toml`) and its printing.

Builds the model of a run file's ``[model]`` section
(:func:`build_model_from_config`), trains it with a
:class:`~workbench.core.training.Trainer` and prints one line per epoch. Qt-free.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from workbench.core.callbacks import Callback
from workbench.core.config import ModelConfig, TrainConfig
from workbench.core.errors import TrainingError, WorkbenchError
from workbench.core.param_names import _resolve_parameter_names

__all__ = ["train_from_toml", "build_model_from_config"]


class _PrintProgress(Callback):
    """One line per epoch (and the start/end) for ``workbench train``."""

    def __init__(self, out: Callable[[str], Any]):
        self.out = out

    def on_fit_start(self, trainer):
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in trainer.model.parameters())
        self.out(f"run folder: {trainer.run_dir}")
        self.out(f"device {trainer.device}, {trainer.config.epochs} epochs x {len(trainer.train_loader)} steps, "
                 f"{trainable:,} of {total:,} parameters trainable")

    def on_epoch_end(self, trainer, m):
        acc = f"  val_acc {m['val_acc'] * 100:.1f}%" if math.isfinite(m["val_acc"]) else ""
        self.out(f"epoch {m['epoch'] + 1}/{trainer.config.epochs}  step {m['step']}  "
                 f"train_loss {m['train_loss']:.4f}  val_loss {m['val_loss']:.4f}{acc}  "
                 f"lr {m['lr']:.3g}  {m['samples_per_s']:.0f} samples/s  {m['epoch_time']:.1f} s"
                 + ("  (best)" if m["best"] else ""))

    def on_exception(self, trainer, exc, tb):
        if not isinstance(exc, WorkbenchError):
            self.out(tb.rstrip())
        self.out(f"error: {exc}")

    def on_fit_end(self, trainer, reason):
        if reason == "nonfinite" and trainer.error is not None:
            self.out(f"error: {trainer.error}")
        self.out(f"finished: {reason}")


def build_model_from_config(mc: ModelConfig) -> tuple[nn.Module, Any, dict | None]:
    """Build the model of a ``[model]`` section.

    Returns
    -------
    (model, arch, payload)
        ``arch`` is an ArchSpec when ``core.architectures`` is available, else a
        dict ``{"name", "kwargs"}``; ``payload`` is the loaded checkpoint dict
        (weights already loaded unless ``mc.resume``) or None.

    Raises
    ------
    WorkbenchError
        Unknown architecture, unreadable checkpoint, weights that do not fit.
    """
    payload = None
    name, kwargs = mc.arch, dict(mc.kwargs)
    if mc.checkpoint:
        path = Path(mc.checkpoint).expanduser()
        if not path.exists():
            raise TrainingError(f"{path}: checkpoint not found; fix [model] checkpoint in the run file")
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001
            raise TrainingError(f"{path}: cannot read the checkpoint with weights_only=True ({e}); "
                                "open it in the app to review what it needs") from e
        if isinstance(payload, dict) and "model_state_dict" not in payload and all(
                isinstance(v, torch.Tensor) for v in payload.values()):
            payload = {"model_state_dict": payload}
        saved_arch = payload.get("arch") if isinstance(payload, dict) else None
        if not name and saved_arch:
            name, kwargs = saved_arch["name"], dict(saved_arch.get("kwargs") or {})
    if not name:
        raise TrainingError("the run file names no architecture: set [model] arch (e.g. \"digits_cnn\")")
    try:
        from workbench.core.architectures import ArchSpec, build_module
    except ImportError:
        ArchSpec = build_module = None
    if build_module is not None:
        arch = ArchSpec(name=name, kwargs=kwargs)
        model = build_module(arch)
    elif name == "digits_cnn":
        from workbench.core.demo_model import DigitsCNN

        arch = {"name": name, "kwargs": kwargs}
        model = DigitsCNN(**kwargs)
    else:
        raise TrainingError(f"unknown architecture {name!r}")
    if payload is not None and not mc.resume:
        sd = payload["model_state_dict"]
        try:
            from workbench.core.architectures import load_state_dict_into
        except ImportError:
            load_state_dict_into = None
        if load_state_dict_into is not None:
            load_state_dict_into(model, sd, strict=True)  # strips module./_orig_mod. prefixes; ArchitectureError
        else:
            sd = {k.removeprefix("module.").removeprefix("_orig_mod."): v for k, v in sd.items()}
            try:
                model.load_state_dict(sd)
            except RuntimeError as e:
                raise TrainingError(f"{mc.checkpoint}: the weights do not fit {name}: {e}") from e
    if mc.frozen:
        try:
            frozen = set(_resolve_parameter_names(model, list(mc.frozen)))
        except KeyError as e:
            raise TrainingError(f"[model] frozen: {e.args[0]}") from e
        for n, p in model.named_parameters():
            if n in frozen:
                p.requires_grad_(False)
    return model, arch, payload


def train_from_toml(path: str | Path, out: Callable[[str], Any] = print) -> int:
    """Run ``workbench train RUN.toml`` headless (no Qt).

    Reads the config, builds the model (``[model] arch`` + ``kwargs``, or
    ``checkpoint`` to start from, ``resume = true`` to continue its training
    state), trains, prints one progress line per epoch through ``out`` and writes
    the run folder (``run_dir`` from the file, else a new folder under the
    default runs root). Ctrl-C stops at the next step boundary.

    Returns
    -------
    int
        0 completed, 130 stopped by Ctrl-C, 1 on any error (with a message
        printed through ``out``).
    """
    path = Path(path)
    try:
        cfg = TrainConfig.from_toml(path)
    except FileNotFoundError:
        out(f"error: {path}: file not found")
        return 1
    except (ValueError, OSError, TypeError) as e:
        out(f"error: {path}: {e}")
        return 1
    try:
        model, arch, _ = build_model_from_config(cfg.model)
        if isinstance(arch, dict):
            arch = None
        from workbench.core.training import Trainer  # here: training re-exports this module

        trainer = Trainer(model, cfg, [_PrintProgress(out)], arch=arch)
        if cfg.model.resume and cfg.model.checkpoint:
            trainer.resume_from(cfg.model.checkpoint)
    except WorkbenchError as e:
        out(f"error: {e}")
        return 1
    except Exception as e:  # noqa: BLE001 - the CLI reports, never tracebacks at the user
        out(f"error: {type(e).__name__}: {e}")
        return 1
    previous = None
    if threading.current_thread() is threading.main_thread():
        def _on_sigint(signum, frame):
            out("stopping at the next step (Ctrl-C again to abort)")
            trainer.request_stop()
            signal.signal(signal.SIGINT, previous or signal.default_int_handler)

        previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        reason = trainer.fit()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if reason == "completed":
        return 0
    if reason == "stopped":
        if trainer.run_dir is not None:
            with contextlib.suppress(Exception):
                trainer.save_checkpoint(trainer.run_dir / "last.pt")
                out(f"saved {trainer.run_dir / 'last.pt'}")
        return 130
    return 1
