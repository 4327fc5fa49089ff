"""Instruction and chat rows for a causal LM: the loss on the answer only. Qt-free.

``[data] prompt = "col"`` with ``response = "col"`` (an instruction and its answer),
or ``messages = "col"`` (a conversation: a list of ``{"role", "content"}``; in a CSV
cell, that list as JSON). Each row is one example, never packed with others:

- with a tokenizer that has a chat template (``tokenizer.chat_template``), the
  conversation is rendered by ``tokenizer.apply_chat_template`` (an instruction row
  is ``[{"role": "user", ...}, {"role": "assistant", ...}]``); each assistant turn
  is the text between the rendering of the turns before it with
  ``add_generation_prompt=True`` and the rendering through it (its end-of-turn
  tokens included);
- without one, a plain join: ``prompt + "\\n"``, then ``response`` and the
  tokenizer's end-of-sequence token (a conversation: each message's content on its
  own line, an assistant's ending with the end-of-sequence token).

The rendered text is tokenized piece by piece (``add_special_tokens=False``: a
template writes its own), so the labels are exactly the answer's tokens: every
other token is labelled ``-100``, which the loss skips (as TRL's and LLaMA-Factory's
supervised fine-tuning do). A row longer than ``block_size`` tokens is cut at its
end; a row whose answer starts past ``block_size`` is an error naming the file and
line. A batch is padded to its longest row: ``{"input_ids", "attention_mask",
"labels"}`` (padding ``-100`` in the labels).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from workbench.core.errors import DataError
from workbench.core.train.config import DataConfig
from workbench.core.train.data.text_files import check_column, read_splits, row_name

__all__ = ["IGNORE_INDEX", "uses_chat", "render", "encode_row", "ChatRows", "PadChat", "chat_datasets"]

#: The label of a token outside the answer: ``torch.nn.CrossEntropyLoss``'s default ``ignore_index``.
IGNORE_INDEX = -100
#: Rows read at a time from the table while tokenizing.
ROW_BATCH = 1000


def uses_chat(cfg: DataConfig) -> bool:
    """Whether ``[data]`` names instruction (``prompt``/``response``) or chat (``messages``) columns."""
    return bool(cfg.prompt or cfg.response or cfg.messages)


def _messages(value: Any, path: str, index: int, column: str) -> list[dict]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    ok = isinstance(value, list) and value and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)
    if not ok:
        raise DataError(f"{path}: {row_name(path, index)}: the column {column!r} is not a list of "
                        "{\"role\", \"content\"} messages; write e.g. [{\"role\": \"user\", \"content\": \"Hi\"}, "
                        "{\"role\": \"assistant\", \"content\": \"Hello\"}]")
    if not any(m["role"] == "assistant" and m["content"].strip() for m in value):
        raise DataError(f"{path}: {row_name(path, index)}: the conversation in {column!r} has no assistant message "
                        "to learn; add one or remove the row")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def render(messages: list[dict], tokenizer: Any) -> list[tuple[str, bool]]:
    """The conversation as ``(text, is_answer)`` pieces whose concatenation is the rendered row.

    With a chat template: the template's text, an assistant turn's piece marked as the answer.
    Without: each message's content on its own line, an assistant's ended by the end-of-sequence token.
    """
    if getattr(tokenizer, "chat_template", None):
        def apply(msgs, prompt):
            return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=prompt)

        full = apply(messages, False)
        pieces, done = [], 0
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before, through = apply(messages[:i], True) if i else "", apply(messages[:i + 1], False)
            if not (full.startswith(through) and through.startswith(before) and len(before) >= done):
                name = getattr(tokenizer, "name_or_path", "") or "the tokenizer"
                raise DataError(f"{name}: its chat template does not render a conversation turn by turn; give a "
                                "tokenizer without a template, or instruction rows ([data] prompt / response)")
            pieces += [(full[done:len(before)], False), (full[len(before):len(through)], True)]
            done = len(through)
        return [p for p in pieces + [(full[done:], False)] if p[0]]
    eos = getattr(tokenizer, "eos_token", None) or "\n"
    return [(m["content"] + eos, True) if m["role"] == "assistant" else (m["content"] + "\n", False)
            for m in messages]


def encode_row(messages: list[dict], tokenizer: Any, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids, labels)`` int64 of one conversation, at most ``max_tokens`` long; labels ``-100`` off the
    answers."""
    pieces = render(messages, tokenizer)
    ids_of = tokenizer([t for t, _ in pieces], add_special_tokens=False)["input_ids"]
    ids = [i for part in ids_of for i in part]
    labels = [i if answer else IGNORE_INDEX for part, (_, answer) in zip(ids_of, pieces) for i in part]
    return np.asarray(ids[:max_tokens], dtype=np.int64), np.asarray(labels[:max_tokens], dtype=np.int64)


