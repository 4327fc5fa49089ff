"""Fully sharded data parallelism: ``strategy = "fsdp"`` (FSDP2, ``torch.distributed.fsdp.fully_shard``).

:class:`FullyShardedParallel` is the strategy of one rank of a run launched on several
ranks (``workbench train run.toml --nproc-per-node N``) whose ``run.toml`` says
``strategy = "fsdp"``. It is :class:`~workbench.core.train.trainer.strategy.DataParallel`
(rank 0's commands, pause and stop agreed by every rank, the loss every rank logs,
the data sharded by rank) except for the model and its checkpoints:

- the model is sharded in place: ``fully_shard`` on each repeated block (a Hugging
  Face model's ``_no_split_modules`` classes, else :func:`~workbench.core.model.blocks.repeated_blocks`),
  then on the root. Every parameter becomes a ``DTensor`` holding this rank's shard;
  a block's parameters are all-gathered for its forward and backward and its gradients
  reduce-scattered, so parameters, gradients and the optimizer state take 1/N of the
  memory per rank (activations do not shrink: ``activation_checkpointing`` does that).
- ``amp = true``: a ``MixedPrecisionPolicy`` (parameters all-gathered in bf16/fp16,
  gradients reduced in fp32) besides the autocast every strategy uses.
- checkpoints are ``torch.distributed.checkpoint`` folders (:mod:`~.fsdp_checkpoints`).
- freezing and unfreezing mid-run work as in one process: ``requires_grad`` is per
  parameter on the ``DTensor``; a frozen parameter's gradient stays None (the optimizer
  skips it), so it stays bit-identical.

Refused with one line (:data:`REFUSED`): ``amp_dtype = "float16"`` (GradScaler not
verified with sharded gradients) and a model with no block to shard. The NaN trace is
not run (its re-run forward would need every rank in lockstep): the NaN handling
itself works. Qt-free.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from workbench.core.errors import TrainingError
from workbench.core.model.blocks import repeated_blocks
from workbench.core.train.trainer.fsdp_checkpoints import REFUSED, ShardedCheckpoints
from workbench.core.train.trainer.strategy import DataParallel, SingleProcess, process_group
from workbench.core.train.trainer.strategy import strategy_for as replica_strategy_for

__all__ = ["FullyShardedParallel", "shard_units", "mixed_precision", "strategy_for", "REFUSED"]


def strategy_for(trainer) -> SingleProcess:
    """The strategy of a trainer being built (what the loop calls): :class:`FullyShardedParallel` in a
    process group of more than one process when ``config.strategy`` is ``"fsdp"``, else
    :func:`workbench.core.train.trainer.strategy.strategy_for` (DDP or one process).

    Returns
    -------
    SingleProcess, DataParallel or FullyShardedParallel
    """
    rank, world_size = process_group()
    if world_size > 1 and getattr(trainer.config, "strategy", "auto") == "fsdp":
        return FullyShardedParallel(trainer, rank, world_size)
    return replica_strategy_for(trainer)


def shard_units(model: nn.Module) -> tuple[list[tuple[str, nn.Module]], str]:
    """The modules ``fully_shard`` wraps before the root, and how they were chosen (for the log).

    A Hugging Face model's ``_no_split_modules`` class names (its decoder layers), else
    the largest repeated block (:func:`repeated_blocks`). Nested matches (a block inside
    a block) keep the outer one.

    Returns
    -------
    (list of (str, nn.Module), str)
        Qualified names and modules, in model order; a few words naming the rule.
    """
    names = set(getattr(model, "_no_split_modules", None) or ())
    units = []
    if names:
        for qn, m in model.named_modules():
            if type(m).__name__ in names and not any(qn.startswith(f"{u}.") for u, _ in units):
                units.append((qn, m))
        if units:
            return units, f"_no_split_modules ({', '.join(sorted({type(m).__name__ for _, m in units}))})"
    units = repeated_blocks(model)
    kind = type(units[0][1]).__name__ if units else ""
    return units, f"repeated blocks ({kind})"


def mixed_precision(config: Any, device: torch.device) -> Any:
    """``MixedPrecisionPolicy`` for ``config.amp`` (bf16 on CPU, ``amp_dtype`` on CUDA; fp32 gradient
    reduction), else None."""
    if not config.amp:
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtype = torch.bfloat16 if device.type == "cpu" or config.amp_dtype == "bfloat16" else torch.float16
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


class FullyShardedParallel(DataParallel):
    """One rank of an FSDP2 run (``strategy = "fsdp"``, ``world_size > 1``).

    Attributes
    ----------
    sharded : bool
        True: the model's parameters are ``DTensor`` shards (checkpoints, digests and
        the NaN trace ask).
    group : ProcessGroup or None
        A Gloo group of its own for the background checkpoint writes (their collectives
        run on a thread, never interleaved with the steps' on the default group).
    """

    sharded = True

    def __init__(self, trainer, rank: int, world_size: int):
        super().__init__(trainer, rank, world_size)
        self.group = None
        self._done = False

    def wrap_model(self) -> None:
        """Shard the model once (blocks, then the root); later calls (a freeze or unfreeze mid-run) keep it.

        Raises
        ------
        TrainingError
            ``amp_dtype = "float16"``, or no block to shard.
        """
        tr = self.trainer
        tr.net = tr.model
        if self._done:
            return  # requires_grad is per parameter on the DTensors: nothing to rebuild
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard

        cfg = tr.config
        if cfg.amp and tr.device.type == "cuda" and cfg.amp_dtype == "float16":
            raise TrainingError(REFUSED["float16"])
        units, rule = shard_units(tr.model)
        if not units:
            raise TrainingError(REFUSED["no_blocks"])
        policy = mixed_precision(cfg, tr.device)
        kwargs = {"mp_policy": policy} if policy is not None else {}
        for _, block in units:
            fully_shard(block, **kwargs)
        fully_shard(tr.model, **kwargs)
        self.group = dist.new_group(backend="gloo")
        self._done = True
        tr.say(f"FSDP2: {len(units)} blocks by {rule} and the root sharded over {self.world_size} ranks"
               + (f"; mixed precision {str(policy.param_dtype).replace('torch.', '')}" if policy else ""))

    def checkpoint_connector(self):
        """Checkpoints as ``torch.distributed.checkpoint`` folders (:class:`~.fsdp_checkpoints.ShardedCheckpoints`)."""
        return ShardedCheckpoints(self.trainer)

    def full_weights(self) -> Any:
        """The full weights, gathered on rank 0's CPU (``init.pt``); every rank must call it.

        Returns
        -------
        FullWeights
            ``state_dict()``: rank 0 the full tensors, the other ranks an empty dict;
            ``named_parameters()``: the model's (``requires_grad`` flags).
        """
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        sd = get_model_state_dict(self.trainer.model, options=StateDictOptions(full_state_dict=True,
                                                                               cpu_offload=True))
        return FullWeights(self.trainer.model, sd)


class FullWeights:
    """What :func:`workbench.core.model.saving.checkpoint_payload` reads of a model, with full tensors."""

    def __init__(self, model: nn.Module, state: dict):
        self._model = model
        self._state = state

    def state_dict(self) -> dict:
        return self._state

    def named_parameters(self):
        return self._model.named_parameters()
