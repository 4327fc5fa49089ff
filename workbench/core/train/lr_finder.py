"""Learning-rate range test (Smith, "Cyclical Learning Rates for Training Neural Networks", 2017).

:func:`lr_find` sweeps the learning rate exponentially from ``min_lr`` to
``max_lr`` over at most ``steps`` training steps of a prepared
:class:`~workbench.core.train.trainer.loop.Trainer` (its data, model, optimizer and
frozen set), records the loss, and puts everything back afterwards, bit for
bit: parameters, BatchNorm statistics, ``requires_grad``, optimizer and
scheduler state, and the RNG states (torch CPU and CUDA, numpy, ``random``).
Lightning's ``lr_find`` did not restore the weights (Lightning#6675) and
fastai's leaked optimizer state (fastai#2892): here a test checks the restore.

The loss is smoothed with a bias-corrected exponential moving average (as
fastai and Lightning do); the sweep stops when the smoothed loss exceeds
``diverge`` times its minimum, or at the first NaN/Inf loss (that point is not
kept, so it cannot spoil the curve).

:func:`sweep_copy` takes the copy a window sweeps (its own model is never
touched) and :func:`find_lr` runs the range test on it with a run's settings,
writing nothing into the runs.
"""

from __future__ import annotations

import copy
import io
import math
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from workbench.core import csv_cells
from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write_text
from workbench.core.train.data.batch import move

if TYPE_CHECKING:  # pragma: no cover
    from workbench.core.train.trainer.loop import Trainer

__all__ = ["LRFindResult", "ModelNotCopyable", "find_lr", "lr_find", "steepest", "sweep_copy", "valley"]


class ModelNotCopyable(WorkbenchError):
    """The model holds tensors without values (fake or ``meta``): there is nothing to sweep a copy of.

    A ``torch.export`` trace (the Graph tab's capture) puts fake tensors in the
    model's place while it runs; a model opened on the ``meta`` device has no
    weights at all.
    """


def _placeholders(model: torch.nn.Module) -> list[str]:
    """Names of the parameters and buffers of ``model`` that hold no values (fake or ``meta`` tensors)."""
    from torch._subclasses.fake_tensor import is_fake

    tensors = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return [name for name, t in tensors if t.device.type == "meta" or is_fake(t)]


