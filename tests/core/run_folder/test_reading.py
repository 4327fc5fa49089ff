"""The careful reading of a run folder's files (``workbench.core.run_folder.reading``), on real files on disk."""

from __future__ import annotations

import os

import pytest

from tests.core.run_folder.threads import in_thread
from workbench.core.run_folder.metrics_csv import MetricsBlocks
from workbench.core.run_folder.reading import MAX_SMALL_BYTES, NotATextFile, read_small, read_text_file, RunFileError
from workbench.core.run_folder.run_toml import read_run_info
from workbench.core.run_folder.status import read_status


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


def test_a_missing_file_is_none_not_an_error(tmp_path):
    assert read_status(tmp_path) is None and read_run_info(tmp_path) is None
    blocks = MetricsBlocks(tmp_path, ["val_loss"])
    assert list(blocks) == [] and not blocks.exists and blocks.problem == ""


@needs_fifo
def test_a_fifo_is_refused_at_once_never_read(tmp_path):
    os.mkfifo(tmp_path / "status.json")
    os.mkfifo(tmp_path / "metrics.csv")
    with pytest.raises(RunFileError, match="status.json: a FIFO, not a regular file"):
        in_thread(lambda: read_status(tmp_path))
    blocks = MetricsBlocks(tmp_path, ["val_loss"])
    assert in_thread(lambda: list(blocks)) == [] and blocks.problem == "metrics.csv: a FIFO, not a regular file"


def test_a_link_out_of_the_run_folder_is_refused_a_link_within_it_is_read(tmp_path):
    (tmp_path / "status.json").symlink_to("/dev/zero")
    with pytest.raises(RunFileError, match="status.json: a link out of the run folder \\(to /dev/zero\\)"):
        in_thread(lambda: read_status(tmp_path))
    outside = tmp_path.parent / f"{tmp_path.name}-outside.toml"
    outside.write_text('[model]\narch = "mlp"\n')
    (tmp_path / "run.toml").symlink_to(outside)
    with pytest.raises(RunFileError, match="link out of the run folder"):
        read_run_info(tmp_path)
    (tmp_path / "run.toml").unlink()
    (tmp_path / "real.toml").write_text('[model]\narch = "mlp"\n')
    (tmp_path / "run.toml").symlink_to("real.toml")
    assert read_run_info(tmp_path).model == "mlp"


def test_a_device_and_a_folder_are_not_regular_files(tmp_path):
    (tmp_path / "status.json").mkdir()
    with pytest.raises(RunFileError, match="a folder, not a regular file"):
        read_status(tmp_path)
    link = tmp_path / "sub"
    link.mkdir()
    (link / "dev").symlink_to("/dev/null")  # a link inside a linked folder still resolves out: refused
    with pytest.raises(RunFileError, match="link out of the run folder"):
        read_small(link, "dev")


def test_nul_bytes_non_utf8_and_a_huge_file_are_said(tmp_path):
    (tmp_path / "status.json").write_bytes(b'{"state": "fini\0\0\0\0')
    with pytest.raises(RunFileError, match="holds NUL bytes \\(from offset 15"):
        read_status(tmp_path)
    (tmp_path / "status.json").write_bytes(b'{"state": "fin\xffished"}')
    with pytest.raises(RunFileError, match="not UTF-8 \\(byte 0xff at offset 14\\)"):
        read_status(tmp_path)
    with open(tmp_path / "status.json", "wb") as f:  # sparse: 1 GB on paper, nothing on disk
        f.truncate(2**30)
    with pytest.raises(RunFileError, match="larger than 4 MB"):
        read_status(tmp_path)
    assert MAX_SMALL_BYTES == 4 * 2**20

@needs_fifo
def test_read_text_file_refuses_a_fifo_a_device_and_a_folder_promptly_and_names_the_file(tmp_path):
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "zero.toml").symlink_to("/dev/zero")
    (tmp_path / "dir.toml").mkdir()
    for name, kind in (("fifo.toml", "a FIFO"), ("zero.toml", "a character device"), ("dir.toml", "a folder")):
        with pytest.raises(NotATextFile, match=f"^{tmp_path / name}: {kind}, not a regular file$"):
            in_thread(lambda name=name: read_text_file(tmp_path / name))
    (tmp_path / "bad.toml").write_bytes(b"epochs = 1\n# caf\xff\n")
    with pytest.raises(ValueError, match=f"^{tmp_path / 'bad.toml'}: not UTF-8 \\(byte 0xff at offset 16\\)$"):
        read_text_file(tmp_path / "bad.toml")
    with open(tmp_path / "big.toml", "wb") as f:
        f.truncate(MAX_SMALL_BYTES + 1)
    with pytest.raises(NotATextFile, match="larger than 4 MB"):
        read_text_file(tmp_path / "big.toml")
    with pytest.raises(FileNotFoundError):
        read_text_file(tmp_path / "missing.toml")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-shared.toml"
    elsewhere.write_text("epochs = 2\n")
    (tmp_path / "linked.toml").symlink_to(elsewhere)  # a link the user made to a regular file anywhere: read
    assert read_text_file(tmp_path / "linked.toml") == "epochs = 2\n"


# ------------------------------------------------------------------------------------------ processes
