"""``TrainConfig.from_toml`` reads a run file through the total reader (``run_files.read_text_file``): a FIFO, a
device or a folder is refused at once, bytes that are not UTF-8 are said with the file's name (real files on disk)."""

from __future__ import annotations

import os

import pytest

from tests.core.train.damaged_runs import within
from workbench.core.run_files import NotATextFile
from workbench.core.train.config import TrainConfig
from workbench.core.train.launch.headless import train_from_toml

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
GOOD = 'epochs = 0\n[model]\narch = "digits_cnn"\n[data]\ndataset = "digits"\n'


@needs_fifo
def test_a_fifo_run_toml_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "run.toml")
    with pytest.raises(NotATextFile, match=f"^{tmp_path / 'run.toml'}: a FIFO, not a regular file$"):
        within(lambda: TrainConfig.from_toml(tmp_path / "run.toml"), timeout=5)  # hung forever before
    lines = []
    assert within(lambda: train_from_toml(tmp_path / "run.toml", out=lines.append), timeout=30) == 1
    assert lines == [f"error: {tmp_path / 'run.toml'}: a FIFO, not a regular file"]


def test_a_run_toml_linked_to_dev_zero_is_refused_unread(tmp_path):
    (tmp_path / "run.toml").symlink_to("/dev/zero")  # read until memory ran out before
    with pytest.raises(ValueError, match="run.toml: a character device, not a regular file"):
        within(lambda: TrainConfig.from_toml(str(tmp_path / "run.toml")), timeout=5)
    lines = []
    assert within(lambda: train_from_toml(tmp_path / "run.toml", out=lines.append), timeout=30) == 1
    assert lines == [f"error: {tmp_path / 'run.toml'}: a character device, not a regular file"]


def test_a_byte_that_is_not_utf8_is_said_with_the_files_name(tmp_path):
    path = tmp_path / "run.toml"
    path.write_bytes(GOOD.encode().replace(b"digits_cnn", b"digits\xffcnn"))
    with pytest.raises(ValueError) as err:
        TrainConfig.from_toml(path)
    assert str(err.value) == f"{path}: not UTF-8 (byte 0xff at offset 33)"
    lines = []
    assert train_from_toml(path, out=lines.append) == 1
    assert lines == [f"error: {path}: not UTF-8 (byte 0xff at offset 33)"]


def test_a_folder_a_huge_file_and_deep_nesting_are_value_errors_naming_the_file(tmp_path):
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(ValueError, match="dir.toml: a folder, not a regular file"):
        TrainConfig.from_toml(tmp_path / "dir.toml")
    with open(tmp_path / "huge.toml", "wb") as f:
        f.truncate(2**31)  # sparse
    with pytest.raises(ValueError, match="huge.toml: larger than 4 MB"):
        within(lambda: TrainConfig.from_toml(tmp_path / "huge.toml"), timeout=5)
    (tmp_path / "deep.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ValueError, match="deep.toml: not TOML \\(nested too deeply\\)"):
        TrainConfig.from_toml(tmp_path / "deep.toml")
    with pytest.raises(FileNotFoundError):
        TrainConfig.from_toml(tmp_path / "missing.toml")


def test_a_good_file_a_path_holding_an_equals_sign_and_text_are_read(tmp_path):
    folder = tmp_path / "lr=0.1"  # a str path with "=" was taken for TOML text
    folder.mkdir()
    (folder / "run.toml").write_text(GOOD)
    assert TrainConfig.from_toml(str(folder / "run.toml")).model.arch == "digits_cnn"
    assert TrainConfig.from_toml(folder / "run.toml").data.dataset == "digits"
    assert TrainConfig.from_toml(GOOD).model.arch == "digits_cnn"
    assert TrainConfig.from_toml("epochs = 4").epochs == 4
