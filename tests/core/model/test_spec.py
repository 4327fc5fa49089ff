"""ArchSpec: parsing, round trips, and specs that cannot be built."""

from __future__ import annotations

import pytest
from torch import nn

from workbench.core.errors import ArchitectureError
from workbench.core.model.meta_build import build_module
from workbench.core.model.spec import ArchSpec


def test_arch_spec_round_trips_and_parses():
    spec = ArchSpec.parse("resnet18(num_classes=10, zero_init_residual=True)")
    assert spec == ArchSpec("resnet18", {"num_classes": 10, "zero_init_residual": True})
    assert ArchSpec.from_dict(spec.to_dict()) == spec
    assert ArchSpec.parse("pkg.mod:make", width=2) == ArchSpec("pkg.mod:make", {"width": 2})
    assert str(spec) == "resnet18(num_classes=10, zero_init_residual=True)"
    with pytest.raises(ValueError):
        ArchSpec("x", {"act": nn.ReLU}).to_dict()
    with pytest.raises(ArchitectureError):
        ArchSpec.parse("resnet18(10)")


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("no_such_net", ["unknown architecture"]),
        ("resnet18(bogus=1)", ["could not build", "bogus"]),
        ("not_a_module_xyz:make", ["could not be imported"]),
        ("/nonexistent/file.py:make", ["not found"]),
    ],
)
def test_bad_specs_raise_architecture_error(spec, words):
    with pytest.raises(ArchitectureError) as info:
        build_module(spec)
    for word in words:
        assert word in str(info.value)
