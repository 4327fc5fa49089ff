"""``[data] dataset = "text"``: dynamic padding, and each bad input as one line naming the file, exit 1, no run folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.core.train.text_models import tiny_bert_folder

import transformers  # noqa: F401,E402 - in the test extra: fails if missing, never skips
import datasets  # noqa: F401,E402 - in the test extra: fails if missing, never skips

from workbench.core.train.config import DataConfig  # noqa: E402
from workbench.core.train.data.text import text_classes, text_loaders  # noqa: E402

TRAIN = "text,label\nthe ball game,sport\nbake the bread,food\nkick the ball,sport\nfry an egg,food\n" \
        "a long game of ball with the team,sport\n"


def _run(tmp_path: Path, data: str, folder: Path) -> Path:
    run = tmp_path / "run.toml"
    run.write_text(f'epochs = 1\ntensorboard = false\nrun_dir = "{tmp_path / "out"}"\n[model]\ncheckpoint = '
                   f'"{folder}"\n[task]\nkind = "text_classification"\n[data]\ndataset = "text"\nbatch_size = 2\n'
                   + data)
    return run


def _error_line(tmp_path, capsys, run: Path) -> str:
    from workbench.cli import main

    assert main(["train", str(run)]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, lines
    assert not (tmp_path / "out").exists()  # stopped before the run folder was made
    return lines[0]


@pytest.fixture
def bert(tmp_path) -> Path:
    return tiny_bert_folder(tmp_path / "bert", [line.split(",")[0] for line in TRAIN.splitlines()[1:]])


def test_batches_are_padded_per_batch_and_classes_sorted(tmp_path, bert):
    (tmp_path / "train.csv").write_text(TRAIN)
    cfg = DataConfig(dataset="text", root=str(tmp_path / "train.csv"), tokenizer=str(bert), batch_size=2,
                     val_fraction=0.2, shuffle=False, max_length=4)
    assert text_classes(cfg) == ["food", "sport"]
    train, val, fields = text_loaders(cfg, task="text_classification")
    assert (fields["num_classes"], fields["train_size"], fields["val_size"]) == (2, 4, 1)
    batches = list(train)
    assert set(batches[0]) >= {"input_ids", "attention_mask", "labels"}
    widths = {b["input_ids"].shape[1] for b in batches}
    assert max(widths) <= 4 and all(b["labels"].dtype.is_floating_point is False for b in batches)


def test_a_missing_text_column(tmp_path, capsys, bert):
    (tmp_path / "train.csv").write_text(TRAIN)
    line = _error_line(tmp_path, capsys, _run(tmp_path, 'root = "train.csv"\ntext = "sentence"\n', bert))
    assert f"{tmp_path / 'train.csv'}: no column 'sentence' (columns: text, label)" in line
    assert 'set [data] text = "<column>"' in line


def test_a_label_never_seen_in_training(tmp_path, capsys, bert):
    (tmp_path / "train.csv").write_text(TRAIN)
    (tmp_path / "val.csv").write_text("text,label\nthe ball,sport\nplay a song,music\n")
    line = _error_line(tmp_path, capsys, _run(tmp_path, 'root = "train.csv"\nval = "val.csv"\n', bert))
    assert f"{tmp_path / 'val.csv'}: line 3: label 'music' never appears in the training data" in line


def test_an_empty_text_row(tmp_path, capsys, bert):
    (tmp_path / "train.csv").write_text(TRAIN + ",sport\n")
    line = _error_line(tmp_path, capsys, _run(tmp_path, 'root = "train.csv"\n', bert))
    assert f"{tmp_path / 'train.csv'}: line 7: the" in line and "empty" in line


def test_a_folder_without_a_tokenizer(tmp_path, capsys):
    folder = tiny_bert_folder(tmp_path / "bare", [], tokenizer=False)
    (tmp_path / "train.csv").write_text(TRAIN)
    line = _error_line(tmp_path, capsys, _run(tmp_path, 'root = "train.csv"\n', folder))
    assert f"{folder}: no tokenizer in this folder (tokenizer.json or tokenizer_config.json is missing)" in line
    assert "[data] tokenizer" in line


MULTI = "text,sport,food\nthe ball game,1,0\nbake the bread,0,1\nkick the ball,1,0\nfry an egg,0,true\n" \
        "a ball game then bread,1,1\n"


def test_a_list_of_target_columns_is_multi_label(tmp_path, bert):
    """``target = ["sport", "food"]``: the labels are the columns, each batch's labels (N, 2) float 0/1."""
    (tmp_path / "train.csv").write_text(MULTI)
    cfg = DataConfig(dataset="text", root=str(tmp_path / "train.csv"), tokenizer=str(bert), batch_size=5,
                     val_fraction=0.2, shuffle=False, target=["sport", "food"])
    assert text_classes(cfg) == ["sport", "food"]
    train, _, fields = text_loaders(cfg, task="text_classification")
    assert (fields["classes"], fields["target_shape"]) == (["sport", "food"], (2,))
    labels = next(iter(train))["labels"]
    assert labels.dtype == torch.float32 and labels.shape == (4, 2)
    assert set(labels.flatten().tolist()) == {0.0, 1.0} and labels.sum(1).max() <= 2


def test_a_multi_label_cell_that_is_not_0_or_1(tmp_path, capsys, bert):
    (tmp_path / "train.csv").write_text(MULTI + "a long game,2,0\n")
    line = _error_line(tmp_path, capsys, _run(tmp_path, 'root = "train.csv"\ntarget = ["sport", "food"]\n', bert))
    assert f"{tmp_path / 'train.csv'}: line 7: the label column 'sport' holds 2; a multi-label target" in line
    assert "0 or 1" in line
