"""A run's checkpoints: the payload of the trainer's state, background writes, resume.

:class:`CheckpointConnector` is one part of a
:class:`~workbench.core.train.trainer.loop.Trainer` (``trainer.checkpoints``, after
Lightning's ``_CheckpointConnector``). Every file it writes is built by the one
payload writer :func:`workbench.core.model.saving.checkpoint_payload` (layout of
the PyTorch tutorial "Saving and loading a general checkpoint" plus the trainer's
own entries) and written by :func:`workbench.core.files.atomic_save`, which adds the
digest of its tensors (:mod:`workbench.core.digest`); read back through
:func:`workbench.core.model.formats.read_checkpoint` (``weights_only=True``), which
verifies it: a corrupt ``last.pt`` is refused, naming the newest intact checkpoint
of the run folder (``best.pt``, an earlier epoch's). Qt-free.
"""

from __future__ import annotations

import math
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from workbench.core.errors import CheckpointCorrupt, TrainingError, WorkbenchError
from workbench.core.files import atomic_save
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.saving import checkpoint_payload
from workbench.core.rng import set_rng_state
from workbench.core.train.trainer.faults import nonfinite_tensors
from workbench.core.train.trainer.types import TrainerLike

__all__ = ["CheckpointConnector", "LAST"]

#: The run folder's checkpoint of the latest state (epoch end, or the step a stop finished).
LAST = "last.pt"


