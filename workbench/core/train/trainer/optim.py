"""Loss, optimizer and scheduler factories, and the LR-schedule preview.

Only parameters with ``requires_grad=True`` go to the optimizer. Each param
group carries a ``"wb_role"`` key (``"head"``, ``"backbone"`` or ``"all"``) so an
LR change or a later unfreeze knows which multiplier applies.

Scheduler stepping: ``"plateau"`` (ReduceLROnPlateau) steps once per epoch on
the validation loss; every other scheduler steps once per optimizer step, its
periods (``step_size``, ``milestones``) given in epochs and converted to steps.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np
import torch
from torch import nn

from workbench.core.errors import TrainingError
from workbench.core.train.config import TrainConfig

LR_KEYS = ("initial_lr", "max_lr", "min_lr")


# ---------------------------------------------------------------- loss
class _OneHotLoss(nn.Module):
    """Wrap a regression-style loss so integer class targets become one-hot floats."""

    def __init__(self, loss: nn.Module):
        super().__init__()
        self.loss = loss

    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if not target.is_floating_point() and output.dim() == 2 and target.dim() == 1:
            target = nn.functional.one_hot(target, output.shape[1]).to(output.dtype)
        elif target.dtype != output.dtype:
            target = target.to(output.dtype)
        return self.loss(output, target)


def build_loss(name: str) -> nn.Module:
    """``"cross_entropy"``, ``"mse"``, ``"bce_with_logits"`` or ``"l1"`` as a module.

    mse / bce_with_logits / l1 turn integer class targets ``(N,)`` into one-hot
    ``(N, C)`` targets matching ``(N, C)`` outputs.

    Raises
    ------
    ValueError
        Unknown name.
    """
    if name == "cross_entropy":
        return nn.CrossEntropyLoss()
    table = {"mse": nn.MSELoss, "bce_with_logits": nn.BCEWithLogitsLoss, "l1": nn.L1Loss}
    if name not in table:
        raise ValueError(f"unknown loss {name!r}; choose cross_entropy, mse, bce_with_logits or l1")
    return _OneHotLoss(table[name]())


# ---------------------------------------------------------------- param groups
def default_head(model: nn.Module) -> str:
    """Qualified name of the parent module of the last ``nn.Linear`` (``""`` if none or top level)."""
    last = None
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            last = name
    if last is None:
        return ""
    return last.rsplit(".", 1)[0] if "." in last else last


def _in_module(param_name: str, module_name: str) -> bool:
    return module_name == "" or param_name == module_name or param_name.startswith(module_name + ".")


def role_of(param_name: str, config: TrainConfig, head: str) -> str:
    """``"all"`` when there is one LR, else ``"head"`` or ``"backbone"``."""
    if config.backbone_lr_mult == 1.0 or not head:
        return "all"
    return "head" if _in_module(param_name, head) else "backbone"


def lr_for_role(role: str, head_lr: float, config: TrainConfig) -> float:
    """LR of a group of ``role`` when the head's LR is ``head_lr``."""
    return head_lr * config.backbone_lr_mult if role == "backbone" else head_lr


def param_groups(model: nn.Module, config: TrainConfig, names: Iterable[str] | None = None) -> list[dict]:
    """Param groups over the trainable parameters (or exactly ``names``).

    Returns
    -------
    list of dict
        ``{"params": [...], "lr": ..., "wb_role": ..., "wb_names": [...]}``; empty
        groups are left out. ``wb_names`` is removed by :func:`build_optimizer`
        and kept by the trainer to rebuild the same groups on resume.
    """
    head = config.head if config.head is not None else default_head(model)
    by_role: dict[str, list] = {}
    wanted = set(names) if names is not None else None
    seen = set()
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        if (wanted is None and not p.requires_grad) or (wanted is not None and name not in wanted):
            continue
        seen.add(id(p))
        by_role.setdefault(role_of(name, config, head), []).append((name, p))
    return [{"params": [p for _, p in items], "wb_names": [n for n, _ in items], "wb_role": role,
             "lr": lr_for_role(role, config.lr, config)} for role, items in by_role.items()]


def named_groups(model: nn.Module, config: TrainConfig, group_names: list[list[str]],
                 roles: list[str] | None = None) -> list[dict]:
    """The param groups a checkpoint records: the parameters of each group by name, each at its role's LR.

    Raises
    ------
    TrainingError
        A name is not a parameter of ``model`` (the first five are named).
    """
    params = dict(model.named_parameters())
    missing = [n for names in group_names for n in names if n not in params]
    if missing:
        raise TrainingError(f"the checkpoint's optimizer covers parameters this model lacks: "
                            f"{', '.join(missing[:5])}; load weights only instead")
    return [{"params": [params[n] for n in names], "wb_names": list(names),
             "wb_role": role, "lr": lr_for_role(role, config.lr, config)}
            for names, role in zip(group_names, roles or ["all"] * len(group_names))]


