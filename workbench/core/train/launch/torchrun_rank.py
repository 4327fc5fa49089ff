"""One rank of a data-parallel run: torchrun runs ``python -m workbench.core.train.launch.torchrun_rank RUN.toml``.

:func:`workbench.core.train.launch.torchrun.launch` starts ``torch.distributed.run`` with
this module; each rank joins the process group (NCCL on CUDA, Gloo on CPU),
builds the model of the run file exactly as ``workbench train`` does, and trains
it with the same :func:`~workbench.core.train.entry.make_trainer`, which wraps
it in ``DistributedDataParallel`` and shards the data by rank. Each rank reports
its steps, a heartbeat and its end to the launcher (:class:`RankReporter`, over
``multiprocessing.connection``); rank 0 prints the epoch lines. Qt-free.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import hashlib
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from workbench.core.train.trainer.hooks import Callback

__all__ = ["RankReporter", "RankLife", "state_digest", "final_barrier", "share_run_dir", "gather_digests",
           "weights_verdict", "main", "REPORT_ENV", "KEY_ENV", "RUN_DIR_ENV", "FAULT_DIR_ENV", "FINAL_BARRIER_S"]

#: ``host:port`` of the launcher's ``multiprocessing.connection.Listener``.
REPORT_ENV = "WORKBENCH_REPORT"
#: Its authkey, hex.
KEY_ENV = "WORKBENCH_REPORT_KEY"
#: The run folder every rank uses (rank 0 writes it).
RUN_DIR_ENV = "WORKBENCH_RUN_DIR"
#: End reasons every rank reaches together (an agreed stop, the last epoch, an agreed NaN end).
AGREED_ENDS = ("completed", "stopped", "nonfinite")
#: Seconds a rank waits at the final barrier for the others (rank 0 may still be saving).
FINAL_BARRIER_S = 300.0
#: Seconds of that wait when torchrun has ended.
ORPHAN_BARRIER_S = 2.0
#: Folder where each rank's native crash report goes (``rank{RANK}.txt``), set by the launcher.
FAULT_DIR_ENV = "WORKBENCH_FAULT_DIR"
#: Bytes of a SHA-256 digest (:func:`state_digest`), all-gathered from every rank at the end.
DIGEST_BYTES = 32


def state_digest(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter and buffer's bytes in ``state_dict`` order: equal replicas, equal digests.

    FSDP's sharded parameters (``DTensor``) are all-gathered first (``full_tensor()``, a collective:
    every rank calls it at its run's end)."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        if hasattr(t, "full_tensor"):
            t = t.full_tensor()
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class RankReporter(Callback):
    """Sends this rank's progress to the launcher and takes its steering.

    Messages sent (tuples): ``("hello", rank, pid, world_size)``, ``("step", rank, step,
    samples_per_s)`` at the metrics cadence (the heartbeat), ``("beat", rank, step)``
    while paused, ``("applied", rank, step, command)`` for each command applied,
    ``("end", rank, reason, state_digest)``; :meth:`RankLife.exit` sends ``("exit", rank, code)``
    last, just before the process exits by itself.

    Messages taken: ``("stop",)`` on any rank; ``("queue", command)``, ``("pause",)`` and
    ``("resume",)`` are rank 0's to give (:class:`~workbench.core.train.trainer.rank_sync.RankSync`
    makes every rank apply them at the same step).

    Parameters
    ----------
    address : str
        ``host:port`` of the launcher's Listener.
    authkey : bytes
    """

    def __init__(self, address: str, authkey: bytes):
        host, port = address.rsplit(":", 1)
        self.conn = Client((host, int(port)), authkey=authkey)
        self.lock = threading.Lock()
        self.trainer = None
        self.digest = ""  # this rank's final weights (on_fit_end)

    def send(self, *msg) -> None:
        with self.lock:
            try:
                self.conn.send(msg)
            except (OSError, ValueError):
                pass  # the launcher is gone (or this connection was closed): it stops the ranks itself

    def close(self) -> None:
        """Close the connection (the launcher's reader then sees this rank's end at once)."""
        with self.lock, contextlib.suppress(OSError):
            self.conn.close()

    def _read(self) -> None:
        try:
            while True:
                msg = self.conn.recv()
                tr = self.trainer
                if tr is None:
                    continue
                if msg == ("stop",):
                    tr.request_stop()
                elif msg[0] == "queue":
                    tr.queue(msg[1])
                elif msg == ("pause",):
                    tr.pause()
                elif msg == ("resume",):
                    tr.resume()
        except (EOFError, OSError):
            return

    def on_fit_start(self, trainer):
        self.trainer = trainer
        self.send("hello", trainer.rank, os.getpid(), trainer.world_size)
        threading.Thread(target=self._read, name="workbench-rank-reader", daemon=True).start()

    def on_metrics(self, trainer, batch):
        if batch:
            self.send("step", trainer.rank, int(batch[-1]["step"]), float(trainer.samples_per_s / trainer.world_size))

    def on_heartbeat(self, trainer):
        self.send("beat", trainer.rank, int(trainer.step))

    def on_command_applied(self, trainer, command):
        self.send("applied", trainer.rank, int(trainer.step), command)

    def on_fit_end(self, trainer, reason):
        self.digest = state_digest(trainer.model)  # RankLife.check_weights compares it across nodes
        self.send("end", trainer.rank, reason, self.digest)


def _join(cfg) -> int:
    """Join the process group (NCCL on CUDA, Gloo on CPU) and point ``cfg`` at this rank's run folder
    and GPU; this rank's number."""
    import torch.distributed as dist

    if os.environ.get(RUN_DIR_ENV):
        cfg.run_dir = os.environ[RUN_DIR_ENV]
    cuda = cfg.device.startswith("cuda")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        cfg.device = f"cuda:{local}"
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    return dist.get_rank()


