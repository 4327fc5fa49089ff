"""formats/sniff.py: what a file is from its first bytes, in one open."""

from __future__ import annotations

import pytest
import torch

from tests.core.model.checkpoint_files import save_safetensors, save_state_dict, save_torchscript
from tests.core.model.open_counting import count_opens
from workbench.core.errors import CheckpointError
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.formats.sniff import Sniff, detect_container, sniff


def test_each_container_from_its_content(tmp_path):
    model = DigitsCNN()
    forms = {
        "zip": save_state_dict(model, tmp_path / "a.safetensors"),  # the suffix lies: the content decides
        "legacy_pickle": save_state_dict(model, tmp_path / "b.pt", legacy=True),
        "safetensors": save_safetensors(model, tmp_path / "c.pt"),
        "torchscript": save_torchscript(model, tmp_path / "d.pt", torch.zeros(1, 1, 8, 8)),
    }
    for container, path in forms.items():
        assert detect_container(path) == container
        found = sniff(path)
        assert isinstance(found, bytes) and found.container == container and found.size == path.stat().st_size


def test_a_sniff_is_one_open(tmp_path):
    path = save_state_dict(DigitsCNN(), tmp_path / "a.pt")
    with count_opens(path) as opened:
        found = sniff(path)
    assert opened.count == 1 and found.zip_names


def test_bad_files_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="file not found"):
        sniff(tmp_path / "missing.pt")
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty"):
        sniff(tmp_path / "empty.pt")
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(CheckpointError, match="is not a PyTorch checkpoint"):
        detect_container(tmp_path / "text.pt")
    assert sniff(tmp_path).is_dir and Sniff(tmp_path).container is None
