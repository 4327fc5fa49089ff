"""The data fields of a table, of a text file or of the user's own dataset (``[data]`` of run.toml).

:class:`DataSourceFields` holds the CSV table's target and feature columns, the
text file's columns, validation file and tokenizer, and the user dataset's spec
and keyword arguments; the form shows only the rows of the chosen dataset. Keyword arguments are typed as the inside of a TOML inline
table (``n = 100, vocab = 50``) and read with :mod:`tomllib`.
"""

from __future__ import annotations

import json
import re
import sys

from PySide6.QtWidgets import QComboBox, QSpinBox

from workbench.ui.train.collapsible import line_edit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["DataSourceFields", "SPEC", "parse_kwargs", "format_kwargs", "parse_columns"]

#: The dataset combo's data of "Your own (spec)…": the dataset is then the spec field's text.
SPEC = "<spec>"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def parse_kwargs(text: str) -> dict:
    """``"n = 100, vocab = 50"`` -> ``{"n": 100, "vocab": 50}`` (the inside of a TOML inline table).

    Raises
    ------
    ValueError
        Not TOML key = value pairs; the message quotes the text and gives an example.
    """
    if not text.strip():
        return {}
    try:
        return dict(tomllib.loads("x = {" + text.strip() + "}")["x"])
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"dataset arguments {text!r}: {exc}; expected TOML pairs such as "
                         "n = 100, name = \"train\", sizes = [1, 2]") from None


def _value(value) -> str:
    if isinstance(value, dict):
        return "{" + format_kwargs(value) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    return repr(value)


def format_kwargs(kwargs: dict) -> str:
    """The text :func:`parse_kwargs` reads back as ``kwargs``."""
    return ", ".join(f"{k if _BARE_KEY.match(k) else json.dumps(k)} = {_value(v)}" for k, v in kwargs.items())


def parse_columns(text: str) -> list[str]:
    """``"age, bmi"`` -> ``["age", "bmi"]`` (comma-separated column names, blanks dropped)."""
    return [c.strip() for c in text.split(",") if c.strip()]


class DataSourceFields:
    """The CSV table's and the user dataset's widgets.

    Attributes
    ----------
    target_edit, features_edit, categorical_combo
        ``targetEdit``, ``featuresEdit``, ``categoricalCombo`` (dataset ``"csv"``).
    spec_edit, kwargs_edit
        ``datasetSpecEdit``, ``datasetKwargsEdit`` (the user's own dataset).
    text_edit, text_pair_edit, val_file_edit, tokenizer_edit, max_length_spin
        ``textColumnEdit``, ``textPairEdit``, ``valFileEdit``, ``tokenizerEdit``, ``maxLengthSpin``
        (dataset ``"text"``; its label column is ``target_edit``).
    processor_edit
        ``processorEdit``: the image processor's folder (``[data] processor``, dataset ``"imagefolder"``).
    """

    def __init__(self):
        self.target_edit = line_edit("targetEdit", "target column(s), e.g. price",
                                     "The column(s) to predict, comma-separated")
        self.features_edit = line_edit("featuresEdit", "all other columns",
                                       "Feature columns, comma-separated (optional: every column but the targets)")
        self.categorical_combo = QComboBox(objectName="categoricalCombo")
        self.categorical_combo.addItem("one-hot", "onehot")
        self.categorical_combo.addItem("integer codes", "codes")
        self.categorical_combo.setToolTip("How text (non-numeric) feature columns become numbers")
        self.spec_edit = line_edit("datasetSpecEdit", "my_data.py:make_dataset",
                                   "Your dataset factory: file.py:function or package.module:function returning "
                                   "(train, val) datasets or {'train': ..., 'val': ..., 'collate_fn': ...}")
        self.kwargs_edit = line_edit("datasetKwargsEdit", "optional, e.g. n = 100, vocab = 50",
                                     "Keyword arguments of the factory, as TOML: n = 100, name = \"x\"")
        self.text_edit = line_edit("textColumnEdit", "text",
                                   "The column of the texts (CSV, JSON Lines, Parquet); a .txt file is its own text")
        self.text_pair_edit = line_edit("textPairEdit", "none",
                                        "A second text column given to the tokenizer as the pair (optional)")
        self.val_file_edit = line_edit("valFileEdit", "hold out the validation share",
                                       "A validation file with the same columns (optional)")
        self.tokenizer_edit = line_edit("tokenizerEdit", "the model folder's own",
                                        "A folder with the tokenizer (tokenizer.json / vocab); empty: the opened "
                                        "model folder's")
        self.processor_edit = line_edit("processorEdit", "none (the transforms below)",
                                        "A model folder whose image processor (preprocessor_config.json) resizes "
                                        "and normalizes the images, as the model was pretrained; empty: the "
                                        "Transforms section's settings")
        self.max_length_spin = QSpinBox(objectName="maxLengthSpin")
        self.max_length_spin.setRange(0, 8192)
        self.max_length_spin.setSpecialValueText("tokenizer's own")
        self.max_length_spin.setToolTip("Tokens per text after truncation (classification) or per packed block "
                                        "(causal LM); the tokenizer's own length (at most 512) when left at 0")

    def csv_widgets(self) -> list:
        """The rows of dataset ``"csv"``."""
        return [self.target_edit, self.features_edit, self.categorical_combo]

    def spec_widgets(self) -> list:
        """The rows of the user's own dataset."""
        return [self.spec_edit, self.kwargs_edit]

    def text_widgets(self) -> list:
        """The rows of dataset ``"text"`` (besides the target)."""
        return [self.text_edit, self.text_pair_edit, self.val_file_edit, self.tokenizer_edit, self.max_length_spin]

    def read(self, choice: str) -> dict:
        """The :class:`DataConfig` fields these widgets set for the dataset ``choice`` (a combo key or :data:`SPEC`).

        Raises
        ------
        ValueError
            No spec typed for the user's own dataset, or arguments that are not TOML.
        """
        out = {"target": parse_columns(self.target_edit.text()), "features": parse_columns(self.features_edit.text()),
               "categorical": self.categorical_combo.currentData(), "kwargs": parse_kwargs(self.kwargs_edit.text()),
               "text": self.text_edit.text().strip(), "text_pair": self.text_pair_edit.text().strip(),
               "val": self.val_file_edit.text().strip(), "tokenizer": self.tokenizer_edit.text().strip(),
               "processor": self.processor_edit.text().strip()}
        length = self.max_length_spin.value()
        out["max_length"] = out["block_size"] = length
        if choice == SPEC:
            spec = self.spec_edit.text().strip()
            if not spec:
                raise ValueError("Your own dataset: type the function that makes it, e.g. my_data.py:make_dataset")
            out["dataset"] = spec
        return out

    def show(self, data) -> None:
        """Put a :class:`DataConfig`'s table and user-dataset fields in the widgets."""
        self.target_edit.setText(", ".join(str(c) for c in data.target))
        self.features_edit.setText(", ".join(str(c) for c in data.features))
        self.categorical_combo.setCurrentIndex(max(self.categorical_combo.findData(data.categorical), 0))
        self.kwargs_edit.setText(format_kwargs(data.kwargs))
        self.text_edit.setText(data.text)
        self.text_pair_edit.setText(data.text_pair)
        self.val_file_edit.setText(data.val)
        self.tokenizer_edit.setText(data.tokenizer)
        self.processor_edit.setText(data.processor)
        self.max_length_spin.setValue(max(data.max_length, data.block_size))
