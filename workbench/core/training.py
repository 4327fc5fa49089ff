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
"""

from __future__ import annotations

import contextlib
import math
import queue
import random
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import nn

from workbench.core import optim as _optim
from workbench.core.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.errors import TrainingError, WorkbenchError
from workbench.core.io import atomic_save
from workbench.core.runs import MetricsCSV, new_run_dir

__all__ = [
    "Callback", "Trainer", "SetTrainable", "SetLR", "SaveNow", "Call", "TrainConfig", "DataConfig",
    "ModelConfig", "STEP_KEYS", "EPOCH_KEYS", "END_REASONS", "NONFINITE_ACTIONS", "available_devices",
    "default_device", "cuda_memory", "train_from_toml", "rng_state", "set_rng_state",
]

#: Keys of each per-step metrics dict (``on_step_end`` and the ``on_metrics`` batches).
#: step: optimizer steps done (1-based); epoch: 0-based epoch index; epoch_float:
#: epoch + fraction done; loss: training loss of the step; lr: head LR used; samples:
#: samples seen so far; time: seconds since ``fit()`` started; samples_per_s: over
#: the last emission window.
STEP_KEYS = ("step", "epoch", "epoch_float", "loss", "lr", "samples", "time", "samples_per_s")
#: Keys of each epoch metrics dict (``on_epoch_end``, ``Trainer.history``). epoch: the
#: 0-based index of the finished epoch; val_acc is NaN when not a classification;
#: best: this epoch has the lowest validation loss so far; epoch_time: seconds.
EPOCH_KEYS = ("epoch", "step", "train_loss", "val_loss", "val_acc", "lr", "time", "samples_per_s",
              "best", "epoch_time")
END_REASONS = ("completed", "stopped", "error", "nonfinite", "oom")
NONFINITE_ACTIONS = ("lower_lr", "rollback", "stop")


# ---------------------------------------------------------------- commands
@dataclass
class SetTrainable:
    """Freeze (``flag=False``) or unfreeze parameters at the next step boundary.

    Attributes
    ----------
    names : str or list of str
        Parameter or module qualified names; ``""`` = the whole model.
    flag : bool
        The new ``requires_grad``.
    changed : list of str
        Filled in when applied: parameter names whose ``requires_grad`` changed.
    error : str or None
        Filled in when a name is unknown (nothing is changed then).
    """

    names: Any
    flag: bool
    changed: list = field(default_factory=list)
    error: str | None = None


@dataclass
class SetLR:
    """Set the head learning rate (backbone groups get ``lr * backbone_lr_mult``)."""

    lr: float


@dataclass
class SaveNow:
    """Save a checkpoint at the next step boundary.

    Attributes
    ----------
    path : str or None
        Target file; None = ``run_dir / "last.pt"``.
    saved_to : str or None
        Filled in when applied.
    """

    path: str | None = None
    saved_to: str | None = None


@dataclass
class Call:
    """Run ``fn(trainer)`` on the training thread at the next step boundary (e.g. probes on/off)."""

    fn: Callable[["Trainer"], Any]
    result: Any = None


class Callback:
    """Hooks called by :class:`Trainer` on the training thread; every hook is a no-op by default.

    ``on_step_end`` is called after EVERY optimizer step: keep it cheap (no
    signals, no I/O); use ``on_metrics`` for anything that crosses threads.
    """

    def on_fit_start(self, trainer: Trainer) -> None:
        """Data, optimizer and run folder are ready; nothing has been trained yet."""

    def on_step_end(self, trainer: Trainer, metrics: dict) -> None:
        """After each step. ``metrics`` keys: :data:`STEP_KEYS`; on CUDA ``loss`` is a
        detached 0-dim device tensor (reading it syncs) and ``samples_per_s`` is NaN. The
        same dict is later passed to ``on_metrics`` with those fields filled in as floats."""

    def on_after_backward(self, trainer: Trainer) -> None:
        """After ``backward()`` of each step, before gradient clipping and the optimizer step
        (fp16: after ``GradScaler.unscale_``, so gradients are true values). Called only for
        callbacks that override it; keep it cheap."""

    def on_metrics(self, trainer: Trainer, batch: list[dict]) -> None:
        """A batch of step dicts (floats only), about every ``emit_every_ms`` and at epoch end."""

    def on_epoch_end(self, trainer: Trainer, metrics: dict) -> None:
        """After validation and checkpointing; ``metrics`` keys: :data:`EPOCH_KEYS`."""

    def on_nonfinite(self, trainer: Trainer, step: int) -> None:
        """The loss of step ``step`` is NaN/Inf; the run is paused until
        ``trainer.resolve_nonfinite(action)`` (may be called from any thread, or here)."""

    def on_command_applied(self, trainer: Trainer, command: Any) -> None:
        """A queued command was applied (its result fields are filled in)."""

    def on_exception(self, trainer: Trainer, exc: BaseException, tb: str) -> None:
        """The run failed; ``tb`` is the formatted traceback. ``on_fit_end`` follows."""

    def on_fit_end(self, trainer: Trainer, reason: str) -> None:
        """The run ended: ``reason`` is one of :data:`END_REASONS`."""


class _Restart(Exception):
    """Internal: the state was rolled back; restart the epoch loop at the restored position."""


# ---------------------------------------------------------------- devices
def available_devices() -> list[tuple[str, str]]:
    """Every device torch can use here, as ``(id, label)``.

    Returns
    -------
    list of (str, str)
        ``("cpu", "CPU")``, then ``("cuda:N", "cuda:N - NAME (M.M GB)")`` for each
        CUDA device, then ``("mps", "Apple GPU (mps)")`` when available.
    """
    out = [("cpu", "CPU")]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            out.append((f"cuda:{i}", f"cuda:{i} - {props.name} ({props.total_memory / 1e9:.1f} GB)"))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append(("mps", "Apple GPU (mps)"))
    return out


def default_device() -> str:
    """The best available device id: ``"cuda:0"``, else ``"mps"``, else ``"cpu"``."""
    ids = [d for d, _ in available_devices()]
    for prefix in ("cuda", "mps"):
        for d in ids:
            if d.startswith(prefix):
                return d
    return "cpu"


def cuda_memory(device: str | torch.device = "cuda") -> tuple[int, int]:
    """``(allocated, reserved)`` bytes of a CUDA device; ``(0, 0)`` for other devices."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return 0, 0
    return int(torch.cuda.memory_allocated(device)), int(torch.cuda.memory_reserved(device))


