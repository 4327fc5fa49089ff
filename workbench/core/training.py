"""The training loop: :class:`Trainer`, its :class:`Callback` hooks and its commands.

Qt-free. The GUI runs :meth:`Trainer.fit` on a QThread through one callback; the
headless ``workbench train run.toml`` runs it through :func:`train_from_toml`.

Threading
---------
``fit()`` runs on one thread (the training thread), which owns the model while
it runs. Other threads talk to it only through thread-safe methods:
:meth:`Trainer.queue` (commands applied at the next step boundary),
:meth:`Trainer.pause`, :meth:`Trainer.resume`, :meth:`Trainer.request_stop` and
:meth:`Trainer.resolve_nonfinite`. Callbacks are called on the training thread.

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
about the new group (:func:`workbench.core.optim.adopt_group`). A parameter
frozen again stays in its group with grad None. Checkpoints store the parameter
names of each group, so a resumed run rebuilds the same groups.

Modules
-------
The trainer is assembled from small modules, all re-exported here:
:mod:`~workbench.core.commands` (the commands), :mod:`~workbench.core.callbacks`
(the hooks and metric keys), :mod:`~workbench.core.devices`,
:mod:`~workbench.core.rng`, :mod:`~workbench.core.headless`
(``workbench train``), and the :class:`Trainer` mixins
:mod:`~workbench.core.trainer_controls`, :mod:`~workbench.core.trainer_epochs`,
:mod:`~workbench.core.trainer_faults` and :mod:`~workbench.core.trainer_checkpoints`.
"""

from __future__ import annotations

import contextlib
import math
import queue
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Iterable

import torch
from torch import nn

from workbench.core import optim as _optim
from workbench.core.callbacks import END_REASONS, EPOCH_KEYS, STEP_KEYS, Callback
from workbench.core.commands import Call, SaveNow, SetLR, SetTrainable
from workbench.core.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.devices import available_devices, cuda_memory, default_device
from workbench.core.errors import TrainingError, WorkbenchError  # noqa: F401 - re-exported
from workbench.core.headless import _PrintProgress, build_model_from_config, train_from_toml  # noqa: F401
from workbench.core.io import atomic_save  # noqa: F401 - re-exported
from workbench.core.param_names import _frozen_names, _resolve_parameter_names  # noqa: F401
from workbench.core.rng import rng_state, set_rng_state
from workbench.core.rng import seed_everything as _seed_everything
from workbench.core.runs import MetricsCSV, new_run_dir
from workbench.core.trainer_checkpoints import CheckpointsMixin, _payload  # noqa: F401 - re-exported
from workbench.core.trainer_controls import ControlsMixin
from workbench.core.trainer_epochs import EpochEndMixin, _apply_batchnorm_policy  # noqa: F401
from workbench.core.trainer_faults import NONFINITE_ACTIONS, FaultsMixin, _clear_traceback, _Restart  # noqa: F401

__all__ = [
    "Callback", "Trainer", "SetTrainable", "SetLR", "SaveNow", "Call", "TrainConfig", "DataConfig",
    "ModelConfig", "STEP_KEYS", "EPOCH_KEYS", "END_REASONS", "NONFINITE_ACTIONS", "available_devices",
    "default_device", "cuda_memory", "train_from_toml", "rng_state", "set_rng_state",
]
# Every name that lived here before the split (helpers included) is still importable from here.


