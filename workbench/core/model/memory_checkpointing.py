"""The activations a training step keeps under activation checkpointing, from one forward's saved tensors.

With ``activation_checkpointing`` on, the trainer recomputes the forward of each
checkpointed block in backward instead of keeping what it saved
(:mod:`workbench.core.train.trainer.speed`): a Hugging Face model's
``GradientCheckpointingLayer`` modules through its own
``gradient_checkpointing_enable()``, any other model's :func:`repeated_blocks`
through ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``.
:func:`checkpointed_blocks` picks the same modules.

What is kept (Chen et al. 2016, "Training Deep Nets with Sublinear Memory
Cost", section 4: a network cut into segments keeps each segment's input and
recomputes one segment at a time in backward; with every block a segment,
memory = the segments' inputs + the largest segment's activations):

- everything saved outside the blocks (embeddings, the head, the loss), as without checkpointing;
- each block's tensor inputs, once per storage: non-reentrant
  ``torch.utils.checkpoint`` stores the positional inputs for the recomputation
  (``_CheckpointFrame.save_inputs``, through the saved-tensor hooks in force, so
  ``saved_tensors_hooks`` sees them), and Hugging Face's layers keep their keyword
  tensors (an attention mask, rotary position embeddings) in the ``partial`` they
  checkpoint; a storage several blocks take (a mask) counts once;
- while one block's backward runs, its recomputed saved tensors (but not its
  inputs, which are the kept ones): the largest block's, :attr:`recompute_bytes`,
  counted in the root's own entry since it lives at one block at a time.

Nothing the blocks save in the forward stays (their saved tensors are replaced
by empty holders), so modules inside a block have no activations of their own.
The estimate is of the forward's end plus one recomputation: an upper bound of
backward's peak, when the head's saved tensors are already freed. Qt-free.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Hashable

from torch import nn

from workbench.core.model.blocks import repeated_blocks

__all__ = ["checkpointed_blocks", "CheckpointedActivations", "checkpointed_activations"]


def _hf_checkpointing_layer() -> type | None:
    """transformers' ``GradientCheckpointingLayer`` when transformers is already imported (a Hugging Face model
    is open) and has it (>= 4.52); else None. Never imports transformers itself."""
    if "transformers" not in sys.modules:
        return None
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:
        return None
    return GradientCheckpointingLayer


def checkpointed_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The modules activation checkpointing would recompute, as the trainer picks them.

    A Hugging Face model that supports gradient checkpointing: its outermost
    ``GradientCheckpointingLayer`` modules (``transformer.h.0`` ...), which its
    ``gradient_checkpointing_enable()`` switches. Otherwise (or when transformers
    has no such class): :func:`~workbench.core.model.blocks.repeated_blocks`.

    Returns
    -------
    list of (str, nn.Module)
        Qualified names and modules, in ``named_modules()`` order; empty when nothing would be checkpointed.
    """
    layer = _hf_checkpointing_layer()
    if layer is not None and getattr(model, "supports_gradient_checkpointing", False):
        found: list[tuple[str, nn.Module]] = []
        for name, module in model.named_modules():
            if isinstance(module, layer) and not any(name.startswith(f"{outer}.") for outer, _ in found):
                found.append((name, module))
        if found:
            return found
    return repeated_blocks(model)


@dataclass(frozen=True)
class CheckpointedActivations:
    """What :func:`checkpointed_activations` found, in bytes.

    Attributes
    ----------
    own : dict
        ``{module or None: bytes}`` kept per module (its own, not its children's): what is saved outside the
        blocks where it was saved, and each block's inputs at the block. ``None``: outside every module.
    recompute_bytes : int
        The largest block's recomputed saved tensors (its inputs left out).
    blocks : int
        How many blocks are checkpointed.
    """

    own: dict
    recompute_bytes: int
    blocks: int

    @property
    def total_bytes(self) -> int:
        """Everything kept plus one block's recomputation."""
        return sum(self.own.values()) + self.recompute_bytes


def checkpointed_activations(saved: dict[Hashable, tuple[Any, int]], inputs: list[dict[Hashable, int]],
                             blocks: list[nn.Module]) -> CheckpointedActivations:
    """The activations of a step with ``blocks`` checkpointed, from a forward without checkpointing.

    Parameters
    ----------
    saved : dict
        ``{storage key: (innermost module running when autograd saved it, or None; bytes)}`` of one training
        forward without checkpointing, each storage once
        (:func:`~workbench.core.model.memory.saved_tensor_bytes` ``storages=``).
    inputs : list of dict
        Per block, in order: ``{storage key: bytes}`` of the tensors it was called with (positional and keyword).
    blocks : list of nn.Module
        The checkpointed blocks (:func:`checkpointed_blocks`), in the order of ``inputs``.

    Returns
    -------
    CheckpointedActivations
        See the module docstring for what is counted and why.
    """
    block_of: dict[int, int] = {}
    for i, block in enumerate(blocks):
        for module in block.modules():
            block_of.setdefault(id(module), i)
    own: dict = {}
    inside = [0] * len(blocks)
    outside_keys = set()
    for key, (owner, nbytes) in saved.items():
        i = block_of.get(id(owner)) if owner is not None else None
        if i is None:
            own[owner] = own.get(owner, 0) + nbytes
            outside_keys.add(key)
        elif key not in inputs[i]:  # an input a block saves is the kept one, not recomputed
            inside[i] += nbytes
    kept: set = set(outside_keys)
    for i, block_inputs in enumerate(inputs):
        for key, nbytes in block_inputs.items():
            if key not in kept:
                kept.add(key)
                own[blocks[i]] = own.get(blocks[i], 0) + nbytes
    return CheckpointedActivations(own, max(inside, default=0), len(blocks))
