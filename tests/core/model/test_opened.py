"""NeedsArchitecture.unique_match: the one candidate that matches every key and shape, else None."""

from __future__ import annotations

import torch
import torchvision

from workbench.core.model.detection import Candidate
from workbench.core.model.spec import ArchSpec
from workbench.core.model.opening import NeedsArchitecture, open_model


def _need(tmp_path, state_dict) -> NeedsArchitecture:
    path = tmp_path / "w.pt"
    torch.save(state_dict, path)
    try:
        open_model(path)
    except NeedsArchitecture as err:
        return err
    raise AssertionError("a bare state_dict must ask for its architecture")


def test_a_full_unique_match_a_partial_one_and_a_tie(tmp_path):
    err = _need(tmp_path, torchvision.models.resnet18(num_classes=7).state_dict())
    assert err.unique_match is not None and err.unique_match.spec == ArchSpec("resnet18", {"num_classes": 7})
    sd = torchvision.models.resnet18().state_dict()
    del sd["fc.bias"]
    assert _need(tmp_path, sd).unique_match is None  # the best match is not 100 %
    tie = NeedsArchitecture(err.checkpoint, [Candidate(ArchSpec("a"), 1.0), Candidate(ArchSpec("b"), 1.0)])
    assert tie.unique_match is None
    assert NeedsArchitecture(err.checkpoint, []).unique_match is None
