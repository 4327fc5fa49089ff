"""One rank of a data-parallel run: ``python -m workbench.core.train.rank RUN.toml``, started by torchrun.

:func:`workbench.core.train.launch.launch` starts ``torch.distributed.run`` with
this module; each rank joins the process group (NCCL on CUDA, Gloo on CPU),
builds the model of the run file exactly as ``workbench train`` does, and trains
it with the same :func:`~workbench.core.train.entry.make_trainer`, which wraps
it in ``DistributedDataParallel`` and shards the data by rank. Each rank reports
its steps, a heartbeat and its end to the launcher (:class:`RankReporter`, over
``multiprocessing.connection``); rank 0 prints the epoch lines. Qt-free.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from multiprocessing.connection import Client
from pathlib import Path
from typing import Sequence

import torch

from workbench.core.train.hooks import Callback

__all__ = ["RankReporter", "state_digest", "main", "REPORT_ENV", "KEY_ENV", "RUN_DIR_ENV"]

#: ``host:port`` of the launcher's ``multiprocessing.connection.Listener``.
REPORT_ENV = "WORKBENCH_REPORT"
#: Its authkey, hex.
KEY_ENV = "WORKBENCH_REPORT_KEY"
#: The run folder every rank uses (rank 0 writes it).
RUN_DIR_ENV = "WORKBENCH_RUN_DIR"


def state_digest(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter and buffer's bytes in ``state_dict`` order: equal replicas, equal digests."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class RankReporter(Callback):
    """Sends this rank's progress to the launcher and takes its steering.

    Messages sent (tuples): ``("hello", rank, pid, world_size)``, ``("step", rank, step,
    samples_per_s)`` at the metrics cadence (the heartbeat), ``("beat", rank, step)``
    while paused, ``("applied", rank, step, command)`` for each command applied,
    ``("end", rank, reason, state_digest)``.

    Messages taken: ``("stop",)`` on any rank; ``("queue", command)``, ``("pause",)`` and
    ``("resume",)`` are rank 0's to give (:class:`~workbench.core.train.rank_sync.RankSync`
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

    def send(self, *msg) -> None:
        with self.lock:
            try:
                self.conn.send(msg)
            except OSError:
                pass  # the launcher is gone: it stops the ranks itself

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
        self.send("end", trainer.rank, reason, state_digest(trainer.model))


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


def _reporter() -> list[Callback]:
    if not os.environ.get(REPORT_ENV):
        return []
    return [RankReporter(os.environ[REPORT_ENV], bytes.fromhex(os.environ.get(KEY_ENV, "")))]


def run_window_job(job_path: Path) -> int:
    """One rank of a run the window started (``--job FILE``); 0 completed, 130 stopped, 1 otherwise.

    The job file is :func:`workbench.core.train.process.make_job`'s dict, pickled by
    the window for its own ranks (0600, in a private temporary folder). Rank 0 opens
    a second connection to the window that speaks the training process's protocol
    (:func:`workbench.core.train.child.run_job`: events, the live probes, commands),
    so the window steers it as it steers one training process; every rank reports
    its heartbeat (:class:`RankReporter`). Probes run on rank 0's replica; its
    gradients are those after DDP's all-reduce.
    """
    import pickle
    from multiprocessing.connection import Client

    import torch.distributed as dist

    from workbench.core.model.architectures import ArchSpec
    from workbench.core.gc_freeze import freeze_startup_objects
    from workbench.core.model.checkpoint import module_from_bytes
    from workbench.core.train import child
    from workbench.core.train.config import TrainConfig
    from workbench.core.train.entry import make_trainer

    with open(job_path, "rb") as f:
        job = pickle.load(f)  # noqa: S301 - written by the window that started this run, for its ranks
    cfg = TrainConfig.from_dict(job["config"])
    rank = _join(cfg)
    freeze_startup_objects()  # as the training process does: a full collection would stall a step ~180 ms
    job["config"] = cfg.to_dict()
    reason = "error"
    try:
        if rank == 0:
            host, port = os.environ[REPORT_ENV].rsplit(":", 1)
            conn = Client((host, int(port)), authkey=bytes.fromhex(os.environ[KEY_ENV]))
            conn.send(("hello", 0, os.getpid(), dist.get_world_size(), "serve"))
            reason = child.run_job(conn, job, extra_callbacks=_reporter())
        else:
            if job.get("threads"):
                torch.set_num_threads(int(job["threads"]))
            for name, path in (job.get("factories") or {}).items():
                child.import_file(name, path)
            model = module_from_bytes(job["model"], trust=True)  # the window pickled its own model
            arch = ArchSpec.from_dict(job["arch"]) if job.get("arch") else None
            reason = make_trainer(model, cfg, _reporter(), arch, resume=job.get("resume")).fit()
    finally:
        dist.destroy_process_group()
    return {"completed": 0, "stopped": 130}.get(reason, 1)


def main(argv: Sequence[str] | None = None) -> int:
    """Train one rank of ``RUN.toml`` (or of a window's job: ``--job FILE``); 0 completed, 130 stopped,
    1 otherwise."""
    import torch.distributed as dist

    from workbench.core.errors import WorkbenchError
    from workbench.core.gc_freeze import freeze_startup_objects
    from workbench.core.train.config import TrainConfig
    from workbench.core.train.entry import make_trainer, save_last
    from workbench.core.train.headless import PrintProgress, model_from_config

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--job"]:
        return run_window_job(Path(argv[1]))
    path = Path(argv[0])
    cfg = TrainConfig.from_toml(path)
    rank = _join(cfg)
    freeze_startup_objects()  # as the training process does: a full collection would stall a step ~180 ms
    callbacks: list[Callback] = _reporter()
    if rank == 0:
        callbacks.append(PrintProgress(lambda line: print(line, flush=True)))
    try:
        model, arch = model_from_config(cfg.model, path.parent)
        resume = cfg.model.checkpoint if cfg.model.resume and cfg.model.checkpoint else None
        trainer = make_trainer(model, cfg, callbacks, arch, resume=resume)
        reason = trainer.fit()
        if reason == "stopped" and rank == 0:
            saved = save_last(trainer)
            if saved is not None:
                print(f"saved {saved}", flush=True)
    except WorkbenchError as e:
        print(f"rank {rank}: error: {e}", flush=True)
        reason = "error"
    finally:
        dist.destroy_process_group()
    return {"completed": 0, "stopped": 130}.get(reason, 1)


if __name__ == "__main__":
    sys.exit(main())
