"""Checkpoints of an FSDP run (``strategy = "fsdp"``): ``torch.distributed.checkpoint`` folders beside a small ``.pt``.

:class:`ShardedCheckpoints` is the ``trainer.checkpoints`` of a
:class:`~workbench.core.train.trainer.fsdp.FullyShardedParallel` rank. A checkpoint is two
things side by side in the run folder:

- ``last.dcp/``: the model's and the optimizer's state, each rank writing its own shards
  (``torch.distributed.checkpoint``; ``get_state_dict`` / ``set_state_dict`` of
  ``torch.distributed.checkpoint.state_dict``, keys are the parameters' names, so a run
  may resume on another number of ranks);
- ``last.pt``: the rest of the payload every checkpoint has (epoch, step, batch of the
  epoch, scheduler, RNG states, frozen names, history, config), with ``"sharded":
  "last.dcp"`` and an empty ``model_state_dict``; rank 0 writes it last, so a ``last.pt``
  always names a complete folder.

Every rank takes part in every save (the loop calls them on every rank at the same
step). The epoch's and ``checkpoint_every_steps``' saves are asynchronous
(``dcp.async_save``: the shards are copied to host memory on the step's path, written on
a thread over a Gloo group of their own); a stop's save and ``SaveNow`` are synchronous.
A folder is written as ``last.dcp.new/`` and renamed over ``last.dcp/`` when complete.
``best.pt`` / ``best.dcp/`` are hard links of the same files. Qt-free.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from workbench.core.errors import TrainingError
from workbench.core.files import atomic_save
from workbench.core.model.names import frozen_names
from workbench.core.train.trainer.checkpoints import LAST, CheckpointConnector, NoState, link_or_copy
from workbench.core.train.trainer.faults import nonfinite_tensors

__all__ = ["ShardedCheckpoints", "dcp_folder", "read_manifest", "REFUSED"]

#: The settings ``strategy = "fsdp"`` refuses, each with what to do instead.
REFUSED = {
    "float16": ('strategy = "fsdp" with amp_dtype = "float16" is not supported (its GradScaler is not verified '
                'with sharded gradients); use amp_dtype = "bfloat16"'),
    "no_blocks": ('strategy = "fsdp": the model has no repeated block to shard (no _no_split_modules, no '
                  'nn.ModuleList / nn.Sequential of one class); use strategy = "ddp"'),
    "resume_full": ('strategy = "fsdp" resumes only its own sharded checkpoints (last.pt beside last.dcp/); '
                    'to start from this file, give it as [model] checkpoint without resume'),
}

#: Name of the file ``torch.distributed.checkpoint`` writes last in a folder (its plan): no folder without it is complete.
METADATA = ".metadata"


def dcp_folder(path: Path) -> Path:
    """The sharded state's folder of a checkpoint file: ``last.pt`` -> ``last.dcp``."""
    path = Path(path)
    return path.with_name(path.stem + ".dcp")


def _replace_folder(new: Path, folder: Path) -> None:
    """``new`` takes the place of ``folder`` (the old one removed after the rename)."""
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        os.replace(folder, old)
    os.replace(new, folder)
    shutil.rmtree(old, ignore_errors=True)


def read_manifest(path: Path) -> dict:
    """The ``.pt`` part of a sharded checkpoint, its digest verified.

    Raises
    ------
    TrainingError
        The file cannot be read, is corrupt, or is not a sharded checkpoint.
    """
    from workbench.core.digest import check_digest
    from workbench.core.model.formats.pickle_safety import torch_load

    try:
        payload = torch_load(path, weights_only=True)  # the one torch.load; tensors only, never code
    except Exception as e:  # noqa: BLE001 - a missing, truncated or foreign file: one line
        raise TrainingError(f"{path}: cannot read the checkpoint ({type(e).__name__}: {e})") from e
    if not isinstance(payload, dict) or "model_state_dict" not in payload:
        raise TrainingError(f"{path}: not a training checkpoint (no model_state_dict)")
    if not payload.get("sharded"):
        raise TrainingError(f"{path}: {REFUSED['resume_full']}")
    status = check_digest(payload).status
    if status in ("mismatch", "malformed"):
        raise TrainingError(f"{path} is corrupt (digest {status}); resume from an earlier checkpoint of the run")
    return payload


