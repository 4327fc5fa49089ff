"""The events of a run: typed, declared once, serialised once at a process boundary.

Every way a run exists (a thread in the window's process, the training process,
torchrun's rank 0; later a user's own step or script) reports what happens as
instances of the dataclasses below, in this order of a run's life:

* :class:`FitStarted` (epoch, step, epochs, steps_per_epoch, total_steps,
  run_dir, data_note, history: the epochs a resumed run continues);
* :class:`Metrics` once per ``on_metrics`` batch (~25 Hz): ``{"step": array, "loss": array, ...}``;
* :class:`ProgressText`, :class:`EpochEnded`, :class:`CommandApplied` (the
  command itself, of the type it was queued as, with its result fields filled
  in), :class:`NonFinite`, :class:`ClassCountDiffers`, :class:`RunError` (the
  traceback text, once per run);
* :class:`ExtrasReady`: optimizer / scheduler state (CPU copies), epoch, step, loss;
* :class:`StateSynced`: the model's state_dict and trainable names, when a run in
  another process pauses, saves or ends;
* :class:`Paused`: the run blocks at this step (before its ``StateSynced``);
* :class:`Sink`: what callback ``index`` built in the training process handed its
  sink (the live probes' reports; routed to the window's callback, never shown);
  :class:`CudaMemory`: bytes allocated, reserved; :class:`RanksLine`: every rank's
  step and heartbeat age of a data-parallel run; :class:`Notice`: one line for the status bar (a run
  file's write failed or works again, Save now failed; an attached script's lease, steering);
* :class:`Finished`: the end reason, always last.

:class:`EventBridge` is the one :class:`~workbench.core.train.trainer.hooks.Callback`
that turns trainer hooks into these events. Each wire has one encoding of them:
a training process's pipe sends ``(type name, fields)`` (:func:`to_wire` /
:func:`from_wire`: tensors as safetensors-style bytes read back weights-only,
commands as their type's name and plain fields); an attached script's socket
sends the event as one data-only dataclass (:mod:`workbench.core.attach.wire`,
the types of :data:`workbench.core.attach.script.PUBLISHED`). Qt-free.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from workbench.core.model.wire import tensors_from_bytes, to_bytes
from workbench.core.train.trainer import commands as _commands
from workbench.core.train.devices import cuda_memory
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.data.preflight import ClassCountMismatch

__all__ = ["Event", "FitStarted", "Metrics", "ProgressText", "EpochEnded", "CommandApplied", "NonFinite",
           "ClassCountDiffers", "RunError", "ExtrasReady", "Paused", "StateSynced", "Sink", "CudaMemory", "RanksLine",
           "Notice", "NOTICE_KINDS", "Finished", "EVENT_TYPES", "to_wire", "from_wire", "EventBridge", "pack_metrics", "to_cpu_copy",
           "run_extras", "model_state", "read_state_blob", "apply_state", "extras_from_bytes"]

@dataclass
class Event:
    """Base of every event of a run (see the module docstring for the list and order)."""


@dataclass
class FitStarted(Event):
    """``fit()`` began: ``info`` holds epoch, step, epochs, steps_per_epoch, total_steps, run_dir, data_note, history,
    samples (a causal LM completes prompts: ``SampleNow`` applies)."""

    info: dict


@dataclass
class Metrics(Event):
    """Per-step metrics of a batch of steps: ``{"step": (S,) array, "loss": (S,) array, ...}`` (float64, NaN = missing)."""

    values: dict


@dataclass
class ProgressText(Event):
    """A line on where the run is before its first step (the pre-flight scan, starting a process)."""

    text: str


@dataclass
class EpochEnded(Event):
    """An epoch's end: ``metrics`` holds epoch, step, train_loss, val_loss, val_acc, time (s), skipped..."""

    metrics: dict


@dataclass
class CommandApplied(Event):
    """A queued command was applied at step ``step`` (epoch ``epoch``, fractional).

    ``command`` is of the type it was queued as (:mod:`~workbench.core.train.trainer.commands`)
    with its result fields filled in (``SetTrainable.changed``, ``SaveNow.saved_to``...).
    """

    command: Any
    step: int
    epoch: float


@dataclass
class NonFinite(Event):
    """The loss of ``step`` was NaN/Inf: the run waits for ``resolve_nonfinite``; ``trace`` is
    :meth:`NonFiniteTrace.to_dict <workbench.core.train.trainer.nan_trace.NonFiniteTrace.to_dict>` or ``{}``."""

    step: int
    loss: float
    trace: dict


