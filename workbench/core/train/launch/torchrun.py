"""``workbench train RUN.toml --nproc-per-node N``: a data-parallel run on torchrun, watched rank by rank.

:class:`DistributedRun` starts ``python -m torch.distributed.run`` (PyTorch's
elastic agent; no launcher of our own) in its own session, with
:mod:`workbench.core.train.launch.torchrun_rank`'s ``main`` as the script (through
:data:`RANK_MODULE`, whose rank 0 also listens for the window), and listens on a
``multiprocessing.connection.Listener`` (127.0.0.1, a random port and a random
authkey per run) for every rank's hello, steps (the heartbeat) and end. It names
a rank that has made no step for ``timeout_s`` and a rank that died, and ends the
whole process group then, so no rank is left behind. Qt-free.

Nothing outlives its owner: torchrun runs under a parent watch
(``python -m workbench.core.train.launch.parent_watch torch.distributed.run ...``) and
ends its ranks when the process that launched it ends, however it ends; each
rank watches torchrun the same way (:class:`~workbench.core.train.launch.torchrun_rank.RankLife`).
:func:`launch` (``workbench train --nproc-per-node N``) answers SIGTERM and
SIGHUP (and the end of its own parent) by stopping every rank at the next step
(rank 0 saves ``last.pt``), and ends torchrun's process group and every rank
:data:`STOP_GRACE_S` seconds later; Ctrl-C stops them the same way.

Several nodes (``--nnodes N``, one launcher on each): each launcher watches the
ranks of its node; without a ``run_dir`` in the run file none makes a folder (the
global rank 0 does, wherever the rendezvous put it), and the ranks compare their
final weights across nodes themselves
(:meth:`~workbench.core.train.launch.torchrun_rank.RankLife.check_weights`).

A completed run exits 0: when every rank reported ``completed`` with identical
weights, a death at shutdown (torchrun then exits 1) is named, rank by rank,
and does not make the run a failure.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Any, Callable, Iterator

from workbench.core.train.launch.parent_watch import PARENT_ENV, ParentWatch
from workbench.core.train.launch.torchrun_rank import FAULT_DIR_ENV, KEY_ENV, REPORT_ENV, RUN_DIR_ENV

__all__ = ["DistributedRun", "RankState", "launch", "end_all", "STOP_GRACE_S", "KILL_GRACE_S"]

#: Seconds the ranks get to stop at a step boundary (rank 0 saving ``last.pt``) after SIGTERM or SIGHUP.
STOP_GRACE_S = 5.0
#: Seconds torchrun gets to end its ranks after SIGTERM, before SIGKILL (to it and every rank).
KILL_GRACE_S = 5.0
#: Seconds ranks still connected after torchrun ended (it was killed outright) get to stop by themselves
#: (their parent watch: ``ORPHAN_GRACE_S`` + ``EXIT_MARGIN_S`` of :mod:`workbench.core.train.launch.training_process_main`).
RANK_END_S = 12.0

#: The module torchrun runs on every rank: :mod:`workbench.core.train.launch.torchrun_rank`'s ``main`` with an
#: attach server on rank 0 (:mod:`workbench.core.attach.torchrun_rank`; ``--no-attach`` and ``--attach-port``
#: in the rank arguments); a window's job (``--job FILE``) passes through it untouched.
RANK_MODULE = "workbench.core.attach.torchrun_rank"

_live: weakref.WeakSet = weakref.WeakSet()


@dataclass
class RankState:
    """What the launcher knows of one rank.

    Attributes
    ----------
    pid : int
    step : int
        Last step reported (0 before the first).
    samples_per_s : float
        This rank's samples/s over its last metrics window.
    last_seen : float
        ``time.monotonic()`` of its last message.
    reason : str or None
        How its ``fit()`` ended; None while running (or when it died).
    digest : str
        SHA-256 of its final weights (equal on every rank of a healthy run).
    gone_at : float or None
        ``time.monotonic()`` when its connection closed without an end: the process died.
    applied : list of (int, object)
        ``(step, command)`` for every command this rank applied, in order (with its result fields).
    exit_code : int or None
        The code it said it exits with, just before it did (None: it did not end by itself).
    closed_at : float or None
        ``time.monotonic()`` when its connection closed (its process ended), whatever it said before.
    """

    pid: int
    step: int = 0
    samples_per_s: float = float("nan")
    last_seen: float = field(default_factory=time.monotonic)
    reason: str | None = None
    digest: str = ""
    gone_at: float | None = None
    applied: list = field(default_factory=list)
    exit_code: int | None = None
    closed_at: float | None = None


class DistributedRun:
    """One ``torch.distributed.run`` of a run file, with every rank's progress.

    Parameters
    ----------
    path : str or Path
        The run file (``run.toml``).
    nproc_per_node : int
    nnodes, node_rank : int
    master_addr : str, optional
    master_port : int, optional
    rdzv_backend, rdzv_endpoint, rdzv_id : str, optional
        Passed through to torchrun under its own names (``--rdzv-backend c10d --rdzv-endpoint HOST:PORT
        --rdzv-id ID``: every node's launcher names the same endpoint and id, and the rendezvous numbers
        the nodes; ``static``, torchrun's default, numbers them by ``node_rank``); without any of them a
        single node uses ``--standalone``.
    timeout_s : float
        A rank that has made no step for this long is named and the run is ended.
    out : callable
        Where progress lines go (``print``).
    config : TrainConfig, optional
        The run's settings when there is no run file (the window's runs: ``rank_args``
        then name the job file).
    rank_args : list of str, optional
        Arguments of :mod:`workbench.core.train.launch.torchrun_rank` (default: the run file).
    serve : bool
        Rank 0 also opens a connection that speaks the training process's protocol
        (:func:`workbench.core.train.launch.training_process_main.run_job`): :attr:`main_conn`, for the window.
    log_path : str or Path, optional
        File that takes torchrun's and the ranks' output (default: this process's).
    trust : bool
        The user agreed to run code the run file names (``workbench train --trust``): each
        rank gets ``--trust`` (:func:`workbench.core.train.launch.headless.model_from_config`). Default False.

    Attributes
    ----------
    ranks : dict of int to RankState
    run_dir : Path or None
        The run folder, made here for one node (or named by the run file). Several nodes without a
        ``run_dir`` in the run file: None, and the global rank 0, wherever the rendezvous put it, makes the
        folder and tells the other ranks (:func:`~workbench.core.train.launch.torchrun_rank.share_run_dir`):
        a node without rank 0 makes no folder.
    messages : list of str
        Every line this launcher printed.
    main_conn : Connection or None
        With ``serve``: rank 0's training-process connection, once it connected.
    end_requested : str or None
        Why the run is being ended from outside (:meth:`request_end`: a signal, the launcher's parent).
    """

    def __init__(self, path: str | Path | None, nproc_per_node: int, *, nnodes: int = 1, node_rank: int = 0,
                 master_addr: str | None = None, master_port: int | None = None, timeout_s: float = 60.0,
                 out: Callable[[str], Any] = print, config=None, rank_args: list[str] | None = None,
                 serve: bool = False, log_path: str | Path | None = None, trust: bool = False,
                 rdzv_backend: str | None = None, rdzv_endpoint: str | None = None, rdzv_id: str | None = None):
        from workbench.core.train.config import TrainConfig
        from workbench.core.train.runs.folder import new_run_dir

        self.path = Path(path) if path is not None else None
        self.config = config if config is not None else TrainConfig.from_toml(self.path)
        self.trust = bool(trust)
        self.rank_args = list(rank_args) if rank_args is not None else [str(self.path)]
        if self.trust and rank_args is None:
            self.rank_args.append("--trust")
        self.serve = bool(serve)
        self.log_path = log_path
        self.main_conn = None
        self.nproc, self.nnodes, self.node_rank = int(nproc_per_node), int(nnodes), int(node_rank)
        self.master_addr, self.master_port = master_addr, master_port
        self.rdzv_backend, self.rdzv_endpoint, self.rdzv_id = rdzv_backend, rdzv_endpoint, rdzv_id
        self.timeout_s = float(timeout_s)
        self.run_dir: Path | None = (Path(self.config.run_dir) if self.config.run_dir
                                     else new_run_dir() if self.nnodes == 1 else None)
        self.ranks: dict[int, RankState] = {}
        self.messages: list[str] = []
        self._out = out
        # guards ranks; notified on every rank message (wait_until)
        self._changed = threading.Condition()
        self._readers: list[threading.Thread] = []
        self._key = secrets.token_bytes(16)
        self._listener = Listener(("127.0.0.1", 0), authkey=self._key)
        self._conns: list = []
        self._by_rank: dict = {}  # rank -> its connection (after its hello)
        self.proc: subprocess.Popen | None = None
        self.failure: str | None = None
        self.end_requested: str | None = None
        self.end_code = 1
        self._fault_dir = Path(tempfile.mkdtemp(prefix="workbench-ranks-"))  # each rank's native crash report
        _live.add(self)

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    def say(self, line: str) -> None:
        self.messages.append(line)
        self._out(line)

    def command(self) -> list[str]:
        """The torchrun command line (under a parent watch: it ends its ranks when this process ends)."""
        cmd = [sys.executable, "-m", "workbench.core.train.launch.parent_watch", "torch.distributed.run",
               f"--nproc-per-node={self.nproc}"]
        backend = self.rdzv_backend or "static"  # torchrun's default
        if self.nnodes == 1 and not (self.master_addr or self.rdzv_endpoint or self.rdzv_backend):
            cmd.append("--standalone")
        elif backend == "static":  # the node's rank is --node-rank; rank 0's node hosts the store
            cmd += [f"--nnodes={self.nnodes}", f"--node-rank={self.node_rank}"]
            cmd += ([f"--rdzv-endpoint={self.rdzv_endpoint}"] if self.rdzv_endpoint else
                    [f"--master-addr={self.master_addr or '127.0.0.1'}", f"--master-port={self.master_port or 29500}"])
        else:  # a dynamic rendezvous (c10d, etcd): it numbers the nodes; --node-rank means nothing there
            endpoint = self.rdzv_endpoint or f"{self.master_addr or '127.0.0.1'}:{self.master_port or 29500}"
            cmd += [f"--nnodes={self.nnodes}", f"--rdzv-backend={backend}", f"--rdzv-endpoint={endpoint}",
                    f"--rdzv-id={self.rdzv_id or 'workbench'}"]
        # the attachable entry (rank 0 listens for the window) is outside core.train: named, not imported
        return cmd + ["-m", RANK_MODULE, *self.rank_args]

    def start(self) -> None:
        """Start torchrun in its own session (so Stop can end its whole process group)."""
        host, port = self._listener.address
        env = {**os.environ, REPORT_ENV: f"{host}:{port}", KEY_ENV: self._key.hex(),
               PARENT_ENV: str(os.getpid()), FAULT_DIR_ENV: str(self._fault_dir)}
        env.pop(RUN_DIR_ENV, None)
        if self.run_dir is not None:
            env[RUN_DIR_ENV] = str(self.run_dir)
        if self.nnodes == 1:
            self.say(f"launching {self.world_size} ranks with torch.distributed.run (run folder {self.run_dir})")
        else:
            self.say(f"launching {self.nproc} of {self.world_size} ranks with torch.distributed.run (node "
                     f"{self.node_rank} of {self.nnodes}; run folder "
                     + (f"{self.run_dir}" if self.run_dir is not None else "made by the global rank 0") + ")")
        if self.log_path is None:
            self.proc = subprocess.Popen(self.command(), env=env, start_new_session=True)
        else:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(self.command(), env=env, start_new_session=True, stdout=log,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        threading.Thread(target=self._accept, name="workbench-ddp-accept", daemon=True).start()

    def _accept(self) -> None:
        for _ in range(self.nproc + (1 if self.serve else 0)):
            try:
                conn = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            reader = threading.Thread(target=self._read, args=(conn,), name="workbench-ddp-rank", daemon=True)
            self._readers.append(reader)
            reader.start()

    def _read(self, conn) -> None:
        rank = None
        try:
            while True:
                msg = conn.recv()
                with self._changed:
                    self._changed.notify_all()
                    kind, rank = msg[0], int(msg[1])
                    if kind == "hello" and msg[4:] == ("serve",):
                        self.main_conn = conn  # rank 0's training-process protocol: its reader is the window's
                        return
                    if kind == "hello":
                        self.ranks[rank] = RankState(pid=int(msg[2]))
                        self._by_rank[rank] = conn
                        continue
                    state = self.ranks.get(rank)
                    if state is None:
                        continue
                    state.last_seen = time.monotonic()
                    if kind == "step":
                        state.step, state.samples_per_s = int(msg[2]), float(msg[3])
                    elif kind == "applied":
                        state.applied.append((int(msg[2]), msg[3]))
                    elif kind == "end":
                        state.reason, state.digest = str(msg[2]), str(msg[3])
                    elif kind == "exit":
                        state.exit_code = int(msg[2])
        except (EOFError, OSError):
            with self._changed:  # the kernel closes a dead process's socket at once
                self._changed.notify_all()
                state = self.ranks.get(rank) if rank is not None else None
                if state is not None:
                    state.closed_at = time.monotonic()
                if state is not None and state.reason is None:
                    state.gone_at = state.closed_at

    def wait_until(self, predicate: Callable[[dict[int, RankState]], bool], timeout: float) -> bool:
        """Block until ``predicate(ranks)`` holds (checked at each rank message); False on timeout
        or when torchrun has ended first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.ranks):
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc is not None and self.proc.poll() is not None):
                    return False
                self._changed.wait(min(left, 0.5))
            return True

    def _to_rank0(self, *msg) -> bool:
        """Send ``msg`` to rank 0 (which every rank follows); False before rank 0 said hello."""
        conn = self._by_rank.get(0)
        if conn is None:
            return False
        with contextlib.suppress(OSError):
            conn.send(msg)
            return True
        return False

    def queue(self, command) -> bool:
        """A command of :mod:`workbench.core.train.trainer.commands` (``SetTrainable``, ``SetLR``, ``SaveNow``)
        for every rank, applied at the same step boundary on each; False before rank 0 is connected."""
        return self._to_rank0("queue", command)

    def pause(self) -> bool:
        """Pause every rank at the same step boundary (they keep their heartbeat)."""
        return self._to_rank0("pause")

    def resume(self) -> bool:
        """Continue after :meth:`pause`."""
        return self._to_rank0("resume")

    def stop(self) -> None:
        """Ask every rank to stop at the same step boundary (rank 0 saves last.pt)."""
        for conn in list(self._conns):
            with contextlib.suppress(OSError):
                conn.send(("stop",))

    def kill(self, grace_s: float = KILL_GRACE_S) -> None:
        """End torchrun and every rank: SIGTERM to torchrun's process group (torchrun ends its ranks, which
        run in sessions of their own), then after ``grace_s`` seconds SIGKILL to the group and to every rank
        whose connection is still open."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace_s)
            return  # torchrun ended its ranks and reaped them
        except subprocess.TimeoutExpired:
            pass
        with self._changed:  # an open connection: the rank's process still runs (its pid is not reused)
            alive = [s.pid for s in self.ranks.values() if s.closed_at is None]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()

    def request_end(self, why: str, code: int = 1) -> None:
        """End the run from outside (a signal handler, a parent watch; any thread): :meth:`wait` then stops
        every rank, and ends them all :data:`STOP_GRACE_S` seconds later; it returns ``code``."""
        if self.end_requested is None:
            self.end_code = int(code)
            self.end_requested = why

    def close(self) -> None:
        """Stop listening (after the run ended) and remove the ranks' crash-report folder."""
        with contextlib.suppress(OSError):
            self._listener.close()
        shutil.rmtree(self._fault_dir, ignore_errors=True)
        _live.discard(self)

    def check(self) -> str | None:
        """A rank that died or hangs, as the sentence to print; None while all is well."""
        now = time.monotonic()
        with self._changed:
            gone = sorted((s.gone_at, r) for r, s in self.ranks.items() if s.gone_at is not None)
            if gone:
                rank = gone[0][1]
                state = self.ranks[rank]
                fault = self._fault(rank)  # a native crash (SIGSEGV, SIGABRT...) wrote its report before it ended
                return (f"rank {rank} (pid {state.pid}) ended without finishing, at step {state.step}"
                        + (f" ({fault})" if fault else "") + ": ending the other ranks")
            for rank, state in sorted(self.ranks.items()):
                if state.reason is not None:
                    continue
                if now - state.last_seen > self.timeout_s:
                    return (f"rank {rank} has made no step for {now - state.last_seen:.0f} s (last step "
                            f"{state.step}): ending every rank")
        return None

    def progress_line(self) -> str:
        """``"ranks: 0 step 40 (812/s, 0.1 s ago) · 1 step 40 (790/s, 0.2 s ago)"``: each rank's last
        step, its samples/s and the age of its last heartbeat (omitted once it has ended)."""
        now = time.monotonic()
        parts = []
        with self._changed:
            for r, s in sorted(self.ranks.items()):
                facts = [f"{s.samples_per_s:,.0f}/s"] if s.samples_per_s == s.samples_per_s else []
                if s.reason is None:
                    facts.append(f"{now - s.last_seen:.1f} s ago")
                parts.append(f"{r} step {s.step}" + (f" ({', '.join(facts)})" if facts else ""))
        return "ranks: " + " · ".join(parts)

    def wait(self, timeout: float | None = None, every_s: float = 10.0) -> int:
        """Watch the run to its end; the exit code (0 completed, 130 stopped, 1 failed; after
        :meth:`request_end` its code: 128 + the signal number for SIGTERM and SIGHUP).

        Raises
        ------
        TimeoutError
            ``timeout`` seconds passed (the run is ended first).
        """
        assert self.proc is not None, "start() first"
        t0 = last_line = time.monotonic()
        try:
            while True:
                try:
                    self.proc.wait(0.1)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if self.end_requested is not None:
                    self._end_from_outside()
                    break
                problem = self.check()
                if problem is not None:
                    self.failure = problem
                    self.say(problem)
                    self.kill()
                    break
                if time.monotonic() - last_line > every_s and self.ranks:
                    last_line = time.monotonic()
                    self.say(self.progress_line())
                if timeout is not None and time.monotonic() - t0 > timeout:
                    self.kill()
                    raise TimeoutError(f"the run did not end in {timeout:.0f} s")
        except KeyboardInterrupt:
            self.say("stopping every rank at the next step (Ctrl-C again to end them now)")
            self.stop()
            try:
                while self.proc.poll() is None:  # a signal or the parent's end meanwhile still ends them
                    if self.end_requested is not None:
                        self._end_from_outside()
                        break
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.proc.wait(0.1)
            except KeyboardInterrupt:
                self.kill()
        code = self.proc.wait()
        self._end_ranks_left(RANK_END_S)
        for reader in self._readers:  # each ends at its rank's EOF: every "end" message is in
            reader.join(5.0)
        self.close()
        if self.end_requested is not None:
            self._summary(code)
            return self.end_code
        return self._summary(code)

    def _end_ranks_left(self, timeout: float) -> None:
        """torchrun has ended: wait up to ``timeout`` s for ranks still connected (a torchrun killed outright
        leaves them to their own parent watch, which stops them), then SIGKILL those left."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while any(s.closed_at is None for s in self.ranks.values()) and time.monotonic() < deadline:
                self._changed.wait(min(0.5, max(0.0, deadline - time.monotonic())))
            alive = [s.pid for s in self.ranks.values() if s.closed_at is None]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def _end_from_outside(self) -> None:
        """:meth:`request_end`: stop every rank at the next step, then end whatever still runs."""
        self.failure = self.failure or self.end_requested
        self.say(f"{self.end_requested}: stopping every rank, ending them in {STOP_GRACE_S:.0f} s")
        self.stop()
        try:
            self.proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def _summary(self, code: int) -> int:
        reasons = {r: s.reason for r, s in self.ranks.items()}
        if self.ranks and (not self.messages or self.messages[-1] != self.progress_line()):
            self.say(self.progress_line())
        digests = {s.digest for s in self.ranks.values() if s.digest}
        if len(digests) == 1 and len(self.ranks) == self.nproc and all(reasons.values()) and self.nproc > 1:
            # several nodes: this node's ranks here; every rank against every other is rank 0's check
            # (torchrun_rank.RankLife.check_weights, across nodes)
            self.say(f"all {len(self.ranks)} ranks end with identical weights" if self.nnodes == 1 else
                     f"all {len(self.ranks)} ranks of this node end with identical weights")
        elif len(digests) > 1:
            self.say("the ranks end with DIFFERENT weights: " + ", ".join(
                f"rank {r} {s.digest[:12]}" for r, s in sorted(self.ranks.items())))
        if self.failure is None and code != 0 and self._completed(digests, reasons):
            self.say(self._shutdown_deaths(code))
            return 0
        if self.failure is not None or (code != 0 and not any(v == "stopped" for v in reasons.values())):
            if self.failure is None:
                if self.nnodes == 1:
                    missing = [str(r) for r in range(self.world_size) if reasons.get(r) is None]
                else:  # a rank that never said hello has no number here: the rendezvous numbers them
                    missing = [str(r) for r, why in sorted(reasons.items()) if why is None]
                    missing += ["?"] * max(0, self.nproc - len(self.ranks))
                self.say(f"torchrun exited with code {code}" + (
                    f"; rank(s) {', '.join(missing)} ended without finishing" if missing else ""))
            return 1
        if all(v == "completed" for v in reasons.values()) and code == 0:
            return 0
        return 130 if any(v == "stopped" for v in reasons.values()) else 1


    def _completed(self, digests: set, reasons: dict) -> bool:
        """Every rank reported ``completed``, with identical weights."""
        return (len(self.ranks) == self.nproc and len(digests) == 1
                and all(v == "completed" for v in reasons.values()))

    def _shutdown_deaths(self, code: int) -> str:
        """The sentence for a run whose every rank completed, and which torchrun still reported failed."""
        parts = []
        for rank, state in sorted(self.ranks.items()):
            if state.exit_code is not None:
                if state.exit_code != 0:
                    parts.append(f"rank {rank} (pid {state.pid}) exited with code {state.exit_code}")
                continue
            fault = self._fault(rank)
            parts.append(f"rank {rank} (pid {state.pid}) died during its shutdown"
                         + (f" ({fault})" if fault else " (by a signal: torchrun's report above names it)"))
        deaths = "; ".join(parts) or "no rank said why"
        return (f"every rank completed with identical weights; then {deaths}; torchrun exited with code {code}. "
                "The run's files were written before: the run counts as completed (exit 0)")

    def _fault(self, rank: int) -> str:
        """The first line of a rank's native crash report (``Fatal Python error: Aborted``), or ""."""
        try:
            text = (self._fault_dir / f"rank{rank}.txt").read_text(errors="replace")
        except OSError:
            return ""
        return next((line.strip() for line in text.splitlines() if line.strip()), "")


