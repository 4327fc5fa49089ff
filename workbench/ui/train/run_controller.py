"""The window's side of a run: :class:`RunController` starts, drives and ends it, wherever it trains.

Where the next run trains (a training process started ahead, torchrun's ranks,
a thread of this process) is the :class:`~workbench.core.train.launch.RunLauncher`'s
choice; the controller keeps the launcher (the process started ahead and warmed
on the opened model, the in-process choice), calls the chosen
:class:`~workbench.core.train.handle.RunHandle`'s ``run`` on its own QThread
(``"trainingThread"``), turns each typed event
(:mod:`workbench.core.train.events`) into the Qt signal ``event(object)``
delivered on the GUI thread in order, and passes steering (pause, resume, stop,
stop and save, commands, the NaN answer, end by force) straight to the handle,
whose methods are thread-safe. A script's run (attached) is driven the same
way. It also watches what belongs to the run rather than to the widgets: a Stop
whose step never returns (``prompts.end_training_process``, after a wait that
follows the measured step time: :mod:`.stop_timeout`), the CUDA memory
line, the TensorBoard command and the window's close. The GUI thread never
touches a model being trained.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QCoreApplication, QObject, Qt, QTimer, Signal, Slot

from workbench.core.train.devices import cuda_memory
from workbench.core.train.events import CudaMemory, Finished, FitStarted, Metrics, ProgressText
from workbench.core.train.handle import RunHandle
from workbench.core.train.launch import ModelNotPortable, RunLauncher, RunRequest
from workbench.core.train.trainer.commands import EmptyCudaCache, SaveNow, SetLR, SetTrainable
from workbench.core.train.trainer.control import NONFINITE_ACTIONS
from workbench.ui.threading import start_in_thread, wait_for
from workbench.ui.train.stop_timeout import StepClock

__all__ = ["RunController", "SHUTDOWN_TIMEOUT_MS", "tensorboard_command"]

#: How long :meth:`RunController.shutdown` waits for the run to stop, ms.
SHUTDOWN_TIMEOUT_MS = 15000
#: How often the CUDA memory line is refreshed during a CUDA run, ms.
MEMORY_MS = 500


def tensorboard_command(run_dir: str | None) -> str | None:
    """``tensorboard --logdir "<run_dir>/tensorboard"``, or None without a run folder."""
    if not run_dir:
        return None
    return f'tensorboard --logdir "{Path(run_dir) / "tensorboard"}"'


def copy_tensorboard_command(run_dir: str | None, status) -> str | None:
    """Put :func:`tensorboard_command` of ``run_dir`` on the clipboard and say so (``status(text, ms)``); it, or
    None (and the status says why) without a run folder."""
    from PySide6.QtGui import QGuiApplication

    command = tensorboard_command(run_dir)
    if command is None:
        status("Start a run first: TensorBoard reads the run folder's event files", 8000)
        return None
    QGuiApplication.clipboard().setText(command)
    status(f"Copied: {command}", 15000)
    return command


#: What the status bar says at Start of a run in a training process, by its priority.
PRIORITY_SAID = {"normal": "Training process at normal priority (Run options › Process priority)",
                 "lower": "Training process at lower priority, nice +10: the window stays smooth "
                          "(Run options › Process priority)"}

class _Runner(QObject):
    """Runs ``handle.run`` on the QThread it was moved to; every event out as ``event(object)``."""

    event = Signal(object)
    finished = Signal(str)

    def __init__(self, handle: RunHandle):
        super().__init__()
        self.handle = handle

    @Slot()
    def run(self) -> None:
        reason = "error"
        try:
            reason = self.handle.run(self.event.emit)
        finally:
            self.handle = None  # the handle holds the trainer; nothing here outlives the run
            self.finished.emit(reason)


class RunController(QObject):
    """Starts the run of the moment, owns it on a QThread and relays its events as Qt signals.

    Parameters
    ----------
    parent : QObject, optional
    prompts : object, optional
        ``end_training_process(seconds) -> bool`` (a Stop whose step has not returned) and
        ``training_error(text)`` (a close that could not stop the run); without it, neither is asked.

    Signals
    -------
    event(object)
        Every :class:`~workbench.core.train.events.Event` of the run, on the GUI
        thread, in order; ``Finished`` is the last.
    ended()
        The run's thread has finished (after ``Finished`` was delivered).
    status(str, int)
        A line for the status bar and how long to show it, ms (0: until replaced).

    Attributes
    ----------
    handle : RunHandle or None
        The run of the moment, from :meth:`start` until just after ``ended`` (it holds the trainer).
    launcher : RunLauncher
        The process started ahead and the choice of the next run's kind.
    in_process : bool
        The next runs train on a thread of this process (:meth:`set_in_process`).
    warm_source : callable or None
        ``() -> (model, config, input_shape)`` to warm the process started ahead on, or None when
        there is nothing to warm it on yet.
    stop_timer : QTimer
        Single shot after Stop: :data:`~.stop_timeout.STOP_STEPS` times the slowest recent step, at least
        :data:`~.stop_timeout.STOP_FLOOR_MS` (:attr:`clock`).
    clock : StepClock
        The durations of the run's recent steps.
    """

    event = Signal(object)
    ended = Signal()
    status = Signal(str, int)

    def __init__(self, parent: QObject | None = None, prompts=None):
        super().__init__(parent)
        self.handle: RunHandle | None = None
        self._thread = None
        self.prompts = prompts
        self.launcher = RunLauncher()
        self.in_process = False
        self.warm_source: Callable[[], tuple | None] | None = None
        #: ``config -> "normal" | "lower"``: the training process's priority for a run (Run options)
        self.priority_source: Callable[[object], str] | None = None
        self.device = "cpu"
        self._cuda_mem: tuple[float, float] | None = None
        self.stop_timer = QTimer(self)
        self.stop_timer.setSingleShot(True)
        self.stop_timer.timeout.connect(self._on_stop_timeout)
        self.clock = StepClock()
        self._stop_asked: tuple[float, int] | None = None  # (monotonic s, steps seen) when Stop was pressed
        self._asking = False  # prompts.end_training_process is open
        self._alive_at = 0.0  # monotonic s of the run's last sign of progress (a step, a pre-flight line)
        self._memory_timer = QTimer(self)
        self._memory_timer.setInterval(MEMORY_MS)
        self._memory_timer.timeout.connect(self.show_memory)
        self.event.connect(self._on_event)

    # -- where the next run trains ------------------------------------------------------
    def make_run(self, model, config, *, arch=None, resume=None, callbacks=(), processes: int = 1) -> RunHandle | None:
        """The handle of the next run, where the launcher chooses (its note goes to :attr:`status`).

        None after ``prompts.training_error`` said why it cannot start (a data-parallel run whose
        model or callback cannot cross into the ranks).
        """
        request = RunRequest(model, config, arch, resume, list(callbacks), processes=processes,
                             in_process=self.in_process)
        if self.priority_source is not None:
            self.launcher.set_priority(self.priority_source(config))
        try:
            handle = self.launcher.make_run(request)
        except ModelNotPortable as exc:
            if self.prompts is not None:
                self.prompts.training_error(f"Cannot start a data-parallel run: {exc}")
            return None
        said = [self.launcher.note] if self.launcher.note else []
        if getattr(handle, "kind", "") == "process":
            said.append(PRIORITY_SAID[self.launcher.priority])
        if said:
            self.status.emit(" · ".join(said), 15000)
        return handle

    def set_priority(self, priority: str) -> None:
        """The training processes' priority from now on (``"normal"`` / ``"lower"``); a process started ahead at
        another one is replaced (idle only: a running run keeps its own)."""
        self.launcher.set_priority(priority)
        if not self.is_running():
            self.start_ahead()

    def set_in_process(self, flag: bool) -> None:
        """Train the next runs on a thread of this process (True: the process started ahead is ended) or not."""
        self.in_process = bool(flag)
        if self.in_process:
            self.launcher.end_spare()
        else:
            self.start_ahead()

    def start_ahead(self) -> None:
        """Start an idle training process now, so the next Start shows its first step within a second.

        Does nothing in in-process mode, when one is already waiting, or when the
        environment sets ``WORKBENCH_START_AHEAD=0``.
        """
        if not self.in_process and self.launcher.start_ahead():
            self.warm_spare()

    def warm_spare(self) -> None:
        """Have the process started ahead take a few throwaway steps of :attr:`warm_source`'s model.

        Nothing happens during a run or without anything to warm on (:meth:`RunLauncher.warm` says what else).
        """
        warm = None if self.is_running() or self.warm_source is None else self.warm_source()
        if warm is not None:
            self.launcher.warm(*warm)

    def wait_for_training_process(self, timeout: float = 120.0) -> bool:
        """Block until the process started ahead is ready and has warmed up (benchmarks: neither may overlap a
        measurement). True when it is, or none was started."""
        return self.launcher.wait_ready(timeout)

    def start(self, handle: RunHandle, device: str = "cpu") -> None:
        """Run ``handle`` on a new QThread (``device``: its memory is shown during a CUDA run).

        Raises
        ------
        RuntimeError
            A run is still going.
        """
        if self.is_running():
            raise RuntimeError("a run is still going")
        self.handle = handle
        self.clock.reset()
        self._stop_asked = None
        runner = _Runner(handle)
        queued = Qt.ConnectionType.QueuedConnection  # always delivered on the GUI thread
        runner.event.connect(self.event, queued)  # signal to signal: emitted again on the GUI thread
        thread = start_in_thread(runner, "trainingThread")
        thread.finished.connect(self._on_thread_finished, queued)
        self._thread = thread
        self.device, self._cuda_mem = str(device), None
        if self.device.startswith("cuda"):
            self._memory_timer.start()

    def is_running(self) -> bool:
        """True from :meth:`start` until the run's thread has finished (and ``ended`` was emitted)."""
        return self._thread is not None

    @property
    def kind(self) -> str:
        """The handle's kind (``"thread"``, ``"process"``, ``"ddp"``, ``"attached"``), or ``""`` before a run."""
        return self.handle.kind if self.handle is not None else ""

    def is_attached(self) -> bool:
        """The run of the moment is a script's, attached (the panel's ``attach``)."""
        return self.is_running() and self.kind == "attached"

    def detach(self) -> bool:
        """Let go of an attached script: it trains on as it is. False when none is attached."""
        if not self.is_attached():
            return False
        self.stop_and_save()  # an attached run's stop_and_save detaches; the script is never stopped
        return True

    def wait(self, timeout_ms: int) -> bool:
        """Wait up to ``timeout_ms`` (ms) for the run's thread; True when it has finished."""
        return wait_for(self._thread, timeout_ms)

    def finish_now(self) -> None:
        """The thread finished but its queued end was not delivered (the window closes): end here."""
        if self._thread is not None:
            self._on_thread_finished()

    def steers(self) -> bool:
        """This window steers the run of the moment (False: an attached run whose steering another window has,
        or took over; its commands would be refused). True without a run."""
        return bool(getattr(self.handle, "steering", True)) if self.handle is not None else True

    # steering: each goes straight to the handle (thread-safe there); nothing happens without a run
    def pause(self) -> None:
        """Pause at the next step boundary."""
        if self.handle is not None:
            self.handle.pause()

    def resume(self) -> None:
        """Continue a paused run."""
        if self.handle is not None:
            self.handle.resume()

    def stop(self) -> None:
        """Stop at the next step boundary.

        A step that has not returned after :data:`~.stop_timeout.STOP_STEPS` times the slowest
        recent step (at least :data:`~.stop_timeout.STOP_FLOOR_MS`; a hung forward) makes the
        controller offer to end the training process (``prompts.end_training_process``).
        """
        if self.handle is not None:
            self.handle.stop()
            if self.kind != "attached" and not self.stop_timer.isActive():  # a script's step is the script's
                self._stop_asked = (time.monotonic(), self.clock.steps)
                self.stop_timer.start(self.clock.timeout_ms())

    def stop_and_save(self) -> None:
        """Stop at the next step boundary and write ``last.pt`` (the window closes)."""
        if self.handle is not None:
            self.handle.stop_and_save()

    def queue(self, command) -> None:
        """Apply ``command`` at the next step boundary.

        Raises
        ------
        RuntimeError
            No run is going.
        """
        if self.handle is None or not self.is_running():
            raise RuntimeError("no training run is active")
        self.handle.queue(command)

    def queue_trainable(self, names: list[str] | str, flag: bool) -> None:
        """Freeze (``flag=False``) / unfreeze ``names`` (module or parameter names, ``""`` = the whole model) at the
        next step boundary. Raises RuntimeError without a run."""
        self.queue(SetTrainable([names] if isinstance(names, str) else list(names), bool(flag)))

    def queue_save(self, path=None) -> None:
        """Save a checkpoint at the next step boundary (``None``: into the run folder)."""
        self.queue(SaveNow(None if path is None else str(path)))

    def queue_lr(self, lr: float) -> None:
        """Change the learning rate at the next step boundary."""
        self.queue(SetLR(float(lr)))

    def empty_cuda_cache(self) -> None:
        """``torch.cuda.empty_cache()`` where the run trains (its process at the next step), else here; the memory
        line follows."""
        if self.is_running():
            self.queue(EmptyCudaCache())
            return
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
            self.show_memory()

    def resolve_nonfinite(self, action: str) -> str:
        """Answer a ``NonFinite`` event (``"lower_lr"``, ``"rollback"``, ``"stop"``; anything else is ``"stop"``);
        returns the answer sent."""
        action = action if action in NONFINITE_ACTIONS else "stop"
        if self.handle is not None:
            self.handle.resolve_nonfinite(action)
        return action

    def end(self) -> bool:
        """End the run by force (a step that never returns); False when its kind cannot be (a thread run)."""
        return self.handle is not None and self.is_running() and self.handle.end()

    def end_training_process(self) -> bool:
        """End the run's training process now (a step that never returns); False for a run in this process."""
        if not self.end():
            return False
        self.status.emit("Ending the training process…", 5000)
        return True

    def show_memory(self) -> None:
        """The CUDA memory of the run's device on :attr:`status` (a process run reports its own; nothing for CPU)."""
        if not self.device.startswith("cuda"):
            return
        # a process run reports its memory; this process never initializes CUDA for it
        mem = self._cuda_mem if self._cuda_mem is not None else (
            cuda_memory(self.device) if self.handle is not None and self.handle.in_this_process else None)
        if mem:
            alloc, reserved = _mem_pair(mem)
            self.status.emit(f"{self.device}: {alloc / 2**20:,.0f} MiB allocated / {reserved / 2**20:,.0f} MiB "
                             "reserved", 0)

    def shutdown(self, ask: Callable[[], bool] | None = None, timeout_ms: int = SHUTDOWN_TIMEOUT_MS) -> bool:
        """The window closes: end the process started ahead and stop the run; True = the window may close.

        While a run is active: ``ask()`` (False = cancel the close; an attached script is let go, never
        stopped, so nothing is asked), stop at the next step boundary (a pause or a pending NaN decision
        ends with "stop") and write ``last.pt`` into the run folder, wait for the thread (``timeout_ms``),
        and let the run's end arrive. A training process that has not stopped by then is ended (SIGKILL;
        the run folder keeps its last checkpoint). False if a run in this process did not finish in time
        (closing then would destroy a running QThread).
        """
        self._memory_timer.stop()
        self._cancel_stop_question()
        if not self.is_running():
            self.launcher.end_spare()
            return True
        if ask is not None and self.kind != "attached" and not ask():
            return False
        self.launcher.end_spare()
        self.stop_and_save()
        if not self.wait(timeout_ms) and (not self.end() or not self.wait(15000)):
            if self.prompts is not None:
                self.prompts.training_error("Training did not stop in time; try closing again in a moment.")
            return False
        for _ in range(20):  # deliver the run's last queued signals (extras, finished) and the thread's end
            QCoreApplication.processEvents()
            if not self.is_running():
                break
        self.finish_now()  # the queued end did not arrive: finish by hand
        self.launcher.end_spare()  # whoever listens to ``ended`` may have started the next one
        return True

    @Slot(object)
    def _on_event(self, event) -> None:
        if isinstance(event, (Metrics, ProgressText)):
            self._alive_at = time.monotonic()
        if isinstance(event, Metrics):
            self.clock.add(event.values)
        elif isinstance(event, FitStarted):
            self.clock.reset()
        elif isinstance(event, CudaMemory):
            self._cuda_mem = (event.allocated, event.reserved)
        elif isinstance(event, Finished):
            self._cancel_stop_question()

    def _cancel_stop_question(self) -> None:
        """The run ended (or the window closes): no "does not stop" question now, nor one left open."""
        self.stop_timer.stop()
        self._stop_asked = None
        if self._asking:  # the box waits in its own event loop: close it, its answer is ignored
            self.prompts.cancel_end_training_process()

    def _on_stop_timeout(self) -> None:
        """Stop was asked a while ago (:attr:`clock`'s timeout): offer to end a step that has not returned."""
        if self.handle is None or not self.is_running() or self._stop_asked is None:
            return
        asked_at, steps_then = self._stop_asked
        # from the last sign of progress: the pre-flight's image scan ("checking images …") is no hung step
        waited_ms = (time.monotonic() - max(asked_at, self._alive_at)) * 1000.0
        wait_ms = self.clock.timeout_ms()
        if self.clock.steps > steps_then:  # the step returned: the run is ending (a save, the last events)
            self.stop_timer.start(wait_ms)
            return
        if waited_ms < wait_ms:  # progress, or a slower step measured, meanwhile: wait for it too
            self.stop_timer.start(int(wait_ms - waited_ms) + 1)
            return
        seconds = max(1, round(waited_ms / 1000.0))
        if not self.handle.can_end:
            self.status.emit(f"The step has not returned in {seconds} s; a run in this window's process cannot be "
                             "ended by force.", 15000)
            return
        if self.prompts is None:
            return
        self._asking = True
        try:
            end = self.prompts.end_training_process(seconds)
        finally:
            self._asking = False
        if self._stop_asked is None or not self.is_running():
            return  # the run ended while the question was open: nothing to end, nothing to ask again
        if end:
            self.end_training_process()
        else:
            self._stop_asked = (time.monotonic(), self.clock.steps)
            self.stop_timer.start(wait_ms)  # ask again later

    @Slot()
    def _on_thread_finished(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._memory_timer.stop()
        wait_for(thread, 5000)
        self.ended.emit()
        self.handle = None


def _mem_pair(mem) -> tuple[float, float]:
    if isinstance(mem, dict):
        return float(mem.get("allocated", 0)), float(mem.get("reserved", 0))
    if isinstance(mem, (tuple, list)):
        return float(mem[0]), float(mem[1])
    return float(getattr(mem, "allocated", 0)), float(getattr(mem, "reserved", 0))
