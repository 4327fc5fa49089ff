"""One batch and the optimizer step (``workbench.core.train.trainer.step.StepRunner``): accumulation, faults."""

from __future__ import annotations

import math

import torch
from torch import nn

from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer.loop import Trainer


def _trainer(tmp_path, accumulate: int, grad_clip: float = 0.0) -> tuple[Trainer, list]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    g = torch.Generator().manual_seed(1)
    train = [(torch.randn(3, 4, generator=g), torch.randint(0, 2, (3,), generator=g)) for _ in range(3)]
    cfg = TrainConfig(run_dir=str(tmp_path / "run"), epochs=1, checkpoint_every_epoch=False, tensorboard=False,
                      optimizer="sgd", lr=0.1, accumulate_grad_batches=accumulate, grad_clip=grad_clip)
    tr = Trainer(model, cfg, data=(train, train[:1]))
    tr.prepare()
    return tr, train


def test_the_stepper_holds_gradients_until_the_batch_that_closes_the_step(tmp_path):
    tr, train = _trainer(tmp_path, accumulate=2)
    before = [p.detach().clone() for p in tr.model.parameters()]
    n, step_loss = tr.stepper.run(train[0], len(train))
    assert (n, step_loss, tr.stepper.pending) == (3, None, 1)
    assert all(torch.equal(a, p) for a, p in zip(before, tr.model.parameters()))  # no optimizer step yet
    grads = [p.grad.clone() for p in tr.model.parameters()]
    tr.batch_in_epoch = 1
    n, step_loss = tr.stepper.run(train[1], len(train))
    assert tr.stepper.pending == 0 and math.isfinite(step_loss)
    assert not all(torch.equal(a, p) for a, p in zip(before, tr.model.parameters()))
    # the second batch's gradients were added to the first's (not zeroed between them)
    assert any(not torch.equal(g, p.grad) for g, p in zip(grads, tr.model.parameters()))


def test_a_nonfinite_loss_drops_the_pending_batches_and_goes_to_the_fault_handler(tmp_path):
    tr, train = _trainer(tmp_path, accumulate=3)
    calls = []
    tr.faults.nonfinite = lambda step, value, **kw: calls.append((step, value))
    tr.stepper.run(train[0], len(train))
    assert tr.stepper.pending == 1
    x, y = train[1]
    assert tr.stepper.run((torch.full_like(x, math.nan), y), len(train)) is None
    assert tr.stepper.pending == 0 and len(calls) == 1 and calls[0][0] == 1 and math.isnan(calls[0][1])


def test_with_grad_clip_the_clipped_norm_is_the_finite_check(tmp_path):
    """``grad_clip``: the gradients are clipped to the norm, and an Inf gradient (its total norm Inf) is handed
    to the fault handler as a gradient, before any weight moves."""
    tr, train = _trainer(tmp_path, accumulate=1, grad_clip=1e-3)
    calls = []
    tr.faults.nonfinite = lambda step, value, **kw: calls.append((step, kw.get("what")))
    assert tr.stepper.run(train[0], len(train)) is not None
    total = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in tr.model.parameters()]))
    assert float(total) <= 1e-3 * 1.0001 and not calls
    before = [p.detach().clone() for p in tr.model.parameters()]
    handle = tr.model[0].weight.register_hook(lambda g: torch.full_like(g, math.inf))
    assert tr.stepper.run(train[1], len(train)) is None
    handle.remove()
    assert calls == [(1, "gradient")]
    assert all(torch.equal(a, p) for a, p in zip(before, tr.model.parameters()))
