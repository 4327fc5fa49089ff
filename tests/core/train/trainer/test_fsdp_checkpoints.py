"""The file half of an FSDP checkpoint (``workbench.core.train.trainer.fsdp_checkpoints``): names, the folder swap,
reading the ``.pt`` back. The 2-rank writes and the bit-exact resume are ``test_fsdp.py``'s."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from workbench.core.errors import TrainingError
from workbench.core.files import atomic_save
from workbench.core.train.trainer.fsdp_checkpoints import _replace_folder, dcp_folder, read_manifest


def test_the_folder_of_a_checkpoint_file_is_named_after_it():
    assert dcp_folder(Path("run/last.pt")) == Path("run/last.dcp")
    assert dcp_folder(Path("/x/best.pt")).name == "best.dcp"


def test_a_new_folder_replaces_the_old_whole(tmp_path):
    folder, new = tmp_path / "last.dcp", tmp_path / "last.dcp.new"
    folder.mkdir()
    (folder / "old.distcp").write_text("old")
    new.mkdir()
    (new / "__0_0.distcp").write_text("new")
    _replace_folder(new, folder)
    assert [p.name for p in folder.iterdir()] == ["__0_0.distcp"] and not new.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.dcp"]


def _manifest(tmp_path) -> Path:
    path = tmp_path / "last.pt"
    atomic_save({"model_state_dict": {}, "sharded": "last.dcp", "step": 4, "rng": torch.arange(3)}, path)
    return path


def test_reading_the_file_back_checks_it_is_sharded_and_intact(tmp_path):
    assert read_manifest(_manifest(tmp_path))["step"] == 4
    whole = tmp_path / "whole.pt"
    atomic_save({"model_state_dict": {"w": torch.ones(2)}}, whole)
    with pytest.raises(TrainingError, match="resumes only its own sharded checkpoints"):
        read_manifest(whole)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(_manifest(tmp_path).read_bytes()[:100])
    with pytest.raises(TrainingError, match="cut.pt: cannot read the checkpoint"):
        read_manifest(cut)
    with pytest.raises(TrainingError, match="cannot read"):
        read_manifest(tmp_path / "missing.pt")


def test_a_damaged_file_is_called_corrupt(tmp_path):
    path = _manifest(tmp_path)
    payload = torch.load(path, weights_only=True)
    payload["rng"] = torch.arange(3) + 1  # the digest still names the old bytes
    torch.save(payload, path)
    with pytest.raises(TrainingError, match="last.pt is corrupt"):
        read_manifest(path)
