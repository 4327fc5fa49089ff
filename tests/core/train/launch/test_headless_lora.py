"""A run file that adds LoRA replays it as the window trains it: the base weights stay frozen.

Issue 45: a run.toml whose ``[model] edits`` add LoRA and that lists no ``frozen`` names trained
every parameter headless (the empty list unfroze what ``add_lora`` froze).
"""

from __future__ import annotations

import torch

from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.train.launch.headless import model_from_config, train_from_toml

LORA = {"op": "add_lora", "paths": ["features.0", "classifier"], "r": 2, "alpha": 4, "dropout": 0.0}


def test_an_empty_frozen_list_keeps_what_add_lora_froze():
    model, _ = model_from_config(ModelConfig(arch="digits_cnn", edits=[LORA], frozen=[]), None)
    params = dict(model.named_parameters())
    assert not params["features.0.base_layer.weight"].requires_grad
    assert not params["classifier.base_layer.weight"].requires_grad
    assert params["classifier.lora_A.default.weight"].requires_grad
    # a listed frozen set stays exact
    model, _ = model_from_config(ModelConfig(arch="digits_cnn", edits=[LORA], frozen=["features.3.weight"]), None)
    params = dict(model.named_parameters())
    assert not params["features.3.weight"].requires_grad and params["features.0.base_layer.weight"].requires_grad


def test_workbench_train_leaves_the_lora_base_weights_untouched(tmp_path):
    cfg = TrainConfig(data=DataConfig(batch_size=256), epochs=1, lr=1e-2, run_dir=str(tmp_path / "out"),
                      model=ModelConfig(arch="digits_cnn", edits=[LORA]))
    path = tmp_path / "run.toml"
    cfg.to_toml(path)
    lines: list[str] = []
    assert train_from_toml(path, out=lines.append) == 0, lines
    trainable = [ln for ln in lines if "parameters trainable" in ln]
    assert trainable and not any(ln.split(" of ")[0].split()[-1] == ln.split(" of ")[1].split()[0] for ln in trainable), trainable
    init = torch.load(tmp_path / "out" / "init.pt", weights_only=True)["model_state_dict"]
    last = torch.load(tmp_path / "out" / "last.pt", weights_only=True)["model_state_dict"]
    assert torch.equal(init["features.0.base_layer.weight"], last["features.0.base_layer.weight"])
    assert not torch.equal(init["classifier.lora_B.default.weight"], last["classifier.lora_B.default.weight"])
