"""``reload_weights``: the opened file's weights back into an edited, partly frozen model."""

from __future__ import annotations

import pytest
import torch

from workbench.core.errors import ArchitectureError
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.edits import replace_head
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.reload import edited_paths, reload_weights


def _trained(model) -> None:
    """Every tensor changed, as a run would (running stats included)."""
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(0.5)


def test_the_file_comes_back_and_a_replaced_head_keeps_its_weights(tmp_path):
    torch.manual_seed(0)
    saved = DigitsCNN()
    path = tmp_path / "digits.pt"
    torch.save({"module." + k: v for k, v in saved.state_dict().items()}, path)  # a DDP prefix, as opening aligns

    model = DigitsCNN()
    model.load_state_dict(saved.state_dict())
    edits = [{"op": "replace_head", "path": "classifier", "num_outputs": 3}]
    replace_head(model, "classifier", 3)
    model.features[0].requires_grad_(False)
    probe = model.features[3].register_forward_hook(lambda *a: None)
    _trained(model)
    head = {k: v.clone() for k, v in model.classifier.state_dict().items()}

    kept = reload_weights(model, read_checkpoint(path), edits)

    assert kept == ["classifier.weight", "classifier.bias"]
    for name, value in model.classifier.state_dict().items():
        assert torch.equal(value, head[name])  # the new head is not the file's 10-way one, nor reset
    file_state = saved.state_dict()
    for name, value in model.state_dict().items():
        if not name.startswith("classifier."):
            assert torch.equal(value, file_state[name]), name
    assert not model.features[0].weight.requires_grad and model.features[3].weight.requires_grad
    assert model.features[3]._forward_hooks  # the same module objects: hooks (probes) stay
    probe.remove()


def test_a_path_works_and_a_file_of_another_model_is_refused(tmp_path):
    saved = DigitsCNN()
    path = tmp_path / "digits.pt"
    torch.save(saved.state_dict(), path)
    model = DigitsCNN()
    _trained(model)
    assert reload_weights(model, str(path)) == []
    assert torch.equal(model.features[7].weight, saved.features[7].weight)

    other = tmp_path / "other.pt"
    torch.save({"encoder.weight": torch.zeros(3, 3)}, other)
    before = model.features[0].weight.clone()
    with pytest.raises(ArchitectureError, match="other.pt"):
        reload_weights(model, other)
    assert torch.equal(model.features[0].weight, before)  # nothing changed


def test_edited_paths_names_heads_and_lora_targets():
    assert edited_paths([{"op": "replace_head", "path": "fc", "num_outputs": 2},
                         {"op": "add_lora", "paths": ["a.q", "a.v"], "r": 4, "alpha": 8, "dropout": 0.0},
                         "not an edit"]) == ["fc", "a.q", "a.v"]
