"""Tabular data: a CSV or Parquet table to in-memory ``(features, target)`` tensors.

``table_datasets(cfg)`` reads ``cfg.root`` (``[data] dataset = "csv"``), splits its
rows into training and validation with ``cfg.split_seed`` / ``cfg.val_fraction``,
fits the feature encoding on the **training rows only** (so nothing of the
validation split leaks into the inputs), applies it to every row and infers the
task from the target column(s).

The fitted encoding is a :class:`TableInfo`: kept on both returned datasets as
``ds.table`` and summarised ("F features from N columns") in the info's ``notes``.
The info is returned as the keyword arguments of ``datasets.DataInfo``, because
``datasets`` imports this module (no import cycles, imports inside functions included).
:func:`encode_features` applies it to any other frame with the same columns
(e.g. rows to predict).

Bounds: before pandas reads a CSV, its header line and first row are read
alone, at most :data:`MAX_LINE_BYTES` each, and its columns counted
(:data:`MAX_COLUMNS`); a Parquet file's footer likewise. A 1 GB one-line file
is refused in one line in a few milliseconds (pandas held 4.4 GB for it, and
the message quoted the whole cell). Messages quote the file's column names
and cells through :func:`workbench.core.quoting.quoted` (a few dozen
characters at most).

Speed: one ``pandas.read_csv`` (C engine) and whole-column numpy operations,
never a Python loop over rows; a 1M-row, 20-column numeric CSV loads in a few
seconds (``benchmarks/bench_tabular.py``: ``csv_1m_rows_load_s``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import TensorDataset

from workbench.core.errors import DataError
from workbench.core.quoting import names_list, quoted, shortened
from workbench.core.train.config import DataConfig

__all__ = ["TableInfo", "TableDataset", "table_datasets", "encode_features", "infer_task", "check_table_shape",
           "MAX_CLASSES", "MAX_ONEHOT", "MAX_LINE_BYTES", "MAX_COLUMNS"]

#: A single integer target column is a class label when it has at most this many distinct values ...
MAX_CLASSES = 20
#: ... and fewer distinct values than this share of the rows (or at most two values).
CLASS_SHARE = 0.05
#: A text column one-hot encoded into more columns than this is refused (an id or free text).
MAX_ONEHOT = 1000
#: Task names :func:`table_datasets` accepts to override the inferred one.
TASKS = ("classification", "regression", "multilabel")
#: Bytes of a CSV's header line, and of its first row, read (each) before pandas reads the table; a longer line
#: is refused. 100,000 columns of 100-character names fit (10 MB); a longer first line is not a table's header
#: but a file of one line or no newlines, which pandas would hold several times over (a 1 GB one took 4.4 GB).
#: Also the most bytes of a Parquet file's footer (its schema) read before the table.
MAX_LINE_BYTES = 16 * 2**20
#: Columns a table may have. Each is a pandas column (about 1 KB before any row) and at least one model input;
#: wide tables (gene expression, one column per gene) have tens of thousands. 537 million one-character
#: columns (a 1 GB header) once took pandas past 4 GB.
MAX_COLUMNS = 100_000
#: Characters of a reader's own error (pandas', pyarrow's) a message shows: it can quote the file's data.
MAX_REASON_CHARS = 200
_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zip", ".parquet", ".pq")


@dataclass
class TableInfo:
    """The feature and target encoding fitted on a table's training rows.

    Attributes
    ----------
    source : str
        The table file.
    columns : list of str
        The feature columns read, in file order.
    feature_names : list of str
        One name per model input, in tensor order: a numeric column keeps its name, a
        one-hot column is ``"column=value"``, an integer-code column keeps its name.
    numeric : dict of str to (float, float)
        Numeric column -> ``(mean, std)`` of its training rows; inputs are ``(x - mean) / std``
        (a constant column has std 1), a missing value becomes the mean (0 after scaling).
    categorical : dict of str to list of str
        Text column -> its categories in the training rows, sorted. ``"onehot"``: one
        0/1 input per category, all zeros for a missing or unseen value; ``"codes"``: one
        input holding the category's index as a float, -1 for missing or unseen.
    encoding : str
        ``"onehot"`` or ``"codes"``.
    target : list of str
        The target column(s).
    task : str
        ``"classification"``, ``"regression"`` or ``"multilabel"``.
    classes : list of str
        Classification: the distinct target values, sorted, as text (target ``i`` is
        ``classes[i]``); multilabel: the target column names; regression: empty.
    target_mean, target_std : list of float
        Regression with ``scale_targets``: per target column, targets are
        ``(y - mean) / std`` (predictions map back with ``y * std + mean``); else empty.
    missing : dict of str to int
        Numeric column -> number of missing values (all rows) replaced by the training mean.
    dropped_rows : int
        Rows left out because a target value was missing.
    """

    source: str
    columns: list = field(default_factory=list)
    feature_names: list = field(default_factory=list)
    numeric: dict = field(default_factory=dict)
    categorical: dict = field(default_factory=dict)
    encoding: str = "onehot"
    target: list = field(default_factory=list)
    task: str = ""
    classes: list = field(default_factory=list)
    target_mean: list = field(default_factory=list)
    target_std: list = field(default_factory=list)
    missing: dict = field(default_factory=dict)
    dropped_rows: int = 0

    def summary(self) -> str:
        """One line for the window, e.g. ``"12 features from 10 columns (8 numeric, 2 text one-hot)"``."""
        parts = [f"{len(self.numeric)} numeric"]
        if self.categorical:
            parts.append(f"{len(self.categorical)} text {'one-hot' if self.encoding == 'onehot' else 'as codes'}")
        return (f"{len(self.feature_names)} features from {len(self.columns)} columns ({', '.join(parts)}; "
                "fitted on the training split)")


class TableDataset(TensorDataset):
    """A :class:`~torch.utils.data.TensorDataset` ``(x, y)`` that also carries its :class:`TableInfo` as ``table``."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, table: TableInfo):
        super().__init__(x, y)
        self.table = table


