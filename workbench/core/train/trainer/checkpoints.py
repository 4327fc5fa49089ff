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

Off the step's path
-------------------
A save during ``fit()`` (the epoch end, ``checkpoint_every_steps``, ``init.pt``) takes
the host copy of the state once, on the training thread, and hands it to one writer
thread: on CUDA the copy goes into page-locked buffers reused between saves
(:class:`PinnedStage`, ``non_blocking`` copies ordered on the current stream; the
writer waits for their event), on CPU the state is cloned (the next step changes
it in place). ``torch.save`` + digest + fsync run on the writer. ``best.pt`` of the
same step is a hard link to ``last.pt`` (a copy where the file system cannot link).
A step waits for a write only when a new save is asked while one is still in flight.
A failed write (a full disk) leaves no half file (``atomic_save``), is logged and
said once through ``on_notice`` (the file, the error, where to free space:
:class:`~workbench.core.train.runs.writes.WriteWatch`, :attr:`CheckpointConnector.writes`,
which the run's ``metrics.csv``, ``steps.csv`` and ``edits.jsonl`` share), the run goes
on, and the next save tries again (its success is said once too).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import random
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from workbench.core.errors import CheckpointCorrupt, TrainingError, WorkbenchError
from workbench.core.files import atomic_save, atomic_write, temp_prefix
from workbench.core.model.names import frozen_names
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.saving import checkpoint_payload
from workbench.core.rng import set_rng_state
from workbench.core.train.runs.writes import WriteWatch
from workbench.core.train.trainer.faults import nonfinite_tensors
from workbench.core.train.trainer.types import TrainerLike

__all__ = ["CheckpointConnector", "LAST", "NoState", "PinnedStage", "link_or_copy"]

log = logging.getLogger(__name__)

#: The run folder's checkpoint of the latest state (epoch end, or the step a stop finished).
LAST = "last.pt"

#: ``os.link`` errors that mean "this file system cannot hard-link here": copy instead.
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES}


