"""``[data] dataset = "text"``: rows of a data file tokenized with the model's tokenizer, in dict batches. Qt-free.

Text classification (``[task] kind = "text_classification"``): the column
``[data] text`` (and ``text_pair``) of each row, its label in the column
``[data] target``; the classes are the sorted distinct labels of the training
rows (they become the head's ``id2label`` / ``label2id``). Each batch is
tokenized when it is drawn, padded to its longest row (dynamic padding) and
truncated at ``max_length``: ``{"input_ids", "attention_mask"[, "token_type_ids"],
"labels"}``, which a Hugging Face ``*ForSequenceClassification`` takes as
keyword arguments and returns its loss for.

Multi-label text classification: ``[data] target`` a list of two or more
columns (``target = ["sports", "politics", "science"]``), each a 0/1 label of
the row (0 or 1, ``true`` / ``false``, ``0.0`` / ``1.0``). The labels are the
column names in the given order (the head's ``id2label``, its config's
``problem_type = "multi_label_classification"``: transformers' loss is
``BCEWithLogitsLoss``); ``"labels"`` is ``(N, K)`` float32 multi-hot. Any other
value is one :class:`~workbench.core.errors.DataError` naming the file, its line and the column.

Token classification (``"token_classification"``): the column ``[data] text``
(default ``"tokens"``) holds each row's words, ``[data] target`` (default
``"tags"``) one tag per word: lists in JSON Lines / Parquet / a saved dataset,
JSON lists (``["Paris", "is", "big"]``) in a CSV cell. The classes are the sorted
distinct tags of the training rows. Each batch is tokenized with
``is_split_into_words=True`` (a fast tokenizer, whose ``word_ids`` map sub-tokens
to words) and each word's tag goes to its first sub-token; the other sub-tokens and
the special tokens get ``-100``, which the loss and the metrics skip (as
transformers' token-classification example does).

Causal language modelling (``"causal_lm"``): see :mod:`workbench.core.train.data.lm_blocks`.

Validation is ``[data] val`` (a file of the same columns), else the
``validation`` split of a saved ``DatasetDict``, else ``val_fraction`` of the
rows held out with ``split_seed``. A bad row (an empty text, a label the
training rows never show) is one :class:`~workbench.core.errors.DataError`
naming the file and its line.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import torch
from torch.utils.data import Dataset

from workbench.core.errors import DataError
from workbench.core.train.config import DataConfig
from workbench.core.train.data.loaders import EpochLoader, loader_settings
from workbench.core.train.data.text_files import check_column, load_tokenizer, read_splits, row_name

__all__ = ["MAX_LENGTH_CAP", "SCAN_BATCH", "text_loaders", "text_classes", "tokenizer_of", "max_length_of",
           "ClassificationRows", "TokenizeBatch", "TaggedRows", "TokenizeWords", "IGNORE_INDEX",
           "tag_classes", "task_classes", "is_multi_label", "MultiLabelRows"]

#: Longest default ``max_length`` (tokens): BERT-like encoders stop at 512 positions, and attention memory
#: grows with its square; a tokenizer whose ``model_max_length`` is larger (or unset: 1e30) is capped here.
MAX_LENGTH_CAP = 512
#: The label of sub-tokens that carry no tag (a word's later pieces, special tokens, padding): the index
#: ``torch.nn.CrossEntropyLoss`` ignores by default, so the loss and the metrics skip them.
IGNORE_INDEX = -100
#: Rows read at a time when a column is scanned (labels, empty texts): bounds the memory of a big file.
SCAN_BATCH = 10_000


def tokenizer_of(cfg: DataConfig) -> Any:
    """The tokenizer ``[data] tokenizer`` names (:func:`~.text_files.load_tokenizer`).

    Raises
    ------
    DataError
        Not set (the run names no model folder), missing, or no tokenizer there.
    """
    if not cfg.tokenizer:
        raise DataError("[data] tokenizer is not set and [model] checkpoint is not a model folder: set "
                        "[data] tokenizer = \"<the model folder with its tokenizer>\"")
    return load_tokenizer(cfg.tokenizer)


def max_length_of(cfg: DataConfig, tokenizer: Any) -> int:
    """``[data] max_length``, else the tokenizer's ``model_max_length`` capped at :data:`MAX_LENGTH_CAP`."""
    if cfg.max_length > 0:
        return int(cfg.max_length)
    own = getattr(tokenizer, "model_max_length", None)
    return int(min(own, MAX_LENGTH_CAP)) if isinstance(own, int) and own > 0 else MAX_LENGTH_CAP