class ChatRows(Dataset):
    """``(input_ids, labels)`` tensors of each tokenized row."""

    def __init__(self, rows: list[tuple[np.ndarray, np.ndarray]]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int):
        ids, labels = self.rows[int(index)]
        return torch.from_numpy(ids), torch.from_numpy(labels)


class PadChat:
    """Collate ``(input_ids, labels)`` rows, padded on the right to the batch's longest.

    Returns ``{"input_ids": (N, L) int64, "attention_mask": (N, L) int64, "labels": (N, L) int64}``.
    """

    def __init__(self, pad_id: int):
        self.pad_id = int(pad_id)

    def __call__(self, samples: list) -> dict:
        n, length = len(samples), max(len(ids) for ids, _ in samples)
        ids = torch.full((n, length), self.pad_id, dtype=torch.long)
        labels = torch.full((n, length), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((n, length), dtype=torch.long)
        for row, (i, lb) in enumerate(samples):
            ids[row, :len(i)], labels[row, :len(lb)], mask[row, :len(i)] = i, lb, 1
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _columns(cfg: DataConfig) -> list[tuple[str, str]]:
    if cfg.messages:
        return [(cfg.messages, "[data] messages")]
    return [(cfg.prompt, "[data] prompt"), (cfg.response, "[data] response")]


def _rows(cfg: DataConfig, table: Any, path: str, tokenizer: Any, max_tokens: int) -> list:
    for column, setting in _columns(cfg):
        check_column(table, column, path, setting)
    names = [c for c, _ in _columns(cfg)]
    out, start = [], 0
    for batch in table.select_columns(names).iter(batch_size=ROW_BATCH):
        for i in range(len(batch[names[0]])):
            index = start + i
            if cfg.messages:
                messages = _messages(batch[cfg.messages][i], path, index, cfg.messages)
            else:
                prompt, response = batch[cfg.prompt][i], batch[cfg.response][i]
                for value, column in ((prompt, cfg.prompt), (response, cfg.response)):
                    if not isinstance(value, str) or not value.strip():
                        raise DataError(f"{path}: {row_name(path, index)}: the column {column!r} is empty; fill "
                                        "the row or remove it")
                messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
            ids, labels = encode_row(messages, tokenizer, max_tokens)
            if not (labels != IGNORE_INDEX).any():
                raise DataError(f"{path}: {row_name(path, index)}: the answer starts after block_size = "
                                f"{max_tokens} tokens; shorten the prompt or set a larger [data] block_size")
            out.append((ids, labels))
        start += len(batch[names[0]])
    if not out:
        raise DataError(f"{path}: no rows; give a file with {' and '.join(names)} columns")
    return out


def chat_datasets(cfg: DataConfig, tokenizer: Any, max_tokens: int) -> tuple[ChatRows, ChatRows, dict, PadChat]:
    """``(train, val, info fields, collate)`` of instruction / chat rows (see the module docstring).

    Raises
    ------
    DataError
        A missing file or column (named), an empty or malformed row (file and line), too few rows to split.
    """
    train_table, saved_val = read_splits(cfg.root, "[data] root")
    train = _rows(cfg, train_table, cfg.root, tokenizer, max_tokens)
    if cfg.val or saved_val is not None:
        val_table = read_splits(cfg.val, "[data] val")[0] if cfg.val else saved_val
        val = _rows(cfg, val_table, cfg.val or cfg.root, tokenizer, max_tokens)
    else:
        n_val = max(1, int(round(len(train) * float(cfg.val_fraction))))
        if n_val >= len(train):
            raise DataError(f"{cfg.root}: {len(train)} row(s) cannot be split for validation; give more rows or a "
                            "validation file in [data] val")
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(int(cfg.split_seed))).tolist()
        train, val = [train[i] for i in sorted(order[n_val:])], [train[i] for i in sorted(order[:n_val])]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    fields = {"name": "text", "input_shape": (max_tokens,), "num_classes": 0, "classes": [], "train_size": len(train),
              "val_size": len(val), "task": "causal_lm", "target_shape": (max_tokens,)}
    return ChatRows(train), ChatRows(val), fields, PadChat(pad)
