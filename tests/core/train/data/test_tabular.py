"""Tabular data (``[data] dataset = "csv"``) on the real tables scikit-learn ships inside its package."""

from __future__ import annotations

import gzip
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from workbench.core.errors import DataError
from workbench.core.train.config import DataConfig
from workbench.core.train.data.datasets import DataInfo
from workbench.core.train.data.tabular import TableDataset, encode_features, table_datasets

SKLEARN_DATA = Path(importlib.util.find_spec("sklearn").origin).parent / "datasets" / "data"
DIABETES_COLUMNS = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]


def write_diabetes(folder: Path, name: str = "diabetes.csv") -> Path:
    """scikit-learn's diabetes table (442 rows, no header in its files) as a CSV with a header and ``progression``."""
    frame = pd.DataFrame(np.loadtxt(SKLEARN_DATA / "diabetes_data_raw.csv.gz"), columns=DIABETES_COLUMNS)
    frame["progression"] = np.loadtxt(SKLEARN_DATA / "diabetes_target.csv.gz")
    path = folder / name
    frame.to_csv(path, index=False)
    return path


def write_counted(folder: Path, source: str, columns: list[str], target: str = "target") -> Path:
    """A scikit-learn CSV whose first line holds counts and class names, rewritten with a header."""
    values = np.loadtxt(SKLEARN_DATA / source, delimiter=",", skiprows=1)
    frame = pd.DataFrame(values[:, :-1], columns=columns)
    frame[target] = values[:, -1].astype(np.int64)
    path = folder / source
    frame.to_csv(path, index=False)
    return path


def _csv(cfg_root: Path, **kw) -> tuple[TableDataset, TableDataset, DataInfo]:
    train, val, fields = table_datasets(DataConfig(dataset="csv", root=str(cfg_root), **kw))
    return train, val, DataInfo(**fields)


@pytest.fixture
def diabetes(tmp_path) -> Path:
    return write_diabetes(tmp_path)


@pytest.fixture
def iris(tmp_path) -> Path:
    return write_counted(tmp_path, "iris.csv", ["sepal_length", "sepal_width", "petal_length", "petal_width"],
                         target="species")


def test_iris_is_a_three_class_classification_of_four_features(iris):
    train, val, info = _csv(iris, target="species")
    assert info.task == "classification" and info.num_classes == 3 and info.classes == ["0", "1", "2"]
    assert info.input_shape == (4,) and info.target_shape == ()
    assert (info.train_size, info.val_size) == (120, 30) == (len(train), len(val))
    x, y = train.tensors
    assert x.dtype == torch.float32 and x.shape == (120, 4)
    assert y.dtype == torch.int64 and y.shape == (120,)
    assert train.table.feature_names == ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    assert "4 features from 4 columns" in info.notes[0]


@pytest.mark.parametrize("source, n_features, n_classes", [("wine_data.csv", 13, 3), ("breast_cancer.csv", 30, 2)])
def test_wine_and_breast_cancer_are_classifications(tmp_path, source, n_features, n_classes):
    path = write_counted(tmp_path, source, [f"f{i}" for i in range(n_features)])
    _, _, info = _csv(path, target=["target"])
    assert (info.task, info.num_classes, info.input_shape) == ("classification", n_classes, (n_features,))


def test_diabetes_is_a_regression_with_float_targets(diabetes):
    train, val, info = _csv(diabetes, target=["progression"])
    assert info.task == "regression" and info.num_classes == 1 and info.classes == []
    assert info.input_shape == (10,) and info.target_shape == (1,)
    y = train.tensors[1]
    assert y.dtype == torch.float32 and y.shape == (len(train), 1)
    # targets standardised on the training split, and the record maps them back
    assert abs(float(y.mean())) < 1e-4 and abs(float(y.std(unbiased=False)) - 1) < 1e-4
    table = train.table
    raw = pd.read_csv(diabetes)["progression"].to_numpy()
    back = val.tensors[1].numpy()[:, 0] * table.target_std[0] + table.target_mean[0]
    assert set(np.round(back, 3)) <= set(np.round(raw, 3))
    assert any("standardised" in n for n in info.notes)


def test_diabetes_targets_in_their_own_units_when_not_scaled(diabetes):
    train, _, fields = table_datasets(DataConfig(dataset="csv", root=str(diabetes), target=["progression"]),
                                      scale_targets=False)
    assert 140 < float(train.tensors[1].mean()) < 165 and train.table.target_mean == []


def test_features_are_standardised_on_the_training_split_only(diabetes):
    train, val, _ = _csv(diabetes, target="progression")
    x_train, x_val = train.tensors[0], val.tensors[0]
    assert x_train.mean(0).abs().max() < 1e-5
    assert (x_train.std(0, unbiased=False) - 1).abs().max() < 1e-4
    assert x_val.mean(0).abs().max() > 1e-3  # fitted without the validation rows
    raw = pd.read_csv(diabetes)
    mean, std = train.table.numeric["bmi"]
    assert mean == pytest.approx(raw["bmi"].mean(), rel=0.05) and mean != pytest.approx(raw["bmi"].mean(), rel=1e-9)
    # the recorded scaling reproduces the tensors
    again = encode_features(raw, train.table)
    assert {tuple(r) for r in np.round(again, 4)} >= {tuple(r) for r in np.round(x_val.numpy(), 4)}