def _splits(cfg: DataConfig, check: Any = None) -> tuple[Any, Any, str, str, Any]:
    """``(train, val, train file, val file, rows the classes come from)``: ``[data] val``, a saved validation
    split, or ``val_fraction`` of the rows.

    ``check(table, path)`` runs on each table as read (before a split), so that a
    row it names is the file's own line.
    """
    train, saved_val = read_splits(cfg.root, "[data] root")
    if check is not None:
        check(train, cfg.root)
    if cfg.val or saved_val is not None:
        val = read_splits(cfg.val, "[data] val")[0] if cfg.val else saved_val
        if check is not None:
            check(val, cfg.val or cfg.root)
        return train, val, cfg.root, cfg.val or cfg.root, train
    n = len(train)
    n_val = int(round(n * float(cfg.val_fraction)))
    if n_val <= 0 or n_val >= n:
        raise DataError(f"{cfg.root}: val_fraction = {cfg.val_fraction} leaves an empty split of {n} rows; choose "
                        "a value between 0 and 1, or give a validation file in [data] val")
    split = train.train_test_split(test_size=n_val, seed=int(cfg.split_seed), shuffle=True)
    return split["train"], split["test"], cfg.root, cfg.root, train  # the classes of every row


def _scan(table: Any, column: str):
    """``(row index, value)`` of ``column``, read :data:`SCAN_BATCH` rows at a time."""
    start = 0
    for batch in table.select_columns([column]).iter(batch_size=SCAN_BATCH):
        for i, value in enumerate(batch[column]):
            yield start + i, value
        start += len(batch[column])


def _target_column(cfg: DataConfig, default: str = "label") -> str:
    target = list(cfg.target) or [default]
    if len(target) != 1:
        raise DataError(f"[data] target = {target}: a text task takes one label column; give one name")
    return str(target[0])


def is_multi_label(cfg: DataConfig) -> bool:
    """True when ``[data] target`` names two or more columns of a text dataset: multi-label classification."""
    targets = [cfg.target] if isinstance(cfg.target, str) else list(cfg.target)  # one column may be a string
    return cfg.dataset == "text" and len(targets) >= 2


#: What a multi-label target cell may hold, lower-cased and stripped (a CSV's ``"1"``, a JSON ``true``).
_ZERO_ONE = {"0": 0.0, "1": 1.0, "0.0": 0.0, "1.0": 1.0, "false": 0.0, "true": 1.0}