class CheckpointConnector:
    """Checkpoint payload, background saves and resume of one trainer.

    Parameters
    ----------
    trainer : TrainerLike
    """

    #: every rank writes (FSDP's sharded checkpoints); here rank 0 alone writes, every replica being the same
    collective = False

    def __init__(self, trainer: TrainerLike):
        self.trainer = trainer
        self._saver: ThreadPoolExecutor | None = None
        self._pending: Future | None = None
        self._pending_paths: list[Path] = []
        self._stage: PinnedStage | None = None
        #: the run's failed writes of the moment, said once each through the trainer's ``on_notice``
        self.writes = WriteWatch(self._notice)
        #: the step of the state last written (or being written) to ``run_dir/last.pt``, None before any
        self.last_step: int | None = None

    def _notice(self, kind: str, text: str, file: str) -> None:
        self.trainer.call("on_notice", self.trainer, kind, text, file)

    def save_now_failed(self, path: str | Path, exc: OSError) -> None:
        """Save now could not write ``path``: said (``save_failed``, every time) and logged; the run goes on."""
        self.writes.failed(path, exc, "not written by Save now (the previous file is kept)", kind="save_failed")

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
        return self._payload(loss, tr.model, tr.optimizer)

    def _payload(self, loss: float | None, model: nn.Module, optimizer: Any) -> dict:
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
        return checkpoint_payload(model, arch=arch, optimizer=optimizer, scheduler=tr.scheduler,
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

    def save_at_stop(self) -> None:
        """A stop finished its step: write ``last.pt`` at that step (Resume continues from exactly there).

        Only when the run keeps checkpoints (``checkpoint_every_epoch``) and trained
        a step (:meth:`save_last` refuses non-finite weights); rank 0 alone writes.
        Written before ``status.json`` says ``stopped``.
        """
        tr = self.trainer
        if not tr.config.checkpoint_every_epoch or tr.step == 0 or tr.run_dir is None:
            return
        self.save_last()

    def after_step(self, n_batches: int, loss: float | None) -> None:
        """After an optimizer step: say a failed background write; ``checkpoint_every_steps``' ``last.pt``
        (not at the epoch's last batch: the epoch end writes its own)."""
        tr = self.trainer
        self.poll()
        self.writes.retry_due()  # a file whose write failed and has no later write of its own (metrics.csv)
        every = int(tr.config.checkpoint_every_steps or 0)
        if (every and tr.step % every == 0 and tr.batch_in_epoch < n_batches
                and (tr.is_main or self.collective) and tr.run_dir is not None):
            self.save_async([Path(tr.run_dir) / LAST], loss=loss, finite_only=True)

    def at_epoch_end(self, best: bool, loss: float) -> None:
        """``checkpoint_every_epoch``: one write of ``last.pt`` on the writer thread; ``best.pt`` of the same
        state (``best``) is a hard link to it. Rank 0 alone writes."""
        tr = self.trainer
        if tr.config.checkpoint_every_epoch and (tr.is_main or self.collective):
            run_dir = Path(tr.run_dir)
            self.save_async([run_dir / LAST] + ([run_dir / "best.pt"] if best else []), loss=loss)

    def staged_payload(self, loss: float | None = None) -> tuple[dict, Callable[[], None] | None]:
        """:meth:`payload` for a background write: the host copy taken once, without waiting for the device.

        On CUDA the model's and optimizer's tensors are copied into page-locked buffers
        reused between saves (:class:`PinnedStage`); the copies are queued on the current
        stream, so later steps cannot change what they read, and the returned ``ready``
        (to call on the writer thread before ``torch.save``) waits for them. Elsewhere it
        is :meth:`payload` (a CPU clone) and ``ready`` is None.

        The pinned buffers are reused by the next call: call it only after
        :meth:`wait_for_saves` (:meth:`save_in_background` does).

        Returns
        -------
        (dict, callable or None)
        """
        tr = self.trainer
        if tr.device.type != "cuda" or not torch.cuda.is_available():
            return self.payload(loss), None
        self.wait_for_saves()  # the buffers the writer still reads are about to be refilled
        if self._stage is None:
            self._stage = PinnedStage()
        model_sd = self._stage.copy(tr.model.state_dict(), "model")
        opt_sd = self._stage.copy(tr.optimizer.state_dict(), "optimizer") if tr.optimizer is not None else None
        ready = self._stage.record()
        # the rest of the payload (counters, RNG, config) from the one payload writer, without the tensors
        payload = self._payload(loss, NoState(), None)
        payload["model_state_dict"] = model_sd
        payload["frozen"] = frozen_names(tr.model)
        if opt_sd is not None:
            payload["optimizer_state_dict"] = opt_sd
            payload["optimizer_class"] = type(tr.optimizer).__name__
        return payload, ready

    def save_in_background(self, payload: dict, paths: list[Path], ready: Callable[[], None] | None = None,
                           finite_only: bool = False) -> None:
        """Write a checkpoint on the writer thread (``payload`` is a host copy: :meth:`staged_payload`).

        The first path is written with ``atomic_save``; every other path holds the same
        state and becomes a hard link to it (:func:`link_or_copy`), not a second write.
        At most one write is in flight: asking for a save while one is (a short epoch,
        ``checkpoint_every_steps`` faster than the disk) makes this step wait for it.
        A failed write is logged and said through ``on_progress`` (at the next save, step
        boundary or the end of ``fit()``); the run goes on.

        Parameters
        ----------
        payload : dict
        paths : list of Path
        ready : callable, optional
            Called on the writer thread before writing (waits for staged device copies).
        finite_only : bool
            Check the weights on the writer thread and write nothing (reported like a failed
            write) when one holds NaN/Inf: a step's save, where a check on the step's path
            would wait for the device.
        """
        self.wait_for_saves()  # a save while another is in flight: this step waits (one writer, one payload)
        if self._saver is None:
            self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="workbench-save")
        paths = [Path(p) for p in paths]

        def write():
            if ready is not None:
                ready()
            if finite_only:
                bad = [k for k, t in payload["model_state_dict"].items()
                       if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())]
                if bad:
                    raise ValueError(f"the weights hold NaN/Inf ({', '.join(bad[:3])}); not written over the "
                                     "previous checkpoint")
            atomic_save(payload, paths[0])
            for other in paths[1:]:
                link_or_copy(paths[0], other)

        self._pending = self._saver.submit(write)
        self._pending_paths = paths
        if any(p.name == LAST for p in paths):
            self.last_step = payload.get("step")

    def save_async(self, paths: list[Path], loss: float | None = None, finite_only: bool = False) -> None:
        """Stage the current state (:meth:`staged_payload`) and write it to ``paths`` in the background
        (:meth:`save_in_background`)."""
        self.wait_for_saves()  # a save while another is in flight: this step waits
        payload, ready = self.staged_payload(loss)
        self.save_in_background(payload, paths, ready, finite_only)

    def poll(self) -> None:
        """Report a background write that has failed (cheap: nothing to do while it runs or after success)."""
        if self._pending is not None and self._pending.done():
            self.wait_for_saves()

    def wait_for_saves(self) -> None:
        """Block until the background write (if any) is done; a failure is reported, not raised.

        The report (:attr:`writes`: the log and ``on_notice``, once per file while it fails) names the files
        and the error; the files keep their previous content (atomic writes). ``last_step`` is
        forgotten so a later stop writes ``last.pt`` again.
        """
        future, self._pending = self._pending, None
        if future is None:
            return
        try:
            future.result()
        except Exception as e:  # noqa: BLE001 - a failed write never ends the run
            self.last_step = None
            for path in self._pending_paths:  # each file once while it fails (logged there)
                self.writes.failed(path, e, "not written (the previous file is kept)")
        else:
            for path in self._pending_paths:
                self.writes.ok(path)

    def shutdown(self) -> None:
        """Finish the pending write and stop the writer thread."""
        try:
            self.wait_for_saves()
            self.writes.retry_due(force=True)  # the last epoch's metrics.csv row, if room came back since
        finally:
            if self._saver is not None:
                self._saver.shutdown(wait=True)
                self._saver = None
            self._stage = None  # the page-locked buffers go with the run (a 1B model's are 12+ GB)

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
        """Put a training payload's state into the trainer (model, optimizer, counters, RNG).

        Raises
        ------
        TrainingError
            The model or optimizer state does not fit, or the file is an FSDP run's
            sharded checkpoint (``strategy = "fsdp"`` resumes it).
        """
        tr = self.trainer
        if payload.get("sharded"):
            raise TrainingError(f"this checkpoint holds its weights in the folder {payload['sharded']}/ beside it "
                                "(an FSDP run's sharded checkpoint): resume it with strategy = \"fsdp\" on several "
                                "ranks, or convert it with torch.distributed.checkpoint.format_utils.dcp_to_torch_save")
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
        self.load_rest(payload)

    def load_rest(self, payload: dict) -> None:
        """The scheduler, GradScaler, counters, history and RNG states of a training payload."""
        tr = self.trainer
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


