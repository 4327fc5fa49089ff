"""The window's data-parallel run: N training processes on torchrun, steered like one.

:class:`DistributedTrainingProcess` has the interface of
:class:`~workbench.core.train.launch.training_process.TrainingProcess` (``wait_ready``,
``start_job``, ``send``, ``recv``, ``is_alive``, ``exitcode``, ``log_tail``,
``end``, ``kill``), so the window's
:class:`~workbench.core.train.launch.training_process.ProcessRun` runs it
unchanged. ``start_job`` writes the job (the window's model as bytes, its
settings, the live probes) to a private file and starts ``torch.distributed.run``
through :class:`~workbench.core.train.launch.torchrun.DistributedRun`, which listens for
every rank's heartbeat; rank 0 also connects back with the training process's
own protocol (:func:`workbench.core.train.launch.training_process_main.run_job`), and every message the
window sends goes to it. Rank 0 makes the other ranks apply the same commands at
the same step (:class:`~workbench.core.train.trainer.rank_sync.RankSync`).

Besides rank 0's events, ``recv`` gives ``("event", "RanksLine", {"text": line})``
with every rank's step and heartbeat age every :data:`RANKS_LINE_S`; a rank that
died or made no step for ``timeout_s`` ends the whole run (torchrun's process
group), and :meth:`log_tail` names it first. Qt-free.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from workbench.core.train.launch.torchrun import DistributedRun

__all__ = ["DistributedTrainingProcess", "RANKS_LINE_S"]

#: Seconds between two per-rank progress lines.
RANKS_LINE_S = 0.5
#: Seconds torchrun may take to start its ranks and rank 0 to connect.
CONNECT_TIMEOUT_S = 180.0


def _ended_by_signal(msg: Any) -> bool:
    """``msg`` is rank 0's ``RunError`` for a signal torchrun's agent sent it (``SignalException``), which it
    sends to every rank left when one rank has died."""
    if not (isinstance(msg, tuple) and len(msg) == 3 and msg[:2] == ("event", "RunError")):
        return False
    text = msg[2].get("text", "") if isinstance(msg[2], dict) else ""
    return "SignalException" in str(text)


class DistributedTrainingProcess:
    """One data-parallel run from the window (see the module docstring).

    Parameters
    ----------
    processes : int
        Ranks on this machine (``--nproc-per-node``).
    timeout_s : float
        A rank without a step (or a heartbeat while paused) for this long ends the run.

    Attributes
    ----------
    run : DistributedRun or None
        Once :meth:`start_job` was called.
    problem : str or None
        The sentence naming a rank that died or hung.
    """

    def __init__(self, processes: int, timeout_s: float = 60.0):
        self.processes = int(processes)
        self.timeout_s = float(timeout_s)
        self._dir = Path(tempfile.mkdtemp(prefix="workbench-ddp-"))  # 0700: the job holds the user's model
        self.log_path = self._dir / "ranks.log"
        self.run: DistributedRun | None = None
        self.problem: str | None = None
        self.job_sent = False
        self.pid: int | None = None
        self._pending: queue.SimpleQueue = queue.SimpleQueue()
        self._last_line = 0.0
        self._closed = False

    # ------------------------------------------------------------ state
    @property
    def ready(self) -> bool:
        """True once rank 0 has connected (a data-parallel run is never started ahead)."""
        return self.run is not None and self.run.main_conn is not None

    def wait_ready(self, timeout: float = 0.0) -> bool:
        """Nothing to wait for before the job: torchrun starts with it (:meth:`start_job`)."""
        return True

    def is_alive(self) -> bool:
        """torchrun runs."""
        return self.run is not None and self.run.proc is not None and self.run.proc.poll() is None

    @property
    def exitcode(self) -> int | None:
        """torchrun's exit code (negative: killed by that signal), None while it runs."""
        if self.run is None or self.run.proc is None:
            return None
        return self.run.proc.poll()

    # ------------------------------------------------------------ messages
    def start_job(self, job: dict) -> bool:
        """Write the job, start torchrun with ``processes`` ranks, wait for rank 0; False when it failed.

        Each rank computes with ``cores // processes`` intra-op threads.
        """
        from workbench.core.train.config import TrainConfig

        self.job_sent = True
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        job = {**job, "threads": max(1, cores // self.processes)}
        path = self._dir / "job.pkl"
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            pickle.dump(job, f, protocol=pickle.HIGHEST_PROTOCOL)
        self.run = DistributedRun(None, self.processes, config=TrainConfig.from_dict(job["config"]),
                                  rank_args=["--job", str(path)], serve=True, log_path=self.log_path,
                                  timeout_s=self.timeout_s, out=self._say)
        self.run.start()
        ok = self.run.wait_until(lambda _ranks: self.run.main_conn is not None, CONNECT_TIMEOUT_S)
        if ok:
            self.pid = self.run.proc.pid
        return ok

    def _say(self, line: str) -> None:
        self._pending.put(("event", "ProgressText", {"text": line}))

    def send(self, msg: tuple) -> bool:
        """One message to rank 0 (which every rank follows); False when it is gone."""
        conn = self.run.main_conn if self.run is not None else None
        if conn is None:
            return False
        try:
            conn.send(msg)
        except (OSError, EOFError, BrokenPipeError, ValueError):
            return False
        return True

    def recv(self, timeout: float) -> Any:
        """The next event of rank 0 or of the rank watch, or None after ``timeout`` seconds.

        Raises
        ------
        EOFError
            Rank 0 closed its connection, or a rank died or hung (the run was ended).
        """
        with contextlib.suppress(queue.Empty):
            return self._pending.get_nowait()
        run = self.run
        problem = run.check() if run is not None else None
        if problem is not None:
            self.problem = problem
            run.kill()
            raise EOFError(problem)
        now = time.monotonic()
        if run is not None and run.ranks and now - self._last_line > RANKS_LINE_S:
            self._last_line = now
            return ("event", "RanksLine", {"text": run.progress_line()})
        conn = run.main_conn if run is not None else None
        if conn is None:
            time.sleep(timeout)
            return None
        try:
            if not conn.poll(timeout):
                return None
            msg = conn.recv()
        except (OSError, EOFError) as exc:
            self._name_the_rank()
            raise EOFError(str(exc)) from exc
        if _ended_by_signal(msg):
            # rank 0's error is torchrun's SIGTERM: the cause is a rank that died first, whose socket's close
            # this process's reader thread may not have seen yet (a loaded machine): name that rank instead
            self._name_the_rank()
            if self.problem is not None:
                run.kill()
                raise EOFError(self.problem)
        return msg

    def _name_the_rank(self) -> None:
        """Rank 0 is gone: when another rank died first (torchrun then ended rank 0), name it."""
        deadline = time.monotonic() + 2.0  # its reader sees its socket close at about the same time
        while self.problem is None and time.monotonic() < deadline:
            self.problem = self.run.check()
            if self.problem is None:
                time.sleep(0.05)

    # ------------------------------------------------------------ ending
    def log_tail(self, lines: int = 15) -> str:
        """The rank that died or hung (when one did), then the last ``lines`` lines of the ranks' output."""
        try:
            rows = self.log_path.read_text(errors="replace").rstrip().splitlines()[-lines:]
        except OSError:
            rows = []
        return "\n".join(([self.problem] if self.problem else []) + rows)

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for torchrun to end."""
        if self.run is not None and self.run.proc is not None:
            with contextlib.suppress(Exception):
                self.run.proc.wait(timeout)

    def kill(self) -> None:
        """End torchrun and every rank now (its whole process group)."""
        if self.run is not None:
            self.run.kill()

    def end(self, timeout: float = 5.0) -> None:
        """Wait ``timeout`` s for the ranks to end (a finished run ends by itself), then end them; never raises."""
        if self._closed:
            return
        self.join(timeout)
        self.kill()
        self._closed = True
        if self.run is not None:
            self.run.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    close = end