def _device():
    """Where this rank's collectives put their tensors: its GPU under NCCL, else the CPU."""
    import torch.distributed as dist

    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def share_run_dir(cfg) -> None:
    """One run folder for every rank: the global rank 0 makes it and sends its path to the others.

    A run whose launcher named no folder (several nodes: the node of rank 0 is
    known only after the rendezvous; torchrun started by a SLURM job) and whose
    run file names none: before, every rank made its own. Call on every rank
    after joining the process group; nothing is done when ``cfg.run_dir`` is set.

    Raises
    ------
    TrainingError
        Rank 0 could not make the folder (every rank raises it: no rank trains alone).
    """
    import torch.distributed as dist

    from workbench.core.errors import TrainingError
    from workbench.core.train.runs.folder import new_run_dir

    if cfg.run_dir or not dist.is_initialized():
        return
    box, problem = [""], ""
    if dist.get_rank() == 0:
        try:
            box = [str(new_run_dir())]
        except OSError as exc:
            problem = f"the run folder could not be made ({exc}); set run_dir in the run file"
    dist.broadcast_object_list(box, src=0, device=_device())  # NCCL: the GPU torch.cuda.set_device chose (_join)
    path = box[0]
    if not path:
        raise TrainingError(problem or "rank 0 could not make the run folder (its output says why)")
    cfg.run_dir = path


def gather_digests(digest: str, timeout_s: float) -> list[str] | None:
    """Every rank's :func:`state_digest` (hex), in rank order, by an all-gather of 32 bytes each; None when a rank
    did not take part within ``timeout_s`` seconds (the group is broken) or ``digest`` is not a SHA-256."""
    import datetime

    import torch.distributed as dist

    try:
        mine = torch.frombuffer(bytearray(bytes.fromhex(digest)), dtype=torch.uint8).to(_device())
        if mine.numel() != DIGEST_BYTES:
            return None
        out = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
        if dist.get_backend() == "nccl":
            dist.all_gather(out, mine)
            torch.cuda.synchronize()
        elif not dist.all_gather(out, mine, async_op=True).wait(timeout=datetime.timedelta(seconds=timeout_s)):
            return None
        return [bytes(t.cpu().numpy()).hex() for t in out]
    except Exception:  # noqa: BLE001 - a rank is gone: there is nothing to compare
        return None


def weights_verdict(digests: list[str], nodes: int = 1) -> tuple[bool, str]:
    """``(identical, the line to print)`` for every rank's final digest (rank order).

    A mismatch names each group of ranks by digest, the largest group first:
    ``"error: the ranks end with DIFFERENT weights across 2 nodes: ranks 0, 1 ab12cd34ef56; rank 2 0f0f..."``.
    """
    where = f" across {nodes} nodes" if nodes > 1 else ""
    if len(set(digests)) == 1:
        return True, f"weights: all {len(digests)} ranks{where} end identical (sha256 {digests[0][:12]})"
    groups: dict[str, list[int]] = {}
    for rank, d in enumerate(digests):
        groups.setdefault(d, []).append(rank)
    parts = [f"rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))} {d[:12]}"
             for d, r in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))]
    return False, f"error: the ranks end with DIFFERENT weights{where}: " + "; ".join(parts)


def _reporter() -> list[Callback]:
    if not os.environ.get(REPORT_ENV):
        return []
    return [RankReporter(os.environ[REPORT_ENV], bytes.fromhex(os.environ.get(KEY_ENV, "")))]