# ---------------------------------------------------------------- RNG
def rng_state() -> dict:
    """RNG states of torch (CPU and every CUDA device), numpy and random.

    Stored as tensors and plain lists so ``torch.load(weights_only=True)`` reads them.
    """
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "python": [int(version), list(internal), gauss_next],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore :func:`rng_state` output (missing entries are left alone)."""
    if "torch" in state:
        torch.set_rng_state(state["torch"].cpu())
    if "numpy" in state:
        kind, keys, pos, has_gauss, cached = state["numpy"]
        keys = keys.numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
        np.random.set_state((str(kind), keys.astype(np.uint32), int(pos), int(has_gauss), float(cached)))
    if "python" in state:
        version, internal, gauss_next = state["python"]
        random.setstate((int(version), tuple(int(v) for v in internal), gauss_next))
    if state.get("cuda") and torch.cuda.is_available():
        states = state["cuda"][: torch.cuda.device_count()]
        torch.cuda.set_rng_state_all([s.cpu() for s in states])


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


# ---------------------------------------------------------------- trainer
class Trainer:
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

    # ------------------------------------------------------------ thread-safe controls
    def request_stop(self) -> None:
        """Ask the run to stop at the next step boundary (also ends a pause)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def pause(self) -> None:
        """Pause at the next step boundary (the thread waits on a condition, no spinning)."""
        with self._cond:
            self._paused = True
            self._cond.notify_all()

    def resume(self) -> None:
        """Continue after :meth:`pause` (a NaN pause needs :meth:`resolve_nonfinite`)."""
        with self._cond:
            if self._nonfinite_step is None:
                self._paused = False
            self._cond.notify_all()

    @property
    def is_paused(self) -> bool:
        """True while paused (by :meth:`pause` or waiting for a NaN decision)."""
        return self._paused

    @property
    def is_waiting(self) -> bool:
        """True while the training thread is blocked at a step boundary (paused, or awaiting a NaN decision)."""
        return self._waiting

    @property
    def is_running(self) -> bool:
        """True while :meth:`fit` runs."""
        return self._running

    def queue(self, command: Any) -> None:
        """Queue a command (:class:`SetTrainable`, :class:`SetLR`, :class:`SaveNow`, :class:`Call`).

        Applied on the training thread at the next step boundary (immediately
        when paused), then ``on_command_applied``. Before/after ``fit()`` it is
        applied at the start of the next ``fit()``; use :meth:`apply_commands`
        to apply now when no run is active.
        """
        self._commands.put(command)
        with self._cond:
            self._cond.notify_all()

    def resolve_nonfinite(self, action: str) -> None:
        """Answer a NaN/Inf pause: ``"lower_lr"``, ``"rollback"`` or ``"stop"``.

        ``lower_lr`` divides every LR by 10, skips the bad batch and continues;
        ``rollback`` reloads ``run_dir/last.pt`` (if none exists the run stops with
        reason ``"nonfinite"``); ``stop`` ends the run with reason ``"nonfinite"``.

        Raises
        ------
        ValueError
            Unknown action.
        """
        if action not in NONFINITE_ACTIONS:
            raise ValueError(f"unknown action {action!r}; choose one of {', '.join(NONFINITE_ACTIONS)}")
        with self._cond:
            self._nonfinite_action = action
            self._cond.notify_all()

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

    def _end_epoch(self) -> None:
        self._emit()
        if self._epoch_loss:
            vals = self._epoch_loss
            if isinstance(vals[0], torch.Tensor):
                train_loss = float(torch.stack([v.float() for v in vals]).mean().item())
            else:
                train_loss = float(sum(vals) / len(vals))
        else:
            train_loss = math.nan
        epoch_time = time.perf_counter() - self._epoch_t0
        val_loss, val_acc = self.validate()
        finished = self.epoch
        self.epoch += 1
        self.batch_in_epoch = 0
        if self.scheduler is not None and _optim.is_per_epoch(self.scheduler) and math.isfinite(val_loss):
            self.scheduler.step(val_loss)
        best = math.isfinite(val_loss) and val_loss < self.best_val_loss
        if best:
            self.best_val_loss = val_loss
        metrics = {"epoch": finished, "step": self.step, "train_loss": train_loss, "val_loss": val_loss,
                   "val_acc": val_acc, "lr": self.lr, "time": time.perf_counter() - self._t0,
                   "samples_per_s": self._epoch_samples / epoch_time if epoch_time > 0 else math.nan,
                   "best": bool(best), "epoch_time": epoch_time}
        self.history.append(metrics)
        if self._csv is not None:
            self._csv.append({**metrics, "time_s": metrics["time"], "best": int(best)})
        if self.config.checkpoint_every_epoch:
            payload = self.checkpoint_payload(loss=val_loss if math.isfinite(val_loss) else train_loss)
            paths = [self.run_dir / "last.pt"] + ([self.run_dir / "best.pt"] if best else [])
            self._save_in_background(payload, paths)
        if self._tb is not None:
            for k in ("train_loss", "val_loss", "val_acc", "lr"):
                if math.isfinite(metrics[k]):
                    self._tb.add_scalar(f"epoch/{k}", metrics[k], finished)
        self._call("on_epoch_end", self, metrics)

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

    def validate(self) -> tuple[float, float]:
        """Validation loss and accuracy under ``model.eval()`` + ``torch.no_grad()``.

        Returns
        -------
        (float, float)
            Mean loss per sample and accuracy in [0, 1] (NaN when the targets
            are not class indices or the validation set is empty). The model is
            back in ``train()`` mode afterwards (frozen BatchNorm policy applied).
        """
        if self.val_loader is None:
            return math.nan, math.nan
        was_training = self.model.training
        self.model.eval()
        total, loss_sum, correct, classification = 0, None, None, True
        try:
            with torch.no_grad():
                loader = self.val_loader
                batches = loader.iter_epoch(0) if hasattr(loader, "iter_epoch") else iter(loader)
                for xb, yb in batches:
                    xb, yb = xb.to(self.device), yb.to(self.device)
                    with self._autocast():
                        out = self.model(xb)
                    out = out.float()
                    loss = self.loss_fn(out, yb).detach() * xb.shape[0]
                    loss_sum = loss if loss_sum is None else loss_sum + loss
                    if classification and out.dim() == 2 and not yb.is_floating_point() and yb.dim() == 1:
                        c = (out.argmax(1) == yb).sum()
                        correct = c if correct is None else correct + c
                    else:
                        classification = False
                    total += int(xb.shape[0])
        finally:
            if was_training:
                self.model.train()
                self._apply_bn_policy()
        if total == 0:
            return math.nan, math.nan
        val_loss = float(loss_sum.item()) / total
        acc = float(correct.item()) / total if classification and correct is not None else math.nan
        return val_loss, acc

    def _apply_bn_policy(self) -> None:
        if not self.config.keep_frozen_bn_eval:
            return
        try:
            from workbench.core.freezing import apply_batchnorm_policy
        except ImportError:
            apply_batchnorm_policy = _apply_batchnorm_policy
        apply_batchnorm_policy(self.model)

    # ------------------------------------------------------------ step boundary
    def _boundary(self) -> None:
        """Apply queued commands; wait while paused (commands still apply); return on stop."""
        self.apply_commands()
        if not self._paused:
            return
        self._emit()
        with self._cond:
            self._waiting = True
            try:
                while self._paused and not self._stop:
                    if not self._commands.empty():
                        self._cond.release()
                        try:
                            self.apply_commands()
                        finally:
                            self._cond.acquire()
                        continue
                    self._cond.wait()
            finally:
                self._waiting = False
        self._window = (time.perf_counter(), self.samples)  # pause time is not throughput
        self.apply_commands()

    def apply_commands(self) -> None:
        """Apply every queued command now (the training thread calls this at step boundaries).

        Call it from another thread only while no ``fit()`` runs.
        """
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return
            self._apply(cmd)
            self._call("on_command_applied", self, cmd)

    def _apply(self, cmd: Any) -> None:
        if isinstance(cmd, SetTrainable):
            self._set_trainable(cmd)
        elif isinstance(cmd, SetLR):
            if self.optimizer is not None:
                _optim.rescale_lr(self.optimizer, self.scheduler, float(cmd.lr), self.config)
            self.config.lr = float(cmd.lr)
            self._lr_cache = float(cmd.lr)
        elif isinstance(cmd, SaveNow):
            self.prepare()
            self.wait_for_saves()  # the epoch-end write must not land after this one
            path = Path(cmd.path) if cmd.path else self.run_dir / "last.pt"
            atomic_save(self.checkpoint_payload(), path)
            cmd.saved_to = str(path)
        elif isinstance(cmd, Call):
            cmd.result = cmd.fn(self)
        else:
            raise TrainingError(f"unknown command {cmd!r}")

    def _set_trainable(self, cmd: SetTrainable) -> None:
        names = [cmd.names] if isinstance(cmd.names, str) else list(cmd.names)
        try:
            targets = _resolve_parameter_names(self.model, names)
        except KeyError as e:
            cmd.error = str(e.args[0])
            return
        params = dict(self.model.named_parameters())
        changed = []
        for n in targets:
            p = params[n]
            if p.requires_grad != cmd.flag:
                p.requires_grad_(cmd.flag)
                changed.append(n)
            if not cmd.flag:
                p.grad = None
        cmd.changed = changed
        if cmd.flag and changed and self.optimizer is not None:
            self._add_to_optimizer(changed)
        if self.model.training:
            self._apply_bn_policy()

    def _add_to_optimizer(self, names: list[str]) -> None:
        """Add a param group per role for newly trainable parameters not yet in the optimizer."""
        in_opt = {id(p) for g in self.optimizer.param_groups for p in g["params"]}
        params = dict(self.model.named_parameters())
        new = [n for n in names if id(params[n]) not in in_opt]
        if not new:
            return
        head = self.lr
        for g in _optim.param_groups(self.model, self.config, names=new):
            role = g["wb_role"]
            ref = next((x for x in self.optimizer.param_groups if x.get("wb_role") == role and x["params"]),
                       None) or next((x for x in self.optimizer.param_groups), None)
            group = {"params": g["params"], "wb_role": role, "lr": _optim.lr_for_role(role, head, self.config)}
            self.optimizer.add_param_group(group)
            _optim.adopt_group(self.optimizer, self.scheduler, self.optimizer.param_groups[-1], ref)
            self._group_names.append(list(g["wb_names"]))

    # ------------------------------------------------------------ faults
    def _has_nonfinite_handler(self) -> bool:
        return any(type(cb).on_nonfinite is not Callback.on_nonfinite for cb in self.callbacks)

    def _nonfinite(self, step: int, counted: bool = False) -> None:
        """Handle a NaN/Inf loss at ``step``: pause and wait for a decision, or stop headless."""
        self.optimizer.zero_grad(set_to_none=True)
        if not counted:
            self.batch_in_epoch += 1  # the bad batch is consumed (skipped)
        message = (f"step {step}: the loss is NaN or infinite; lower the learning rate, "
                   "roll back to the last checkpoint, or stop")
        if not self._has_nonfinite_handler():
            self._end_nonfinite(message)
            return
        self._emit()
        with self._cond:
            self._nonfinite_step = step
            self._nonfinite_action = None
            self._paused = True
        self._call("on_nonfinite", self, step)
        with self._cond:
            self._waiting = True
            while self._nonfinite_action is None and not self._stop:
                self._cond.wait()
            self._waiting = False
            action = self._nonfinite_action or "stop"
            self._nonfinite_step = None
            self._nonfinite_action = None
            self._paused = False
        if action == "lower_lr":
            _optim.rescale_lr(self.optimizer, self.scheduler, self.lr / 10.0, self.config)
            self._lr_cache = self.lr
            self.config.lr = self.lr
        elif action == "rollback":
            self.wait_for_saves()
            last = self.run_dir / "last.pt" if self.run_dir else None
            if last is None or not last.exists():
                self._end_nonfinite(f"step {step}: the loss is NaN or infinite and there is no "
                                    f"checkpoint to roll back to ({last}); stopped")
                return
            self._load_payload(torch.load(last, map_location="cpu", weights_only=True))
            raise _Restart()
        else:
            self._end_nonfinite(message.split(";")[0] + "; stopped")

    def _end_nonfinite(self, message: str) -> None:
        self.error = TrainingError(message)
        self._reason_override = "nonfinite"
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def _on_oom(self, exc: BaseException) -> None:
        tb = traceback.format_exc()
        _clear_traceback(exc)
        del exc
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        self._buf = [r for r in self._buf if not isinstance(r.get("loss"), torch.Tensor)]
        self._epoch_loss = []
        import gc

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        self.error = TrainingError(
            f"step {self.step + 1}: out of memory on {self.device} with batch size "
            f"{self.config.data.batch_size}; try a smaller batch size (or mixed precision, or a smaller model)")
        self._safe_call("on_exception", self.error, tb)

    def _on_error(self, exc: BaseException) -> None:
        tb = traceback.format_exc()
        _clear_traceback(exc)
        self.error = exc
        with contextlib.suppress(Exception):
            if self.optimizer is not None:
                self.optimizer.zero_grad(set_to_none=True)
            self.model.train()
        self._safe_call("on_exception", exc, tb)

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


