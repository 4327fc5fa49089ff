"""A state_dict keeps its ``_metadata`` (module versions) through reading and prefix stripping.

torchvision's ``mnasnet1_0`` reads its version from the metadata in
``_load_from_state_dict``: a plain ``torch.save(model.state_dict())`` of it must open.
"""

from __future__ import annotations

import torch
import torchvision

from workbench.core.model.formats import read_checkpoint
from workbench.core.model.opening import open_model
from workbench.core.model.prefixes import strip_prefixes


def test_a_plain_state_dict_of_mnasnet_opens(tmp_path):
    model = torchvision.models.mnasnet1_0()
    path = tmp_path / "mnasnet.pt"
    torch.save(model.state_dict(), path)
    opened = open_model(path, "mnasnet1_0")
    assert opened.report.ok
    for name, tensor in model.state_dict().items():
        assert torch.equal(opened.model.state_dict()[name], tensor), name


def test_metadata_survives_reading_and_stripping(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    wrapped = torch.nn.DataParallel(model)
    path = tmp_path / "dp.pt"
    torch.save(wrapped.state_dict(), path)
    ckpt = read_checkpoint(path)
    assert "module.0" in ckpt.state_dict._metadata
    stripped, prefixes = strip_prefixes(ckpt.state_dict)
    assert prefixes == ["module."] and list(stripped) == ["0.weight", "0.bias"]
    assert "0" in stripped._metadata and "" in stripped._metadata and "module.0" not in stripped._metadata