@dataclass
class ClassCountDiffers(Event):
    """Caught before any step: the data has ``data_classes`` classes, the model ``model_outputs`` outputs."""

    data_classes: int
    model_outputs: int
    message: str


@dataclass
class RunError(Event):
    """The run failed: ``text`` is the traceback (or the one line saying why), once per run."""

    text: str


@dataclass
class ExtrasReady(Event):
    """``optimizer_state_dict``, ``scheduler_state_dict``, ``epoch``, ``step``, ``loss`` (CPU copies) at the run's end."""

    extras: dict


@dataclass
class Paused(Event):
    """The run blocks at step ``step`` (a pause, or a NaN question)."""

    step: int


@dataclass
class StateSynced(Event):
    """The weights and frozen set of a model trained in another process: ``{"state_dict", "trainable"}``."""

    state: dict


@dataclass
class Sink(Event):
    """What callback ``index`` of a training process handed its sink (routed to the window's callback)."""

    index: int
    data: Any


@dataclass
class CudaMemory(Event):
    """CUDA memory of the training process: bytes allocated and reserved."""

    allocated: float
    reserved: float


@dataclass
class RanksLine(Event):
    """A data-parallel run's every rank: ``"ranks: 0 step 40 (812/s, 0.1 s ago) · 1 step 40 (…)"``."""

    text: str


#: The kinds of :class:`Notice`.
NOTICE_KINDS = ("write_failed", "write_ok", "save_failed", "command_failed", "lease_lapsed", "read_only")


@dataclass
class Notice(Event):
    """One line the window shows in its status bar (a run's or an attached script's).

    Attributes
    ----------
    kind : str
        One of :data:`NOTICE_KINDS`: a write failed (``file`` names it), a file is written again after a failure,
        Save now failed, a command could not apply, the pause lease lapsed, this window is read-only now.
    text : str
        The line, whole (what failed and why).
    file : str
        The file concerned (``""``: none).
    """

    kind: str
    text: str
    file: str = ""


@dataclass
class Finished(Event):
    """The run ended: ``"completed"``, ``"stopped"``, ``"error"``, ``"nonfinite"``, ``"crashed"``, ``"ended"``."""

    reason: str


#: Every event type by name: the one declaration (the wire format and the window dispatch on it).
EVENT_TYPES: dict[str, type[Event]] = {cls.__name__: cls for cls in (
    FitStarted, Metrics, ProgressText, EpochEnded, CommandApplied, NonFinite, ClassCountDiffers, RunError,
    ExtrasReady, Paused, StateSynced, Sink, CudaMemory, RanksLine, Notice, Finished)}

#: The command types a :class:`CommandApplied` may carry back over a process boundary.
_COMMAND_TYPES = {cls.__name__: cls for cls in (
    _commands.SetTrainable, _commands.SetLR, _commands.SaveNow, _commands.EmptyCudaCache, _commands.SampleNow,
    _commands.Call)}


#: Seconds between two ``CudaMemory`` events of a CUDA run.
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


def to_wire(event: Event) -> tuple[str, dict]:
    """``(type name, fields)`` of ``event`` for a process boundary: plain data and bytes only.

    The tensors of :class:`StateSynced` and :class:`ExtrasReady` become bytes
    (:func:`~workbench.core.model.wire.to_bytes`); a :class:`CommandApplied`'s
    command becomes ``(its type's name, its plain fields)`` (a ``Call``'s function stays behind).
    """
    name = type(event).__name__
    fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    if isinstance(event, StateSynced):
        fields["state"] = to_bytes(event.state)
    elif isinstance(event, ExtrasReady):
        fields["extras"] = to_bytes(event.extras)
    elif isinstance(event, CommandApplied):
        cmd = event.command
        data = {f.name: plain(getattr(cmd, f.name)) for f in dataclasses.fields(cmd) if f.name != "fn"}
        fields["command"] = (type(cmd).__name__, data)
    return name, fields


def from_wire(name: str, fields: dict) -> Event:
    """The event :func:`to_wire` described (decodes bytes weights-only; call off the GUI thread).

    Raises
    ------
    KeyError
        ``name`` is not an event type (:data:`EVENT_TYPES`), or a command type unknown here.
    CheckpointError
        The bytes of a :class:`StateSynced` are damaged.
    """
    cls = EVENT_TYPES[name]
    fields = dict(fields)
    if cls is StateSynced:
        fields["state"] = read_state_blob(fields["state"])
    elif cls is ExtrasReady:
        fields["extras"] = extras_from_bytes(fields["extras"])
    elif cls is CommandApplied:
        kind, data = fields["command"]
        command_cls = _COMMAND_TYPES[kind]
        if command_cls is _commands.Call:
            data = {"fn": None, **data}
        fields["command"] = command_cls(**data)
    return cls(**fields)


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