def _zero_one(value: Any) -> float | None:
    """A multi-label cell as 0.0 / 1.0; None when it is anything else (empty, 2, "yes")."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value) if value in (0, 1) else None
    if isinstance(value, str):
        return _ZERO_ONE.get(value.strip().lower())
    return None


def _check_zero_one(table: Any, columns: list[str], path: str) -> None:
    """Each cell of ``columns`` holds 0 or 1 (read :data:`SCAN_BATCH` rows at a time)."""
    for column in columns:
        for i, value in _scan(table, column):
            if _zero_one(value) is None:
                raise DataError(f"{path}: {row_name(path, i)}: the label column {column!r} holds {value!r}; a "
                                "multi-label target (one column per label) holds 0 or 1: fix the row")


def _label(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip()
    return text or None


def _check_texts(table: Any, column: str, path: str) -> None:
    for i, value in _scan(table, column):
        if not isinstance(value, str) or not value.strip():
            raise DataError(f"{path}: {row_name(path, i)}: the text column {column!r} is empty; fill the row or "
                            "remove it")


def text_classes(cfg: DataConfig, tables: tuple | None = None) -> list[str]:
    """The classes of a text classification: the sorted distinct labels of the training rows.

    Integer labels are sorted as numbers (``"2"`` before ``"10"``), others as text.
    Multi-label (:func:`is_multi_label`): the target column names, in their order.

    Raises
    ------
    DataError
        The file cannot be read, the target column is missing, a row has no label,
        or fewer than 2 classes; multi-label: a cell that is not 0 or 1 (file, line, column).
    """
    _, _, path, _, rows = tables or _splits(cfg)
    if is_multi_label(cfg):
        columns = [str(c) for c in cfg.target]
        if len(set(columns)) != len(columns):
            raise DataError(f"[data] target = {columns}: a column is named twice; name each label column once")
        if tables is None:  # else the reader's check ran on them
            for c in columns:
                check_column(rows, c, path, "[data] target")
            _check_zero_one(rows, columns, path)
        return columns
    column = _target_column(cfg)
    check_column(rows, column, path, "[data] target")
    seen: set[str] = set()
    for i, value in _scan(rows, column):
        label = _label(value)
        if label is None:
            raise DataError(f"{path}: {row_name(path, i)}: the label column {column!r} is empty; fill the row "
                            "or remove it")
        seen.add(label)
    if len(seen) < 2:
        raise DataError(f"{path}: the label column {column!r} has {len(seen)} class(es); a classifier needs 2 or "
                        "more")
    numeric = all(s.lstrip("-").isdigit() for s in seen)
    return sorted(seen, key=(lambda s: (int(s), s)) if numeric else None)


class ClassificationRows(Dataset):
    """``(text, text_pair or None, class index)`` of each row of a table (memory-mapped, read per item)."""

    def __init__(self, table: Any, text: str, pair: str, target: str, label2id: dict[str, int]):
        self.table, self.text, self.pair, self.target, self.label2id = table, text, pair, target, label2id

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, index: int):
        row = self.table[int(index)]
        return row[self.text], (row[self.pair] if self.pair else None), self.label2id[_label(row[self.target])]


class MultiLabelRows(Dataset):
    """``(text, text_pair or None, [0.0 / 1.0 per label column])`` of each row of a table (read per item)."""

    def __init__(self, table: Any, text: str, pair: str, targets: list[str]):
        self.table, self.text, self.pair, self.targets = table, text, pair, list(targets)

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, index: int):
        row = self.table[int(index)]
        return row[self.text], (row[self.pair] if self.pair else None), [_zero_one(row[c]) for c in self.targets]


class TokenizeBatch:
    """Collate ``(text, pair, label)`` samples: one tokenizer call per batch, padded to the batch's longest row.

    Returns ``{"input_ids": (N, L) int64, "attention_mask": (N, L), ["token_type_ids"], "labels": (N,) int64}``
    with ``L <= max_length``; multi-label samples (a list of 0/1 per row) give ``"labels": (N, K) float32``.
    """

    def __init__(self, tokenizer: Any, max_length: int):
        self.tokenizer = tokenizer
        self.max_length = int(max_length)

    def __call__(self, samples: list) -> dict:
        texts = [s[0] for s in samples]
        pairs = [s[1] for s in samples] if samples and samples[0][1] is not None else None
        enc = self.tokenizer(texts, pairs, truncation=True, max_length=self.max_length, padding=True,
                             return_tensors="pt")
        batch = {k: v for k, v in enc.items()}
        labels = [s[2] for s in samples]
        multi = bool(labels) and isinstance(labels[0], list)
        batch["labels"] = torch.tensor(labels, dtype=torch.float32 if multi else torch.long)
        return batch


def _multi_label(cfg: DataConfig, tokenizer: Any) -> tuple[Dataset, Dataset, dict]:
    text, pair, targets = cfg.text or "text", cfg.text_pair, [str(c) for c in cfg.target]

    def check(table, path):
        check_column(table, text, path, "[data] text")
        if pair:
            check_column(table, pair, path, "[data] text_pair")
        for c in targets:
            check_column(table, c, path, "[data] target")
        _check_texts(table, text, path)
        _check_zero_one(table, targets, path)

    tables = _splits(cfg, check)
    train, val = tables[0], tables[1]
    classes = text_classes(cfg, tables)
    fields = {"name": "text", "input_shape": (max_length_of(cfg, tokenizer),), "num_classes": len(classes),
              "classes": classes, "train_size": len(train), "val_size": len(val), "task": "text_classification",
              "target_shape": (len(classes),)}
    return MultiLabelRows(train, text, pair, targets), MultiLabelRows(val, text, pair, targets), fields


def _classification(cfg: DataConfig, tokenizer: Any) -> tuple[Dataset, Dataset, dict]:
    if is_multi_label(cfg):
        return _multi_label(cfg, tokenizer)
    text, pair = cfg.text or "text", cfg.text_pair
    target = _target_column(cfg)

    def check(table, path):
        check_column(table, text, path, "[data] text")
        if pair:
            check_column(table, pair, path, "[data] text_pair")
        check_column(table, target, path, "[data] target")
        _check_texts(table, text, path)

    tables = _splits(cfg, check)
    train, val, _, val_path, _ = tables
    classes = text_classes(cfg, tables)
    label2id = {c: i for i, c in enumerate(classes)}
    for i, value in _scan(val, target):
        label = _label(value)
        if label not in label2id:
            what = "has no label" if label is None else f"label {label!r} never appears in the training data"
            raise DataError(f"{val_path}: {row_name(val_path, i)}: {what} (classes: {', '.join(classes[:20])}); "
                            "fix the row or add training rows of that class")
    fields = {"name": "text", "input_shape": (max_length_of(cfg, tokenizer),), "num_classes": len(classes),
              "classes": classes, "train_size": len(train), "val_size": len(val), "task": "text_classification"}
    return (ClassificationRows(train, text, pair, target, label2id),
            ClassificationRows(val, text, pair, target, label2id), fields)


def _word_list(value: Any, path: str, index: int, column: str) -> list[str]:
    """A row's list of words or tags: a list as stored, or a CSV cell holding a JSON list of strings."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, (list, tuple)) or not value or \
            not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        raise DataError(f"{path}: {row_name(path, index)}: the column {column!r} is not a non-empty list of words "
                        "or tags; write a list (JSON Lines) or a JSON list in the cell (CSV), e.g. "
                        "[\"Paris\", \"is\", \"big\"]")
    return [str(v) for v in value]


