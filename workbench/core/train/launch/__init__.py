"""Everything that starts a run somewhere: a thread, the training process, torchrun ranks, headless `workbench train`.

The room's public face is :class:`RunLauncher` (where the next run trains, the
process started ahead), :class:`RunRequest` and :class:`ModelNotPortable`; the
modules behind it are its internals. They load on first use (PEP 562), so
``python -m workbench.core.train.launch.parent_watch`` stays a light process.
"""

from __future__ import annotations

__all__ = ["RunLauncher", "RunRequest", "ModelNotPortable"]


def __getattr__(name: str):
    if name in ("RunLauncher", "RunRequest"):
        from workbench.core.train.launch import launcher

        return getattr(launcher, name)
    if name == "ModelNotPortable":
        from workbench.core.train.launch.process import ModelNotPortable

        return ModelNotPortable
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