def build_optimizer(groups: list[dict], config: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer of ``config.optimizer`` over ``groups`` (``wb_names`` dropped).

    An empty parameter list gets a placeholder group with no parameters so
    unfreezing later can add groups.

    Raises
    ------
    ValueError
        Unknown optimizer name.
    """
    groups = [{k: v for k, v in g.items() if k != "wb_names"} for g in groups]
    if not groups:
        groups = [{"params": [], "wb_role": "all", "lr": config.lr}]
    kw: dict = {"lr": config.lr, "weight_decay": config.weight_decay}
    name = config.optimizer
    if name == "sgd":
        return torch.optim.SGD(groups, momentum=config.momentum,
                               nesterov=bool(config.nesterov and config.momentum > 0), **kw)
    if name == "adam":
        return torch.optim.Adam(groups, **kw, **fused_kwargs(groups, torch.optim.Adam))
    if name == "adamw":
        return torch.optim.AdamW(groups, **kw, **fused_kwargs(groups, torch.optim.AdamW))
    if name == "rmsprop":
        return torch.optim.RMSprop(groups, momentum=config.momentum, **kw)
    raise ValueError(f"unknown optimizer {name!r}; choose sgd, adam, adamw or rmsprop")


def fused_kwargs(groups: list[dict], optimizer_class: type) -> dict:
    """``{"fused": True}`` when every parameter of ``groups`` is a floating-point CUDA tensor and
    ``optimizer_class`` has a fused implementation (Adam, AdamW: one kernel for the whole step); else ``{}``
    (torch's default: ``foreach`` on CUDA, the loop on CPU).

    An empty group list (a fully frozen model, unfrozen later) gets ``{}``: groups added
    later may live anywhere.
    """
    import inspect

    params = [p for g in groups for p in g["params"]]
    if not params or not all(p.is_cuda and p.is_floating_point() for p in params):
        return {}
    if "fused" not in inspect.signature(optimizer_class.__init__).parameters:
        return {}
    return {"fused": True}


def build_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig, steps_per_epoch: int):
    """The scheduler of ``config.scheduler``, or None for ``"none"``.

    Per-step schedulers get their periods in steps: StepLR ``step_size *
    steps_per_epoch``; MultiStepLR ``milestones * steps_per_epoch``;
    CosineAnnealingLR ``T_max = epochs * steps_per_epoch``; OneCycleLR
    ``total_steps = epochs * steps_per_epoch`` with ``max_lr`` = each group's LR.
    ReduceLROnPlateau is stepped per epoch with the validation loss.

    Raises
    ------
    ValueError
        Unknown scheduler name.
    """
    spe = max(1, int(steps_per_epoch))
    total = max(1, int(config.epochs) * spe)
    name = config.scheduler
    S = torch.optim.lr_scheduler
    if name == "none":
        return None
    if name == "step":
        return S.StepLR(optimizer, step_size=max(1, int(config.step_size)) * spe, gamma=config.gamma)
    if name == "multistep":
        return S.MultiStepLR(optimizer, milestones=[int(m) * spe for m in config.milestones], gamma=config.gamma)
    if name == "cosine":
        return S.CosineAnnealingLR(optimizer, T_max=total, eta_min=config.min_lr)
    if name == "onecycle":
        return S.OneCycleLR(optimizer, max_lr=[g["lr"] for g in optimizer.param_groups], total_steps=total,
                            pct_start=config.pct_start,
                            cycle_momentum=config.optimizer in ("sgd", "rmsprop") and config.momentum > 0)
    if name == "plateau":
        return S.ReduceLROnPlateau(optimizer, mode="min", factor=config.plateau_factor,
                                   patience=config.plateau_patience, min_lr=config.min_lr)
    raise ValueError(f"unknown scheduler {name!r}")


def is_per_epoch(scheduler) -> bool:
    """True for ReduceLROnPlateau (stepped per epoch on the validation loss)."""
    return isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def adopt_group(optimizer, scheduler, group: dict, reference: dict | None) -> None:
    """Make a param group added after the scheduler was built follow the schedule.

    Copies the scheduler's per-group keys (``initial_lr``, ``max_lr``, ``min_lr``,
    momentum bounds) from ``reference`` scaled by the LR ratio, and extends the
    scheduler's ``base_lrs`` / ``min_lrs`` lists.
    """
    if scheduler is None or reference is None:
        return
    ratio = group["lr"] / reference["lr"] if reference["lr"] else 1.0
    for key, value in reference.items():
        if key in group or key == "params":
            continue
        if key in LR_KEYS:
            group[key] = value * ratio
        elif key in ("base_momentum", "max_momentum"):
            group[key] = value
    if hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs.append(group.get("initial_lr", group["lr"]))
    if hasattr(scheduler, "_last_lr") and isinstance(scheduler._last_lr, list):
        scheduler._last_lr.append(group["lr"])
    if hasattr(scheduler, "min_lrs") and isinstance(scheduler.min_lrs, list):
        scheduler.min_lrs.append(scheduler.min_lrs[-1] if scheduler.min_lrs else 0.0)


def rescale_lr(optimizer, scheduler, head_lr: float, config: TrainConfig) -> None:
    """Set every group's LR from the head LR (``SetLR``); the schedule continues from there.

    Scales the scheduler's reference LRs (``base_lrs``, ``initial_lr``,
    ``max_lr``, ``min_lr``) by the same ratio as each group's LR.
    """
    for i, g in enumerate(optimizer.param_groups):
        set_group_lr_at(optimizer, scheduler, i,
                        lr_for_role(g.get("wb_role", "all"), head_lr, config) * float(g.get("wb_lr_factor", 1.0)))


def set_group_lr_at(optimizer, scheduler, index: int, new: float) -> None:
    """Set param group ``index``'s LR to ``new``; its other LR keys (:data:`LR_KEYS`) and the scheduler's
    reference LRs (``base_lrs``, the last LR) scale by the same ratio, so the schedule continues from there."""
    g = optimizer.param_groups[index]
    ratio = new / g["lr"] if g["lr"] else 1.0
    g["lr"] = new
    for key in LR_KEYS:
        if key in g:
            g[key] = g[key] * ratio
    if scheduler is not None and hasattr(scheduler, "base_lrs") and index < len(scheduler.base_lrs):
        scheduler.base_lrs[index] = scheduler.base_lrs[index] * ratio
    last = getattr(scheduler, "_last_lr", None)
    if isinstance(last, list) and index < len(last):
        last[index] = new


def set_group_lr(optimizer, scheduler, lr: float, group: int | None = None) -> list[int]:
    """Set the LR of one param group, or (``group`` None) of every group in proportion to the first's.

    The scheduler's reference LRs of each changed group (``base_lrs``,
    ``initial_lr``, ``max_lr``, ``min_lr``) scale by the same ratio, so the
    schedule continues from the new LR.

    Returns
    -------
    list of int
        The indices of the groups changed.

    Raises
    ------
    ValueError
        ``lr`` is not a positive finite number, or ``group`` is not a group's index.
    """
    lr = float(lr)
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"a learning rate must be a positive number, not {lr!r}")
    groups = optimizer.param_groups
    if group is not None and not (0 <= int(group) < len(groups)):
        raise ValueError(f"param group {group} does not exist (the optimizer has {len(groups)})")
    first = float(groups[0]["lr"])
    targets = [int(group)] if group is not None else list(range(len(groups)))
    for i in targets:
        old = float(groups[i]["lr"])
        new = lr if group is not None or not first else old * lr / first
        set_group_lr_at(optimizer, scheduler, i, new)
    return targets


def head_lr(optimizer) -> float:
    """The LR shown to the user: the head group's (or the first group's)."""
    for g in optimizer.param_groups:
        if g.get("wb_role") in ("head", "all"):
            return float(g["lr"])
    return float(optimizer.param_groups[0]["lr"])


def lr_schedule_preview(config: TrainConfig, steps_per_epoch: int) -> np.ndarray:
    """The planned head LR at every optimizer step of the run.

    Parameters
    ----------
    config : TrainConfig
    steps_per_epoch : int

    Returns
    -------
    numpy.ndarray
        ``(epochs * steps_per_epoch,)`` float64 LRs. ``"plateau"`` depends on the
        validation loss and previews as a constant ``lr``.
    """
    total = max(0, int(config.epochs) * max(1, int(steps_per_epoch)))
    p = nn.Parameter(torch.zeros(1))
    opt = build_optimizer([{"params": [p], "lr": config.lr, "wb_role": "all"}], config)
    sched = build_scheduler(opt, config, steps_per_epoch)
    out = np.empty(total, dtype=np.float64)
    for i in range(total):
        out[i] = opt.param_groups[0]["lr"]
        if sched is not None and not is_per_epoch(sched):
            opt.step()  # no grads: parameters stay put; silences the "step order" warning
            sched.step()
    return out