class Trainer(ControlsMixin, EpochEndMixin, FaultsMixin, CheckpointsMixin):
    """Trains ``model`` with ``config``; driven by :meth:`fit`, steered from any thread.

    Parameters
    ----------
    model : nn.Module
        Trained in place (moved to ``config.device``). Its current ``requires_grad``
        flags are the frozen set.
    config : TrainConfig
    callbacks : iterable of Callback
    arch : ArchSpec, optional
        Recorded in checkpoints and ``run.toml`` (anything with ``to_dict()`` or
        ``name`` / ``kwargs``).
    data : (train_loader, val_loader), optional
        Loaders to use instead of building them from ``config.data`` (tests,
        custom data). Any iterables of ``(x, y)`` batches with ``len()``; an
        ``iter_epoch(epoch, start_batch)`` method makes them resumable mid-epoch.

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
    history : list of dict
        Epoch metrics (:data:`EPOCH_KEYS`).
    best_val_loss : float
    run_dir : Path or None
        The run folder (set by :meth:`prepare`).
    optimizer, scheduler
        Built by :meth:`prepare`.
    end_reason : str or None
        What the last ``fit()`` returned.
    error : Exception or None
        The error that ended the last run (``TrainingError`` for NaN / OOM).
    """

    def __init__(self, model: nn.Module, config: TrainConfig, callbacks: Iterable[Callback] = (),
                 arch: Any = None, *, data: tuple | None = None):
        self.model = model
        self.config = config
        self.callbacks = list(callbacks)
        self.arch = arch
        self.device = torch.device(config.device)
        self.epoch = 0
        self.batch_in_epoch = 0
        self.step = 0
        self.samples = 0
        self.samples_per_s = 0.0
        self.history: list[dict] = []
        self.best_val_loss = math.inf
        self.run_dir: Path | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler = None
        self.scaler = None
        self.loss_fn: nn.Module = _optim.build_loss(config.loss)
        self.train_loader = self.val_loader = None
        self.info = None
        #: what prepare() changed in the data settings to fit the model (e.g. grayscale -> rgb), or None
        self.data_note: str | None = None
        self.end_reason: str | None = None
        self.error: Exception | None = None
        self._data = data
        self._prepared = False
        self._resumed = False
        self._group_names: list[list[str]] = []
        self._cond = threading.Condition()
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = False
        self._paused = False
        self._nonfinite_step: int | None = None
        self._nonfinite_action: str | None = None
        self._reason_override: str | None = None
        self._buf: list[dict] = []
        self._t0 = time.perf_counter()
        self._last_emit = 0.0
        self._window = (0.0, 0)  # (time, samples) at the start of the emission window
        self._epoch_loss: list = []
        self._epoch_t0 = 0.0
        self._epoch_samples = 0
        self._csv: MetricsCSV | None = None
        self._tb = None
        self._running = False
        self._in_teardown = False
        self._waiting = False
        self._after_backward: list[Callback] = []
        self._step_end: list[Callback] = []
        self._defer_loss = False
        self._saver = None
        self._pending_save = None
        self._lr_cache = float(config.lr)

    # ------------------------------------------------------------ set-up
    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps per epoch (builds the data if needed)."""
        self.prepare()
        return len(self.train_loader)

    @property
    def total_steps(self) -> int:
        """``epochs * steps_per_epoch``."""
        return int(self.config.epochs) * self.steps_per_epoch

    @property
    def lr(self) -> float:
        """Current head LR."""
        return _optim.head_lr(self.optimizer) if self.optimizer is not None else float(self.config.lr)

    def prepare(self) -> None:
        """Build data, optimizer, scheduler and the run folder (idempotent).

        Raises
        ------
        DataError
            The dataset cannot be built.
        OSError
            The run folder cannot be created.
        """
        if self._prepared:
            return
        cfg = self.config
        self.model.to(self.device)
        if self._data is not None:
            self.train_loader, self.val_loader = self._data
        else:
            from workbench.core.data import TensorBatchLoader, build_loaders, fit_channels_to_model

            self.data_note = fit_channels_to_model(cfg.data, self.model)
            self.train_loader, self.val_loader, self.info = build_loaders(cfg.data, seed=cfg.seed)
            for loader in (self.train_loader, self.val_loader):
                if isinstance(loader, TensorBatchLoader) and self.device.type != "cpu":
                    loader.to(self.device)
        self._build_optimizer()
        if cfg.amp and self.device.type == "cuda" and cfg.amp_dtype == "float16":
            self.scaler = torch.amp.GradScaler("cuda")
        self.run_dir = Path(cfg.run_dir) if cfg.run_dir else new_run_dir()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # CUDA: keep step losses on the device and read them at the emission cadence.
        self._defer_loss = self.device.type == "cuda"
        self._prepared = True

    def _build_optimizer(self, group_names: list[list[str]] | None = None, roles: list[str] | None = None):
        cfg = self.config
        if group_names is None:
            groups = _optim.param_groups(self.model, cfg)
        else:
            params = dict(self.model.named_parameters())
            missing = [n for names in group_names for n in names if n not in params]
            if missing:
                raise TrainingError(f"the checkpoint's optimizer covers parameters this model lacks: "
                                    f"{', '.join(missing[:5])}; load weights only instead")
            groups = [{"params": [params[n] for n in names], "wb_names": list(names),
                       "wb_role": role, "lr": _optim.lr_for_role(role, cfg.lr, cfg)}
                      for names, role in zip(group_names, roles or ["all"] * len(group_names))]
        self._group_names = [list(g["wb_names"]) for g in groups]
        self.optimizer = _optim.build_optimizer(groups, cfg)
        if not groups:
            self._group_names = [[]]
        self.scheduler = _optim.build_scheduler(self.optimizer, cfg, len(self.train_loader))
        self._lr_cache = self.lr

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
        self._reason_override = None
        self.error = None
        try:
            self._fit_start()
            while not self._done():
                try:
                    self._train_epoch()
                    if self._stop:
                        break
                    self._end_epoch()
                except _Restart:
                    continue
            self.wait_for_saves()
            reason = self._reason_override or ("stopped" if self.epoch < self.config.epochs else "completed")
        except KeyboardInterrupt:
            reason = "stopped"
        except torch.OutOfMemoryError as e:
            reason = "oom"
            self._on_oom(e)
        except Exception as e:  # noqa: BLE001 - fit() never raises: report and end cleanly
            reason = "error"
            self._on_error(e)
        finally:
            self._teardown()
        self.end_reason = reason
        self._running = False
        self._safe_call("on_fit_end", reason)
        return reason

    def _done(self) -> bool:
        return self._stop or self.epoch >= self.config.epochs

    def _fit_start(self) -> None:
        self.prepare()
        if not self._resumed and self.step == 0:
            _seed_everything(int(self.config.seed))
        self._record_model_in_config()
        saved = TrainConfig.from_dict({**self.config.to_dict()})
        saved.run_dir = None  # replaying run.toml makes a new run folder
        saved.to_toml(self.run_dir / "run.toml")
        self._csv = MetricsCSV(self.run_dir / "metrics.csv")
        self._tb = _tensorboard_writer(self.run_dir) if self.config.tensorboard else None
        self._t0 = time.perf_counter()
        self._last_emit = self._t0
        self._window = (self._t0, self.samples)
        self.model.train()
        self._apply_bn_policy()
        # Per-step hooks are called only on callbacks that override them.
        self._after_backward = [cb for cb in self.callbacks
                                if type(cb).on_after_backward is not Callback.on_after_backward]
        self._step_end = [cb for cb in self.callbacks if type(cb).on_step_end is not Callback.on_step_end]
        self._call("on_fit_start", self)

    def _record_model_in_config(self) -> None:
        mc = self.config.model
        if self.arch is not None:
            d = self.arch.to_dict() if hasattr(self.arch, "to_dict") else {
                "name": getattr(self.arch, "name", str(self.arch)), "kwargs": getattr(self.arch, "kwargs", {})}
            mc.arch, mc.kwargs = d["name"], dict(d.get("kwargs") or {})
        elif not mc.checkpoint:
            from workbench.core.demo_model import DigitsCNN

            if type(self.model) is DigitsCNN:
                mc.arch = "digits_cnn"
                mc.kwargs = {"num_classes": self.model.classifier.out_features,
                             "in_channels": self.model.features[0].in_channels}
            else:
                mc.arch = ""
        mc.frozen = _frozen_names(self.model)

    def _teardown(self) -> None:
        self._in_teardown = True
        with contextlib.suppress(Exception):
            self.wait_for_saves()
        if self._saver is not None:
            self._saver.shutdown(wait=True)
            self._saver = None
        try:
            self._emit()
        except Exception:  # noqa: BLE001
            self._buf = []
        if self._tb is not None:
            with contextlib.suppress(Exception):
                self._tb.close()
            self._tb = None
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        with self._cond:
            self._paused = False
            self._stop = False  # a stop requested before fit() started is honoured; the next fit() runs
            self._nonfinite_step = None

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
            self._epoch_loss = []
            self._epoch_t0 = time.perf_counter()
            self._epoch_samples = 0
        n_batches = len(loader)
        while True:
            self._boundary()
            if self._stop:
                return
            try:
                xb, yb = next(it)
            except StopIteration:
                return
            self._train_step(xb, yb, n_batches)

    def _autocast(self):
        if not self.config.amp or self.device.type not in ("cpu", "cuda", "mps"):
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.device.type == "cpu" or self.config.amp_dtype == "bfloat16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def _train_step(self, xb, yb, n_batches: int) -> None:
        dev = self.device
        non_blocking = dev.type == "cuda"
        xb = xb.to(dev, non_blocking=non_blocking)
        yb = yb.to(dev, non_blocking=non_blocking)
        opt = self.optimizer
        opt.zero_grad(set_to_none=True)
        with self._autocast():
            out = self.model(xb)
            loss = self.loss_fn(out.float() if out.dtype != torch.float32 else out, yb)
        on_cuda = self._defer_loss
        if not on_cuda:
            value = loss.item()
            if not math.isfinite(value):
                del out, loss
                self._nonfinite(self.step + 1)
                return
        if loss.requires_grad:
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
            else:
                loss.backward()
            if self.scaler is not None and (self.config.grad_clip or self._after_backward):
                self.scaler.unscale_(opt)
            for cb in self._after_backward:
                cb.on_after_backward(self)
            if self.config.grad_clip:
                grads = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
                if grads:
                    torch.nn.utils.clip_grad_norm_(grads, float(self.config.grad_clip))
            if self.scaler is not None:
                self.scaler.step(opt)
                self.scaler.update()
            else:
                opt.step()
            if self.scheduler is not None and not _optim.is_per_epoch(self.scheduler):
                self.scheduler.step()
        n = int(xb.shape[0])
        del out, xb
        lr_used = self._lr_cache
        self.step += 1
        self.batch_in_epoch += 1
        self.samples += n
        self._epoch_samples += n
        detached = loss.detach()
        self._epoch_loss.append(detached if on_cuda else value)
        now = time.perf_counter()
        rec = {"step": self.step, "epoch": self.epoch,
               "epoch_float": self.epoch + self.batch_in_epoch / max(1, n_batches),
               "loss": detached if on_cuda else value, "lr": lr_used, "samples": self.samples,
               "time": now - self._t0, "samples_per_s": math.nan}
        self._lr_cache = self.lr
        self._buf.append(rec)
        for cb in self._step_end:
            cb.on_step_end(self, rec)
        if (now - self._last_emit) * 1000.0 >= self.config.emit_every_ms:
            self._emit(now)

    def _emit(self, now: float | None = None) -> None:
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
        t_start, s_start = self._window
        dt = now - t_start
        if dt > 0:
            self.samples_per_s = (self.samples - s_start) / dt
        self._window = (now, self.samples)
        for r in batch:
            r["samples_per_s"] = self.samples_per_s
        if self._tb is not None:
            for r in batch[-1:]:
                self._tb.add_scalar("train/loss", r["loss"], r["step"])
        self._call("on_metrics", self, batch)
        if tensors and not self._in_teardown:
            bad = next((r for r in batch if not math.isfinite(r["loss"])), None)
            if bad is not None:
                # On CUDA the check runs at the emission cadence: later steps of this
                # window may have used NaN gradients already (rollback is the safe answer).
                self._nonfinite(bad["step"], counted=True)

    # ------------------------------------------------------------ callbacks
    def _call(self, hook: str, *args) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(*args)

    def _safe_call(self, hook: str, *args) -> None:
        for cb in self.callbacks:
            try:
                getattr(cb, hook)(self, *args)
            except Exception:  # noqa: BLE001 - a broken callback must not make fit() raise
                traceback.print_exc()


def _tensorboard_writer(run_dir: Path):
    """A SummaryWriter into ``run_dir/tensorboard`` when tensorboard is installed, else None."""
    try:
        import tensorboard  # noqa: F401
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # noqa: BLE001 - optional
        return None
    try:
        return SummaryWriter(str(run_dir / "tensorboard"))
    except Exception:  # noqa: BLE001
        return None
