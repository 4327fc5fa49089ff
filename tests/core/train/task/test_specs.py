"""The code a run's settings name (workbench.core.train.task.specs): listed for trust, pinned by path and hash,
and said when a pinned file changed since the run. Real files on disk; nothing is imported."""

from __future__ import annotations

import hashlib
import sys

import pytest

from workbench.core.errors import DataError, TrustRequired
from workbench.core.train.config import DataConfig, TaskConfig, TrainConfig
from workbench.core.train.task.specs import changed_files, check_trust, code_specs, file_of, pin


def user_cfg(**task) -> TrainConfig:
    return TrainConfig(data=DataConfig(dataset="my_data.py:make"),
                       task=TaskConfig(step="steps.py:train", validation_step="pkg.steps:val", loss="mse",
                                       metrics=["accuracy", "metrics.py:iou"], **task))


def test_every_setting_that_names_code_is_listed_and_builtins_are_not():
    assert code_specs(user_cfg()) == [("data.dataset", "dataset", "my_data.py:make"),
                                      ("task.step", "step", "steps.py:train"),
                                      ("task.validation_step", "step", "pkg.steps:val"),
                                      ("task.metrics", "metric", "metrics.py:iou")]
    assert code_specs(TrainConfig()) == []
    own_loss = TrainConfig(task=TaskConfig(loss="losses.py:focal"))
    assert code_specs(own_loss) == [("task.loss", "loss", "losses.py:focal")]


def test_one_trust_question_names_every_spec_and_trust_lets_them_pass(tmp_path):
    origin = tmp_path / "run.toml"
    with pytest.raises(TrustRequired) as err:
        check_trust(user_cfg(), origin, trust=False)
    assert err.value.kind == "code" and err.value.path == origin
    assert err.value.globals == ["my_data.py:make", "steps.py:train", "pkg.steps:val", "metrics.py:iou"]
    check_trust(user_cfg(), origin, trust=True)
    check_trust(TrainConfig(), origin, trust=False)  # built-ins only: nothing to ask
    assert "my_data" not in sys.modules and "steps" not in sys.modules  # nothing was imported


def test_an_empty_dataset_name_is_a_data_error(tmp_path):
    cfg = TrainConfig()
    cfg.data.dataset = " "
    with pytest.raises(DataError, match="the dataset name must be a non-empty string"):
        check_trust(cfg, tmp_path / "run.toml", trust=True)


@pytest.mark.parametrize("spec, file", [
    ("my_data.py:make", "my_data.py"),
    ("/abs/dir/data.py:make", "/abs/dir/data.py"),
    ("sub/module:make", "sub/module"),
    ("C:\\work\\data.py:make", "C:\\work\\data.py"),
    ("pkg.mod:make", None),
    ("digits", None),
    (":make", None),
])
def test_the_file_part_of_a_spec(spec, file):
    assert file_of(spec) == file


def test_pin_makes_file_specs_absolute_and_records_their_hashes(tmp_path):
    (tmp_path / "my_data.py").write_text("def make(): ...\n")
    (tmp_path / "steps.py").write_text("def train(model, batch): ...\n")
    cfg = user_cfg()
    pin(cfg, tmp_path)
    data, steps = (tmp_path / "my_data.py").resolve(), (tmp_path / "steps.py").resolve()
    assert cfg.data.dataset == f"{data}:make" and cfg.task.step == f"{steps}:train"
    assert cfg.task.validation_step == "pkg.steps:val"  # a module spec is not a file
    assert cfg.task.metrics == ["accuracy", f"{(tmp_path / 'metrics.py').resolve()}:iou"]
    assert cfg.task.files == {str(data): hashlib.sha256(data.read_bytes()).hexdigest(),
                              str(steps): hashlib.sha256(steps.read_bytes()).hexdigest()}  # metrics.py is missing
    before = (cfg.data.dataset, dict(cfg.task.files))
    pin(cfg, tmp_path / "elsewhere")  # idempotent: absolute specs and recorded hashes stay
    assert (cfg.data.dataset, cfg.task.files) == before
    assert changed_files(cfg) == []


def test_a_csv_beside_the_run_file_becomes_absolute(tmp_path):
    (tmp_path / "table.csv").write_text("x,y\n1,2\n")
    cfg = TrainConfig(data=DataConfig(dataset="csv", root="table.csv"))
    pin(cfg, tmp_path)
    assert cfg.data.root == str((tmp_path / "table.csv").resolve())
    far = TrainConfig(data=DataConfig(dataset="csv", root="nowhere.csv"))
    pin(far, tmp_path)
    assert far.data.root == "nowhere.csv"


def test_a_changed_or_missing_pinned_file_is_said(tmp_path):
    (tmp_path / "my_data.py").write_text("def make(): ...\n")
    (tmp_path / "steps.py").write_text("def train(model, batch): ...\n")
    cfg = user_cfg()
    pin(cfg, tmp_path)
    (tmp_path / "my_data.py").write_text("def make(): return 1\n")
    (tmp_path / "steps.py").unlink()
    assert changed_files(cfg) == [f"{(tmp_path / 'my_data.py').resolve()} (changed since the run)",
                                  f"{(tmp_path / 'steps.py').resolve()} (missing)"]
