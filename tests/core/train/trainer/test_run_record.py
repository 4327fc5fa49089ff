"""What a run records of its model (``[model]`` of run.toml): the same for a run here and one sent to a host."""

from __future__ import annotations

import torchvision

from workbench.core.model.demo import DigitsCNN
from workbench.core.model.spec import ArchSpec
from workbench.core.train.config import ModelConfig
from workbench.core.train.trainer.run_record import record_model


def test_the_demo_a_spec_and_a_bare_model_are_recorded_with_their_frozen_set():
    demo = DigitsCNN()
    demo.features[0].weight.requires_grad_(False)
    mc = ModelConfig()
    assert record_model(mc, demo) == {"name": "digits_cnn", "kwargs": {"num_classes": 10, "in_channels": 1}}
    assert mc.frozen == ["features.0.weight"]

    mc = ModelConfig()
    spec = ArchSpec("resnet18", {"num_classes": 3})
    assert record_model(mc, torchvision.models.resnet18(num_classes=3), spec) == {
        "name": "resnet18", "kwargs": {"num_classes": 3}}
    assert (mc.arch, mc.frozen) == ("resnet18", [])

    mc = ModelConfig(arch="stale", checkpoint="")  # no spec, no file: nothing could build it again by name
    assert record_model(mc, torchvision.models.resnet18()) is None and mc.arch == ""
    mc = ModelConfig(arch="from_file", checkpoint="weights.pt")  # the file names it: kept
    assert record_model(mc, torchvision.models.resnet18()) == {"name": "from_file", "kwargs": {}}
