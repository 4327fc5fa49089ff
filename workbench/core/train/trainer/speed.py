"""Fitting big models: gradient accumulation arithmetic, activation checkpointing, ``torch.compile``.

Qt-free. The trainer (:mod:`workbench.core.train.trainer.loop`) calls these from
``prepare()`` and its step; each is a small pure helper so it can be tested alone.

- ``accumulate_grad_batches = N``: the loss of each batch is divided by ``N``, the
  optimizer steps every ``N`` batches and at the epoch's end for a remainder, the LR
  scheduler once per optimizer step (Lightning's definitions): :func:`optimizer_steps`,
  :func:`closes_step`.
- ``activation_checkpointing``: a Hugging Face model through its own
  ``gradient_checkpointing_enable()``; any other model on its repeated blocks
  (:func:`repeated_blocks`) through ``torch.utils.checkpoint`` (non-reentrant), by a
  forward wrapper that keeps parameter names and ``state_dict`` keys.
- ``compile``: :class:`CompiledStep` keeps ``torch.compile`` of the step's module beside
  the eager one; steps run eager while a probe's forward hooks are attached (hooks are
  not traced), and graph breaks and recompilations are read from dynamo's counters.
"""

from __future__ import annotations

import math
import types
from typing import Any

import torch
from torch import nn

from workbench.core.model.blocks import repeated_blocks

__all__ = ["optimizer_steps", "closes_step", "repeated_blocks", "enable_activation_checkpointing",
           "disable_activation_checkpointing", "CompiledStep", "forward_hook_count", "compile_report"]

#: Lines of a graph break's reason kept in the run's log (dynamo's reasons run to a dozen lines of hints).
BREAK_REASON_LINES = 2


# ---------------------------------------------------------------- accumulation
def optimizer_steps(n_batches: int, accumulate: int) -> int:
    """Optimizer steps of an epoch of ``n_batches`` batches: ``ceil(n_batches / accumulate)``.

    A remainder (``n_batches % accumulate``) makes one shorter step at the epoch's end.
    """
    return math.ceil(max(0, int(n_batches)) / max(1, int(accumulate)))


def closes_step(batch_in_epoch: int, n_batches: int, accumulate: int) -> bool:
    """Whether the batch just consumed (the ``batch_in_epoch``-th, 1-based) ends an optimizer step.

    Every ``accumulate``-th batch of the epoch does, and the epoch's last batch.
    """
    return batch_in_epoch % max(1, int(accumulate)) == 0 or batch_in_epoch >= n_batches


# ---------------------------------------------------------------- activation checkpointing
def _checkpointed_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """A block's forward under ``torch.utils.checkpoint`` while training with grad (bound to the block)."""
    forward = types.MethodType(type(self).forward, self)
    if self.training and torch.is_grad_enabled():
        from torch.utils.checkpoint import checkpoint

        return checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return forward(*args, **kwargs)


def enable_activation_checkpointing(model: nn.Module) -> str:
    """Recompute activations in backward instead of keeping them; what was done, as a line for the log.

    A Hugging Face model that supports it (``supports_gradient_checkpointing``) is
    switched with ``gradient_checkpointing_enable(use_reentrant=False)``. Otherwise each
    of :func:`repeated_blocks` gets an instance ``forward`` that runs the class's
    forward under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``:
    parameter names, ``state_dict`` keys and hooks on the blocks are unchanged
    (forward hooks of modules inside a block also fire during the recomputation).
    Eval and ``no_grad`` forwards run as before.

    Returns
    -------
    str
        ``"activation checkpointing: ..."``: the method, or why nothing was checkpointed.
    """
    if getattr(model, "supports_gradient_checkpointing", False) and hasattr(model, "gradient_checkpointing_enable"):
        # transformers 5 renamed it activation_checkpointing_enable (the old name warns)
        name = ("activation_checkpointing_enable" if hasattr(model, "activation_checkpointing_enable")
                else "gradient_checkpointing_enable")
        kwargs = {"activation_checkpointing_kwargs" if name.startswith("activation") else
                  "gradient_checkpointing_kwargs": {"use_reentrant": False}}
        getattr(model, name)(**kwargs)
        if getattr(getattr(model, "config", None), "use_cache", False):
            model.config.use_cache = False  # a KV cache is useless in training and conflicts with recomputation
        return f"activation checkpointing: Hugging Face {name}()"
    blocks = repeated_blocks(model)
    if not blocks:
        return ("activation checkpointing: no repeated blocks (an nn.ModuleList or nn.Sequential of one class) "
                "found; the model trains without it")
    for _, block in blocks:
        block.forward = types.MethodType(_checkpointed_forward, block)
    first, last = blocks[0][0], blocks[-1][0]
    return f"activation checkpointing: {len(blocks)} blocks ({first} .. {last}, {type(blocks[0][1]).__name__})"


