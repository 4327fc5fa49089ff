"""Reading text data files and the tokenizer of a model folder, for ``[data] dataset = "text"``. Qt-free.

A data file is read by Hugging Face ``datasets`` (the optional extra
``workbench[text]``, imported inside the functions): ``.csv`` / ``.tsv``,
``.jsonl`` / ``.json``, ``.parquet``, ``.txt`` (one row a line, column
``text``), or a folder written by ``Dataset.save_to_disk`` /
``DatasetDict.save_to_disk`` (its ``train`` split; ``validation`` or ``test``
as the validation split when ``[data] val`` is not set). ``datasets`` converts
a file into Arrow files under Workbench's cache folder and memory-maps them,
so a file larger than memory is read without holding it whole.

The tokenizer is ``AutoTokenizer.from_pretrained(folder, local_files_only=True,
trust_remote_code=False)``: a folder's own code never runs and nothing is
downloaded (:func:`~workbench.core.hub_offline.hub_offline`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.core.errors import DataError

__all__ = ["TABLE_BUILDERS", "TOKENIZER_FILES", "read_table", "read_splits", "load_tokenizer", "check_column",
           "row_name"]

#: The ``datasets`` builder of each file suffix.
TABLE_BUILDERS = {".csv": "csv", ".tsv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet",
                  ".txt": "text"}
#: Any of these in a folder is a tokenizer ``AutoTokenizer`` can read.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model",
                   "tokenizer.model", "sentencepiece.bpe.model")


def _datasets():
    try:
        import datasets
    except ImportError as exc:
        raise DataError("[data] dataset = \"text\" reads files with the datasets package; install it "
                        "(pip install 'workbench[text]')") from exc
    datasets.disable_progress_bars()
    return datasets


def _cache() -> str:
    from workbench.core.contrib import cache_dir

    return str(cache_dir() / "datasets")


def read_table(path: str | Path, setting: str = "[data] root") -> Any:
    """The rows of a data file or a ``save_to_disk`` folder as a ``datasets.Dataset`` (memory-mapped).

    Raises
    ------
    DataError
        The path is missing, has a suffix no reader knows, or cannot be parsed; the
        message names the file and the setting to fix.
    """
    return read_splits(path, setting)[0]


def read_splits(path: str | Path, setting: str = "[data] root") -> tuple[Any, Any | None]:
    """``(train, validation or None)`` of ``path``: a file has one split; a saved ``DatasetDict`` may have two.

    Raises
    ------
    DataError
        As :func:`read_table`.
    """
    p = Path(path).expanduser()
    if not str(path):
        raise DataError(f"{setting} is not set: give the data file (.csv, .jsonl, .parquet, .txt) or a "
                        "datasets folder (save_to_disk)")
    if not p.exists():
        raise DataError(f"{p}: file not found; fix {setting} in the run file")
    datasets = _datasets()
    from workbench.core.hub_offline import hub_offline

    if p.is_dir():
        try:
            with hub_offline():
                loaded = datasets.load_from_disk(str(p))
        except Exception as exc:  # noqa: BLE001 - a folder's content: one line
            raise DataError(f"{p}: not a datasets folder written by save_to_disk ({type(exc).__name__}: "
                            f"{str(exc)[:200]}); give a .csv, .jsonl, .parquet or .txt file in {setting}") from exc
        if isinstance(loaded, datasets.DatasetDict):
            if "train" not in loaded:
                raise DataError(f"{p}: the saved datasets have no \"train\" split (splits: {', '.join(loaded)})")
            val = next((loaded[k] for k in ("validation", "valid", "val", "test") if k in loaded), None)
            return loaded["train"], val
        return loaded, None
    builder = TABLE_BUILDERS.get(p.suffix.lower())
    if builder is None:
        raise DataError(f"{p}: {p.suffix or 'no suffix'} is not a text data file Workbench reads; give a "
                        f"{', '.join(TABLE_BUILDERS)} file or a save_to_disk folder in {setting}")
    kwargs = {"delimiter": "\t"} if p.suffix.lower() == ".tsv" else {}
    try:
        with hub_offline():
            return datasets.load_dataset(builder, data_files=str(p), split="train", cache_dir=_cache(),
                                         **kwargs), None
    except Exception as exc:  # noqa: BLE001 - a file's content: one line, never a traceback
        cause = exc
        while cause.__cause__ is not None and cause.__cause__ is not cause:
            cause = cause.__cause__
        text = str(cause).strip().splitlines()
        raise DataError(f"{p}: cannot be read as {builder.upper()} ({type(cause).__name__}: "
                        f"{(text[0] if text else '')[:200]}); fix the file or give another in {setting}") from exc


def row_name(path: str | Path, index: int) -> str:
    """How a message names row ``index`` (0-based) of a file: its line for CSV (after the header) and JSON Lines."""
    suffix = Path(path).suffix.lower()
    if suffix in (".csv", ".tsv"):
        return f"line {index + 2}"
    if suffix in (".jsonl", ".txt"):
        return f"line {index + 1}"
    return f"row {index + 1}"


def check_column(table: Any, column: str, path: str | Path, setting: str) -> None:
    """Raise a :class:`DataError` naming the file, the missing ``column`` and the columns it has."""
    if column not in table.column_names:
        raise DataError(f"{path}: no column {column!r} (columns: {', '.join(table.column_names)}); set "
                        f"{setting} = \"<column>\" in the run file")


def load_tokenizer(folder: str | Path, setting: str = "[data] tokenizer") -> Any:
    """``AutoTokenizer`` of ``folder``: local files only, never the folder's own code.

    Raises
    ------
    DataError
        The folder is missing, holds no tokenizer file (:data:`TOKENIZER_FILES`), or
        transformers cannot read it; the message names the folder and what to set.
    """
    p = Path(folder).expanduser()
    if not str(folder) or not p.is_dir():
        raise DataError(f"{p}: not a folder; set {setting} = \"<the model folder with its tokenizer>\"")
    if not any((p / name).is_file() for name in TOKENIZER_FILES):
        raise DataError(f"{p}: no tokenizer in this folder (tokenizer.json or tokenizer_config.json is missing); "
                        f"set {setting} = \"<a folder with the model's tokenizer>\" in the run file")
    try:
        import transformers
    except ImportError as exc:
        raise DataError("tokenizing text needs transformers; install it (pip install 'workbench[hf]')") from exc
    from workbench.core.hub_offline import hub_offline

    try:
        with hub_offline():
            return transformers.AutoTokenizer.from_pretrained(str(p), local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - a folder's content: one line
        raise DataError(f"{p}: transformers cannot read the tokenizer ({type(exc).__name__}: {str(exc)[:200]}); "
                        f"set {setting} to a folder with the model's tokenizer") from exc