def test_the_split_follows_split_seed_and_val_fraction(diabetes):
    a, _, _ = _csv(diabetes, target="progression")
    b, _, _ = _csv(diabetes, target="progression")
    c, _, _ = _csv(diabetes, target="progression", split_seed=1)
    _, v, info = _csv(diabetes, target="progression", val_fraction=0.5)
    assert torch.equal(a.tensors[0], b.tensors[0]) and not torch.equal(a.tensors[0], c.tensors[0])
    assert info.val_size == 221 == len(v)
    with pytest.raises(DataError, match="diabetes.csv: val_fraction=0.0"):
        _csv(diabetes, target="progression", val_fraction=0.0)


def _shop(tmp_path: Path, rows: int = 200) -> Path:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({
        "price": rng.normal(10, 3, rows),
        "colour": rng.choice(["red", "green", "blue"], rows),
        "size": rng.choice(["S", "M", "L", "XL"], rows),
        "sold": rng.choice(["yes", "no"], rows),
    })
    frame.loc[3, "price"] = np.nan
    frame.loc[5, "colour"] = np.nan
    path = tmp_path / "shop.csv"
    frame.to_csv(path, index=False)
    return path


def test_text_columns_are_one_hot_with_categories_of_the_training_split(tmp_path):
    train, val, info = _csv(_shop(tmp_path), target="sold")
    table = train.table
    assert info.task == "classification" and info.classes == ["no", "yes"]
    assert table.categorical == {"colour": ["blue", "green", "red"], "size": ["L", "M", "S", "XL"]}
    assert table.feature_names == ["price", "colour=blue", "colour=green", "colour=red",
                                   "size=L", "size=M", "size=S", "size=XL"]
    assert info.input_shape == (8,) and train.tensors[0].shape[1] == 8
    x = torch.cat([train.tensors[0], val.tensors[0]])
    onehot = x[:, 1:4]
    assert set(onehot.sum(1).tolist()) == {0.0, 1.0}  # the missing colour is all zeros
    assert table.missing == {"price": 1}
    assert any("1 missing numeric values replaced by the training mean" in n for n in info.notes)
    assert "8 features from 3 columns" in info.notes[0]


def test_unseen_categories_in_validation_are_all_zeros(tmp_path):
    train, _, _ = _csv(_shop(tmp_path), target="sold")
    rows = pd.DataFrame({"price": [10.0, np.nan], "colour": ["purple", "red"], "size": ["M", None]})
    x = encode_features(rows, train.table)
    assert x.shape == (2, 8)
    assert x[0, 1:4].tolist() == [0, 0, 0] and x[1, 1:4].tolist() == [0, 0, 1]
    assert x[1, 0] == 0.0 and x[1, 4:].tolist() == [0, 0, 0, 0]


def test_text_columns_as_integer_codes(tmp_path):
    train, _, info = _csv(_shop(tmp_path), target="sold", categorical="codes")
    assert train.table.feature_names == ["price", "colour", "size"] and info.input_shape == (3,)
    codes = train.tensors[0][:, 2]
    assert set(codes.tolist()) == {0.0, 1.0, 2.0, 3.0}
    rows = pd.DataFrame({"price": [1.0], "colour": ["purple"], "size": ["XL"]})
    assert encode_features(rows, train.table)[0, 1:].tolist() == [-1.0, 3.0]


def test_chosen_features_only(diabetes):
    train, _, info = _csv(diabetes, target="progression", features=["bmi", "bp"])
    assert info.input_shape == (2,) and train.table.columns == ["bmi", "bp"]


def test_a_missing_target_column_names_the_file_and_the_columns(diabetes):
    with pytest.raises(DataError) as err:
        _csv(diabetes, target="disease")
    text = str(err.value)
    assert text.startswith("diabetes.csv has no column 'disease'; columns: age, sex, bmi")
    assert "progression" in text and text.endswith("set [data] target to one of them") and "\n" not in text


