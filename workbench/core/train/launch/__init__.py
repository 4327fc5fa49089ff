"""Everything that starts a run somewhere: a thread, the training process, torchrun ranks, headless `workbench train`.

The room's public face is :class:`RunLauncher` (where the next run trains, the
process started ahead), :class:`RunRequest` and :class:`ModelNotPortable`; the
modules behind it are its internals, each named for where a run runs:

* ``in_thread``: on a thread of the caller's process (and that process's thread policy);
* ``training_process``: the window's side of its separate training process;
  ``training_process_main``: what runs inside that process;
* ``ddp_ranks``: the window's data-parallel run on local ranks; ``torchrun``: torchrun
  watched rank by rank (also ``workbench train --nproc-per-node``); ``torchrun_rank``:
  what runs inside one rank;
* ``headless``: ``workbench train RUN.toml`` in the calling process;
* ``launcher``: the choice between them; ``parent_watch``: nothing outlives its owner.

They load on first use (PEP 562), so
``python -m workbench.core.train.launch.parent_watch`` stays a light process.
"""

from __future__ import annotations

__all__ = ["RunLauncher", "RunRequest", "ModelNotPortable"]


def __getattr__(name: str):
    if name in ("RunLauncher", "RunRequest"):
        from workbench.core.train.launch import launcher

        return getattr(launcher, name)
    if name == "ModelNotPortable":
        from workbench.core.train.launch.training_process import ModelNotPortable

        return ModelNotPortable
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
