"""The one open policy (workbench.core.model.opening.open_model) on real saved files."""

from __future__ import annotations

import pytest
import torch
import torchvision

from tests.core.model.checkpoint_files import TIED_SPEC, TiedDigits, save_lightning, save_pickled_module
from workbench.core.errors import TrustRequired
from workbench.core.model.spec import ArchSpec
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.opening import NeedsArchitecture, PartialFit, open_model


def test_a_file_without_arch_asks_with_the_detected_ranking(tmp_path):
    path = tmp_path / "r18.pt"
    torch.save(torchvision.models.resnet18().state_dict(), path)
    with pytest.raises(NeedsArchitecture) as info:
        open_model(path)
    assert info.value.candidates[0].spec.name == "resnet18"
    assert info.value.checkpoint.path == path
    opened = open_model(path, info.value.candidates[0].spec)
    assert sum(p.numel() for p in opened.model.parameters()) == 11_689_512
    assert opened.source == "r18.pt · state_dict"
    weights = open_model(path, weights_only=True)
    assert weights.weights_only and weights.spec is None


def test_a_partial_fit_is_a_question_then_a_partial_load(tmp_path):
    path = tmp_path / "r18_10.pt"
    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), path)
    with pytest.raises(PartialFit) as info:
        open_model(path, "resnet18")
    assert [m[0] for m in info.value.report.mismatched] == ["fc.weight", "fc.bias"]
    opened = open_model(path, "resnet18", partial=True)
    assert opened.model.fc.out_features == 1000 and opened.notes


def test_a_pickled_module_needs_trust(tmp_path):
    path = save_pickled_module(DigitsCNN(), tmp_path / "whole.pt")
    with pytest.raises(TrustRequired):
        open_model(path)
    assert type(open_model(path, trust=True).model).__name__ == "DigitsCNN"


def test_lightning_checkpoint_opens_with_its_prefix_stripped(tmp_path):
    model = DigitsCNN()
    path = save_lightning(model, tmp_path / "digits.ckpt")
    opened = open_model(path, "digits_cnn")
    assert all(torch.equal(a, b) for a, b in zip(opened.model.state_dict().values(), model.state_dict().values()))


def test_tied_weights_stay_tied(tmp_path):
    """The meta-device load used to give the decoder its own copy of the embedding (1,454 parameters)."""
    path = tmp_path / "tied.pt"
    torch.save(TiedDigits().state_dict(), path)
    model = open_model(path, TIED_SPEC).model
    assert model.decoder.weight is model.embedding.weight
    assert sum(p.numel() for p in model.parameters()) == 814


def test_recorded_edits_are_made_before_the_weights_go_in(tmp_path):
    model = torchvision.models.resnet18()
    model.fc = torch.nn.Linear(512, 2)
    path = tmp_path / "r18_2.pt"
    torch.save(model.state_dict(), path)
    with pytest.raises(PartialFit):
        open_model(path, ArchSpec("resnet18"))
    opened = open_model(path, ArchSpec("resnet18"), edits=[{"op": "replace_head", "path": "fc", "num_outputs": 2}])
    assert opened.report.ok and torch.equal(opened.model.fc.weight, model.fc.weight)
