"""Causal language modelling data: text tokenized and packed into blocks of ``block_size`` tokens. Qt-free.

Each row's text (a ``.txt`` file's lines, or the column ``[data] text``) is
tokenized, the rows joined end to end (a line of a ``.txt`` keeps its newline;
a column's rows are separated by the tokenizer's end-of-sequence token) and cut
into blocks of ``block_size`` tokens; the tail shorter than a block is dropped
(the packing of Hugging Face's ``run_clm``). A batch is
``{"input_ids": (N, block_size) int64, "attention_mask": ones, "labels": input_ids}``:
a ``*ForCausalLM`` shifts the labels itself and returns the mean next-token loss.

Validation is ``[data] val`` (packed the same way), else ``val_fraction`` of the
blocks (at least one) chosen with ``split_seed``.

Instruction or chat columns (``[data] prompt`` / ``response``, ``messages``) are
not packed: each row is one example with the loss on its answer
(:mod:`workbench.core.train.data.lm_chat`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from workbench.core.errors import DataError
from workbench.core.train.config import DataConfig
from workbench.core.train.data.lm_chat import chat_datasets, uses_chat
from workbench.core.train.data.text_files import check_column, read_splits

__all__ = ["DEFAULT_BLOCK_SIZE", "TOKENIZE_BATCH", "block_size_of", "pack", "Blocks", "stack_blocks", "lm_datasets"]

#: Default tokens per block: small enough for a CPU step of a small model, long enough for a sentence or two;
#: ``[data] block_size`` sets it (up to the tokenizer's ``model_max_length``).
DEFAULT_BLOCK_SIZE = 128
#: Rows tokenized per tokenizer call while packing.
TOKENIZE_BATCH = 1000


def block_size_of(cfg: DataConfig, tokenizer: Any) -> int:
    """``[data] block_size``, else ``min(model_max_length, DEFAULT_BLOCK_SIZE)``."""
    if cfg.block_size > 0:
        return int(cfg.block_size)
    own = getattr(tokenizer, "model_max_length", None)
    return int(min(own, DEFAULT_BLOCK_SIZE)) if isinstance(own, int) and own > 0 else DEFAULT_BLOCK_SIZE


def pack(table: Any, column: str, tokenizer: Any, block_size: int, lines: bool) -> np.ndarray:
    """``(B, block_size)`` int64 token blocks of a table's ``column`` (rows joined, the tail dropped).

    Parameters
    ----------
    lines : bool
        The rows are a text file's lines: each keeps a newline. Else rows are
        separated by ``tokenizer.eos_token`` (when it has one).
    """
    sep = "\n" if lines else (getattr(tokenizer, "eos_token", None) or "\n")
    ids: list[np.ndarray] = []
    for batch in table.select_columns([column]).iter(batch_size=TOKENIZE_BATCH):
        texts = [(t or "") + sep for t in batch[column]]
        for row in tokenizer(texts, add_special_tokens=False)["input_ids"]:
            ids.append(np.asarray(row, dtype=np.int64))
    flat = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    n = len(flat) // block_size
    return flat[: n * block_size].reshape(n, block_size)


class Blocks(Dataset):
    """Rows of a ``(B, L)`` token array."""

    def __init__(self, blocks: np.ndarray):
        self.blocks = torch.from_numpy(np.ascontiguousarray(blocks))

    def __len__(self) -> int:
        return int(self.blocks.shape[0])

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.blocks[int(index)]


def stack_blocks(samples: list) -> dict:
    """``{"input_ids", "attention_mask", "labels"}`` of a batch of blocks (labels = input_ids)."""
    ids = torch.stack(samples)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def _packed(cfg: DataConfig, table: Any, path: str, tokenizer: Any, size: int, setting: str) -> np.ndarray:
    lines = str(path).lower().endswith(".txt")
    column = "text" if lines else (cfg.text or "text")
    check_column(table, column, path, "[data] text")
    blocks = pack(table, column, tokenizer, size, lines)
    if len(blocks) == 0:
        raise DataError(f"{path}: fewer than block_size = {size} tokens of text; give more text in {setting} or "
                        "set a smaller [data] block_size")
    return blocks


def lm_datasets(cfg: DataConfig, tokenizer: Any) -> tuple[Blocks, Blocks, dict, Any]:
    """``(train, val, info fields, collate)`` of packed token blocks (or instruction / chat rows) for a causal LM.

    Raises
    ------
    DataError
        A missing file or column, or too little text for one block (named with the file).
    """
    size = block_size_of(cfg, tokenizer)
    if uses_chat(cfg):  # instruction / chat rows, the loss on the answer (data.lm_chat)
        return chat_datasets(cfg, tokenizer, size)
    train_table, saved_val = read_splits(cfg.root, "[data] root")
    train = _packed(cfg, train_table, cfg.root, tokenizer, size, "[data] root")
    if cfg.val or saved_val is not None:
        val_table = read_splits(cfg.val, "[data] val")[0] if cfg.val else saved_val
        val = _packed(cfg, val_table, cfg.val or cfg.root, tokenizer, size, "[data] val")
    else:
        n_val = max(1, int(round(len(train) * float(cfg.val_fraction))))
        if n_val >= len(train):
            raise DataError(f"{cfg.root}: {len(train)} block(s) of {size} tokens cannot be split for validation; "
                            "give more text, a smaller [data] block_size, or a validation file in [data] val")
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(int(cfg.split_seed))).numpy()
        train, val = train[np.sort(order[n_val:])], train[np.sort(order[:n_val])]
    fields = {"name": "text", "input_shape": (size,), "num_classes": 0, "classes": [], "train_size": len(train),
              "val_size": len(val), "task": "causal_lm", "target_shape": (size,)}
    return Blocks(train), Blocks(val), fields, stack_blocks