class RankLife:
    """The end of one rank's life, in order, however the run ends.

    A completed run must exit 0 on every rank. A rank that simply returned from
    ``main`` let Python finalize while Gloo's worker threads still ran (the
    ``DistributedDataParallel`` wrapper keeps the process group alive, so
    ``destroy_process_group`` does not join them). In the 2-rank digits benchmark
    4 runs of 116 ended with ``terminate called without an active exception``
    (SIGABRT) on rank 1 after both ranks had reported ``completed``; torchrun then
    SIGTERMed rank 0 and exited 1. The core dump: the main thread in
    ``Py_FinalizeEx``, and a ``ProcessGroupGloo::runLoop`` thread destroying a
    finished ``AsyncBroadcastWork`` (the buffers' broadcast at the end of
    ``fit``), whose tensors' Python objects needed the GIL; a thread that takes
    the GIL during finalization is ended with ``pthread_exit``, whose unwinding
    through a ``noexcept`` frame calls ``std::terminate``. So a rank ends like
    this (:meth:`finish`, :meth:`exit`):

    1. a final barrier, when the ranks ended in agreement (completed, stopped,
       NaN): no rank leaves while another still works in the process group;
    2. ``destroy_process_group()``;
    3. the atexit handlers (Python-level cleanup);
    4. ``("exit", rank, code)`` to the launcher and the connections closed: the
       launcher knows this rank ended by itself;
    5. ``os._exit(code)``: no interpreter finalization (where the aborts came
       from) and no C++ static destructors; every thread ends with the process.

    It also watches torchrun (:class:`~workbench.core.train.launch.parent_watch.ParentWatch`):
    when torchrun ends, however it ends, the rank stops at its next step (rank 0
    saves ``last.pt``) within :data:`~workbench.core.train.launch.training_process_main.ORPHAN_GRACE_S`
    seconds, else it marks ``status.json`` (rank 0) and exits.

    Attributes
    ----------
    state : JobState
        The run's control and trainer once built (for the watch).
    reporters : list of RankReporter
    rank : int or None
    """

    def __init__(self) -> None:
        from workbench.core.train.launch.training_process_main import JobState

        self.state = JobState()
        self.reporters: list = []
        self.rank: int | None = None
        self.orphaned = False
        self.fault_file = None
        self._watch = None

    def watch_agent(self) -> None:
        """Start watching torchrun (its pid from :data:`~workbench.core.train.launch.parent_watch.AGENT_ENV`, else the
        parent), and send native crash reports to the launcher's fault folder (:data:`FAULT_DIR_ENV`)."""
        from workbench.core.train.launch.parent_watch import AGENT_ENV, ParentWatch

        folder = os.environ.get(FAULT_DIR_ENV)
        if folder:
            with contextlib.suppress(OSError):
                name = f"rank{int(os.environ.get('RANK', '0'))}.txt"
                self.fault_file = open(os.path.join(folder, name), "w")  # noqa: SIM115 - lives with the process
                faulthandler.enable(self.fault_file, all_threads=True)  # the launcher names a native crash
        agent = int(os.environ.get(AGENT_ENV) or 0) or None
        self._watch = ParentWatch(self._agent_ended, agent).start()

    def take(self, trainer) -> None:
        """The run's trainer (its control stops it when torchrun ends)."""
        self.state.trainer = trainer
        self.state.control = trainer.control

    def _agent_ended(self) -> None:
        from workbench.core.train.launch.training_process_main import (
            EXIT_MARGIN_S, ORPHAN_GRACE_S, mark_unfinished, stop_and_save,
        )
        from workbench.core.train.launch.parent_watch import exit_later

        self.orphaned = True
        exit_later(ORPHAN_GRACE_S + EXIT_MARGIN_S)
        print(f"rank {self.rank}: torchrun ended: stopping (at most {ORPHAN_GRACE_S:.0f} s)", flush=True)
        if self.state.control is not None:
            stop_and_save(self.state.control, self.state.flags)
        time.sleep(ORPHAN_GRACE_S)  # the main thread ends the process meanwhile (exit) unless its step hangs
        if self.rank == 0:
            mark_unfinished(getattr(self.state.trainer, "run_dir", None), "orphaned")
        os._exit(1)

    def finish(self, reason: str) -> int:
        """Steps 1-2: the final barrier (ranks that ended in agreement) and ``destroy_process_group``; the
        exit code (0 completed, 130 stopped, 1 otherwise)."""
        import torch.distributed as dist

        if not dist.is_initialized():
            return _code(reason)
        if reason in AGREED_ENDS:  # orphaned: a short wait, a rank may be gone with torchrun
            wait_s = ORPHAN_BARRIER_S if self.orphaned else FINAL_BARRIER_S
            if final_barrier(wait_s):
                self.check_weights(wait_s)
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
        return _code(reason)

    def check_weights(self, timeout_s: float = FINAL_BARRIER_S) -> bool | None:
        """Every rank, every node: are the final weights identical? (a collective: all ranks call it together)

        Each rank's digest (its reporter's, else :func:`state_digest`) is all-gathered
        (:func:`gather_digests`); the global rank 0 prints the verdict
        (:func:`weights_verdict`), and a mismatch also goes into the run's
        ``status.json`` as its ``error`` (the run folder is rank 0's). True
        identical, False different, None when not checked (no trainer, a broken group).
        """
        import torch.distributed as dist

        trainer = self.state.trainer
        if trainer is None:
            return None
        digest = next((r.digest for r in self.reporters if getattr(r, "digest", "")), "") or \
            state_digest(trainer.model)
        digests = gather_digests(digest, timeout_s)
        if digests is None:
            return None
        nodes = max(1, dist.get_world_size() // max(1, int(os.environ.get("LOCAL_WORLD_SIZE") or 1)))
        same, line = weights_verdict(digests, nodes)
        if dist.get_rank() == 0:
            print(line, flush=True)
            if not same and getattr(trainer, "run_dir", None) is not None:
                from workbench.core.train.runs.folder import note_status

                with contextlib.suppress(OSError):
                    note_status(trainer.run_dir, error=line.removeprefix("error: "))
        return same

    def exit(self, code: int) -> None:
        """Steps 3-5: atexit handlers, tell the launcher, close, ``os._exit(code)``; never returns."""
        # atexit's own runner: os._exit below skips interpreter finalization, not Python's cleanup
        with contextlib.suppress(Exception):
            atexit._run_exitfuncs()
        for reporter in self.reporters:
            reporter.send("exit", self.rank if self.rank is not None else -1, int(code))
            reporter.close()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(int(code))


def _code(reason: str) -> int:
    return {"completed": 0, "stopped": 130}.get(reason, 1)


def final_barrier(timeout_s: float) -> bool:
    """Wait until every rank is here, at most ``timeout_s`` seconds; False on a timeout or a broken group."""
    import datetime

    import torch.distributed as dist

    try:
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[torch.cuda.current_device()])
            torch.cuda.synchronize()
            return True
        work = dist.barrier(async_op=True)
        return bool(work.wait(timeout=datetime.timedelta(seconds=timeout_s)))
    except Exception:  # noqa: BLE001 - a rank is gone: nothing to wait for
        return False