def _check_tagged(table: Any, words: str, tags: str, path: str) -> None:
    """Each row has as many tags as words (read :data:`SCAN_BATCH` rows at a time)."""
    start = 0
    for batch in table.select_columns([words, tags]).iter(batch_size=SCAN_BATCH):
        for i, (w, t) in enumerate(zip(batch[words], batch[tags])):
            n_words = len(_word_list(w, path, start + i, words))
            n_tags = len(_word_list(t, path, start + i, tags))
            if n_words != n_tags:
                raise DataError(f"{path}: {row_name(path, start + i)}: {n_words} words in {words!r} but {n_tags} "
                                f"tags in {tags!r}; give one tag per word")
        start += len(batch[words])


def _tags_of(table: Any, column: str, path: str) -> list[str]:
    """The sorted distinct tags of the rows of ``table``."""
    seen: set[str] = set()
    for i, value in _scan(table, column):
        seen.update(_word_list(value, path, i, column))
    if len(seen) < 2:
        raise DataError(f"{path}: the tag column {column!r} has {len(seen)} tag(s); a tagger needs 2 or more")
    return sorted(seen)


def tag_classes(cfg: DataConfig) -> list[str]:
    """The classes of a token classification: the sorted distinct tags of the training rows.

    Raises
    ------
    DataError
        The file cannot be read, the tag column is missing, a row's tags are not a
        list, or fewer than 2 distinct tags.
    """
    _, _, path, _, rows = _splits(cfg)
    column = _target_column(cfg, "tags")
    check_column(rows, column, path, "[data] target")
    return _tags_of(rows, column, path)


def task_classes(cfg: DataConfig, kind: str) -> list[str]:
    """The classes a head of ``kind`` is sized to: :func:`text_classes` or :func:`tag_classes`.

    Raises
    ------
    DataError
        As those; ``kind`` has no classes (``"causal_lm"``).
    """
    if kind == "token_classification":
        return tag_classes(cfg)
    if kind == "text_classification":
        return text_classes(cfg)
    raise DataError(f"[task] kind = {kind!r} has no classes to read from the data")


class TaggedRows(Dataset):
    """``(words, tag indices)`` of each row of a table (memory-mapped, read per item)."""

    def __init__(self, table: Any, words: str, tags: str, label2id: dict[str, int], path: str):
        self.table, self.words, self.tags, self.label2id, self.path = table, words, tags, label2id, path

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, index: int):
        row = self.table[int(index)]
        words = _word_list(row[self.words], self.path, int(index), self.words)
        return words, [self.label2id[t] for t in _word_list(row[self.tags], self.path, int(index), self.tags)]


