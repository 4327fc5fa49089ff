"""Choosing where a run trains, and having a training process ready before it is asked for.

:class:`RunLauncher` is what the window keeps between runs: the training
process started ahead (so the next Start shows its first step within a second),
warmed on the opened model, and the choice of the kind of run for the next
Start (:meth:`RunLauncher.make_run`): a data-parallel run on torchrun when the
device asks for several processes, else a run in a training process, else (the
"train in this window's process" setting, or a model that cannot cross) a run
on a thread of this process. Every choice is a
:class:`~workbench.core.train.handle.RunHandle`. Qt-free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from workbench.core.train.handle import RunHandle
from workbench.core.train.launch.ddp_ranks import DistributedTrainingProcess
from workbench.core.train.launch.in_thread import ThreadRun
from workbench.core.train.launch.priority import niceness
from workbench.core.train.launch.training_process import (
    ModelNotPortable, ProcessRun, TrainingProcess, make_job, make_warm_up,
)

__all__ = ["RunLauncher", "RunRequest", "START_AHEAD_ENV"]

#: Environment variable: ``0`` starts no training process ahead (tests, benchmarks measuring a cold start).
START_AHEAD_ENV = "WORKBENCH_START_AHEAD"


@dataclass
class RunRequest:
    """What to train and where.

    Attributes
    ----------
    model : nn.Module
        The window's model (its current weights and frozen set).
    config : TrainConfig
    arch : ArchSpec or None
    resume : str, Path or Checkpoint or None
    callbacks : list of Callback
        The live probes (copies are built where the run trains).
    processes : int
        Ranks of a data-parallel run (1: not data-parallel).
    in_process : bool
        Train on a thread of this process.
    """

    model: object
    config: object
    arch: object = None
    resume: object = None
    callbacks: list | None = None
    processes: int = 1
    in_process: bool = False


class RunLauncher:
    """The process started ahead and the choice of the next run's kind (see the module docstring).

    Attributes
    ----------
    note : str
        One line on the last choice worth saying (a model that cannot cross, a cold
        start, a data-parallel run), or ``""``; the window shows it in the status bar.
    priority : str
        ``"normal"`` or ``"lower"``: the training processes it starts (:meth:`set_priority`).
    """

    def __init__(self) -> None:
        self._spare: TrainingProcess | None = None
        self.note = ""
        self.priority = "lower"

    def set_priority(self, priority: str) -> None:
        """The scheduling priority of the next training processes (:mod:`.priority`); a process started ahead at
        another one is ended (a process cannot raise its own priority again): start another with
        :meth:`start_ahead`.

        Raises
        ------
        ValueError
            ``priority`` is not ``"normal"`` or ``"lower"``.
        """
        niceness(priority)
        self.priority = priority
        if self._spare is not None and self._spare.niceness != niceness(priority):
            self.end_spare()

    def make_run(self, request: RunRequest) -> RunHandle:
        """The handle of the next run (not started: call its ``run`` on the thread that should wait for it).

        Raises
        ------
        ModelNotPortable
            A data-parallel run whose model (or callback) cannot cross into the ranks.
        """
        self.note = ""
        callbacks = list(request.callbacks or [])
        config = request.config
        if request.processes > 1:
            job = make_job(request.model, config, request.arch, request.resume, callbacks=callbacks)
            backend = "NCCL" if str(config.device).startswith("cuda") else "Gloo"
            self.note = (f"Training on {request.processes} processes (DDP, {backend}): the probes show rank 0's "
                         "replica; gradient norms are those after the all-reduce.")
            return ProcessRun(DistributedTrainingProcess(request.processes), job, callbacks,
                              kind="ddp", ranks=request.processes)
        if not request.in_process:
            try:
                job = make_job(request.model, config, request.arch, request.resume, callbacks=callbacks)
            except ModelNotPortable as exc:
                self.note = f"Training in the window's process: {exc}"
            else:
                return ProcessRun(self._take_process(), job, callbacks)
        return ThreadRun(request.model, config, arch=request.arch, resume=request.resume, callbacks=callbacks)

    def start_ahead(self) -> bool:
        """Start an idle training process now, unless one waits or ``WORKBENCH_START_AHEAD=0``; True when one started."""
        if os.environ.get(START_AHEAD_ENV, "1") == "0":
            return False
        if self._spare is not None and self._spare.is_alive():
            return False
        self.end_spare()
        self._spare = TrainingProcess(niceness(self.priority))
        return True

    @property
    def spare(self) -> TrainingProcess | None:
        """The training process started ahead, if any."""
        return self._spare

    def warm(self, model, config, input_shape) -> None:
        """Have the process started ahead take a few throwaway steps of ``model`` at ``config``'s batch size.

        Its first run then does not pay oneDNN's kernel creation at the run's shapes
        (:func:`workbench.core.train.launch.training_process_main.warm_model`). Nothing happens without
        a spare process, or for what :func:`make_warm_up` skips (no input shape, CUDA, large models).
        """
        if self._spare is not None and model is not None:
            self._spare.warm_up(make_warm_up(model, config, input_shape))

    def wait_ready(self, timeout: float = 120.0) -> bool:
        """Block until the process started ahead is ready and warmed (benchmarks); True when it is, or none was started."""
        return self._spare is None or (self._spare.wait_ready(timeout) and self._spare.wait_warm(timeout))

    def end_spare(self) -> None:
        """End the process started ahead (the window closes, or the next runs train in this process)."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.end()

    def _take_process(self) -> TrainingProcess:
        """The process started ahead when it lives, else a new one (a cold start, said in :attr:`note`)."""
        spare, self._spare = self._spare, None
        if spare is not None and spare.is_alive() and spare.niceness == niceness(self.priority):
            return spare
        if spare is not None:
            spare.end()
        self.note = "Starting training process…"
        return TrainingProcess(niceness(self.priority))