def run_window_job(job_path: Path, life: RankLife | None = None) -> int:
    """One rank of a run the window started (``--job FILE``); 0 completed, 130 stopped, 1 otherwise.

    The job file is :func:`workbench.core.train.launch.training_process.make_job`'s dict, pickled by
    the window for its own ranks (0600, in a private temporary folder). Rank 0 opens
    a second connection to the window that speaks the training process's protocol
    (:func:`workbench.core.train.launch.training_process_main.run_job`: events, the live probes, commands),
    so the window steers it as it steers one training process; every rank reports
    its heartbeat (:class:`RankReporter`). Probes run on rank 0's replica; its
    gradients are those after DDP's all-reduce.
    """
    import pickle
    from multiprocessing.connection import Client

    import torch.distributed as dist

    from workbench.core.gc_freeze import freeze_startup_objects
    from workbench.core.model.spec import ArchSpec
    from workbench.core.model.wire import module_from_bytes
    from workbench.core.train.launch import training_process_main as process_main
    from workbench.core.train.config import TrainConfig
    from workbench.core.train.entry import make_trainer

    life = life if life is not None else RankLife()
    with open(job_path, "rb") as f:
        job = pickle.load(f)  # noqa: S301 - written by the window that started this run, for its ranks
    cfg = TrainConfig.from_dict(job["config"])
    rank = life.rank = _join(cfg)
    freeze_startup_objects()  # as the training process does: a full collection would stall a step ~180 ms
    job["config"] = cfg.to_dict()
    reason = "error"
    life.reporters = reporters = _reporter()
    conn = None
    try:
        if rank == 0:
            host, port = os.environ[REPORT_ENV].rsplit(":", 1)
            conn = Client((host, int(port)), authkey=bytes.fromhex(os.environ[KEY_ENV]))
            conn.send(("hello", 0, os.getpid(), dist.get_world_size(), "serve"))
            reason = process_main.run_job(conn, job, extra_callbacks=reporters, state=life.state)
        else:
            if job.get("threads"):
                torch.set_num_threads(int(job["threads"]))
            for name, path in (job.get("factories") or {}).items():
                process_main.import_file(name, path)
            model = module_from_bytes(job["model"], trust=True)  # the window pickled its own model
            arch = ArchSpec.from_dict(job["arch"]) if job.get("arch") else None
            trainer = make_trainer(model, cfg, reporters, arch, resume=job.get("resume"))
            life.take(trainer)
            reason = trainer.fit()
    finally:
        code = life.finish(reason)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()
    return code