# ---------------------------------------------------------------- helpers
def _frozen_names(model: nn.Module) -> list[str]:
    return [n for n, p in model.named_parameters() if not p.requires_grad]


def _resolve_parameter_names(model: nn.Module, names: list[str]) -> list[str]:
    """Parameter names under each name (a parameter, a module path, or "" = all).

    Raises
    ------
    KeyError
        A name matches neither a parameter nor a module.
    """
    params = [n for n, _ in model.named_parameters()]
    modules = {n for n, _ in model.named_modules()}
    out: list[str] = []
    for name in names:
        if name in params:
            hits = [name]
        elif name == "" or name in modules:
            hits = [n for n in params if name == "" or n.startswith(name + ".")]
        else:
            raise KeyError(f"{name!r} is neither a parameter nor a module of the model")
        out.extend(h for h in hits if h not in out)
    return out


def _apply_batchnorm_policy(model: nn.Module) -> list[str]:
    """Fallback until core.freezing lands: fully frozen BatchNorm layers go to eval()."""
    changed = []
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            ps = list(m.parameters(recurse=False))
            if ps and not any(p.requires_grad for p in ps) and m.training:
                m.eval()
                changed.append(name)
    return changed


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


def _clear_traceback(exc: BaseException) -> None:
    """Drop the frames an exception keeps alive (they pin tensors and device memory)."""
    tb = exc.__traceback__
    if tb is not None:
        traceback.clear_frames(tb)


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


# ---------------------------------------------------------------- headless
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
