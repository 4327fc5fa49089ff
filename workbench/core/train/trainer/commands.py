"""The commands a :class:`~workbench.core.train.trainer.loop.Trainer` takes from other threads.

:class:`SetTrainable`, :class:`SetLR`, :class:`SaveNow`, :class:`SampleNow` and :class:`Call` are
queued on the run's :class:`~workbench.core.train.trainer.control.RunControl` and applied
on the training thread at the next step boundary by :func:`apply_command`, which
asks of the run only a :class:`~workbench.core.train.trainer.types.SteeredRun`
(the Trainer, or an attached script's
:class:`~workbench.core.attach.script_run.ScriptRun`). Their result fields are
filled in when applied. Qt-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from workbench.core.errors import TrainingError
from workbench.core.model import freezing
from workbench.core.model.names import UnknownPathError
from workbench.core.model.saving import save_model_file
from workbench.core.train.trainer import optim
from workbench.core.train.trainer.faults import nonfinite_tensors
from workbench.core.train.trainer.types import SteeredRun

__all__ = ["SetTrainable", "SetLR", "SaveNow", "EmptyCudaCache", "SampleNow", "Call", "apply_command"]


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
    #: queued by the run's own ``unfreeze`` schedule (run.toml replays it: not an edit to record)
    scheduled: bool = False
    #: unfreezing: the new param groups' LR is their role's LR times this (staged unfreezing's
    #: "unfreeze layer3 at a tenth of the LR"); kept in the group as ``wb_lr_factor``
    lr_factor: float = 1.0

    def name_list(self) -> list[str]:
        """:attr:`names` as a list (a single name is a list of one)."""
        return [self.names] if isinstance(self.names, str) else list(self.names)


@dataclass
class SetLR:
    """Set the head learning rate (backbone groups get ``lr * backbone_lr_mult``).

    Attributes
    ----------
    lr : float
    group : int or None
        An attached script's param group to set alone (None: every group; see
        :func:`workbench.core.train.trainer.optim.set_group_lr`).
    """

    lr: float
    group: int | None = None


@dataclass
class SaveNow:
    """Save a checkpoint at the next step boundary.

    Attributes
    ----------
    path : str or None
        Target file; None = ``run_dir / "last.pt"``.
    saved_to : str or None
        Filled in when applied.
    nonfinite : list of str
        Filled in when applied: parameters / buffers that held NaN or Inf in the
        file written (the file is written all the same, and the user is told).
    """

    path: str | None = None
    saved_to: str | None = None
    nonfinite: list = field(default_factory=list)


@dataclass
class EmptyCudaCache:
    """``torch.cuda.empty_cache()`` on the training side (give cached, unused GPU memory back)."""


@dataclass
class SampleNow:
    """Complete a causal language model's prompts now, between two steps (the Samples view's "Sample now").

    Applied by :func:`workbench.core.train.task.samples.sample_now`: the same prompts and
    settings as at each evaluation, appended to the run folder's ``samples.jsonl`` at the
    current step with ``"on_demand": true``.

    Attributes
    ----------
    rows : list of dict
        Filled in when applied: the rows written (``step``, ``epoch``, ``prompt``, ``completion``, ``on_demand``).
    error : str or None
        Filled in when nothing could be written: why, in one line (not a causal LM, no prompts yet, a full disk).
    """

    rows: list = field(default_factory=list)
    error: str | None = None


@dataclass
class Call:
    """Run ``fn(run)`` on the training thread at the next step boundary (e.g. probes on/off); ``run`` is the
    run the command applies to (the :class:`~workbench.core.train.trainer.loop.Trainer`)."""

    fn: Callable[[Any], Any]
    result: Any = None


def apply_command(trainer: SteeredRun, cmd: Any) -> None:
    """Apply one command to a run on the training thread, filling in its result fields.

    Parameters
    ----------
    trainer : SteeredRun
        The run (its model, optimizer, control, run folder, step...).
    cmd : SetTrainable, SetLR, SaveNow, EmptyCudaCache, SampleNow or Call

    Raises
    ------
    TrainingError
        An unknown command type.
    """
    if isinstance(cmd, SetTrainable):
        _set_trainable(trainer, cmd)
    elif isinstance(cmd, SetLR) and cmd.group is not None:  # one param group alone
        if trainer.optimizer is None or not 0 <= int(cmd.group) < len(trainer.optimizer.param_groups):
            raise TrainingError(f"param group {cmd.group} does not exist")
        optim.set_group_lr_at(trainer.optimizer, trainer.scheduler, int(cmd.group), float(cmd.lr))
    elif isinstance(cmd, SetLR):
        if trainer.optimizer is not None:
            optim.rescale_lr(trainer.optimizer, trainer.scheduler, float(cmd.lr), trainer.config)
        trainer.config.lr = float(cmd.lr)
        trainer.lr_used = float(cmd.lr)
    elif isinstance(cmd, SaveNow) and getattr(getattr(trainer, "checkpoints", None), "collective", False):
        path = trainer.checkpoints.save(cmd.path or None)  # FSDP: every rank writes its shards (path's .dcp/)
        cmd.saved_to = str(path) if trainer.is_main else None
    elif isinstance(cmd, SaveNow):
        if not trainer.is_main:
            return  # data-parallel: rank 0 alone writes; every replica holds the same weights
        trainer.prepare()
        trainer.wait_for_saves()  # the epoch-end write must not land after this one
        path = Path(cmd.path) if cmd.path else trainer.run_dir / "last.pt"
        cmd.nonfinite = nonfinite_tensors(trainer.model)
        path, _ = save_model_file(path, trainer.checkpoint_payload())  # the format the suffix names
        cmd.saved_to = str(path)
    elif isinstance(cmd, EmptyCudaCache):
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    elif isinstance(cmd, SampleNow):
        from workbench.core.train.task.samples import sample_now

        sample_now(trainer, cmd)
    elif isinstance(cmd, Call):
        cmd.result = cmd.fn(trainer)
    else:
        raise TrainingError(f"unknown command {cmd!r}")


def _set_trainable(trainer: SteeredRun, cmd: SetTrainable) -> None:
    """Freeze / unfreeze through :mod:`workbench.core.model.freezing` (the window's own resolver)."""
    model = trainer.model
    names = cmd.name_list()
    try:
        changed = freezing.set_requires_grad(model, names, cmd.flag)
    except UnknownPathError as e:
        cmd.error = str(e)
        return
    cmd.changed = changed
    if not cmd.flag:
        for p in model.parameters():
            if not p.requires_grad:
                p.grad = None
    if cmd.flag and changed and trainer.optimizer is not None:
        _add_to_optimizer(trainer, changed, float(cmd.lr_factor))
    if model.training:
        trainer.apply_bn_policy()


def _add_to_optimizer(trainer: SteeredRun, names: list[str], factor: float = 1.0) -> None:
    """Add a param group per role for newly trainable parameters not yet in the optimizer (LR times ``factor``)."""
    opt = trainer.optimizer
    in_opt = {id(p) for g in opt.param_groups for p in g["params"]}
    params = dict(trainer.model.named_parameters())
    new = [n for n in names if id(params[n]) not in in_opt]
    if not new:
        return
    head = trainer.lr
    for g in optim.param_groups(trainer.model, trainer.config, names=new):
        role = g["wb_role"]
        ref = next((x for x in opt.param_groups if x.get("wb_role") == role and x["params"]),
                   None) or next((x for x in opt.param_groups), None)
        group = {"params": g["params"], "wb_role": role, "lr": optim.lr_for_role(role, head, trainer.config) * factor}
        if factor != 1.0:
            group["wb_lr_factor"] = factor  # in the optimizer's state_dict: resume and SetLR keep it
        opt.add_param_group(group)
        optim.adopt_group(opt, trainer.scheduler, opt.param_groups[-1], ref)
        trainer.group_names.append(list(g["wb_names"]))
