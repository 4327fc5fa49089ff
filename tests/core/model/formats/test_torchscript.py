"""formats/torchscript.py: TorchScript archives, loaded only with trust."""

from __future__ import annotations

import pytest
import torch

from tests.core.model.checkpoint_files import save_state_dict, save_torchscript
from workbench.core.errors import TrustRequired
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.formats import torchscript
from workbench.core.model.formats.sniff import sniff


def test_torchscript_matches_only_its_archives_and_needs_trust(tmp_path):
    path = save_torchscript(DigitsCNN(), tmp_path / "s.pt", torch.zeros(1, 1, 8, 8))
    other = save_state_dict(DigitsCNN(), tmp_path / "sd.pt")
    assert torchscript.match(path, sniff(path)) and not torchscript.match(other, sniff(other))
    with pytest.raises(TrustRequired) as info:
        torchscript.read(path)
    assert info.value.kind == "torchscript"
    ckpt = torchscript.read(path, trust=True)
    assert ckpt.metadata.format == "torchscript" and ckpt.module is not None and ckpt.state_dict
