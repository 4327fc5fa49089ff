"""DDPGuard: the freezes and unfreezes a script's DistributedDataParallel wrapper cannot follow are refused."""

from __future__ import annotations

import pytest
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel

from workbench.core.attach.ddp_guard import DDPGuard
from workbench.core.model.names import UnknownPathError


@pytest.fixture
def one_rank(tmp_path):
    """A one-process gloo group (what a DistributedDataParallel needs to be built)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _frozen_layer1():
    model = torchvision.models.resnet18(num_classes=10)
    for p in model.layer1.parameters():
        p.requires_grad_(False)
    return model


@pytest.mark.parametrize("find_unused", [False, True])
def test_a_guard_refuses_what_the_wrapper_cannot_follow_and_leaves_the_model_as_it_was(one_rank, find_unused):
    model = _frozen_layer1()
    guard = DDPGuard(DistributedDataParallel(model, find_unused_parameters=find_unused), model)
    states = {n: p.requires_grad for n, p in model.named_parameters()}
    if find_unused:
        guard.check(model, ["layer2"], False)  # it expects no gradient for every parameter: allowed
    else:
        with pytest.raises(ValueError, match="find_unused_parameters=True"):
            guard.check(model, ["layer2"], False)
    with pytest.raises(ValueError, match=r"built while layer1\.0\.conv1\.weight, .* and \d+ more were frozen"):
        guard.check(model, ["layer1"], True)  # never averaged: the replicas would drift apart
    guard.check(model, ["layer2", "fc"], True)  # trainable already: nothing changes, nothing to refuse
    guard.check(model, ["layer1"], False)  # frozen already
    with pytest.raises(UnknownPathError):
        guard.check(model, ["layer9"], False)
    assert {n: p.requires_grad for n, p in model.named_parameters()} == states  # a check changes nothing
