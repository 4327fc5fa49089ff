"""The events of a run, as plain data: one protocol for a run on a thread and in a process.

:class:`EventBridge` is the one :class:`~workbench.core.train.trainer.hooks.Callback`
that turns trainer hooks into named events carrying only floats, strings, lists,
numpy arrays and bytes. It hands each to ``emit(name, *args)``: the window's
in-process worker emits the Qt signal of that name, the training process sends
it over its connection (:mod:`workbench.core.train.launch.child`). The names are
:data:`EVENTS`:

* ``fitStarted(dict)``: epoch, step, epochs, steps_per_epoch, total_steps,
  run_dir, data_note, history (the epochs a resumed run continues);
* ``metrics(dict)`` once per ``on_metrics`` batch (~25 Hz): ``{"step": array, "loss": array, ...}``;
* ``progressText(str)``, ``epochEnded(dict)``, ``commandApplied(dict)``,
  ``nonFinite(int, float, dict)`` (step, loss, :meth:`NonFiniteTrace.to_dict <workbench.core.train.trainer.nan_trace.NonFiniteTrace.to_dict>` or ``{}``), ``classCountMismatch(int, int, str)``, ``error(str)``
  (the traceback text, once per run);
* ``extrasReady(dict)``: optimizer / scheduler state (CPU copies), epoch, step, loss;
* ``stateSynced(bytes)``: the model's state_dict and trainable names (:func:`state_blob`),
  when a process run pauses, saves or ends (``sync_state=True`` only);
* ``paused(int)``: the run blocks at this step (sent before its ``stateSynced``);
* ``sink(int, object)``: what callback ``index`` built in the training process handed its
  sink (the live probes' reports); ``cudaMemory(float, float)``: bytes allocated, reserved;
* ``finished(str)``: the end reason, sent by whoever ran ``fit()``.

Qt-free.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from workbench.core.model.checkpoint import tensors_from_bytes, to_bytes
from workbench.core.train.trainer.commands import SaveNow, SetTrainable
from workbench.core.train.devices import cuda_memory
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.data.preflight import ClassCountMismatch

__all__ = ["EventBridge", "EVENTS", "pack_metrics", "to_cpu_copy", "describe_command", "run_extras",
           "state_blob", "read_state_blob", "apply_state", "extras_from_bytes"]

EVENTS = ("fitStarted", "metrics", "progressText", "epochEnded", "commandApplied", "nonFinite",
          "classCountMismatch", "error", "extrasReady", "paused", "stateSynced", "sink", "cudaMemory", "finished")

#: Seconds between two ``cudaMemory`` events of a CUDA run.
CUDA_MEMORY_EVERY_S = 0.5


def to_cpu_copy(obj: Any) -> Any:
    """Deep copy ``obj`` with every tensor detached, cloned and moved to the CPU.

    Works on nested dicts / lists / tuples (``optimizer.state_dict()``, ...).
    """
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: to_cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_cpu_copy(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(to_cpu_copy(v) for v in obj)
    return copy.deepcopy(obj)


def plain(value: Any) -> Any:
    """A float / int / str / numpy version of ``value`` (tensors become Python numbers or arrays)."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        return value.item() if value.numel() == 1 else value.cpu().numpy()
    if isinstance(value, (bool, int, float, str, type(None), np.ndarray, np.generic)):
        return value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)


def pack_metrics(batch: list[dict]) -> dict[str, np.ndarray]:
    """Turn a list of per-step metric dicts into one dict of float64 arrays (NaN where missing)."""
    keys: list[str] = []
    for row in batch:
        for k in row:
            if k not in keys:
                keys.append(k)
    out: dict[str, np.ndarray] = {}
    for k in keys:
        values = []
        for row in batch:
            v = plain(row.get(k, float("nan")))
            values.append(float(v) if isinstance(v, (int, float, np.generic)) and not isinstance(v, bool) else float("nan"))
        out[k] = np.asarray(values, dtype=np.float64)
    return out


def describe_command(command: Any) -> dict:
    """A plain dict describing an applied queued command (type name + its fields)."""
    info: dict[str, Any] = {"type": type(command).__name__}
    fields = getattr(command, "__dataclass_fields__", None)
    names = list(fields) if fields else [k for k in vars(command)] if hasattr(command, "__dict__") else []
    for name in names:
        info[name] = plain(getattr(command, name))
    return info


def run_extras(trainer) -> dict:
    """``optimizer_state_dict`` / ``scheduler_state_dict`` / ``epoch`` / ``step`` / ``loss`` of ``trainer``.

    Tensors are deep-copied, detached CPU tensors (call on the training thread).
    """
    extras: dict[str, Any] = {}
    if trainer.optimizer is not None:
        extras["optimizer_state_dict"] = to_cpu_copy(trainer.optimizer.state_dict())
    if trainer.scheduler is not None:
        extras["scheduler_state_dict"] = to_cpu_copy(trainer.scheduler.state_dict())
    extras["epoch"] = int(trainer.epoch)
    extras["step"] = int(trainer.step)
    history = trainer.history
    if history:
        last = history[-1]
        loss = last.get("val_loss")
        if loss is None or not np.isfinite(loss):
            loss = last.get("train_loss")
        if loss is not None and np.isfinite(loss):
            extras["loss"] = float(loss)
    return extras


def state_blob(model: nn.Module) -> bytes:
    """The model's weights and frozen set as bytes: ``{"state_dict", "trainable"}`` (CPU copies).

    ``trainable`` lists the parameter names with ``requires_grad=True``.
    """
    state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    trainable = [n for n, p in model.named_parameters(remove_duplicate=False) if p.requires_grad]
    return to_bytes({"state_dict": state, "trainable": trainable})