class NoState(nn.Module):
    """A stand-in model with no state: the payload's non-tensor entries without copying any weight."""


class PinnedStage:
    """Host copies of device tensors in page-locked buffers, reused from one save to the next.

    :meth:`copy` returns the same nested structure (dicts, lists, tuples) with each
    CUDA tensor replaced by its buffer (filled by a ``non_blocking`` copy queued on the
    current stream), each CPU tensor cloned, and tied tensors (one storage under several
    names, a tied ``lm_head``) copied once. :meth:`record` returns the wait for the copies.
    A buffer is keyed by its place in the structure and reallocated when the shape or
    dtype changes (an unfreeze adds optimizer state).
    """

    def __init__(self):
        self._buffers: dict[str, torch.Tensor] = {}
        self._seen: dict[tuple, torch.Tensor] = {}

    def copy(self, obj: Any, key: str) -> Any:
        """``obj`` with its tensors copied to host buffers (see the class)."""
        self._seen = {}
        return self._copy(obj, key)

    def _copy(self, obj: Any, key: str) -> Any:
        if isinstance(obj, torch.Tensor):
            return self._tensor(obj.detach(), key)
        if isinstance(obj, dict):
            return {k: self._copy(v, f"{key}/{k}") for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            out = [self._copy(v, f"{key}/{i}") for i, v in enumerate(obj)]
            return out if isinstance(obj, list) else tuple(out)
        return obj

    def _tensor(self, t: torch.Tensor, key: str) -> torch.Tensor:
        ident = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()),
                 t.dtype)
        if ident in self._seen:
            return self._seen[ident]
        if t.device.type != "cuda":
            out = t.clone()
        else:
            buf = self._buffers.get(key)
            if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
                buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                self._buffers[key] = buf
            out = buf.copy_(t, non_blocking=True)
        self._seen[ident] = out
        return out

    def record(self) -> Callable[[], None]:
        """A callable that waits until the queued copies are done (an event on the current stream)."""
        self._seen = {}
        if not torch.cuda.is_available():
            return lambda: None
        event = torch.cuda.Event()
        event.record()
        return event.synchronize

    @property
    def nbytes(self) -> int:
        """Bytes of page-locked memory held."""
        return sum(b.numel() * b.element_size() for b in self._buffers.values())


def link_or_copy(src: Path, dst: Path) -> Path:
    """Make ``dst`` hold the same bytes as ``src``: a hard link, atomically; a copy where linking fails.

    The link is made under a temporary name in ``dst``'s folder and moved over ``dst``
    with ``os.replace``, so ``dst`` is always either its old file or the new one.
    Where the file system refuses a link (another device, FAT, a share: ``EXDEV``,
    ``EPERM``, ...) the bytes are copied through the one atomic writer. A later
    ``atomic_save`` of ``src`` replaces ``src``'s name with a new file and leaves
    ``dst`` as it was.

    Raises
    ------
    OSError
        Neither a link nor a copy could be made; ``dst`` is unchanged.
    """
    src, dst = Path(src), Path(dst)
    for _ in range(16):
        tmp = dst.parent / f"{temp_prefix(dst.name)}{''.join(random.choices('abcdefghijklmnopqrstuvwxyz0123456789', k=8))}.tmp"
        try:
            os.link(src, tmp)
        except FileExistsError:
            continue
        except OSError as e:
            if e.errno not in _NO_LINK:
                raise
            break
        try:
            os.replace(tmp, dst)
        except BaseException:
            with contextlib.suppress(Exception):
                os.unlink(tmp)
            raise
        return dst

    def copy(f):
        with open(src, "rb") as s:
            shutil.copyfileobj(s, f, 16 << 20)

    return atomic_write(dst, copy)