class ShardedCheckpoints(CheckpointConnector):
    """Sharded saves and resume of one FSDP rank (every rank calls every save at the same step).

    Parameters
    ----------
    trainer : TrainerLike
        Its ``strategy`` is a :class:`~workbench.core.train.trainer.fsdp.FullyShardedParallel`.
    """

    #: every rank writes its shards: the loop calls the epoch's and the step's saves on every rank
    collective = True

    def __init__(self, trainer):
        super().__init__(trainer)
        self._dir: Path | None = None  # the folder of the checkpoint being loaded

    # ------------------------------------------------------------ writing
    def _state(self) -> dict:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        tr = self.trainer
        model_sd, optim_sd = get_state_dict(tr.model, tr.optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def payload(self, loss: float | None = None, folder: str = "last.dcp") -> dict:
        """The ``.pt`` part of a checkpoint: every entry but the model's and optimizer's tensors,
        with ``"sharded"`` naming the folder that holds them (relative to the file)."""
        tr = self.trainer
        payload = self._payload(loss, NoState(), None)
        payload["frozen"] = frozen_names(tr.model)
        payload["sharded"] = folder
        payload["sharded_world_size"] = tr.world_size
        if tr.optimizer is not None:
            payload["optimizer_class"] = type(tr.optimizer).__name__
            payload["optimizer_roles"] = [g.get("wb_role", "all") for g in tr.optimizer.param_groups]
        return payload

    def save(self, path: str | Path | None = None) -> Path:
        """Write the checkpoint now, synchronously, on every rank; ``path`` (``run_dir/last.pt`` by default)."""
        tr = self.trainer
        tr.prepare()
        self.wait_for_saves()
        path = Path(path) if path else Path(tr.run_dir) / LAST
        self._write([path], None, background=False)
        return path

    def save_last(self) -> Path | None:
        """:meth:`CheckpointConnector.save_last` on every rank: skipped only when every rank agrees that
        ``last.pt`` already holds this step (a write rank 0 alone saw fail is written again by all)."""
        import torch
        import torch.distributed as dist

        tr = self.trainer
        if tr.run_dir is None or nonfinite_tensors(tr.model):
            return None
        path = Path(tr.run_dir) / LAST
        self.wait_for_saves()
        done = torch.tensor([int(self.last_step == tr.step)])
        dist.all_reduce(done, op=dist.ReduceOp.MIN, group=tr.strategy.group)
        return path if bool(done) else self.save(path)

    def save_async(self, paths: list[Path], loss: float | None = None, finite_only: bool = False) -> None:
        """Write the checkpoint to ``paths`` (``last.pt``, ``best.pt``) with ``dcp.async_save``; the step goes on
        once the shards are copied. ``finite_only``: weights holding NaN/Inf are not written (said as a failed write)."""
        self.wait_for_saves()
        paths = [Path(p) for p in paths]
        if finite_only:
            bad = nonfinite_tensors(self.trainer.model)  # every rank: one all-reduce
            if bad:
                self._pending_paths = paths
                self._report(ValueError(f"the weights hold NaN/Inf ({', '.join(bad[:3])}); not written over the "
                                        "previous checkpoint"))
                return
        self._write(paths, loss, background=True)

    def _report(self, error: Exception) -> None:
        from concurrent.futures import Future

        failed: Future = Future()
        failed.set_exception(error)
        self._pending = failed
        self.wait_for_saves()

    def _write(self, paths: list[Path], loss: float | None, background: bool) -> None:
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        tr = self.trainer
        group = tr.strategy.group
        folder = dcp_folder(paths[0])
        new = folder.with_name(folder.name + ".new")
        if tr.is_main:
            shutil.rmtree(new, ignore_errors=True)  # a write that never finished
        dist.barrier(group=group)
        state = self._state()
        files = [(p, self.payload(loss, dcp_folder(p).name)) for p in paths] if tr.is_main else []

        def finish() -> None:  # rank 0, once every rank's shards and the plan are on disk
            if not files:
                return
            _replace_folder(new, folder)
            atomic_save(files[0][1], paths[0])
            for path, payload in files[1:]:  # best.pt: the same state, hard links
                other = dcp_folder(path)
                other_new = other.with_name(other.name + ".new")
                shutil.rmtree(other_new, ignore_errors=True)
                other_new.mkdir(parents=True)
                for f in folder.iterdir():
                    link_or_copy(f, other_new / f.name)
                _replace_folder(other_new, other)
                atomic_save(payload, path)

        if any(p.name == LAST for p in paths):
            self.last_step = tr.step
        def finish_together(save: Any) -> None:  # no rank's save is over before last.pt names the new folder
            written = False
            try:
                save()
                written = True
            finally:
                try:
                    if written:
                        finish()
                finally:
                    dist.barrier(group=group)

        if not background:
            finish_together(lambda: dcp.save(state, checkpoint_id=str(new), process_group=group))
            return
        if self._saver is None:
            from concurrent.futures import ThreadPoolExecutor

            self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="workbench-save")
        future = dcp.async_save(state, checkpoint_id=str(new), process_group=group)

        def write() -> None:
            finish_together(future.result)

        self._pending = self._saver.submit(write)
        self._pending_paths = paths

    # ------------------------------------------------------------ reading
    def resume_from(self, path_or_checkpoint: Any) -> None:
        """Resume from a sharded checkpoint this strategy wrote (its ``.pt``; the folder beside it).

        Raises
        ------
        TrainingError
            Not a sharded checkpoint (a one-process or DDP ``last.pt``: give it as weights),
            or its folder is incomplete.
        """
        if not isinstance(path_or_checkpoint, (str, Path)):
            super().resume_from(path_or_checkpoint)
            return
        path = Path(path_or_checkpoint)
        self._dir = path.parent
        super().resume_from(read_manifest(path))
        self.trainer.config.model.checkpoint = str(path)
        self.trainer.config.model.resume = True

    def load_file(self, path: Path) -> None:
        """Load a checkpoint this run wrote (the NaN rollback)."""
        self._dir = Path(path).parent
        self.load(read_manifest(Path(path)))

    def load(self, payload: dict) -> None:
        """Put a sharded checkpoint's state into the trainer: the shards of every parameter and of the
        optimizer state (``dcp.load`` + ``set_state_dict``), then the counters, scheduler and RNG."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        tr = self.trainer
        name = payload.get("sharded")
        if not name:
            raise TrainingError(REFUSED["resume_full"])
        folder = (self._dir or Path(tr.run_dir)) / name
        if not (folder / METADATA).is_file():
            raise TrainingError(f"{folder}: the sharded state of this checkpoint is missing or incomplete "
                                f"(no {METADATA}); resume from an earlier checkpoint of the run")
        frozen = set(payload.get("frozen") or ())
        for n, p in tr.model.named_parameters():
            p.requires_grad_(n not in frozen)
        tr.build_optimizer(payload.get("optimizer_param_names"), payload.get("optimizer_roles"))
        saved_class, ours = payload.get("optimizer_class"), type(tr.optimizer).__name__
        if isinstance(saved_class, str) and saved_class != ours:
            raise TrainingError(f"the checkpoint's optimizer is {saved_class} but the settings build {ours}: "
                                f"choose {saved_class} to resume")
        state = self._state()
        dcp.load(state, checkpoint_id=str(folder), process_group=tr.strategy.group)
        set_state_dict(tr.model, tr.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self.load_rest(payload)
