"""``short_name``: what a table cell or a dialog calls an architecture (never its builder and config)."""

from __future__ import annotations

import json

from workbench.core.model.formats.model_folder import HF_BUILDER, TIMM_BUILDER
from workbench.core.model.spec import SHORT_NAME_CHARS, ArchSpec, short_name


def test_a_model_folders_builder_is_called_by_its_class():
    config = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64})
    spec = ArchSpec(HF_BUILDER, {"architecture": "LlamaForCausalLM", "config_json": config})
    assert str(spec).startswith(HF_BUILDER)  # what the dialog and the Runs table had shown
    assert short_name(spec) == "LlamaForCausalLM"
    assert short_name(spec.to_dict()) == "LlamaForCausalLM"
    # the old builder name of files saved before the move; the class from the config when the spec names none
    old = {"name": "workbench.core.model.hf_folder:build_hf_model", "kwargs": {"config_json": config}}
    assert short_name(old) == "LlamaForCausalLM"
    no_class = ArchSpec(HF_BUILDER, {"config_json": json.dumps({"model_type": "bert"})})
    assert short_name(no_class) == "bert"
    assert short_name(ArchSpec(HF_BUILDER, {"config_json": "not json"}), "/models/tiny-llama/") == "tiny-llama"
    assert short_name(ArchSpec(TIMM_BUILDER, {"model_name": "resnet50d", "num_classes": 3})) == "resnet50d"


def test_names_and_factories_keep_their_own_short_form():
    assert short_name("resnet18") == "resnet18"
    assert short_name(ArchSpec("resnet18", {"num_classes": 10})) == "resnet18"
    assert short_name("resnet18(num_classes=10)") == "resnet18"
    assert short_name("my_pkg.nets:make_net(width=2)") == "make_net"
    assert short_name("timm:create_model('resnet50d', num_classes=10)") == "resnet50d"
    assert short_name({"arch": "evil.py:make", "kwargs": {}}) == "make"
    assert short_name("", "/runs/cats/best.pt") == "best.pt" and short_name(None) == ""
    assert short_name("not (a spec") == "not (a spec"  # unreadable text is shown as it is
    long = ArchSpec(HF_BUILDER, {"architecture": "X" * 200})
    assert len(short_name(long)) == SHORT_NAME_CHARS and short_name(long).endswith("…")
