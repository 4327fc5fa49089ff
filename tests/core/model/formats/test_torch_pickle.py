"""formats/torch_pickle.py: torch.save zip and legacy pickles, matched by content and read weights-only."""

from __future__ import annotations

import pytest
import torch

from tests.core.model.checkpoint_files import save_lightning, save_state_dict, save_training_dict
from workbench.core.errors import TrustRequired
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.formats import torch_pickle
from workbench.core.model.formats.sniff import sniff


def test_match_by_content(tmp_path):
    path = save_state_dict(DigitsCNN(), tmp_path / "a.bin")
    assert torch_pickle.match(path, sniff(path)) and torch_pickle.match(path, b"PK\x03\x04")
    assert torch_pickle.match(path, b"\x80\x02") and not torch_pickle.match(path, b"{}")


def test_read_every_dict_form(tmp_path):
    model = DigitsCNN()
    plain = torch_pickle.read(save_state_dict(model, tmp_path / "sd.pt"))
    assert plain.metadata.format == "state_dict" and plain.raw is None
    training = torch_pickle.read(save_training_dict(model, tmp_path / "t.pt", epoch=3))
    assert training.metadata.format == "training_dict" and training.metadata.epoch == 3
    assert training.metadata.optimizer_class == "AdamW"
    lightning = torch_pickle.read(save_lightning(model, tmp_path / "l.ckpt"))
    assert lightning.metadata.format == "lightning" and lightning.metadata.state_dict_key == "state_dict"


def test_a_pickled_module_needs_trust_and_carries_its_sniff(tmp_path):
    path = tmp_path / "m.pt"
    torch.save(DigitsCNN(), path)
    with pytest.raises(TrustRequired) as info:
        torch_pickle.read(path)
    assert info.value.sniff.container == "zip"
    assert torch_pickle.read(path, trust=True, head=info.value.sniff).module is not None