def model_state(model: nn.Module) -> dict:
    """The model's weights and frozen set: ``{"state_dict", "trainable"}`` (CPU copies).

    ``trainable`` lists the parameter names with ``requires_grad=True``.
    """
    state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    trainable = [n for n, p in model.named_parameters(remove_duplicate=False) if p.requires_grad]
    return {"state_dict": state, "trainable": trainable}


def read_state_blob(blob: bytes) -> dict:
    """The ``{"state_dict", "trainable"}`` of a :func:`model_state` sent as bytes (:func:`to_wire`; weights only).

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
    """Turns trainer hooks into typed events handed to ``emit(event)`` (training thread).

    Parameters
    ----------
    emit : callable
        ``emit(event)`` with an :class:`Event`.
    sync_state : bool
        The model lives in another process than the window's copy: send
        :class:`StateSynced` on pause, after a save and at the end, and
        :class:`CudaMemory` every :data:`CUDA_MEMORY_EVERY_S`.
    """

    def __init__(self, emit: Callable[[Event], Any], *, sync_state: bool = False):
        self.emit = emit
        self.sync_state = sync_state
        self.error_sent = False
        self.extras_sent = False
        self._cuda_t = 0.0

    def on_fit_start(self, trainer) -> None:  # noqa: D102
        self.emit(FitStarted(_fit_info(trainer)))

    def on_metrics(self, trainer, batch) -> None:  # noqa: D102
        if batch:
            self.emit(Metrics(pack_metrics(batch)))
        if self.sync_state and trainer.device.type == "cuda":
            now = time.monotonic()
            if now - self._cuda_t >= CUDA_MEMORY_EVERY_S:
                self._cuda_t = now
                mem = cuda_memory(str(trainer.device))
                if mem:
                    self.emit(CudaMemory(float(mem[0]), float(mem[1])))

    def on_progress(self, trainer, text) -> None:  # noqa: D102
        self.emit(ProgressText(str(text)))

    def on_notice(self, trainer, kind, text, file) -> None:  # noqa: D102
        self.emit(Notice(str(kind), str(text), str(file)))

    def on_epoch_end(self, trainer, metrics) -> None:  # noqa: D102
        self.emit(EpochEnded(plain(dict(metrics))))

    def on_pause(self, trainer) -> None:  # noqa: D102
        self.emit(Paused(int(trainer.step)))
        if self.sync_state:
            self.emit(StateSynced(model_state(trainer.model)))

    def on_command_applied(self, trainer, command) -> None:  # noqa: D102
        epoch = float(trainer.epoch) + float(trainer.batch_in_epoch) / max(1, _len(trainer))
        if isinstance(command, _commands.SaveNow) and self.sync_state:
            self.emit(StateSynced(model_state(trainer.model)))
        self.emit(CommandApplied(command, int(trainer.step), epoch))

    def on_nonfinite(self, trainer, step, loss) -> None:  # noqa: D102
        trace = trainer.nonfinite_trace
        self.emit(NonFinite(int(step), float(loss), trace.to_dict() if trace is not None else {}))

    def on_exception(self, trainer, exc, tb) -> None:  # noqa: D102
        if isinstance(exc, ClassCountMismatch):  # the window offers to replace the head instead
            self.error_sent = True
            self.emit(ClassCountDiffers(exc.data_classes, exc.model_outputs, str(exc)))
            return
        self.report_error(tb)

    def on_fit_end(self, trainer, reason) -> None:  # noqa: D102
        self.send_extras(trainer)
        if self.sync_state:
            self.emit(StateSynced(model_state(trainer.model)))

    def report_error(self, text: str) -> None:
        """Emit :class:`RunError` once per run."""
        if not self.error_sent:
            self.error_sent = True
            self.emit(RunError(text))

    def send_extras(self, trainer) -> None:
        """Emit :class:`ExtrasReady` once per run; never raises."""
        if self.extras_sent:
            return
        self.extras_sent = True
        try:
            extras = run_extras(trainer)
        except Exception:  # noqa: BLE001 - extras are a convenience, never fail the run's end
            extras = {}
        self.emit(ExtrasReady(extras))


def extras_from_bytes(blob: bytes) -> dict:
    """The ``ExtrasReady`` dict a training process sent as bytes (``{}`` when unreadable)."""
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
    info["samples"] = getattr(getattr(trainer, "task", None), "samples", None) is not None  # "Sample now" applies
    info["history"] = [plain(dict(h)) for h in trainer.history]  # the epochs a resumed run continues
    return info
