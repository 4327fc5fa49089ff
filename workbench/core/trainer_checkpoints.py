"""Checkpoints of a :class:`~workbench.core.training.Trainer`: payload, saving and resuming.

:class:`CheckpointsMixin` builds the checkpoint dict of the current state, writes
it (epoch-end writes go to a background writer thread) and restores a run from
one. Files load with ``torch.load(weights_only=True)``. Qt-free.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from workbench.core.errors import TrainingError
from workbench.core.io import atomic_save
from workbench.core.param_names import _frozen_names
from workbench.core.rng import rng_state, set_rng_state

__all__ = ["CheckpointsMixin"]


class CheckpointsMixin:
    """Checkpoint payload, background saves and resume of :class:`~workbench.core.training.Trainer`.

    Uses the trainer's model, optimizer, scheduler, scaler, counters and
    ``_build_optimizer``.
    """

    def _save_in_background(self, payload: dict, paths: list[Path]) -> None:
        """Write an epoch-end checkpoint on a writer thread (the payload is already a CPU copy).

        ``torch.save`` + fsync cost ~10-30 ms per file here, a sizeable share of a
        small model's epoch; training goes on while the file is written. At most
        one write is in flight; a failed write is raised at the next save or at
        the end of ``fit()``.
        """
        self.wait_for_saves()
        if self._saver is None:
            from concurrent.futures import ThreadPoolExecutor

            self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="workbench-save")

        def write():
            for path in paths:
                atomic_save(payload, path)

        self._pending_save = self._saver.submit(write)

    def wait_for_saves(self) -> None:
        """Block until the background checkpoint write (if any) is on disk; re-raise its error."""
        future, self._pending_save = self._pending_save, None
        if future is not None:
            future.result()


    # ------------------------------------------------------------ checkpoints
    def checkpoint_payload(self, loss: float | None = None) -> dict:
        """The checkpoint dict of the current state (loadable with ``weights_only=True``).

        Keys: ``model_state_dict``, ``optimizer_state_dict``, ``scheduler_state_dict``,
        ``epoch`` (epochs completed), ``step``, ``loss``, ``arch``, ``frozen``,
        ``workbench_version``, ``rng_state``, and the trainer's own
        ``batch_in_epoch``, ``samples``, ``best_val_loss``, ``optimizer_param_names``,
        ``scaler_state_dict``, ``config``, ``history``.
        """
        arch = None
        if self.arch is not None:
            arch = self.arch.to_dict() if hasattr(self.arch, "to_dict") else {
                "name": getattr(self.arch, "name", str(self.arch)), "kwargs": dict(getattr(self.arch, "kwargs", {}))}
        elif self.config.model.arch:
            arch = {"name": self.config.model.arch, "kwargs": dict(self.config.model.kwargs)}
        extra = {
            "rng_state": rng_state(),
            "batch_in_epoch": self.batch_in_epoch,
            "samples": self.samples,
            "best_val_loss": self.best_val_loss,
            "optimizer_param_names": [list(n) for n in self._group_names],
            "config": self.config.to_dict(),
            "history": [dict(h) for h in self.history],
        }
        if self.scaler is not None:
            extra["scaler_state_dict"] = self.scaler.state_dict()
        loss = None if loss is None or not math.isfinite(loss) else float(loss)
        return _payload(self.model, arch=arch, optimizer=self.optimizer, scheduler=self.scheduler,
                        epoch=self.epoch, step=self.step, loss=loss, extra=extra)

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        """Save :meth:`checkpoint_payload` atomically now (only while no ``fit()`` runs on another thread).

        While a run is active use ``queue(SaveNow(path))`` instead.
        """
        self.prepare()
        self.wait_for_saves()
        path = Path(path) if path else self.run_dir / "last.pt"
        atomic_save(self.checkpoint_payload(), path)
        return path

    def resume_from(self, path_or_checkpoint: Any) -> None:
        """Restore model, optimizer, scheduler, epoch, step, frozen set and RNG states.

        Call before :meth:`fit`. The data order needs no saved state: it is a
        function of ``(seed, epoch)``, and a mid-epoch checkpoint skips the
        batches already seen.

        Parameters
        ----------
        path_or_checkpoint : str, Path, dict or Checkpoint
            A checkpoint file (read with ``weights_only=True``), its loaded dict,
            or a ``workbench.core.checkpoint.Checkpoint`` (its ``raw`` dict).

        Raises
        ------
        TrainingError
            The file is not a training checkpoint or does not fit the model.
        """
        payload = path_or_checkpoint
        source = None
        if isinstance(payload, (str, Path)):
            source = str(payload)
            try:
                payload = torch.load(payload, map_location="cpu", weights_only=True)
            except Exception as e:  # noqa: BLE001
                raise TrainingError(f"{source}: cannot read the checkpoint ({e})") from e
        elif hasattr(payload, "raw"):
            source = str(getattr(payload, "path", "") or "") or None
            payload = payload.raw
        if not isinstance(payload, dict) or "model_state_dict" not in payload:
            raise TrainingError(f"{source or 'checkpoint'}: not a training checkpoint (no model_state_dict); "
                                "open it as weights instead")
        self.prepare()
        self._load_payload(payload)
        self._resumed = True
        if source:
            self.config.model.checkpoint = source
            self.config.model.resume = True

    def _load_payload(self, payload: dict) -> None:
        try:
            self.model.load_state_dict(payload["model_state_dict"])
        except RuntimeError as e:
            raise TrainingError(f"the checkpoint does not fit this model: {e}") from e
        frozen = payload.get("frozen")
        if frozen is not None:
            frozen = set(frozen)
            for n, p in self.model.named_parameters():
                p.requires_grad_(n not in frozen)
        opt_state = payload.get("optimizer_state_dict")
        names = payload.get("optimizer_param_names")
        roles = [g.get("wb_role", "all") for g in opt_state["param_groups"]] if opt_state else None
        self._build_optimizer(names, roles)
        if opt_state is not None:
            try:
                self.optimizer.load_state_dict(opt_state)
            except ValueError as e:
                raise TrainingError(f"the checkpoint's optimizer state does not match the trainable "
                                    f"parameters ({e}); load the weights only") from e
        if self.scheduler is not None and payload.get("scheduler_state_dict") is not None:
            self.scheduler.load_state_dict(payload["scheduler_state_dict"])
        if self.scaler is not None and payload.get("scaler_state_dict") is not None:
            self.scaler.load_state_dict(payload["scaler_state_dict"])
        self.epoch = int(payload.get("epoch") or 0)
        self.step = int(payload.get("step") or 0)
        self.batch_in_epoch = int(payload.get("batch_in_epoch") or 0)
        self.samples = int(payload.get("samples") or 0)
        bvl = payload.get("best_val_loss")
        self.best_val_loss = float(bvl) if bvl is not None else math.inf
        self.history = [dict(h) for h in payload.get("history") or []]
        if payload.get("rng_state"):
            set_rng_state(payload["rng_state"])
        saved_seed = (payload.get("config") or {}).get("seed")
        if saved_seed is not None and int(saved_seed) != int(self.config.seed):
            # the data order is a function of (seed, epoch): continue with the run's own seed
            self.config.seed = int(saved_seed)
            for loader in (self.train_loader, self.val_loader):
                if hasattr(loader, "seed"):
                    loader.seed = int(saved_seed)
        self._lr_cache = self.lr


def _payload(model, *, arch, optimizer, scheduler, epoch, step, loss, extra) -> dict:
    """``saving.checkpoint_payload`` when available, else the same layout written here."""
    try:
        from workbench.core.saving import checkpoint_payload
    except ImportError:
        checkpoint_payload = None
    if checkpoint_payload is not None:
        return checkpoint_payload(model, arch=arch, optimizer=optimizer, scheduler=scheduler,
                                  epoch=epoch, step=step, loss=loss, extra=extra)
    import workbench

    import copy

    payload = {  # deep copies: the payload may be written on another thread while training goes on
        "model_state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "optimizer_state_dict": copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None,
        "scheduler_state_dict": copy.deepcopy(scheduler.state_dict()) if scheduler is not None else None,
        "epoch": epoch, "step": step, "loss": loss, "arch": arch,
        "frozen": _frozen_names(model),
        "workbench_version": getattr(workbench, "__version__", "0"),
    }
    payload.update(extra)
    return payload
