"""formats/__init__.py: the formats asked in turn, and formats installed packages contribute."""

from __future__ import annotations

import types

import pytest
import torch

from tests.core.model.checkpoint_files import save_safetensors, save_state_dict
from workbench.core import contrib
from workbench.core.errors import CheckpointError
from workbench.core.model.checkpoint import Checkpoint, CheckpointMetadata
from workbench.core.model import formats
from workbench.core.model.demo import DigitsCNN


def test_each_file_finds_its_format(tmp_path):
    assert formats.find_format(save_state_dict(DigitsCNN(), tmp_path / "a.pt"))[0] is formats.torch_pickle
    assert formats.find_format(save_safetensors(DigitsCNN(), tmp_path / "b.bin"))[0] is formats.safetensors


def test_a_contributed_format_reads_a_file_no_builtin_knows(tmp_path, monkeypatch):
    path = tmp_path / "weights.npz-ish"
    path.write_bytes(b"MYFMT" + b"\0" * 16)

    def read(p, *, trust=False, head=None, **_):
        sd = {"w": torch.zeros(2)}
        return Checkpoint(p, sd, CheckpointMetadata(format="myfmt", container="myfmt", num_tensors=1))

    fmt = types.SimpleNamespace(match=lambda p, head: head.startswith(b"MYFMT"), read=read)
    monkeypatch.setattr(contrib, "names", lambda kind: ["myfmt"] if kind == "format" else [])
    monkeypatch.setattr(contrib, "resolve", lambda kind, name, **kw: fmt)
    ckpt = formats.read_checkpoint(path)
    assert ckpt.metadata.format == "myfmt"
    monkeypatch.setattr(contrib, "names", lambda kind: [])
    with pytest.raises(CheckpointError, match="is not a PyTorch checkpoint"):
        formats.read_checkpoint(path)
