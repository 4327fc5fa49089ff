"""formats/model_folder.py: a model folder reads as its weights and names its builder as plain data."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from workbench.core.errors import CheckpointError, TrustRequired
from workbench.core.model.formats import model_folder


def _folder(tmp_path, config):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file({"w": torch.ones(2, 3)}, str(folder / "model.safetensors"))
    return folder


def test_a_transformers_folder_names_its_builder_without_importing_it(tmp_path):
    folder = _folder(tmp_path, {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 4})
    for path in (folder, folder / "config.json", folder / "model.safetensors"):
        assert model_folder.match(path, b"")
    ckpt = model_folder.read(folder / "model.safetensors")
    assert ckpt.path == folder and ckpt.metadata.format == "hf_folder"
    assert ckpt.metadata.arch["name"] == model_folder.HF_BUILDER
    assert ckpt.metadata.arch["kwargs"]["architecture"] == "BertModel"
    assert json.loads(ckpt.metadata.arch["kwargs"]["config_json"])["hidden_size"] == 4


def test_a_timm_folder_names_timm_s_builder(tmp_path):
    folder = _folder(tmp_path, {"architecture": "resnet18", "num_classes": 5, "pretrained_cfg": {}})
    ckpt = model_folder.read(folder)
    assert ckpt.metadata.format == "timm_folder"
    assert ckpt.metadata.arch == {"name": model_folder.TIMM_BUILDER,
                                  "kwargs": {"model_name": "resnet18", "num_classes": 5}}


def test_custom_code_needs_trust_and_bad_folders_are_named(tmp_path):
    folder = _folder(tmp_path, {"architectures": ["X"], "model_type": "x", "auto_map": {"AutoModel": "m.X"}})
    (folder / "m.py").write_text("raise SystemExit")
    with pytest.raises(TrustRequired) as info:
        model_folder.read(folder)
    assert info.value.globals == ["m.py"]
    assert model_folder.read(folder, trust=True).metadata.arch["kwargs"]["architecture"] == "X"
    (folder / "config.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(CheckpointError, match="neither a Hugging Face"):
        model_folder.read(folder)
    assert not model_folder.match(tmp_path / "elsewhere.pt", b"")