def disable_activation_checkpointing(model: nn.Module) -> None:
    """Undo :func:`enable_activation_checkpointing` (the blocks' own forward again)."""
    if hasattr(model, "activation_checkpointing_disable"):
        model.activation_checkpointing_disable()
    elif hasattr(model, "gradient_checkpointing_disable"):
        model.gradient_checkpointing_disable()
    for m in model.modules():
        fwd = m.__dict__.get("forward")
        if isinstance(fwd, types.MethodType) and fwd.__func__ is _checkpointed_forward:
            del m.forward


# ---------------------------------------------------------------- compile
def forward_hook_count(model: nn.Module) -> int:
    """How many forward (pre-)hooks the modules of ``model`` hold (a probe adds some while it listens)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


class CompiledStep:
    """``torch.compile`` of the module a step calls, beside the eager module.

    The trainer keeps its ``model`` (probes, hooks, ``state_dict``) and asks
    :meth:`module` for what the step calls: the compiled module, or the eager one
    while the model holds forward hooks other than those it had when compiled
    (dynamo does not trace hooks added after compilation; the probe's step runs
    eager and reports as always). A new ``net`` (a DDP re-wrap after a freeze) is
    compiled again.

    Parameters
    ----------
    model : nn.Module
        The trainer's model (where probes put their hooks).
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self._net: nn.Module | None = None
        self._compiled: nn.Module | None = None
        #: steps that ran eager because of hooks
        self.eager_steps = 0
        self._said_eager = False
        self._frames0: int | None = None
        self._breaks_said: set[str] = set()
        self._own_hooks = forward_hook_count(model)  # the model's own hooks (traced with it)

    def module(self, net: nn.Module) -> tuple[nn.Module, str | None]:
        """What this step calls, and a line for the log the first time a step runs eager (else None)."""
        if forward_hook_count(self.model) != self._own_hooks:
            self.eager_steps += 1
            if not self._said_eager:
                self._said_eager = True
                return net, ("torch.compile: steps with a probe's forward hooks attached run uncompiled "
                             "(hooks are not traced); the others run compiled")
            return net, None
        if self._net is not net:
            self._net, self._compiled = net, torch.compile(net)
        return self._compiled, None

    def report(self) -> str | None:
        """New graph breaks and recompilations since the last report, as one line; None when nothing is new.

        Read from ``torch._dynamo.utils.counters`` (cheap): ``graph_break`` (reason ->
        count) and ``frames.total``; frames compiled after the first report (the first
        step's compilation) count as recompilations.
        """
        text = compile_report(self._breaks_said, self._frames0)
        self._frames0 = _frames_total()
        return text


def _frames_total() -> int:
    from torch._dynamo.utils import counters

    return int(counters["frames"].get("total", 0))


def compile_report(said: set[str], frames0: int | None) -> str | None:
    """One log line of the graph breaks not in ``said`` (added to it) and the frames compiled since ``frames0``.

    Returns
    -------
    str or None
        ``"torch.compile: N frames compiled, K graph breaks: reason (xC); ...; R recompilations"``.
    """
    from torch._dynamo.utils import counters

    breaks = counters["graph_break"]
    new = [(r, c) for r, c in breaks.items() if r not in said]
    said.update(r for r, _ in new)
    frames = _frames_total()
    recompiles = frames - frames0 if frames0 is not None else 0
    if frames0 is not None and not new and recompiles == 0:
        return None
    parts = [f"torch.compile: {frames} frames compiled"]
    if new:
        reasons = "; ".join(" ".join(line.strip() for line in r.strip().splitlines()[:BREAK_REASON_LINES]) + f" (x{c})" for r, c in new)
        parts.append(f"{len(new)} graph break{'s' if len(new) > 1 else ''}: {reasons}")
    elif frames0 is None:
        parts.append("no graph breaks")
    if recompiles:
        parts.append(f"{recompiles} recompilation{'s' if recompiles > 1 else ''} since the last report")
    return ", ".join(parts)