class CheckpointConnector:
    """Checkpoint payload, background saves and resume of one trainer.

    Parameters
    ----------
    trainer : TrainerLike
    """

    def __init__(self, trainer: TrainerLike):
        self.trainer = trainer
        self._saver: ThreadPoolExecutor | None = None
        self._pending: Future | None = None
        #: the step of the state last written (or being written) to ``run_dir/last.pt``, None before any
        self.last_step: int | None = None

    # ------------------------------------------------------------ writing
    def payload(self, loss: float | None = None) -> dict:
        """The checkpoint dict of the trainer's current state (loadable with ``weights_only=True``).

        Keys: ``model_state_dict``, ``optimizer_state_dict``, ``scheduler_state_dict``,
        ``epoch`` (epochs completed), ``step``, ``loss``, ``arch``, ``frozen``,
        ``workbench_version``, ``rng_state``, and the trainer's own
        ``batch_in_epoch``, ``samples``, ``best_val_loss``, ``optimizer_param_names``,
        ``scaler_state_dict``, ``config``, ``history``.
        """
        tr = self.trainer
        arch = tr.arch
        if arch is None and tr.config.model.arch:
            arch = {"name": tr.config.model.arch, "kwargs": dict(tr.config.model.kwargs)}
        extra = {
            "batch_in_epoch": tr.batch_in_epoch,
            "samples": tr.samples,
            "best_val_loss": tr.best_val_loss,
            "best_score": tr.best_score,
            "optimizer_param_names": [list(n) for n in tr.group_names],
            "config": tr.config.to_dict(),
            "history": [dict(h) for h in tr.history],
        }
        if tr.scaler is not None:
            extra["scaler_state_dict"] = tr.scaler.state_dict()
        if tr.batch_in_epoch > 0:  # mid-epoch (a stop): the epoch's train loss so far, so a resume reports it whole
            extra["epoch_loss_sum"], extra["epoch_loss_count"] = tr.epoch_loss_so_far()
        loss = None if loss is None or not math.isfinite(loss) else float(loss)
        return checkpoint_payload(tr.model, arch=arch, optimizer=tr.optimizer, scheduler=tr.scheduler,
                                  epoch=tr.epoch, step=tr.step, loss=loss, extra=extra)

    def save(self, path: str | Path | None = None) -> Path:
        """Write :meth:`payload` atomically now (only while no ``fit()`` runs on another thread)."""
        tr = self.trainer
        tr.prepare()
        self.wait_for_saves()
        path = Path(path) if path else tr.run_dir / "last.pt"
        if tr.is_main:  # data-parallel: rank 0 alone writes
            atomic_save(self.payload(), path)
            if tr.run_dir is not None and path == Path(tr.run_dir) / LAST:
                self.last_step = tr.step
        return path

    def save_last(self) -> Path | None:
        """Write the current state as ``run_dir/last.pt`` unless it already holds this step; the path.

        After a stop the run continues from exactly here on Resume: the step, the
        batch of the epoch, the optimizer, scheduler and RNG states are those after
        the last finished step. A write of the same step already made (the epoch
        end's, in the background) is waited for instead of repeated. Weights that
        hold NaN/Inf are never written over it (every route: a stop, Ctrl-C or
        SIGTERM, a closing window, a rank): the previous ``last.pt`` stays.

        Returns
        -------
        Path or None
            ``run_dir/last.pt``; None when the run made no run folder or its weights are not finite.
        """
        tr = self.trainer
        if tr.run_dir is None or nonfinite_tensors(tr.model):
            return None
        path = Path(tr.run_dir) / LAST
        if self.last_step == tr.step:
            self.wait_for_saves()
            if path.exists():
                return path
        return self.save(path)

    def save_in_background(self, payload: dict, paths: list[Path]) -> None:
        """Write an epoch-end checkpoint on a writer thread (the payload is already a CPU copy).

        ``torch.save`` + fsync cost ~10-30 ms per file here, a sizeable share of a
        small model's epoch; training goes on while the file is written. At most
        one write is in flight; a failed write is raised at the next save or at
        the end of ``fit()``.
        """
        self.wait_for_saves()
        if self._saver is None:
            self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="workbench-save")

        def write():
            for path in paths:
                atomic_save(payload, path)

        self._pending = self._saver.submit(write)
        if any(Path(p).name == LAST for p in paths):
            self.last_step = payload.get("step")

    def wait_for_saves(self) -> None:
        """Block until the background write (if any) is on disk; re-raise its error."""
        future, self._pending = self._pending, None
        if future is not None:
            future.result()

    def shutdown(self) -> None:
        """Finish the pending write and stop the writer thread."""
        try:
            self.wait_for_saves()
        finally:
            if self._saver is not None:
                self._saver.shutdown(wait=True)
                self._saver = None

    # ------------------------------------------------------------ reading
    def resume_from(self, path_or_checkpoint: Any) -> None:
        """Restore model, optimizer, scheduler, epoch, step, frozen set and RNG states.

        Call before ``fit()``. The data order needs no saved state: it is a
        function of ``(seed, epoch)``, and a mid-epoch checkpoint skips the
        batches already seen.

        Parameters
        ----------
        path_or_checkpoint : str, Path, dict or Checkpoint
            A checkpoint file (read with ``weights_only=True``), its loaded dict,
            or a :class:`~workbench.core.model.checkpoint.Checkpoint`.

        Raises
        ------
        TrainingError
            The file is not a training checkpoint, does not fit the model, or is
            corrupt (its tensors no longer match their digest: the message names
            the newest intact checkpoint of its folder; ``__cause__`` is the
            :class:`~workbench.core.errors.CheckpointCorrupt`, whose ``.intact`` is that file).
        """
        payload, source = path_or_checkpoint, None
        if isinstance(payload, (str, Path)):
            source = str(payload)
            payload = _read(Path(payload))
        elif hasattr(payload, "raw"):
            source = str(getattr(payload, "path", "") or "") or None
            payload = payload.raw
        if not isinstance(payload, dict) or "model_state_dict" not in payload:
            raise TrainingError(f"{source or 'checkpoint'}: not a training checkpoint (no model_state_dict); "
                                "open it as weights instead")
        tr = self.trainer
        tr.prepare()
        self.load(payload)
        tr.resumed = True
        if source:
            tr.config.model.checkpoint = source
            tr.config.model.resume = True

    def load_file(self, path: Path) -> None:
        """:meth:`load` the payload of a file this run wrote (the NaN rollback)."""
        self.load(_read(path))

    def load(self, payload: dict) -> None:
        """Put a training payload's state into the trainer (model, optimizer, counters, RNG)."""
        tr = self.trainer
        try:
            tr.model.load_state_dict(payload["model_state_dict"])
        except RuntimeError as e:
            raise TrainingError(f"the checkpoint does not fit this model: {e}") from e
        frozen = payload.get("frozen")
        if frozen is not None:
            frozen = set(frozen)
            for n, p in tr.model.named_parameters():
                p.requires_grad_(n not in frozen)
        opt_state = payload.get("optimizer_state_dict")
        names = payload.get("optimizer_param_names")
        roles = [g.get("wb_role", "all") for g in opt_state["param_groups"]] if opt_state else None
        tr.build_optimizer(names, roles)
        saved_class, ours = payload.get("optimizer_class"), type(tr.optimizer).__name__
        if opt_state is not None and isinstance(saved_class, str) and saved_class != ours:
            raise TrainingError(f"the checkpoint's optimizer is {saved_class} but the settings build {ours}: "
                                f"choose {saved_class} to resume, or untick Resume to train these weights "
                                "with a fresh optimizer")
        if opt_state is not None:
            try:
                tr.optimizer.load_state_dict(opt_state)
            except ValueError as e:
                raise TrainingError(f"the checkpoint's optimizer state does not match the trainable "
                                    f"parameters ({e}); load the weights only") from e
        if tr.scheduler is not None and payload.get("scheduler_state_dict") is not None:
            tr.scheduler.load_state_dict(payload["scheduler_state_dict"])
        if tr.scaler is not None and payload.get("scaler_state_dict") is not None:
            tr.scaler.load_state_dict(payload["scaler_state_dict"])
        tr.epoch = int(payload.get("epoch") or 0)
        tr.step = int(payload.get("step") or 0)
        tr.batch_in_epoch = int(payload.get("batch_in_epoch") or 0)
        tr.samples = int(payload.get("samples") or 0)
        bvl = payload.get("best_val_loss")
        tr.best_val_loss = float(bvl) if bvl is not None else math.inf
        score = payload.get("best_score")  # absent from files of older versions: best.pt followed val_loss
        tr.best_score = float(score) if score is not None else (tr.best_val_loss if bvl is not None else math.nan)
        if math.isinf(tr.best_score):
            tr.best_score = math.nan
        tr.history = [dict(h) for h in payload.get("history") or []]
        tr.carry_epoch_loss(payload.get("epoch_loss_sum"), payload.get("epoch_loss_count"))
        if payload.get("rng_state"):
            set_rng_state(payload["rng_state"])
        saved_seed = (payload.get("config") or {}).get("seed")
        if saved_seed is not None and int(saved_seed) != int(tr.config.seed):
            # the data order is a function of (seed, epoch): continue with the run's own seed
            tr.config.seed = int(saved_seed)
            for loader in (tr.train_loader, tr.val_loader):
                if hasattr(loader, "seed"):
                    loader.seed = int(saved_seed)
        tr.lr_used = tr.lr


def _read(path: Path) -> dict | None:
    """The payload of a checkpoint file, its digest verified (``read_checkpoint``).

    Raises
    ------
    TrainingError
        The file cannot be read or is corrupt.
    """
    try:
        return read_checkpoint(path, mmap=False).raw
    except CheckpointCorrupt as e:
        intact = (f"{e.intact.name} ({e.intact}) is intact: resume from it instead" if e.intact is not None
                  else "no intact checkpoint of this run was found")
        raise TrainingError(f"{path} is corrupt ({getattr(e, 'detail', 'digest mismatch')}); {intact}") from e
    except WorkbenchError as e:
        raise TrainingError(f"{path}: cannot read the checkpoint ({e})") from e