# ------------------------------------------------------------------ reading
def _import_pandas():
    try:
        import pandas as pd
    except ImportError:
        raise DataError("the csv dataset needs pandas: pip install workbench[tabular]") from None
    return pd


def _read_table(root: str):
    """The table ``root`` as a pandas DataFrame; DataError naming the file on any failure."""
    pd = _import_pandas()
    if not root:
        raise DataError("[data] dataset = \"csv\" needs a table file: set [data] root to a .csv, .csv.gz "
                        "or .parquet file")
    path = Path(root).expanduser()
    if not path.is_file():
        raise DataError(f"table file {path} does not exist; set [data] root to a .csv, .csv.gz or .parquet file")
    name = path.name.lower()
    if not name.endswith(_SUFFIXES):
        raise DataError(f"{path.name} is not a table file Workbench reads; use .csv, .csv.gz or .parquet")
    check_table_shape(path)
    try:
        if name.endswith((".parquet", ".pq")):
            if importlib.util.find_spec("pyarrow") is None:
                raise DataError(f"{path.name}: reading .parquet needs pyarrow: pip install pyarrow")
            return pd.read_parquet(path)
        # low_memory=False: one dtype per column (no chunk-wise mixed types, no DtypeWarning)
        return pd.read_csv(path, low_memory=False)
    except DataError:
        raise
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError, ValueError) as exc:
        reason = shortened(" ".join(str(exc).split()), MAX_REASON_CHARS)  # pandas' words may quote a cell
        raise DataError(f"{path.name} cannot be read as a table ({reason}); check that it is a "
                        "comma-separated file with a header row") from None


def check_table_shape(path: str | Path) -> None:
    """Refuse a table whose first lines (or Parquet footer) exceed :data:`MAX_LINE_BYTES` or whose columns exceed
    :data:`MAX_COLUMNS`, reading at most two lines of it.

    A CSV (compressed ones too: ``.gz``, ``.bz2``, ``.xz``, ``.zip``) has its header
    line and its first row read, each at most :data:`MAX_LINE_BYTES` bytes, and
    its header's fields counted (commas outside double quotes); a Parquet file
    has its footer's length read from its last 8 bytes, then its schema. A file
    that cannot be opened this way is left to pandas, which says what is wrong.

    Raises
    ------
    DataError
        A line or footer too long, or too many columns; the message names the file.
    """
    path = Path(path)
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        columns = _parquet_columns(path)
    else:
        try:
            with _open_text_bytes(path) as f:
                header, first = f.readline(MAX_LINE_BYTES + 1), f.readline(MAX_LINE_BYTES + 1)
        except Exception:  # noqa: BLE001 - a damaged or odd file: pandas reads it and says why
            return
        for what, line in (("header line", header), ("first row", first)):
            if len(line) > MAX_LINE_BYTES:
                raise DataError(f"{path.name}: its {what} is longer than {MAX_LINE_BYTES / 2**20:g} MB, more than a "
                                "table's; check that it is a comma-separated file with a header row and one line "
                                "per row")
        # fields: commas outside double-quoted text ("" inside quotes pairs up too), + 1; linear, no field copied
        columns = re.sub(rb'"[^"]*"', b"", header).count(b",") + 1
    if columns > MAX_COLUMNS:
        raise DataError(f"{path.name} has {columns:,} columns, more than the {MAX_COLUMNS:,} Workbench reads; "
                        "keep the columns the model needs, or check that its separator is a comma")