def read_state_blob(blob: bytes) -> dict:
    """The ``{"state_dict", "trainable"}`` of a :func:`state_blob` (weights only).

    Raises
    ------
    CheckpointError
        The bytes are damaged.
    """
    return dict(tensors_from_bytes(blob))


def apply_state(model: nn.Module, data: dict) -> None:
    """Load a :func:`read_state_blob` result into ``model`` (the window's copy): values, then ``requires_grad``.

    Raises
    ------
    RuntimeError
        The state_dict does not fit ``model`` (``load_state_dict(strict=True)``).
    """
    with torch.no_grad():
        model.load_state_dict(data["state_dict"], strict=True)
    trainable = set(data["trainable"])
    for name, p in model.named_parameters(remove_duplicate=False):
        p.requires_grad_(name in trainable)


class EventBridge(Callback):
    """Turns trainer hooks into :data:`EVENTS` handed to ``emit(name, *args)`` (training thread).

    Parameters
    ----------
    emit : callable
        ``emit(name, *args)``; args are plain data (floats, str, lists, dicts, numpy arrays, bytes).
    sync_state : bool
        The model lives in another process than the window's copy: send ``stateSynced``
        on pause, after a save and at the end, ``extrasReady`` with its tensors as
        bytes (:func:`~workbench.core.model.checkpoint.to_bytes`), and ``cudaMemory``.
    """

    def __init__(self, emit: Callable[..., Any], *, sync_state: bool = False):
        self.emit = emit
        self.sync_state = sync_state
        self.error_sent = False
        self.extras_sent = False
        self._cuda_t = 0.0

    def on_fit_start(self, trainer) -> None:  # noqa: D102
        self.emit("fitStarted", _fit_info(trainer))

    def on_metrics(self, trainer, batch) -> None:  # noqa: D102
        if batch:
            self.emit("metrics", pack_metrics(batch))
        if self.sync_state and trainer.device.type == "cuda":
            now = time.monotonic()
            if now - self._cuda_t >= CUDA_MEMORY_EVERY_S:
                self._cuda_t = now
                mem = cuda_memory(str(trainer.device))
                if mem:
                    self.emit("cudaMemory", float(mem[0]), float(mem[1]))

    def on_progress(self, trainer, text) -> None:  # noqa: D102
        self.emit("progressText", str(text))

    def on_epoch_end(self, trainer, metrics) -> None:  # noqa: D102
        self.emit("epochEnded", plain(dict(metrics)))

    def on_pause(self, trainer) -> None:  # noqa: D102
        self.emit("paused", int(trainer.step))
        if self.sync_state:
            self.emit("stateSynced", state_blob(trainer.model))

    def on_command_applied(self, trainer, command) -> None:  # noqa: D102
        info = describe_command(command)
        info.setdefault("applied_step", int(trainer.step))
        info.setdefault("applied_epoch", float(trainer.epoch) + float(trainer.batch_in_epoch) / max(1, _len(trainer)))
        if isinstance(command, SetTrainable):
            info["changed"] = list(command.changed)
        if isinstance(command, SaveNow) and self.sync_state:
            self.emit("stateSynced", state_blob(trainer.model))
        self.emit("commandApplied", info)

    def on_nonfinite(self, trainer, step, loss) -> None:  # noqa: D102
        trace = trainer.nonfinite_trace
        self.emit("nonFinite", int(step), float(loss), trace.to_dict() if trace is not None else {})

    def on_exception(self, trainer, exc, tb) -> None:  # noqa: D102
        if isinstance(exc, ClassCountMismatch):  # the window offers to replace the head instead
            self.error_sent = True
            self.emit("classCountMismatch", exc.data_classes, exc.model_outputs, str(exc))
            return
        self.report_error(tb)

    def on_fit_end(self, trainer, reason) -> None:  # noqa: D102
        self.send_extras(trainer)
        if self.sync_state:
            self.emit("stateSynced", state_blob(trainer.model))

    def report_error(self, text: str) -> None:
        """Emit ``error(text)`` once per run."""
        if not self.error_sent:
            self.error_sent = True
            self.emit("error", text)

    def send_extras(self, trainer) -> None:
        """Emit ``extrasReady`` once per run (bytes when ``sync_state``); never raises."""
        if self.extras_sent:
            return
        self.extras_sent = True
        try:
            extras = run_extras(trainer)
        except Exception:  # noqa: BLE001 - extras are a convenience, never fail the run's end
            extras = {}
        self.emit("extrasReady", to_bytes(extras) if self.sync_state else extras)


def extras_from_bytes(blob: bytes) -> dict:
    """The ``extrasReady`` dict a training process sent as bytes (``{}`` when unreadable)."""
    try:
        return dict(tensors_from_bytes(blob))
    except Exception:  # noqa: BLE001 - a scheduler state weights_only refuses: keep the weights
        return {}


def _len(trainer) -> int:
    try:
        return len(trainer.train_loader)
    except Exception:  # noqa: BLE001 - not prepared / no len()
        return 1


def _fit_info(trainer) -> dict:
    info: dict[str, Any] = {"epoch": int(trainer.epoch), "step": int(trainer.step),
                            "epochs": int(trainer.config.epochs)}
    try:
        info["steps_per_epoch"] = int(trainer.steps_per_epoch)
        info["total_steps"] = int(trainer.total_steps)
    except Exception:  # noqa: BLE001 - loaders without len()
        pass
    info["run_dir"] = str(trainer.run_dir) if trainer.run_dir is not None else None
    info["data_note"] = trainer.data_note
    info["history"] = [plain(dict(h)) for h in trainer.history]  # the epochs a resumed run continues
    return info
