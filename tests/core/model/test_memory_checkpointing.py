"""Will it fit with activation checkpointing: the estimate against what torch really keeps on CPU.

"What torch keeps" is measured, not estimated: ``torch.autograd.graph.saved_tensors_hooks``
(:func:`~workbench.core.model.memory.saved_tensor_bytes`) sums the bytes autograd saves during a real
training forward with the trainer's own checkpointing switched on (non-reentrant
``torch.utils.checkpoint`` stores each block's inputs through those hooks), and the saved bytes of one
real block's forward are what its recomputation in backward holds.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.core.model.example_input import ExampleInput
from workbench.core.model.memory import FIT_HEADROOM, estimate_memory, fit_summary, saved_tensor_bytes
from workbench.core.model.memory_checkpointing import checkpointed_activations, checkpointed_blocks
from workbench.core.train.trainer.speed import disable_activation_checkpointing, enable_activation_checkpointing

BATCH, WIDTH, DEPTH = 8, 32, 6
#: The estimate may differ from the measured bytes by this share: 0 for the block stack (both count the same
#: storages), a little for GPT-2, whose layers keep keyword tensors in the closure they checkpoint, which the
#: estimate counts and saved-tensor hooks do not see.
TOLERANCE = 0.02


class Block(nn.Module):
    """A pre-norm residual MLP block, the shape of a transformer's feed-forward half."""

    def __init__(self, width: int):
        super().__init__()
        self.norm, self.fc1, self.act, self.fc2 = nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(), \
            nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(16, WIDTH)
        self.blocks = nn.ModuleList(Block(WIDTH) for _ in range(DEPTH))
        self.head = nn.Linear(WIDTH, 4)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def _saved(model: nn.Module, call, exclude=()) -> int:
    """Bytes autograd really saves in one training forward on CPU (parameters, buffers and ``exclude`` left out)."""
    model.train()
    with saved_tensor_bytes(model, exclude=[*model.parameters(), *model.buffers(), *exclude]) as counts:
        out = call(model)
    del out
    return sum(counts.values())


def _largest_block(blocks, x_shape, **kwargs) -> int:
    """The largest saved bytes of one real block's forward, its input left out: its recomputation."""
    sizes = []
    for block in blocks:
        x = torch.randn(x_shape)
        sizes.append(_saved(block, lambda b: b(x, **kwargs), exclude=[x]))
    return max(sizes)


def test_a_block_stack_keeps_the_inputs_and_one_block():
    model = Stack()
    off = estimate_memory(model, torch.zeros(1, 16), batch_size=BATCH)
    on = estimate_memory(model, torch.zeros(1, 16), batch_size=BATCH, activation_checkpointing=True)
    assert on.checkpointed_blocks == DEPTH and on.activation_checkpointing and not off.activation_checkpointing
    x = torch.randn(BATCH, 16)
    assert off.root.activations_bytes == _saved(model, lambda m: m(x))
    enable_activation_checkpointing(model)
    try:
        kept = _saved(model, lambda m: m(x))  # real: the input Linear's x, 6 block inputs, the head's input
    finally:
        disable_activation_checkpointing(model)
    recompute = _largest_block(model.blocks, (BATCH, WIDTH))
    assert kept == BATCH * 16 * 4 + (DEPTH + 1) * BATCH * WIDTH * 4
    assert on.root.activations_bytes - on.recompute_bytes == pytest.approx(kept, rel=TOLERANCE)
    assert on.recompute_bytes == pytest.approx(recompute, rel=TOLERANCE)
    assert on.root.activations_bytes == pytest.approx(kept + recompute, rel=TOLERANCE)
    assert on.root.activations_bytes < off.root.activations_bytes / 2  # the point of it
    assert on.activations_checkpointed_bytes == off.activations_checkpointed_bytes == on.root.activations_bytes
    # per module: a block keeps its input; nothing inside a block stays; the rest as without checkpointing
    assert on.modules["blocks.2"].activations_bytes == BATCH * WIDTH * 4
    assert on.modules["blocks.2.fc1"].activations_bytes == 0
    assert on.modules["head"].activations_bytes == off.modules["head"].activations_bytes
    assert on.root.params_bytes == off.root.params_bytes and on.root.optimizer_bytes == off.root.optimizer_bytes


def test_gpt2_checkpointed_through_hugging_face_layers():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=3, n_embd=64, n_head=2, vocab_size=256, n_positions=64,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    assert [n for n, _ in checkpointed_blocks(model)] == ["transformer.h.0", "transformer.h.1", "transformer.h.2"]
    call = ExampleInput((), {"input_ids": torch.zeros(1, 32, dtype=torch.long)})
    off = estimate_memory(model, call, batch_size=2)
    on = estimate_memory(model, call, batch_size=2, activation_checkpointing=True)
    ids = torch.randint(0, 256, (2, 32))
    enable_activation_checkpointing(model)  # the trainer's: gradient_checkpointing_enable(use_reentrant=False)
    try:
        kept = _saved(model, lambda m: m(input_ids=ids))
    finally:
        disable_activation_checkpointing(model)
    assert on.checkpointed_blocks == 3
    assert on.root.activations_bytes - on.recompute_bytes == pytest.approx(kept, rel=TOLERANCE)
    assert on.root.activations_bytes < off.root.activations_bytes / 2


def test_nothing_to_checkpoint_changes_nothing():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))  # no container of one class
    off = estimate_memory(model, torch.zeros(1, 8), batch_size=4)
    on = estimate_memory(model, torch.zeros(1, 8), batch_size=4, activation_checkpointing=True)
    assert on.checkpointed_blocks == 0 and on.recompute_bytes == 0
    assert on.modules == off.modules


def test_fit_summary_offers_checkpointing_only_where_it_helps():
    est = estimate_memory(Stack(), torch.zeros(1, 16), batch_size=64)
    root = est.root
    static = root.params_bytes + root.grads_bytes + root.optimizer_bytes
    text = fit_summary(est, "cuda:0", available=int((static + est.activations_checkpointed_bytes) / FIT_HEADROOM) + 1)
    assert "does not fit" in text and f"activation checkpointing (keeps each of the {DEPTH} blocks' inputs" in text
    on = estimate_memory(Stack(), torch.zeros(1, 16), batch_size=64, activation_checkpointing=True)
    assert "activation checkpointing" not in fit_summary(on, "cuda:0", available=10)  # already on
    # checkpointing single Linears keeps what they saved anyway: not offered
    lin = estimate_memory(nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)), torch.zeros(1, 8), batch_size=64)
    assert lin.activations_checkpointed_bytes == lin.root.activations_bytes
    assert "activation checkpointing" not in fit_summary(lin, "cuda:0", available=lin.root.params_bytes * 5)


def test_the_arithmetic_counts_a_shared_input_once():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    saved = {"x0": (a, 10), "h": (b, 20), "mask": (b, 5), "out": (None, 7)}
    inputs = [{"x0": 10, "mask": 5}, {"h": 20, "mask": 5}]
    result = checkpointed_activations(saved, inputs, [a, b])
    assert result.own == {None: 7, a: 15, b: 20} and result.recompute_bytes == 0 and result.blocks == 2
    result = checkpointed_activations({**saved, "t": (b, 40)}, inputs, [a, b])
    assert result.recompute_bytes == 40 and result.total_bytes == 7 + 15 + 20 + 40