def end_all() -> None:
    """End every run this process launched and that still runs (at exit: no torchrun outlives it)."""
    for run in list(_live):
        with contextlib.suppress(Exception):
            run.kill()


atexit.register(end_all)


@contextlib.contextmanager
def _ended_from_outside(run: DistributedRun) -> Iterator[None]:
    """While the run is watched: SIGTERM and SIGHUP, and the end of this process's parent, end it
    (:meth:`DistributedRun.request_end`). Under ``nohup`` (SIGHUP ignored) the user asked the run to
    outlive the terminal: neither SIGHUP nor the parent's end is then taken as a reason."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread; the caller handles its own signals
        return
    names = {signal.SIGTERM: "SIGTERM"}
    detached = signal.getsignal(signal.SIGHUP) == signal.SIG_IGN if hasattr(signal, "SIGHUP") else True
    if not detached:
        names[signal.SIGHUP] = "SIGHUP"
    previous = {sig: signal.getsignal(sig) for sig in names}
    for sig, name in names.items():
        signal.signal(sig, lambda signum, _frame: run.request_end(f"got {names[signum]}", 128 + signum))
    watch = None if detached else ParentWatch(lambda: run.request_end("the launcher's parent process ended")).start()
    try:
        yield
    finally:
        if watch is not None:
            watch.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def launch(path: str | Path, nproc_per_node: int, out: Callable[[str], Any] = print, *, trust: bool = False,
           **kwargs) -> int:
    """Run ``path`` on ``nproc_per_node`` ranks and watch it (:class:`DistributedRun`); the exit code.

    ``trust`` (``workbench train --trust``) reaches every rank's
    :func:`~workbench.core.train.launch.headless.model_from_config`. A bad run file is
    reported through ``out`` (exit code 1).
    """
    try:
        run = DistributedRun(path, nproc_per_node, out=out, trust=trust, **kwargs)
    except FileNotFoundError:
        out(f"error: {path}: file not found")
        return 1
    except (ValueError, OSError, TypeError) as e:
        out(f"error: {e}")
        return 1
    with _ended_from_outside(run):
        run.start()
        return run.wait()