class TokenizeWords:
    """Collate ``(words, tag indices)`` samples: one ``is_split_into_words`` tokenizer call per batch.

    Each word's tag goes to its first sub-token; later sub-tokens, special tokens
    and padding get :data:`IGNORE_INDEX`. Words past ``max_length`` are cut off.
    Returns ``{"input_ids": (N, L) int64, "attention_mask": (N, L), ["token_type_ids"],
    "labels": (N, L) int64}`` with ``L <= max_length``.
    """

    def __init__(self, tokenizer: Any, max_length: int):
        self.tokenizer = tokenizer
        self.max_length = int(max_length)

    def __call__(self, samples: list) -> dict:
        enc = self.tokenizer([s[0] for s in samples], is_split_into_words=True, truncation=True,
                             max_length=self.max_length, padding=True, return_tensors="pt")
        labels = torch.full(enc["input_ids"].shape, IGNORE_INDEX, dtype=torch.long)
        for row, (_, tags) in enumerate(samples):
            previous = None
            for pos, word in enumerate(enc.word_ids(row)):
                if word is not None and word != previous:
                    labels[row, pos] = tags[word]
                previous = word
        batch = {k: v for k, v in enc.items()}
        batch["labels"] = labels
        return batch


def _token_classification(cfg: DataConfig, tokenizer: Any) -> tuple[Dataset, Dataset, dict]:
    if not getattr(tokenizer, "is_fast", False):
        raise DataError(f"{cfg.tokenizer}: token classification needs a fast tokenizer (tokenizer.json), which maps "
                        "sub-tokens to words; give a folder with tokenizer.json in [data] tokenizer")
    words, tags = cfg.text or "tokens", _target_column(cfg, "tags")

    def check(table, path):
        check_column(table, words, path, "[data] text")
        check_column(table, tags, path, "[data] target")
        _check_tagged(table, words, tags, path)

    train, val, path, val_path, rows = _splits(cfg, check)
    classes = _tags_of(rows, tags, path)
    label2id = {c: i for i, c in enumerate(classes)}
    for i, value in _scan(val, tags):
        unseen = [t for t in _word_list(value, val_path, i, tags) if t not in label2id]
        if unseen:
            raise DataError(f"{val_path}: {row_name(val_path, i)}: tag {unseen[0]!r} never appears in the training "
                            f"data (tags: {', '.join(classes[:20])}); fix the row or add training rows with it")
    fields = {"name": "text", "input_shape": (max_length_of(cfg, tokenizer),), "num_classes": len(classes),
              "classes": classes, "train_size": len(train), "val_size": len(val), "task": "token_classification"}
    return (TaggedRows(train, words, tags, label2id, path), TaggedRows(val, words, tags, label2id, val_path), fields)


def text_loaders(cfg: DataConfig, seed: int = 0, device: str | torch.device = "cpu",
                 shard: tuple[int, int] = (0, 1), task: str = "") -> tuple[EpochLoader, EpochLoader, dict]:
    """``(train_loader, val_loader, info fields)`` of ``[data] dataset = "text"`` for the task ``task``.

    The loaders are :class:`~workbench.core.train.data.loaders.EpochLoader` s (seeded,
    resumable, sharded for data parallelism); tokenizing runs in this process
    (``num_workers = "auto"`` means none here: a batch tokenizes in well under a millisecond a row).

    Parameters
    ----------
    cfg : DataConfig
    task : str
        ``"text_classification"``, ``"token_classification"`` or ``"causal_lm"``.

    Returns
    -------
    tuple
        The fields of a :class:`~workbench.core.train.data.datasets.DataInfo`.

    Raises
    ------
    DataError
        A missing file, column or tokenizer, a bad row (named with its file and line).
    """
    tokenizer = tokenizer_of(cfg)
    if task == "causal_lm":
        from workbench.core.train.data.lm_blocks import lm_datasets

        train_ds, val_ds, fields, collate = lm_datasets(cfg, tokenizer)
    elif task == "text_classification":
        train_ds, val_ds, fields = _classification(cfg, tokenizer)
        collate = TokenizeBatch(tokenizer, max_length_of(cfg, tokenizer))
    elif task == "token_classification":
        train_ds, val_ds, fields = _token_classification(cfg, tokenizer)
        collate = TokenizeWords(tokenizer, max_length_of(cfg, tokenizer))
    else:
        raise DataError(f"[data] dataset = \"text\" needs [task] kind = \"text_classification\", "
                        f"\"token_classification\" or \"causal_lm\" (not {task!r})")
    settings = loader_settings(cfg, device)
    if cfg.num_workers == "auto":
        settings = dataclasses.replace(settings, num_workers=0, persistent_workers=False,
                                       note="text: tokenized in this process, no workers")
    train = EpochLoader(train_ds, cfg.batch_size, seed, cfg.shuffle, cfg.drop_last, settings, collate=collate,
                        shard=shard)
    val = EpochLoader(val_ds, cfg.batch_size, seed, False, False, settings, collate=collate)
    return train, val, fields