def sweep_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``model`` to sweep (call on the thread that owns ``model``; it is left unchanged).

    Raises
    ------
    ModelNotCopyable
        A parameter or buffer holds no values (a ``torch.export`` trace is running on
        ``model``, or it was built on the ``meta`` device); the message names it.
    """
    empty = _placeholders(model)
    if not empty:
        try:
            return copy.deepcopy(model)
        except RuntimeError as exc:  # a tensor swapped for a fake one while copying (a trace started meanwhile)
            if not _placeholders(model):
                raise
            empty = _placeholders(model) or [str(exc)]
    raise ModelNotCopyable(
        f"the model holds no weights in {empty[0]}" + (f" and {len(empty) - 1} more" if len(empty) > 1 else "")
        + " (a graph capture is tracing it, or it was built without weights); try again when it has them")


def find_lr(model: torch.nn.Module, config, arch=None, min_lr: float = 1e-7, max_lr: float = 10.0,
            steps: int = 100, progress=None) -> LRFindResult:
    """The range test of :func:`lr_find` on ``model`` with ``config``'s data and optimizer; nothing goes to the runs.

    Parameters
    ----------
    model : nn.Module
        The model to sweep (a :func:`sweep_copy`; the sweep restores it afterwards anyway).
    config : TrainConfig
        The run's settings; a copy is used, its ``run_dir`` a new temporary folder and TensorBoard off.
    arch : ArchSpec, optional
    min_lr, max_lr, steps, progress
        As :func:`lr_find`.

    Returns
    -------
    LRFindResult
    """
    from workbench.core.train.trainer.loop import Trainer

    config = copy.deepcopy(config)
    config.run_dir = tempfile.mkdtemp(prefix="workbench-lr-find-")
    config.tensorboard = False
    try:
        trainer = Trainer(model, config, [], arch)
        return lr_find(trainer, min_lr, max_lr, steps, progress=progress)
    finally:
        shutil.rmtree(config.run_dir, ignore_errors=True)


@dataclass
class LRFindResult:
    """One range test.

    Attributes
    ----------
    lrs : list of float
        The learning rate of each step (the head's, when groups have LR factors).
    losses : list of float
        The raw training loss of each step.
    smoothed : list of float
        The bias-corrected EMA of ``losses``.
    reason : str
        ``"completed"`` (all steps), ``"diverged"`` (smoothed loss > ``diverge`` x
        its minimum) or ``"nonfinite"`` (a NaN/Inf loss ended it; not recorded).
    steepest : float or None
        LR of the steepest descent of the smoothed loss over log10(LR).
    valley : float or None
        fastai's "valley" suggestion (the longest decreasing stretch, 2/3 of
        the way down; fastai 2.4, ``lr_find(suggest_funcs=valley)``).
    """

    lrs: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    smoothed: list[float] = field(default_factory=list)
    reason: str = "completed"
    steepest: float | None = None
    valley: float | None = None

    @property
    def suggested(self) -> float | None:
        """The suggestion to use: the valley point, else the steepest descent."""
        return self.valley if self.valley is not None else self.steepest

    def to_csv(self) -> str:
        """``step,lr,loss,smoothed`` rows."""
        buf = io.StringIO()
        w = csv_cells.writer(buf, lineterminator="\n")
        w.writerow(["step", "lr", "loss", "smoothed"])
        for i, (lr, loss, s) in enumerate(zip(self.lrs, self.losses, self.smoothed)):
            w.writerow([i, repr(lr), repr(loss), repr(s)])
        return buf.getvalue()

    def write_csv(self, path):
        """Write :meth:`to_csv` atomically; returns the path."""
        return atomic_write_text(path, self.to_csv())


def steepest(lrs: list[float], smoothed: list[float], skip_begin: int = 3, skip_end: int = 1) -> float | None:
    """LR where the smoothed loss falls fastest per decade (``np.gradient`` over log10 LR), or None.

    The first ``skip_begin`` and last ``skip_end`` points are left out, as
    Lightning's suggestion does (its defaults are 10 and 1 for 100 steps), and
    so is everything after the lowest loss (:func:`_descent`): a loss that
    rose past its minimum and fell back while diverging is no suggestion.
    """
    lrs, smoothed = _descent(lrs, smoothed)
    n = len(smoothed)
    if n < skip_begin + skip_end + 2:
        return None
    x = np.log10(np.asarray(lrs[skip_begin:n - skip_end]))
    y = np.asarray(smoothed[skip_begin:n - skip_end])
    return float(10 ** x[int(np.argmin(np.gradient(y, x)))])


def _descent(lrs: list[float], smoothed: list[float]) -> tuple[list[float], list[float]]:
    """The sweep up to and including its lowest finite smoothed loss (one point past it, for the slope there)."""
    finite = [i for i, v in enumerate(smoothed) if np.isfinite(v)]
    if not finite:
        return [], []
    end = min(min(finite, key=lambda i: smoothed[i]) + 2, len(smoothed))
    return list(lrs[:end]), list(smoothed[:end])


def valley(lrs: list[float], smoothed: list[float]) -> float | None:
    """fastai's valley point: the longest decreasing run of the loss, then 2/3 of the way along it.

    Source: fastai ``callback/schedule.py`` ``valley`` (2.4+); O(n^2) in the
    points, fine for a few hundred. Only the sweep up to its lowest loss is
    searched (:func:`_descent`), so a fall inside a diverged tail is never picked.
    """
    lrs, smoothed = _descent(lrs, smoothed)
    n = len(smoothed)
    if n < 3:
        return None
    lds = [1] * n
    max_start = max_end = 0
    for i in range(1, n):
        for j in range(i):
            if smoothed[i] < smoothed[j] and lds[i] < lds[j] + 1:
                lds[i] = lds[j] + 1
            if lds[max_end] < lds[i]:
                max_end = i
                max_start = max_end - lds[max_end]
    sections = (max_end - max_start) / 3
    idx = max_start + int(sections) + int(sections / 2)
    return float(lrs[min(max(idx, 0), n - 1)])


class _Snapshot:
    """Everything a sweep changes, copied before it and put back after it."""

    def __init__(self, tr: Trainer):
        self.state = {k: v.detach().clone() for k, v in tr.model.state_dict().items()}
        self.requires_grad = {n: p.requires_grad for n, p in tr.model.named_parameters()}
        self.training = tr.model.training
        self.optimizer = copy.deepcopy(tr.optimizer.state_dict())
        self.scheduler = copy.deepcopy(tr.scheduler.state_dict()) if tr.scheduler is not None else None
        self.scaler = copy.deepcopy(tr.scaler.state_dict()) if tr.scaler is not None else None
        self.rng = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
                    np.random.get_state(), random.getstate())

    def restore(self, tr: Trainer) -> None:
        with torch.no_grad():
            for k, v in tr.model.state_dict().items():
                v.copy_(self.state[k])
        for n, p in tr.model.named_parameters():
            p.requires_grad_(self.requires_grad[n])
            p.grad = None
        tr.model.train(self.training)
        tr.optimizer.load_state_dict(self.optimizer)
        if self.scheduler is not None:
            tr.scheduler.load_state_dict(self.scheduler)
        if self.scaler is not None:
            tr.scaler.load_state_dict(self.scaler)
        cpu, cuda, np_state, py_state = self.rng
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        np.random.set_state(np_state)
        random.setstate(py_state)


def _batches(loader):
    """Training batches, epoch after epoch (the sweep may need more steps than one epoch has)."""
    epoch = 0
    while True:
        it = loader.iter_epoch(epoch) if hasattr(loader, "iter_epoch") else iter(loader)
        got = False
        for batch in it:
            got = True
            yield batch
        if not got:
            return
        epoch += 1


def lr_find(trainer: Trainer, min_lr: float = 1e-7, max_lr: float = 10.0, steps: int = 100, beta: float = 0.98,
            diverge: float = 4.0, progress=None) -> LRFindResult:
    """Run the range test on ``trainer``'s model and data, then restore everything it changed.

    Parameters
    ----------
    trainer : Trainer
        Prepared here if it is not (data, optimizer, run folder); not running.
    min_lr, max_lr : float
        First and last learning rate of the sweep (the head's; groups with an
        LR factor keep their ratio to it).
    steps : int
        Steps of the sweep (>= 5).
    beta : float
        EMA factor of the smoothed loss (0.98 as in fastai).
    diverge : float
        Stop when the smoothed loss exceeds this multiple of its minimum.
    progress : callable, optional
        ``progress(step, lr, loss)`` after each step (e.g. to update a window; return True to stop early).

    Returns
    -------
    LRFindResult

    Raises
    ------
    ValueError
        ``min_lr`` not in (0, ``max_lr``) or ``steps`` < 5.
    """
    if not (0 < min_lr < max_lr) or steps < 5:
        raise ValueError(f"lr_find needs 0 < min_lr < max_lr and steps >= 5 (got {min_lr}, {max_lr}, {steps})")
    tr = trainer
    tr.prepare()
    snap = _Snapshot(tr)
    opt = tr.optimizer
    head = max(float(g["lr"]) for g in opt.param_groups) or 1.0
    factors = [float(g["lr"]) / head for g in opt.param_groups]
    result = LRFindResult()
    avg, best = 0.0, math.inf
    dev = tr.device
    fmt = torch.channels_last if tr.channels_last else None
    tr.model.train()
    tr.apply_bn_policy()
    try:
        for i, batch in zip(range(steps), _batches(tr.train_loader)):
            lr = min_lr * (max_lr / min_lr) ** (i / (steps - 1))
            for g, f in zip(opt.param_groups, factors):
                g["lr"] = lr * f
            batch = move(batch, dev, False, fmt)
            opt.zero_grad(set_to_none=True)
            with tr.autocast():
                loss = tr.task.train_step(tr.net, batch).loss
            value = float(loss.item())
            if not math.isfinite(value):
                result.reason = "nonfinite"
                break
            if loss.requires_grad:
                if tr.scaler is not None:
                    tr.scaler.scale(loss).backward()
                    tr.scaler.step(opt)
                    tr.scaler.update()
                else:
                    loss.backward()
                    opt.step()
            avg = beta * avg + (1 - beta) * value
            smooth = avg / (1 - beta ** (i + 1))
            result.lrs.append(lr)
            result.losses.append(value)
            result.smoothed.append(smooth)
            best = min(best, smooth)
            if progress is not None and progress(i, lr, value):
                result.reason = "stopped"
                break
            if i > 0 and smooth > diverge * best:
                result.reason = "diverged"
                break
    finally:
        snap.restore(tr)
    result.steepest = steepest(result.lrs, result.smoothed)
    result.valley = valley(result.lrs, result.smoothed)
    return result
