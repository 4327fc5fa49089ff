"""The commands a :class:`~workbench.core.training.Trainer` takes from other threads.

:class:`SetTrainable`, :class:`SetLR`, :class:`SaveNow` and :class:`Call` are
queued with ``Trainer.queue`` and applied on the training thread at the next
step boundary (see :mod:`workbench.core.trainer_controls`). Their result fields
are filled in when applied. Qt-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from workbench.core.training import Trainer

__all__ = ["SetTrainable", "SetLR", "SaveNow", "Call"]


@dataclass
class SetTrainable:
    """Freeze (``flag=False``) or unfreeze parameters at the next step boundary.

    Attributes
    ----------
    names : str or list of str
        Parameter or module qualified names; ``""`` = the whole model.
    flag : bool
        The new ``requires_grad``.
    changed : list of str
        Filled in when applied: parameter names whose ``requires_grad`` changed.
    error : str or None
        Filled in when a name is unknown (nothing is changed then).
    """

    names: Any
    flag: bool
    changed: list = field(default_factory=list)
    error: str | None = None


@dataclass
class SetLR:
    """Set the head learning rate (backbone groups get ``lr * backbone_lr_mult``)."""

    lr: float


@dataclass
class SaveNow:
    """Save a checkpoint at the next step boundary.

    Attributes
    ----------
    path : str or None
        Target file; None = ``run_dir / "last.pt"``.
    saved_to : str or None
        Filled in when applied.
    """

    path: str | None = None
    saved_to: str | None = None


@dataclass
class Call:
    """Run ``fn(trainer)`` on the training thread at the next step boundary (e.g. probes on/off)."""

    fn: Callable[["Trainer"], Any]
    result: Any = None
