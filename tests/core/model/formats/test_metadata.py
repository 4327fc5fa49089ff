"""formats/metadata.py, optimizer_guess.py, plain.py, classify.py: what a loaded dict says about itself."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from workbench.core.errors import CheckpointError
from workbench.core.model.formats.classify import classify
from workbench.core.model.formats.metadata import arch_entry, metadata_from_raw, tensor_stats
from workbench.core.model.formats.optimizer_guess import guess_optimizer_class, optimizer_info
from workbench.core.model.formats.plain import as_int, plain


def test_classify_keeps_the_module_versions():
    sd = OrderedDict(w=torch.zeros(1))
    sd._metadata = {"": {"version": 2}}
    fmt, key, state, module = classify(Path("x"), sd)
    assert fmt == "state_dict" and state._metadata == {"": {"version": 2}} and state is not sd
    fmt, key, state, _ = classify(Path("x"), {"model_state_dict": sd, "epoch": 1})
    assert (fmt, key) == ("training_dict", "model_state_dict") and state._metadata
    with pytest.raises(CheckpointError, match="without any state_dict"):
        classify(Path("x"), {"epoch": 1})


def test_metadata_optimizer_and_plain_values():
    group = {"lr": 0.1, "momentum": 0.9, "dampening": 0, "weight_decay": 0, "nesterov": False, "maximize": False,
             "foreach": None, "differentiable": False, "fused": None, "params": [0]}
    raw = {"optimizer_state_dict": {"param_groups": [group]}, "epoch": torch.tensor(4), "arch": "digits_cnn"}
    meta = metadata_from_raw("training_dict", "zip", "model_state_dict", raw)
    assert meta.epoch == 4 and meta.optimizer_class == "SGD" and meta.optimizer_hparams["lr"] == 0.1
    assert meta.arch == {"name": "digits_cnn", "kwargs": {}}  # not timm's: a plain name
    adam = torch.optim.Adam([torch.zeros(1, requires_grad=True)]).state_dict()["param_groups"][0]
    assert guess_optimizer_class(list(adam), adam) == "Adam"
    assert optimizer_info({}) == (None, {})
    assert arch_entry({"name": "x", "kwargs": None}) == {"name": "x", "kwargs": {}} and arch_entry(3) is None
    assert plain({"t": torch.zeros(2), "n": (1, 2)}) == {"t": [0.0, 0.0], "n": [1, 2]} and as_int(True) is None
    assert tensor_stats({"a": torch.zeros(2, 3), "b": torch.zeros(1, dtype=torch.int64)}) == \
        (2, 7, {"float32": 1, "int64": 1})
