"""``workbench train RUN.toml --nproc-per-node N``: a data-parallel run on torchrun, watched rank by rank.

:class:`DistributedRun` starts ``python -m torch.distributed.run`` (PyTorch's
elastic agent; no launcher of our own) in its own session, with
:mod:`workbench.core.train.rank` as the script, and listens on a
``multiprocessing.connection.Listener`` (127.0.0.1, a random port and a random
authkey per run) for every rank's hello, steps (the heartbeat) and end. It names
a rank that has made no step for ``timeout_s`` and a rank that died, and ends the
whole process group then, so no rank is left behind. Qt-free.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Any, Callable

from workbench.core.train.rank import KEY_ENV, REPORT_ENV, RUN_DIR_ENV

__all__ = ["DistributedRun", "RankState", "launch"]


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
    """

    pid: int
    step: int = 0
    samples_per_s: float = float("nan")
    last_seen: float = field(default_factory=time.monotonic)
    reason: str | None = None
    digest: str = ""
    gone_at: float | None = None
    applied: list = field(default_factory=list)


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
        Passed through to torchrun; without them a single node uses ``--standalone``.
    timeout_s : float
        A rank that has made no step for this long is named and the run is ended.
    out : callable
        Where progress lines go (``print``).
    config : TrainConfig, optional
        The run's settings when there is no run file (the window's runs: ``rank_args``
        then name the job file).
    rank_args : list of str, optional
        Arguments of :mod:`workbench.core.train.rank` (default: the run file).
    serve : bool
        Rank 0 also opens a connection that speaks the training process's protocol
        (:func:`workbench.core.train.child.run_job`): :attr:`main_conn`, for the window.
    log_path : str or Path, optional
        File that takes torchrun's and the ranks' output (default: this process's).

    Attributes
    ----------
    ranks : dict of int to RankState
    run_dir : Path
    messages : list of str
        Every line this launcher printed.
    main_conn : Connection or None
        With ``serve``: rank 0's training-process connection, once it connected.
    """

    def __init__(self, path: str | Path | None, nproc_per_node: int, *, nnodes: int = 1, node_rank: int = 0,
                 master_addr: str | None = None, master_port: int | None = None, timeout_s: float = 60.0,
                 out: Callable[[str], Any] = print, config=None, rank_args: list[str] | None = None,
                 serve: bool = False, log_path: str | Path | None = None):
        from workbench.core.train.config import TrainConfig
        from workbench.core.train.runs import new_run_dir

        self.path = Path(path) if path is not None else None
        self.config = config if config is not None else TrainConfig.from_toml(self.path)
        self.rank_args = list(rank_args) if rank_args is not None else [str(self.path)]
        self.serve = bool(serve)
        self.log_path = log_path
        self.main_conn = None
        self.nproc, self.nnodes, self.node_rank = int(nproc_per_node), int(nnodes), int(node_rank)
        self.master_addr, self.master_port = master_addr, master_port
        self.timeout_s = float(timeout_s)
        self.run_dir = Path(self.config.run_dir) if self.config.run_dir else new_run_dir()
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

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    def say(self, line: str) -> None:
        self.messages.append(line)
        self._out(line)

    def command(self) -> list[str]:
        """The torchrun command line."""
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={self.nproc}"]
        if self.nnodes == 1 and not self.master_addr:
            cmd.append("--standalone")
        else:
            cmd += [f"--nnodes={self.nnodes}", f"--node-rank={self.node_rank}",
                    f"--master-addr={self.master_addr or '127.0.0.1'}", f"--master-port={self.master_port or 29500}"]
        return cmd + ["-m", "workbench.core.train.rank", *self.rank_args]

    def start(self) -> None:
        """Start torchrun in its own session (so Stop can end its whole process group)."""
        host, port = self._listener.address
        env = {**os.environ, REPORT_ENV: f"{host}:{port}", KEY_ENV: self._key.hex(), RUN_DIR_ENV: str(self.run_dir)}
        self.say(f"launching {self.world_size} ranks with torch.distributed.run (run folder {self.run_dir})")
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
        except (EOFError, OSError):
            with self._changed:  # the kernel closes a dead process's socket at once
                self._changed.notify_all()
                state = self.ranks.get(rank) if rank is not None else None
                if state is not None and state.reason is None:
                    state.gone_at = time.monotonic()

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
        """A command of :mod:`workbench.core.train.commands` (``SetTrainable``, ``SetLR``, ``SaveNow``)
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

    def kill(self) -> None:
        """End torchrun and every rank: SIGTERM to the process group, SIGKILL after 10 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def close(self) -> None:
        """Stop listening (after the run ended)."""
        with contextlib.suppress(OSError):
            self._listener.close()

    def check(self) -> str | None:
        """A rank that died or hangs, as the sentence to print; None while all is well."""
        now = time.monotonic()
        with self._changed:
            gone = sorted((s.gone_at, r) for r, s in self.ranks.items() if s.gone_at is not None)
            if gone:
                rank = gone[0][1]
                state = self.ranks[rank]
                return (f"rank {rank} (pid {state.pid}) ended without finishing, at step {state.step}: "
                        "ending the other ranks")
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
        """Watch the run to its end; the exit code (0 completed, 130 stopped, 1 failed).

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
                self.proc.wait()
            except KeyboardInterrupt:
                self.kill()
        code = self.proc.wait()
        for reader in self._readers:  # each ends at its rank's EOF: every "end" message is in
            reader.join(5.0)
        self.close()
        return self._summary(code)

    def _summary(self, code: int) -> int:
        reasons = {r: s.reason for r, s in self.ranks.items()}
        if self.ranks and (not self.messages or self.messages[-1] != self.progress_line()):
            self.say(self.progress_line())
        digests = {s.digest for s in self.ranks.values() if s.digest}
        if len(digests) == 1 and len(self.ranks) == self.world_size and all(reasons.values()):
            self.say(f"all {len(self.ranks)} ranks end with identical weights")
        elif len(digests) > 1:
            self.say("the ranks end with DIFFERENT weights: " + ", ".join(
                f"rank {r} {s.digest[:12]}" for r, s in sorted(self.ranks.items())))
        if self.failure is not None or (code != 0 and not any(v == "stopped" for v in reasons.values())):
            if self.failure is None:
                missing = [r for r in range(self.world_size) if reasons.get(r) is None]
                self.say(f"torchrun exited with code {code}" + (
                    f"; rank(s) {', '.join(map(str, missing))} ended without finishing" if missing else ""))
            return 1
        if all(v == "completed" for v in reasons.values()) and code == 0:
            return 0
        return 130 if any(v == "stopped" for v in reasons.values()) else 1


def launch(path: str | Path, nproc_per_node: int, out: Callable[[str], Any] = print, **kwargs) -> int:
    """Run ``path`` on ``nproc_per_node`` ranks and watch it (:class:`DistributedRun`); the exit code.

    A bad run file is reported through ``out`` (exit code 1).
    """
    try:
        run = DistributedRun(path, nproc_per_node, out=out, **kwargs)
    except FileNotFoundError:
        out(f"error: {path}: file not found")
        return 1
    except (ValueError, OSError, TypeError) as e:
        out(f"error: {e}")
        return 1
    run.start()
    return run.wait()