def test_bad_settings_and_files_are_one_line_data_errors(tmp_path, diabetes):
    cases = [
        (dict(target=[]), "diabetes.csv: no target column set; columns: age"),
        (dict(target="progression", features=["bmi", "weight"]), "diabetes.csv has no column 'weight'"),
        (dict(target="progression", features=["bmi", "progression"]), "'progression' is both a target and a feature"),
        (dict(target="progression", categorical="ordinal"), "categorical = 'ordinal'"),
    ]
    for kw, message in cases:
        with pytest.raises(DataError, match=message.replace("[", r"\[")):
            _csv(diabetes, **kw)
    with pytest.raises(DataError, match="does not exist; set \\[data\\] root"):
        _csv(tmp_path / "nope.csv", target="y")
    with pytest.raises(DataError, match="needs a table file"):
        table_datasets(DataConfig(dataset="csv", target=["y"]))
    (tmp_path / "table.xlsx").write_bytes(b"PK")
    with pytest.raises(DataError, match="table.xlsx is not a table file"):
        _csv(tmp_path / "table.xlsx", target="y")
    (tmp_path / "broken.csv.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match="broken.csv.gz cannot be read as a table"):
        _csv(tmp_path / "broken.csv.gz", target="y")
    with pytest.raises(DataError, match="diabetes.csv: multilabel targets must be 0 or 1, and bmi, age hold"):
        table_datasets(DataConfig(dataset="csv", root=str(diabetes), target=["bmi", "age"]), task="multilabel")


def test_parquet_without_pyarrow_says_what_to_install(tmp_path, monkeypatch):
    path = tmp_path / "table.parquet"
    path.write_bytes(b"PAR1")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    with pytest.raises(DataError, match="table.parquet: reading .parquet needs pyarrow: pip install pyarrow"):
        _csv(path, target="y")


def test_without_pandas_the_error_says_what_to_install(diabetes, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(DataError, match=r"the csv dataset needs pandas: pip install workbench\[tabular\]"):
        _csv(diabetes, target="progression")


def test_a_gzipped_csv_reads_like_the_plain_one(tmp_path, diabetes):
    packed = tmp_path / "diabetes.csv.gz"
    packed.write_bytes(gzip.compress(diabetes.read_bytes()))
    plain, _, _ = _csv(diabetes, target="progression")
    zipped, _, info = _csv(packed, target="progression")
    assert info.name == "diabetes.csv.gz" and torch.equal(plain.tensors[0], zipped.tensors[0])


def test_two_zero_one_targets_are_multilabel(tmp_path):
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300)})
    frame["spam"] = (frame.a > 0).astype(int)
    frame["urgent"] = (frame.b > 0.5).astype(int)
    frame.to_csv(tmp_path / "mail.csv", index=False)
    train, _, info = _csv(tmp_path / "mail.csv", target=["spam", "urgent"])
    assert info.task == "multilabel" and info.classes == ["spam", "urgent"] and info.num_classes == 2
    y = train.tensors[1]
    assert y.dtype == torch.float32 and y.shape == (240, 2) and set(y.unique().tolist()) == {0.0, 1.0}
    assert info.target_shape == (2,)


def test_several_real_valued_targets_are_a_regression(tmp_path):
    exercise = pd.read_csv(SKLEARN_DATA / "linnerud_exercise.csv", sep=r"\s+")
    body = pd.read_csv(SKLEARN_DATA / "linnerud_physiological.csv", sep=r"\s+")
    pd.concat([exercise, body], axis=1).to_csv(tmp_path / "linnerud.csv", index=False)
    train, _, info = _csv(tmp_path / "linnerud.csv", target=["Weight", "Waist", "Pulse"])
    assert info.task == "regression" and info.target_shape == (3,) and train.tensors[1].shape == (16, 3)


def test_the_task_can_be_forced_and_rows_without_a_target_are_left_out(diabetes, tmp_path):
    cfg = DataConfig(dataset="csv", root=str(diabetes), target=["sex"])
    assert table_datasets(cfg)[2]["task"] == "regression"  # floats 1.0 / 2.0
    train, _, fields = table_datasets(cfg, task="classification")
    assert fields["classes"] == ["1.0", "2.0"] and train.tensors[1].dtype == torch.int64
    with pytest.raises(DataError, match="classification takes one target column"):
        table_datasets(DataConfig(dataset="csv", root=str(diabetes), target=["sex", "age"]), task="classification")
    frame = pd.read_csv(diabetes)
    frame.loc[[0, 7], "progression"] = np.nan
    frame.to_csv(tmp_path / "holes.csv", index=False)
    _, _, info = _csv(tmp_path / "holes.csv", target="progression")
    assert info.train_size + info.val_size == 440
    assert any("2 rows without a target value left out" in n for n in info.notes)


def test_integer_targets_are_classes_only_when_few(diabetes, tmp_path):
    frame = pd.read_csv(diabetes)
    frame["age"] = frame["age"].astype(int)  # 58 distinct ages: too many for classes
    frame["sex"] = frame["sex"].astype(int)
    frame["grade"] = np.arange(len(frame)) % 3
    frame.to_csv(tmp_path / "ints.csv", index=False)
    for target, task in (("age", "regression"), ("sex", "classification"), ("grade", "classification")):
        _, _, fields = table_datasets(DataConfig(dataset="csv", root=str(tmp_path / "ints.csv"), target=[target]))
        assert fields["task"] == task, target
