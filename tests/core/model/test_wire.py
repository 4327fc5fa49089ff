"""core/model/wire.py: models and states as bytes between the window and its training process."""

from __future__ import annotations

import pytest
import torch

from workbench.core.errors import CheckpointError, TrustRequired
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.wire import module_from_bytes, tensors_from_bytes, to_bytes


def test_round_trips_and_the_trust_rule():
    model = DigitsCNN()
    state = tensors_from_bytes(to_bytes(model.state_dict()))
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    data = to_bytes(model)
    with pytest.raises(CheckpointError):
        tensors_from_bytes(data)  # a pickled module is more than tensors
    with pytest.raises(TrustRequired):
        module_from_bytes(data, trust=False)
    assert type(module_from_bytes(data, trust=True)).__name__ == "DigitsCNN"
    scripted = torch.jit.script(model)
    assert isinstance(module_from_bytes(to_bytes(scripted), trust=True), torch.jit.ScriptModule)
