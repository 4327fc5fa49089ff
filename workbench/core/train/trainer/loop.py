"""The training loop: :class:`Trainer` (fit, epoch, step, validate), composed of its parts.

Qt-free. The window runs :meth:`Trainer.fit` through a run handle
(:class:`~workbench.core.train.handle.RunHandle`: in a training process, on torchrun's
ranks or on a thread of its own process) with one
:class:`~workbench.core.train.events.EventBridge` callback; the headless
``workbench train run.toml`` runs it through
:func:`workbench.core.train.launch.headless.train_from_toml`.

Threading
---------
``fit()`` runs on one thread (the training thread), which owns the model while
it runs. Other threads talk to it only through its
:class:`~workbench.core.train.trainer.control.RunControl` (``trainer.control``: queue a
command, pause, resume, stop, answer a NaN pause); the trainer's methods of the
same names delegate to it. Callbacks are called on the training thread.

Metrics
-------
Each optimizer step appends a dict to a buffer (keys :data:`STEP_KEYS`); the
buffer goes to ``Callback.on_metrics`` at most every ``config.emit_every_ms``
milliseconds and at each epoch end, so a GUI bridge gets ~25 calls per second
rather than one per step. On CUDA the loss is not read with ``.item()`` each
step: the detached device tensors are read in one go at the emission cadence.

Frozen parameters
-----------------
Only parameters with ``requires_grad=True`` go to the optimizer, and
``zero_grad(set_to_none=True)`` leaves frozen ones with ``grad=None``: every
torch optimizer skips a parameter whose grad is None, so momentum and weight
decay cannot move it and it stays bit-identical. Unfreezing during a run
(:class:`SetTrainable`) ADDS a param group for the newly trainable parameters
(``optimizer.add_param_group``): the state (moments, step counts) of every
parameter already in the optimizer is kept exactly, and the scheduler is taught
about the new group (:func:`workbench.core.train.trainer.optim.adopt_group`). A parameter
frozen again stays in its group with grad None. Checkpoints store the parameter
names of each group, so a resumed run rebuilds the same groups.

Parts
-----
The trainer is composed, not split across mixins (Lightning's connectors):
``trainer.control`` (:class:`~workbench.core.train.trainer.control.RunControl`, shared
with whoever started the run), ``trainer.checkpoints``
(:class:`~workbench.core.train.trainer.checkpoints.CheckpointConnector`),
``trainer.faults`` (:class:`~workbench.core.train.trainer.faults.FaultHandler`),
``trainer.stepper`` (:class:`~workbench.core.train.trainer.step.StepRunner`: a batch's forward and
backward, gradient accumulation, the compiled step, the optimizer step) and
``trainer.strategy`` (:mod:`~workbench.core.train.trainer.strategy`: one process, or one
rank of a ``DistributedDataParallel`` run; :mod:`~.fsdp`: one rank of an FSDP2 run; the loop asks it and does
not know which); commands
are applied by :func:`~workbench.core.train.trainer.commands.apply_command`, validation and the
best epoch are :mod:`~workbench.core.train.trainer.evaluation`'s; the data and task are built by
:mod:`~.data_setup`, the run folder's first files written by :mod:`~.run_record`, the epoch's loss
kept by :mod:`~.epoch_loss`, TensorBoard written by :mod:`~.tensorboard_log` and the unfreeze
schedule applied by :mod:`~.staged_unfreeze`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import traceback
from pathlib import Path
from typing import Any, Iterable

import torch
from torch import nn

from workbench.core.model.spec import ArchSpec
from workbench.core.model.freezing import apply_batchnorm_policy
from workbench.core.rng import seed_everything
from workbench.core.train.trainer import optim, speed
from workbench.core.train.trainer.checkpoints import CheckpointConnector
from workbench.core.train.trainer.commands import SaveNow, apply_command
from workbench.core.train.trainer.edit_log import EditLog
from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer.control import RunControl
from workbench.core.train.trainer.data_setup import build_data, settle_task, take_skipped, wants_channels_last
from workbench.core.train.trainer.epoch_loss import EpochLoss
from workbench.core.train.trainer.evaluation import is_best, monitor_key, validate
from workbench.core.train.trainer.faults import FaultHandler, Restart, nonfinite_tensors
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.data.loaders import DevicePrefetcher, epoch_batches, say_overlong
from workbench.core.train.trainer.rank_sync import RankSync
from workbench.core.train.trainer.run_record import open_run_files, record_start, status_info
from workbench.core.train.trainer.staged_unfreeze import apply_scheduled_unfreeze, check_schedule
from workbench.core.train.trainer.step import StepRunner
from workbench.core.train.trainer.fsdp import strategy_for  # FSDP, DDP or one process
from workbench.core.train.trainer.strategy import SingleProcess
from workbench.core.train.trainer.tensorboard_log import TensorBoardLog
from workbench.core.train.runs.folder import MetricsCSV, StepsCSV, new_run_dir, write_status
from workbench.core.train.task import specs as task_specs
from workbench.core.train.task.tasks import Task

__all__ = ["Trainer"]

log = logging.getLogger(__name__)


class Trainer:
    """Trains ``model`` with ``config``; driven by :meth:`fit`, steered from any thread.

    Parameters
    ----------
    model : nn.Module
        Trained in place (moved to ``config.device``). Its current ``requires_grad``
        flags are the frozen set.
    config : TrainConfig
    callbacks : iterable of Callback
    arch : ArchSpec or str, optional
        Recorded in checkpoints and ``run.toml`` (anything with ``to_dict()`` or
        ``name`` / ``kwargs``).
    data : (train_loader, val_loader), optional
        Loaders to use instead of building them from ``config.data`` (tests,
        custom data). Any iterables of ``(x, y)`` batches with ``len()``; an
        ``iter_epoch(epoch, start_batch)`` method makes them resumable mid-epoch.
    control : RunControl, optional
        Shared with whoever steers the run (a thread run's
        :class:`~workbench.core.train.launch.in_thread.ThreadRun`); a new one by default.

    Attributes
    ----------
    epoch : int
        Epochs completed (the 0-based index of the epoch being trained).
    batch_in_epoch : int
        Batches of the current epoch consumed.
    step : int
        Optimizer steps done.
    samples : int
        Training samples seen.
    samples_per_s : float
        Throughput over the last emission window.
    input_wait : float
        Share of the last emission window's wall time spent waiting for the next
        batch (0..1; NaN before the first emission). Host time only: no device sync.
    loader_note : str or None
        How the DataLoader settings were chosen (``"auto"`` workers, pinning), or None.
    channels_last : bool
        The model and its 4-D batches use ``torch.channels_last``.
    rank, world_size : int
        This process's place in a data-parallel run (``torch.distributed`` initialized
        before the trainer was built), else 0 and 1 (read-only, from :attr:`strategy`).
        Rank 0 alone writes the run folder.
    net : nn.Module
        What the steps call: ``model``, or its ``DistributedDataParallel`` wrapper.
    strategy : SingleProcess, DataParallel or FullyShardedParallel
        Everything that differs in a data-parallel (DDP or FSDP) run
        (:mod:`workbench.core.train.trainer.strategy`).
    sync : RankSync or None
        Data-parallel: rank 0's commands, pause and stop agreed by every rank (read-only,
        ``strategy.sync``); None in one process.
    history : list of dict
        Epoch metrics (:data:`EPOCH_KEYS`).
    best_val_loss : float
    best_score : float
        The best value so far of ``config.task.monitor`` (``best.pt`` follows it).
    task : Task or None
        How a batch becomes a loss and metrics (:mod:`workbench.core.train.task`), built by :meth:`prepare`.
    kind : str
        The task's settled kind (``classification``, ``regression``, ``multilabel``, ``model_loss``).
    run_dir : Path or None
        The run folder (set by :meth:`prepare`).
    optimizer, scheduler
        Built by :meth:`prepare`.
    end_reason : str or None
        What the last ``fit()`` returned.
    error : Exception or None
        The error that ended the last run (``TrainingError`` for NaN / OOM).
    control : RunControl
    checkpoints : CheckpointConnector
    faults : FaultHandler
    """

    def __init__(self, model: nn.Module, config: TrainConfig, callbacks: Iterable[Callback] = (),
                 arch: Any = None, *, data: tuple | None = None,
                 control: RunControl | None = None):
        self.model = model
        self.config = config
        self.callbacks = list(callbacks)
        # a spec given as text ("resnet18(num_classes=10)") is parsed, so checkpoints name it readably
        self.arch = ArchSpec.parse(arch) if isinstance(arch, str) else arch
        self.device = torch.device(config.device)
        self.epoch = 0
        self.batch_in_epoch = 0
        self.step = 0
        self.samples = 0
        self.samples_per_s = 0.0
        self.input_wait = math.nan
        self.loader_note: str | None = None
        self.channels_last = False
        self.strategy: SingleProcess = strategy_for(self)
        self.net: nn.Module = model
        self.history: list[dict] = []
        self.best_val_loss = math.inf
        self.run_dir: Path | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler = None
        self.scaler = None
        self.task: Task | None = None
        self.kind = ""
        self.best_score = math.nan
        self.train_loader = self.val_loader = None
        self.info = None
        #: what prepare() changed in the data settings to fit the model (e.g. grayscale -> rgb), or None
        self.data_note: str | None = None
        self.end_reason: str | None = None
        self.error: Exception | None = None
        self.control = control if control is not None else RunControl()
        self.checkpoints: CheckpointConnector = self.strategy.checkpoint_connector()
        self.faults = FaultHandler(self)
        self.stepper = StepRunner(self)
        self.resumed = False
        #: parameter names of each optimizer param group (saved for resume)
        self.group_names: list[list[str]] = []
        #: the head LR the next step uses (read without touching the optimizer each step)
        self.lr_used = float(config.lr)
        #: set by the fault handler: the end reason that overrides completed / stopped
        self.reason_override: str | None = None
        #: appends every applied mid-run edit to ``run_dir/edits.jsonl`` (rank 0, once prepared)
        self.edit_log: EditLog | None = None
        #: the run's ``torch.utils.tensorboard.SummaryWriter`` (rank 0, ``config.tensorboard`` and the
        #: tensorboard package installed), else None; callbacks may add to it (probe histograms)
        self.tensorboard = None
        #: the latest training batch, on the device (a reference, kept for the NaN trace)
        self.last_batch: tuple | None = None
        #: where the last non-finite loss came from (``faults.trace``), or None
        self.nonfinite_trace = None
        self._data = data
        self._prepared = False
        self._buf: list[dict] = []
        self._t0 = time.perf_counter()
        self._last_emit = 0.0
        self._window = (0.0, 0, 0.0)  # (time, samples, data wait) at the start of the emission window
        self._wait = 0.0  # seconds spent waiting for batches in this fit()
        self._epoch_wait = 0.0
        self._epoch_loss = EpochLoss()
        self._epoch_t0 = 0.0
        self._epoch_samples = 0
        self._csv: MetricsCSV | None = None
        self._steps: StepsCSV | None = None  # steps.csv (rank 0): the step rows, from the first step
        self._tb: TensorBoardLog | None = None
        self._running = False
        self._in_teardown = False
        self._started_at: float | None = None  # time.time() of this fit's start (status.json)
        self._after_backward: list[Callback] = []
        self._step_end: list[Callback] = []
        self._defer_loss = False

    # ------------------------------------------------------------ steering (delegates to control)
    def request_stop(self) -> None:
        """Ask the run to stop at the next step boundary (``control.request_stop``).

        Data-parallel, the wish travels with the next step's loss all-reduce and every
        rank stops after that same step (:class:`RankSync`, :attr:`stop_agreed`).
        """
        self.control.request_stop()

    @property
    def stop_agreed(self) -> bool:
        """The run stops at this boundary: a stop was asked (data-parallel: and every rank agreed)."""
        return self.strategy.stop_agreed

    @property
    def rank(self) -> int:
        """This process's rank in a data-parallel run, else 0 (``strategy.rank``)."""
        return self.strategy.rank

    @property
    def world_size(self) -> int:
        """The number of data-parallel processes, else 1 (``strategy.world_size``)."""
        return self.strategy.world_size

    @property
    def sync(self) -> RankSync | None:
        """Data-parallel: the ranks' agreement (``strategy.sync``, a :class:`RankSync`); None in one process."""
        return self.strategy.sync

    def pause(self) -> None:
        """Pause at the next step boundary (``control.pause``)."""
        self.control.pause()

    def resume(self) -> None:
        """Continue after :meth:`pause` (``control.resume``)."""
        self.control.resume()

    def queue(self, command: Any) -> None:
        """Queue a command for the next step boundary (``control.queue``).

        Before/after ``fit()`` it is applied at the start of the next ``fit()``;
        use :meth:`apply_commands` to apply now when no run is active.
        """
        self.control.queue(command)

    def resolve_nonfinite(self, action: str) -> None:
        """Answer a NaN/Inf pause (``control.resolve_nonfinite``).

        Raises
        ------
        ValueError
            Unknown action.
        """
        self.control.resolve_nonfinite(action)

    @property
    def is_paused(self) -> bool:
        """True while paused (by :meth:`pause` or waiting for a NaN decision)."""
        return self.control.is_paused

    @property
    def is_waiting(self) -> bool:
        """True while the training thread is blocked at a step boundary."""
        return self.control.is_waiting

    @property
    def is_running(self) -> bool:
        """True while :meth:`fit` runs."""
        return self._running

    def apply_commands(self) -> None:
        """Apply every queued command now (the training thread does this at step boundaries).

        Call it from another thread only while no ``fit()`` runs.
        """
        for cmd in self.control.take_commands():
            self.apply_one(cmd)

    def apply_one(self, cmd: Any) -> None:
        """Apply one command on the training thread, record it in the edit log and tell the callbacks.

        A Save now that cannot write (a full disk) is said (``on_notice``, ``save_failed``) instead of
        applied: the run goes on."""
        try:
            apply_command(self, cmd)
        except Exception as exc:
            disk = exc if isinstance(exc, OSError) else exc.__cause__  # save_model_file's CheckpointError names it
            if not isinstance(cmd, SaveNow) or not isinstance(disk, OSError):
                raise
            self.checkpoints.save_now_failed(cmd.path or self.run_dir / "last.pt", disk)
            return
        if self.edit_log is not None:
            self.edit_log.command(self.step, cmd)
        self.call("on_command_applied", self, cmd)

    def restart_throughput_window(self) -> None:
        """After a pause: the time paused does not count against samples/s."""
        self._window = (time.perf_counter(), self.samples, self._wait)

    def lockstep_paused(self) -> None:
        """Data-parallel: every rank pauses at this step (:class:`RankSync`): send the rows, call ``on_pause``."""
        self.emit()
        self.call("on_pause", self)

    def lockstep_resumed(self) -> None:
        """Data-parallel: the lockstep pause ended (:meth:`restart_throughput_window`)."""
        self.restart_throughput_window()

    def heartbeat(self) -> None:
        """Data-parallel, while the ranks wait together: ``on_heartbeat`` of every callback that has one."""
        for cb in self.callbacks:
            beat = getattr(cb, "on_heartbeat", None)
            if beat is not None:
                beat(self)

    @property
    def is_main(self) -> bool:
        """Rank 0 (or not data-parallel): the process that writes the run folder."""
        return self.rank == 0

    def wrap_ddp(self) -> None:
        """Data-parallel: (re)build the ``DistributedDataParallel`` wrapper of the model (``strategy.wrap_model``).

        Only parameters with ``requires_grad=True`` join the reducer, so frozen ones stay
        bit-identical; a freeze or unfreeze mid-run calls this again at the same step
        boundary on every rank (:class:`RankSync`). In one process there is nothing to wrap.
        """
        self.strategy.wrap_model()

    # ------------------------------------------------------------ checkpoints (delegates)
    def checkpoint_payload(self, loss: float | None = None) -> dict:
        """The checkpoint dict of the current state (``checkpoints.payload``)."""
        return self.checkpoints.payload(loss)

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        """Save now, while no ``fit()`` runs on another thread (``checkpoints.save``); the path written."""
        return self.checkpoints.save(path)

    def resume_from(self, path_or_checkpoint: Any) -> None:
        """Restore a run's state before :meth:`fit` (``checkpoints.resume_from``).

        Raises
        ------
        TrainingError
            Not a training checkpoint, or it does not fit the model.
        """
        self.checkpoints.resume_from(path_or_checkpoint)

    def wait_for_saves(self) -> None:
        """Block until the background checkpoint write is on disk (``checkpoints.wait_for_saves``)."""
        self.checkpoints.wait_for_saves()

    # ------------------------------------------------------------ set-up
    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps per epoch (builds the data if needed): batches / ``accumulate_grad_batches``, rounded up."""
        self.prepare()
        return speed.optimizer_steps(len(self.train_loader), self.config.accumulate_grad_batches)

    @property
    def total_steps(self) -> int:
        """``epochs * steps_per_epoch``."""
        return int(self.config.epochs) * self.steps_per_epoch

    @property
    def lr(self) -> float:
        """Current head LR."""
        return optim.head_lr(self.optimizer) if self.optimizer is not None else float(self.config.lr)

    def prepare(self) -> None:
        """Build data, optimizer, scheduler and the run folder (idempotent).

        Raises
        ------
        DataError
            The dataset cannot be built, an image cannot be read, a batch does
            not go through the model, or the model has fewer outputs than the
            data has classes (:mod:`workbench.core.train.data.preflight`).
        OSError
            The run folder cannot be created.
        """
        if self._prepared:
            return
        cfg = self.config
        self.model.to(self.device)
        self.channels_last = wants_channels_last(cfg.channels_last, self.device, self.model)
        if self.channels_last:
            self.model.to(memory_format=torch.channels_last)
        task_specs.pin(cfg, Path.cwd())  # a user's file specs absolute, with their hashes (run.toml replays them)
        if self._data is not None:
            self.train_loader, self.val_loader = self._data
            self.kind, self.task = settle_task(cfg, self.info, self.train_loader)
        else:
            d = build_data(cfg, self.model, self.device, (self.rank, self.world_size),
                           lambda text: self.call("on_progress", self, text))
            self.train_loader, self.val_loader, self.info = d.train_loader, d.val_loader, d.info
            self.loader_note, self.data_note, self.kind, self.task = d.loader_note, d.data_note, d.kind, d.task
        self.stepper.before_wrap()  # activation checkpointing
        self.strategy.wrap_model()
        self.stepper.after_wrap()  # the compiled step
        self.build_optimizer()
        if cfg.amp and self.device.type == "cuda" and cfg.amp_dtype == "float16":
            self.scaler = torch.amp.GradScaler("cuda")
        self.run_dir = Path(cfg.run_dir) if cfg.run_dir else new_run_dir()
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.edit_log = EditLog(self.run_dir, self.checkpoints.writes)  # a full disk: said, never raised
        # CUDA: keep step losses on the device and read them at the emission cadence.
        self._defer_loss = self.device.type == "cuda"
        self._prepared = True

    def build_optimizer(self, group_names: list[list[str]] | None = None, roles: list[str] | None = None):
        """Build the optimizer and scheduler: one param group per role, or the groups a checkpoint names.

        Raises
        ------
        TrainingError
            ``group_names`` holds a parameter the model lacks.
        """
        cfg = self.config
        groups = optim.param_groups(self.model, cfg) if group_names is None else \
            optim.named_groups(self.model, cfg, group_names, roles)
        self.group_names = [list(g["wb_names"]) for g in groups]
        self.optimizer = optim.build_optimizer(groups, cfg)
        if not groups:
            self.group_names = [[]]
        self.scheduler = optim.build_scheduler(
            self.optimizer, cfg, speed.optimizer_steps(len(self.train_loader), cfg.accumulate_grad_batches))
        self.lr_used = self.lr

    # ------------------------------------------------------------ fit
    def fit(self) -> str:
        """Train until ``config.epochs`` epochs are done or the run is stopped.

        Returns
        -------
        str
            ``"completed"``, ``"stopped"``, ``"error"`` (an exception: see
            ``on_exception`` and :attr:`error`), ``"nonfinite"`` (NaN/Inf loss)
            or ``"oom"`` (CUDA out of memory). Never raises.
        """
        reason = "error"
        self._running = True
        self._in_teardown = False
        self.reason_override = None
        self.error = None
        self.nonfinite_trace = None
        try:
            self._fit_start()
            while not self._done():
                try:
                    self._train_epoch()
                    if self.stop_agreed:
                        break
                    self._end_epoch()
                except Restart:
                    continue
            self.strategy.sync_buffers()
            self.wait_for_saves()
            reason = self.reason_override or ("stopped" if self.epoch < self.config.epochs else "completed")
            if reason == "stopped":
                self.checkpoints.save_at_stop()
        except KeyboardInterrupt:
            reason = "stopped"
        except torch.OutOfMemoryError as e:
            reason = "oom"
            self.faults.on_oom(e)
        except Exception as e:  # noqa: BLE001 - fit() never raises: report and end cleanly
            reason = "error"
            self.faults.on_error(e)
        finally:
            self._teardown()
        self.end_reason = reason
        self._running = False
        if self.is_main and self._started_at is not None and self.run_dir is not None:
            with contextlib.suppress(OSError):
                write_status(self.run_dir, reason, self._started_at, status_info(self.config))
        self.safe_call("on_fit_end", reason)
        return reason

    def epoch_loss_so_far(self) -> tuple[float, int]:
        """``(sum, count)`` of this epoch's step losses so far (a mid-epoch checkpoint keeps them)."""
        return self._epoch_loss.so_far()

    def carry_epoch_loss(self, total: float | None, count: int | None) -> None:
        """Resume mid-epoch: the epoch's loss sum and step count before the checkpoint (None: none)."""
        self._epoch_loss.carry_over(total, count)

    def _done(self) -> bool:
        return self.stop_agreed or self.epoch >= self.config.epochs

    def _fit_start(self) -> None:
        self.prepare()
        check_schedule(self.config, self.model)
        if not self.resumed and self.step == 0:
            seed_everything(int(self.config.seed))
        record_start(self)
        if self.is_main:
            self._started_at, self._csv, self._steps = open_run_files(self)
        self._tb = TensorBoardLog.open(self.run_dir) if self.config.tensorboard and self.is_main else None
        self.tensorboard = self._tb.writer if self._tb is not None else None
        self._t0 = time.perf_counter()
        self._epoch_t0 = self._t0  # a run resumed mid-epoch times the rest of that epoch from here
        self._last_emit = self._t0
        self._wait = 0.0
        self._window = (self._t0, self.samples, 0.0)
        self.model.train()
        self.apply_bn_policy()
        # Per-step hooks are called only on callbacks that override them.
        self._after_backward = [cb for cb in self.callbacks
                                if type(cb).on_after_backward is not Callback.on_after_backward]
        self._step_end = [cb for cb in self.callbacks if type(cb).on_step_end is not Callback.on_step_end]
        self.stepper.start_fit()
        self.call("on_fit_start", self)

    def _teardown(self) -> None:
        self._in_teardown = True
        self.last_batch = None  # frees the batch kept for the NaN trace
        with contextlib.suppress(Exception):
            self.checkpoints.shutdown()
        try:
            self.emit()
        except Exception:  # noqa: BLE001
            self._buf = []
        if self._tb is not None:
            with contextlib.suppress(Exception):
                self._tb.close()
            self._tb = None
            self.tensorboard = None
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        for loader in (self.train_loader, self.val_loader):
            if hasattr(loader, "close") and self._data is None:  # persistent DataLoader workers end with the run
                with contextlib.suppress(Exception):
                    loader.close()
        self.control.reset()  # a stop requested before fit() started is honoured; the next fit() runs
        self.strategy.reset()

    # ------------------------------------------------------------ epochs and steps
    def _train_epoch(self) -> None:
        loader = self.train_loader
        if hasattr(loader, "iter_epoch"):
            it = loader.iter_epoch(self.epoch, self.batch_in_epoch)
        else:
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(self.epoch)
            it = iter(loader)
            for _ in range(self.batch_in_epoch):
                next(it)
        if self.batch_in_epoch == 0:
            apply_scheduled_unfreeze(self)
            self._epoch_loss.start()
            self._epoch_t0 = time.perf_counter()
            self._epoch_samples = 0
            self._epoch_wait = 0.0
        n_batches = len(loader)
        # the epoch is len(loader) batches, whatever the loader yields (an endless iterable dataset ends too)
        it = epoch_batches(it, n_batches - self.batch_in_epoch, say_overlong(self, loader, "training"))
        if self.device.type == "cuda":  # the next batch's copy overlaps this step's kernels
            it = iter(DevicePrefetcher(it, self.device, torch.channels_last if self.channels_last else None))
        clock = time.perf_counter
        self.stepper.start_epoch()  # an epoch (or a rollback's restart) begins at a step boundary
        while True:
            if self.stepper.pending == 0:  # commands, pause and stop wait for the optimizer step (accumulation)
                self.strategy.boundary()  # commands, pause (data-parallel: rank 0's, agreed by every rank)
                if self.stop_agreed:
                    return
            t = clock()
            try:
                batch = next(it)
            except StopIteration:
                return
            waited = clock() - t
            self._wait += waited
            self._epoch_wait += waited
            self._train_step(batch, n_batches)

    def autocast(self):
        """``torch.autocast`` for ``config.amp`` (bfloat16 on CPU, the configured dtype on CUDA), else a no-op."""
        if not self.config.amp or self.device.type not in ("cpu", "cuda", "mps"):
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.device.type == "cpu" or self.config.amp_dtype == "bfloat16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def say(self, text: str) -> None:
        """A line for the run's log: the process's log (``logging``) and ``on_progress`` (the window's line)."""
        log.info(text)
        self.call("on_progress", self, text)

    def _train_step(self, batch, n_batches: int) -> None:
        """One batch (:meth:`StepRunner.run`): the counters; closing an optimizer step, the step's row."""
        done = self.stepper.run(batch, n_batches)
        if done is None:  # a non-finite loss or gradient, handed to the fault handler
            return
        n, step_loss = done
        self.batch_in_epoch += 1
        self.samples += n
        self._epoch_samples += n
        if step_loss is None:  # the step accumulates
            return
        lr_used = self.lr_used
        self.step += 1
        self._epoch_loss.add(step_loss)
        now = time.perf_counter()
        rec = {"step": self.step, "epoch": self.epoch,
               "epoch_float": self.epoch + self.batch_in_epoch / max(1, n_batches),
               "loss": step_loss, "lr": lr_used, "samples": self.samples,
               "time": now - self._t0, "samples_per_s": math.nan, "input_wait": math.nan}
        self.lr_used = self.lr
        self._buf.append(rec)
        for cb in self._step_end:
            cb.on_step_end(self, rec)
        self.checkpoints.after_step(n_batches, None if isinstance(step_loss, torch.Tensor) else step_loss)
        self.stepper.report(first_only=True)
        if (now - self._last_emit) * 1000.0 >= self.config.emit_every_ms:
            self.emit(now)

    def emit(self, now: float | None = None) -> None:
        """Send the buffered step dicts to ``on_metrics`` (floats only)."""
        now = time.perf_counter() if now is None else now
        self._last_emit = now
        if not self._buf:
            return
        batch, self._buf = self._buf, []
        tensors = [r["loss"] for r in batch if isinstance(r["loss"], torch.Tensor)]
        if tensors:  # CUDA: one device->host copy for the whole batch
            values = torch.stack([t.float() for t in tensors]).cpu().tolist()
            it = iter(values)
            for r in batch:
                if isinstance(r["loss"], torch.Tensor):
                    r["loss"] = next(it)
        t_start, s_start, w_start = self._window
        dt = now - t_start
        if dt > 0:
            self.samples_per_s = (self.samples - s_start) / dt
            self.input_wait = min(1.0, (self._wait - w_start) / dt)
        self._window = (now, self.samples, self._wait)
        for r in batch:
            r["samples_per_s"] = self.samples_per_s
            r["input_wait"] = self.input_wait
        if self._tb is not None:  # once per emission (4-25 Hz)
            self._tb.steps(batch, self.samples_per_s)
        if self._steps is not None:
            self._steps.append(batch)
        self.call("on_metrics", self, batch)
        if tensors and not self._in_teardown:
            bad = next((r for r in batch if not math.isfinite(r["loss"])), None)
            if bad is not None:
                # On CUDA the check runs at the emission cadence: later steps of this
                # window may have used NaN gradients already (rollback is the safe answer).
                self.faults.nonfinite(bad["step"], bad["loss"], counted=True)

    # ------------------------------------------------------------ epoch end
    def _end_epoch(self) -> None:
        self.emit()
        self.strategy.sync_buffers()
        train_loss = self._epoch_loss.mean()
        epoch_time = time.perf_counter() - self._epoch_t0
        val = self.validate()
        val_loss = val["val_loss"]
        bad = nonfinite_tensors(self.model)
        if bad:  # never write NaN weights into last.pt / best.pt without saying so
            self.faults.nonfinite_state(self.step, bad)
            return
        finished = self.epoch
        self.epoch += 1
        self.batch_in_epoch = 0
        if self.scheduler is not None and optim.is_per_epoch(self.scheduler) and math.isfinite(val_loss):
            self.scheduler.step(val_loss)
        if math.isfinite(val_loss) and val_loss < self.best_val_loss:
            self.best_val_loss = val_loss
        logged = self._epoch_loss.logged_means()
        metrics = {"epoch": finished, "step": self.step, "train_loss": train_loss, "val_acc": math.nan,
                   **val, **logged, "lr": self.lr, "time": time.perf_counter() - self._t0,
                   "samples_per_s": self._epoch_samples / epoch_time if epoch_time > 0 else math.nan,
                   "epoch_time": epoch_time,
                   "input_wait": min(1.0, self._epoch_wait / epoch_time) if epoch_time > 0 else math.nan,
                   "skipped": take_skipped(self.train_loader, self.val_loader)}
        best = is_best(self, metrics)
        metrics["best"] = best
        self.history.append(metrics)
        if self._csv is not None:
            self._csv.append({**metrics, "time_s": metrics["time"], "best": int(best)})
        self.checkpoints.at_epoch_end(best, val_loss if math.isfinite(val_loss) else train_loss)
        self.stepper.report()
        if self._tb is not None:  # at the epoch's last global step, as metrics.csv's step column
            self._tb.epoch(metrics, ("train_loss", *val, *logged), self.step)
        self.call("on_epoch_end", self, metrics)

    def monitor_key(self) -> str:
        """The ``metrics.csv`` column ``best.pt`` follows (:func:`~.evaluation.monitor_key`)."""
        return monitor_key(self.config)

    def validate(self) -> dict[str, float]:
        """``{"val_loss": ..., "val_acc": ..., "val_<metric>": ...}`` (:func:`workbench.core.train.trainer.evaluation.validate`)."""
        return validate(self)

    def apply_bn_policy(self) -> None:
        """With ``config.keep_frozen_bn_eval``: fully frozen BatchNorm layers to ``eval()``."""
        if self.config.keep_frozen_bn_eval:
            apply_batchnorm_policy(self.model)

    def drop_device_losses(self) -> None:
        """Forget step losses still held as device tensors (after an out-of-memory error)."""
        self._buf = [r for r in self._buf if not isinstance(r.get("loss"), torch.Tensor)]
        self._epoch_loss.drop_device_losses()

    # ------------------------------------------------------------ callbacks
    def call(self, hook: str, *args) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(*args)

    def safe_call(self, hook: str, *args) -> None:
        for cb in self.callbacks:
            try:
                getattr(cb, hook)(self, *args)
            except Exception:  # noqa: BLE001 - a broken callback must not make fit() raise
                traceback.print_exc()