def stop_on_signals(trainer, rank: int) -> None:
    """SIGTERM and SIGHUP stop this rank at its next step, as one agreed stop of every rank (rank 0 saves ``last.pt``).

    A cluster's ``scancel`` (and a job's time limit) signals every process of the
    job at once: torchrun and each rank, which without a handler die before any
    save. Here each rank asks its trainer to stop (the ranks agree on the step);
    torchrun's own forwarded SIGTERM that follows changes nothing, and SIGKILL
    after the cluster's ``KillWait`` (or torchrun's grace) still ends a rank that
    cannot reach a step. A signal ignored (``nohup``) stays ignored; only the main
    thread can set handlers (elsewhere none is set).
    """
    if threading.current_thread() is not threading.main_thread():
        return
    said: list[int] = []

    def _on_signal(signum, frame):
        if not said:
            said.append(signum)
            print(f"rank {rank}: {signal.Signals(signum).name}: stopping at the next step", flush=True)
        trainer.request_stop()

    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _on_signal)


def main(argv: Sequence[str] | None = None, life: RankLife | None = None,
         callbacks_for: Callable[[int, Any], Sequence[Callback]] | None = None) -> int:
    """Train one rank of ``RUN.toml [--trust]`` (or of a window's job: ``--job FILE``); 0 completed,
    130 stopped, 1 otherwise.

    ``--trust`` lets :func:`~workbench.core.train.launch.headless.model_from_config` run code the run
    file names (``workbench train --trust``); without it such a run file is an error on every rank.
    ``life`` ends the rank in order (:class:`RankLife`); ``python -m workbench.core.train.launch.torchrun_rank``
    then exits through :meth:`RankLife.exit`.

    ``callbacks_for(rank, config)`` gives more callbacks of a run file's rank (after the launcher's
    reporter and rank 0's progress lines), called once the rank joined the group; the attachable entry,
    :mod:`workbench.core.attach.torchrun_rank`, gives rank 0 the attach server's this way (a window's
    job, ``--job``, never takes them).
    """
    from workbench.core.errors import WorkbenchError
    from workbench.core.gc_freeze import freeze_startup_objects
    from workbench.core.train.config import TrainConfig
    from workbench.core.train.entry import make_trainer, save_last
    from workbench.core.train.launch.headless import PrintProgress, model_from_config, settle_run_file

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--job"]:
        return run_window_job(Path(argv[1]), life)
    life = life if life is not None else RankLife()
    trust = "--trust" in argv  # workbench train --trust: the user agreed to run code the run file names
    path = Path([a for a in argv if a != "--trust"][0])
    cfg = TrainConfig.from_toml(path)
    rank = life.rank = _join(cfg)
    freeze_startup_objects()  # as the training process does: a full collection would stall a step ~180 ms
    life.reporters = _reporter()
    callbacks: list[Callback] = list(life.reporters)
    if rank == 0:
        callbacks.append(PrintProgress(lambda line: print(line, flush=True)))
    reason = "error"
    try:
        share_run_dir(cfg)  # no folder named yet (several nodes, a SLURM job): rank 0's, on every rank
        if callbacks_for is not None:
            callbacks.extend(callbacks_for(rank, cfg))
        settle_run_file(cfg, path, trust=trust, out=(lambda line: print(line, flush=True)) if rank == 0 else None)
        model, arch = model_from_config(cfg.model, path.parent, trust=trust, origin=path)
        resume = cfg.model.checkpoint if cfg.model.resume and cfg.model.checkpoint else None
        trainer = make_trainer(model, cfg, callbacks, arch, resume=resume)
        life.take(trainer)
        stop_on_signals(trainer, rank)
        reason = trainer.fit()
        if reason == "stopped" and rank == 0:
            saved = save_last(trainer)
            if saved is not None:
                print(f"saved {saved}", flush=True)
    except WorkbenchError as e:
        print(f"rank {rank}: error: {e}", flush=True)
        reason = "error"
    finally:
        code = life.finish(reason)
    return code


if __name__ == "__main__":
    _life = RankLife()
    _life.watch_agent()
    _life.exit(main(life=_life))