@contextlib.contextmanager
def _open_text_bytes(path: Path):
    """The decompressed bytes of a CSV file (by its suffix, as pandas decides), as a binary file object."""
    name = path.name.lower()
    if name.endswith(".zip"):
        import zipfile

        with zipfile.ZipFile(path) as z, z.open(z.namelist()[0]) as f:
            yield f
        return
    if name.endswith(".gz"):
        import gzip as module
    elif name.endswith(".bz2"):
        import bz2 as module
    elif name.endswith(".xz"):
        import lzma as module
    else:
        module = None
    with (open(path, "rb") if module is None else module.open(path, "rb")) as f:
        yield f


def _parquet_columns(path: Path) -> int:
    """Columns of a Parquet file's schema; its footer refused past :data:`MAX_LINE_BYTES` (0: left to pyarrow)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            if f.tell() < 12:
                return 0
            f.seek(-8, 2)
            tail = f.read(8)
    except OSError:
        return 0
    if tail[4:] != b"PAR1":
        return 0
    footer = int.from_bytes(tail[:4], "little")
    if footer > MAX_LINE_BYTES:
        raise DataError(f"{path.name}: its Parquet footer (the schema) is {footer:,} bytes, more than "
                        f"{MAX_LINE_BYTES / 2**20:g} MB; check the file, or write it with fewer columns")
    if importlib.util.find_spec("pyarrow") is None:
        return 0
    try:
        import pyarrow.parquet as pq

        return int(pq.read_metadata(path).num_columns)
    except Exception:  # noqa: BLE001 - a damaged file: read_parquet says why
        return 0


def _names(columns, limit: int = 20) -> str:
    """Column names for a message: at most ``limit``, each shortened (:func:`workbench.core.quoting.names_list`)."""
    return names_list(columns, limit)


def _as_list(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _pick_columns(df, cfg: DataConfig, file: str) -> tuple[list[str], list[str]]:
    """``(targets, features)`` checked against the table's columns."""
    df.columns = [str(c) for c in df.columns]
    columns = list(df.columns)
    targets, features = _as_list(cfg.target), _as_list(cfg.features)
    if not targets:
        raise DataError(f"{file}: no target column set; columns: {_names(columns)}; "
                        "set [data] target to one (or several) of them")
    for role, names in (("target", targets), ("features", features)):
        for col in names:
            if col not in df.columns:
                raise DataError(f"{file} has no column {quoted(col)}; columns: {_names(columns)}; "
                                f"set [data] {role} to {'one of them' if role == 'target' else 'some of them'}")
    both = [c for c in features if c in targets]
    if both:
        raise DataError(f"{file}: column {quoted(both[0])} is both a target and a feature; remove it from [data] features")
    features = features or [c for c in columns if c not in targets]
    if not features:
        raise DataError(f"{file}: no feature columns are left besides the target(s) {_names(targets)}; "
                        "the table needs at least one more column")
    return targets, features


def _split_rows(n: int, val_fraction: float, seed: int, file: str) -> tuple[np.ndarray, np.ndarray]:
    """``(train, val)`` row indices: the rule of ``datasets._split`` (kept in step with it).

    A ``torch.randperm`` of ``n`` under a generator seeded with ``seed``; the first
    ``round(n * val_fraction)`` rows validate. Written here, not imported, because
    ``datasets`` imports this module.
    """
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed))).numpy()
    n_val = int(round(n * float(val_fraction)))
    if n_val <= 0 or n_val >= n:
        raise DataError(f"{file}: val_fraction={val_fraction} leaves an empty split of {n} rows; "
                        "choose a value between 0 and 1")
    return perm[n_val:], perm[:n_val]


# ------------------------------------------------------------------ features
def _is_numeric(series) -> bool:
    from pandas.api.types import is_numeric_dtype

    return bool(is_numeric_dtype(series.dtype))


def _numeric_block(df, columns: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """``(x, missing)``: the columns as a fresh float32 ``(N, k)`` array and its non-finite mask (None: none)."""
    x = df[columns].to_numpy(dtype=np.float32, copy=True)  # scaled in place later
    bad = ~np.isfinite(x)
    return x, (bad if bad.any() else None)


def _fit_numeric(x: np.ndarray, missing: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-column ``(mean, std)`` of the training rows ``x``, ignoring missing values (std 0 -> 1)."""
    if missing is None:
        mean = x.mean(axis=0, dtype=np.float64)
        std = x.std(axis=0, dtype=np.float64)
    else:
        count = np.maximum((~missing).sum(axis=0), 1)
        mean = np.where(missing, 0.0, x).sum(axis=0, dtype=np.float64) / count
        std = np.sqrt((np.where(missing, 0.0, x - mean) ** 2).sum(axis=0) / count)
    return mean, np.where(std > 0, std, 1.0)


def _fit_features(df, columns: list[str], train: np.ndarray, encoding: str, file: str,
                  x: np.ndarray | None, missing: np.ndarray | None) -> TableInfo:
    """Fit the numeric scaling and the categories on the training rows ``train``.

    ``x`` and ``missing`` are the numeric columns as :func:`_numeric_block` returns them.
    """
    info = TableInfo(source=file, columns=list(columns), encoding=encoding)
    numeric = [c for c in columns if _is_numeric(df[c])]
    if numeric:
        mean, std = _fit_numeric(x[train], None if missing is None else missing[train])
        info.numeric = {c: (float(m), float(s)) for c, m, s in zip(numeric, mean, std)}
    for col in columns:
        if col in info.numeric:
            info.feature_names.append(col)
            continue
        cats = sorted(df[col].iloc[train].dropna().astype(str).unique().tolist())
        if encoding == "onehot" and len(cats) > MAX_ONEHOT:
            raise DataError(f"{file}: text column {quoted(col)} has {len(cats):,} distinct values, too many to one-hot; "
                            "leave it out of [data] features or set [data] categorical = \"codes\"")
        info.categorical[col] = cats
        info.feature_names += [f"{col}={v}" for v in cats] if encoding == "onehot" else [col]
    return info


def encode_features(df, table: TableInfo) -> np.ndarray:
    """Apply a fitted :class:`TableInfo` to the rows of ``df``.

    Parameters
    ----------
    df : pandas.DataFrame
        Rows with (at least) the columns ``table.columns``.
    table : TableInfo
        The fitted encoding.

    Returns
    -------
    numpy.ndarray
        ``(N, len(table.feature_names))`` float32 inputs in ``table.feature_names``
        order; ``table`` is left unchanged.
    """
    numeric = list(table.numeric)
    x, missing = _numeric_block(df, numeric) if numeric else (None, None)
    return _encode(df, table, x, missing)


def _encode(df, table: TableInfo, x: np.ndarray | None, missing: np.ndarray | None) -> np.ndarray:
    """:func:`encode_features` with the numeric block already read (``x`` is scaled in place)."""
    import pandas as pd

    numeric = list(table.numeric)
    if numeric:
        if missing is not None:
            x[missing] = 0.0  # no inf - inf below
        stats = np.array(list(table.numeric.values()), dtype=np.float32)
        x -= stats[:, 0]
        x /= stats[:, 1]
        if missing is not None:
            x[missing] = 0.0  # the training mean, scaled
    n = len(df)
    cat_blocks = {}
    for col, cats in table.categorical.items():
        text = df[col].where(df[col].isna(), df[col].astype(str))
        codes = pd.Index(cats, dtype=object).get_indexer(text.astype(object))  # -1: missing or unseen
        if table.encoding == "onehot":
            out = np.zeros((n, len(cats)), dtype=np.float32)
            rows = np.flatnonzero(codes >= 0)
            out[rows, codes[rows]] = 1.0
        else:
            out = codes.astype(np.float32).reshape(n, 1)
        cat_blocks[col] = out
    if not cat_blocks:  # all numeric: already in column order
        return x
    num_at = {c: i for i, c in enumerate(numeric)}
    ordered = [x[:, num_at[c]:num_at[c] + 1] if c in num_at else cat_blocks[c] for c in table.columns]
    return np.ascontiguousarray(np.concatenate(ordered, axis=1), dtype=np.float32)


# ------------------------------------------------------------------ targets
def infer_task(df, targets: list[str]) -> str:
    """The task a table's target column(s) imply.

    One column: ``"classification"`` when it is text or boolean, or integers with at
    most :data:`MAX_CLASSES` (20) distinct values and fewer than :data:`CLASS_SHARE`
    (5 %) of the rows as distinct values (two values always qualify); otherwise
    ``"regression"`` (floats always are). Several columns: ``"multilabel"`` when every
    value is 0 or 1, else ``"regression"``.
    """
    from pandas.api.types import is_bool_dtype, is_integer_dtype

    if len(targets) > 1:
        values = df[targets]
        if all(_is_numeric(values[c]) for c in targets) and values.isin([0, 1]).to_numpy().all():
            return "multilabel"
        return "regression"
    col = df[targets[0]]
    if not _is_numeric(col) or is_bool_dtype(col.dtype):
        return "classification"
    if is_integer_dtype(col.dtype):
        k = col.nunique()
        if k <= 2 or (k <= MAX_CLASSES and k < CLASS_SHARE * len(col)):
            return "classification"
    return "regression"


def _encode_target(df, targets: list[str], task: str, train: np.ndarray, scale: bool, table: TableInfo,
                   file: str) -> torch.Tensor:
    """The target tensor of every row: int64 ``(N,)`` class indices or float32 ``(N, k)``."""
    import pandas as pd

    table.task = task
    if task == "classification":
        if len(targets) != 1:
            raise DataError(f"{file}: classification takes one target column, [data] target names "
                            f"{len(targets)} ({_names(targets)}); choose one, or the multilabel task for 0/1 columns")
        col = df[targets[0]]
        if not _is_numeric(col):  # text (maybe mixed with numbers): sorted as text
            col = col.astype(str)
        codes, uniques = pd.factorize(col, sort=True)
        table.classes = [str(v) for v in uniques]
        return torch.from_numpy(codes.astype(np.int64))
    for col in targets:
        if not _is_numeric(df[col]):
            raise DataError(f"{file}: target column {quoted(col)} holds text, which cannot be a {task} target; "
                            "choose numeric target columns, or one text column for classification")
    y = df[targets].to_numpy(dtype=np.float32, copy=True)  # writable: torch shares its memory
    if task == "multilabel":
        if not np.isin(y, (0.0, 1.0)).all():
            raise DataError(f"{file}: multilabel targets must be 0 or 1, and {_names(targets)} hold other values; "
                            "choose 0/1 columns, or the regression task")
        table.classes = list(targets)
    elif scale:
        mean = y[train].mean(axis=0, dtype=np.float64)
        std = y[train].std(axis=0, dtype=np.float64)
        std = np.where(std > 0, std, 1.0)
        y = ((y - mean) / std).astype(np.float32)
        table.target_mean, table.target_std = mean.tolist(), std.tolist()
    return torch.from_numpy(np.ascontiguousarray(y))


# ------------------------------------------------------------------ entry point
def table_datasets(cfg: DataConfig, task: str = "", scale_targets: bool = True
                   ) -> tuple[TableDataset, TableDataset, dict[str, Any]]:
    """Training and validation datasets of the table file ``cfg.root``.

    Parameters
    ----------
    cfg : DataConfig
        ``root`` (``.csv``, ``.csv.gz`` and other pandas compressions; ``.parquet``
        with pyarrow), ``target`` (a column name or a list of them), ``features``
        (empty: every column but the targets), ``categorical`` (``"onehot"`` or
        ``"codes"``), ``val_fraction`` and ``split_seed``.
    task : str
        ``""`` or ``"auto"``: inferred by :func:`infer_task`; ``"classification"``,
        ``"regression"`` or ``"multilabel"``: that task (the targets must fit it).
    scale_targets : bool
        Regression: standardise each target column with its training mean and std
        (recorded in ``TableInfo.target_mean`` / ``target_std``), so default learning
        rates fit any target scale. Losses, MAE and RMSE are then in standard
        deviations of the target; R² is unchanged.

    Returns
    -------
    train, val : TableDataset
        ``(x, y)`` with ``x`` float32 ``(N, F)`` and ``y`` int64 ``(N,)`` class indices
        (classification) or float32 ``(N, k)`` for k target columns (regression,
        k = 1 included, so ``y`` has the shape of a ``Linear(F, k)`` output and a
        plain ``mse_loss(output, y)`` cannot broadcast ``(N, 1)`` against ``(N,)``;
        multilabel: 0/1). Both carry the fitted :class:`TableInfo` as ``.table``.
    info : dict
        The keyword arguments of ``datasets.DataInfo`` (``DataInfo(**info)``; a dict
        because ``datasets`` imports this module, not the other way round):
        ``name`` the file name, ``input_shape`` ``(F,)``, ``num_classes`` the number of
        model outputs (classes, or k target columns), ``classes`` (class values or, for
        multilabel, the column names), ``task``, ``target_shape`` (``()`` or ``(k,)``)
        and ``notes``: the "F features from N columns" summary, missing values
        filled, rows dropped, target scaling.

    Raises
    ------
    DataError
        pandas (or pyarrow for Parquet) is missing; the file is missing or unreadable;
        a named column does not exist; a target does not fit the task; a text column
        has more than :data:`MAX_ONEHOT` categories to one-hot; a split is empty.
        The message names the file and the setting to change.
    """
    if cfg.categorical not in ("onehot", "codes"):
        raise DataError(f"[data] categorical = {quoted(cfg.categorical)} is not one of \"onehot\", \"codes\"")
    if task not in ("", "auto") + TASKS:
        raise DataError(f"task {quoted(task)} is not one of {', '.join(TASKS)} (or \"auto\")")
    df = _read_table(cfg.root)
    file = Path(cfg.root).name
    targets, features = _pick_columns(df, cfg, file)
    keep = df[targets].notna().all(axis=1).to_numpy()
    dropped = int((~keep).sum())
    if dropped:
        df = df.loc[keep]
    if len(df) < 2:
        raise DataError(f"{file} has {len(df)} rows with a target value; it needs at least 2")
    train, val = _split_rows(len(df), cfg.val_fraction, cfg.split_seed, file)
    numeric = [c for c in features if _is_numeric(df[c])]
    x, missing = _numeric_block(df, numeric) if numeric else (None, None)
    table = _fit_features(df, features, train, cfg.categorical, file, x, missing)
    table.target, table.dropped_rows = targets, dropped
    if missing is not None:
        table.missing = {c: int(k) for c, k in zip(numeric, missing.sum(axis=0)) if k}
    x = _encode(df, table, x, missing)
    y = _encode_target(df, targets, task if task in TASKS else infer_task(df, targets), train, scale_targets,
                       table, file)
    info = _data_info(table, len(train), len(val), y)
    tr, va = torch.from_numpy(train), torch.from_numpy(val)
    return (TableDataset(torch.from_numpy(x[train]), y[tr], table),
            TableDataset(torch.from_numpy(x[val]), y[va], table), info)


def _data_info(table: TableInfo, n_train: int, n_val: int, y: torch.Tensor) -> dict[str, Any]:
    notes = [f"{table.source}: {table.summary()}"]
    if table.missing:
        notes.append(f"{table.source}: {sum(table.missing.values()):,} missing numeric values replaced by the "
                     f"training mean ({', '.join(f'{c}: {k}' for c, k in table.missing.items())})")
    if table.dropped_rows:
        notes.append(f"{table.source}: {table.dropped_rows:,} rows without a target value left out")
    if table.target_mean:
        notes.append(f"{table.source}: regression targets standardised with the training split's mean and std "
                     "(losses, MAE and RMSE in standard deviations; R² unchanged)")
    classification = table.task == "classification"
    return dict(name=table.source, input_shape=(len(table.feature_names),),
                num_classes=len(table.classes) if classification else int(y.shape[1]),
                classes=list(table.classes), train_size=n_train, val_size=n_val, task=table.task,
                target_shape=() if classification else (int(y.shape[1]),), notes=notes)
