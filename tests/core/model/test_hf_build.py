"""Model folders open as their model: Hugging Face save_pretrained folders (single and sharded) and timm hub folders.

Real transformers / timm models from small random configs, saved into temporary
folders; nothing is downloaded.
"""

from __future__ import annotations

import json
import time

import pytest
import torch

from workbench.core.errors import CheckpointError, TrustRequired
from workbench.core.model import hf_build
from workbench.core.model.example_input import hf_example_input
from workbench.core.model.formats import model_folder
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.opening import NeedsArchitecture, open_model

import transformers  # noqa: E402 - in the test extra
import timm  # noqa: E402

TIMES: dict[str, float] = {}


def _bert():
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100, max_position_embeddings=64, num_labels=3)
    return transformers.BertForSequenceClassification(cfg)


def _gpt2():
    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def _vit():
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=64, num_labels=4)
    return transformers.ViTForImageClassification(cfg)


MAKERS = {"bert": _bert, "gpt2": _gpt2, "vit": _vit}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> (original model in eval mode, folder); ``<name>`` single-file, ``<name>_sharded`` sharded."""
    out = {}
    torch.manual_seed(0)
    for name, make in MAKERS.items():
        model = make().eval()
        for sharded in (False, True):
            folder = tmp_path_factory.mktemp(name + ("_sharded" if sharded else ""))
            with hf_build.quiet(transformers):
                model.save_pretrained(folder, **({"max_shard_size": "50KB"} if sharded else {}))
            out[name + ("_sharded" if sharded else "")] = (model, folder)
    return out


def _logits(model, example):
    with torch.no_grad():
        return model(**example).logits


def _open_timed(key, path):
    start = time.perf_counter()
    opened = open_model(path)
    TIMES[key] = time.perf_counter() - start
    return opened


@pytest.mark.parametrize("key", ["bert", "gpt2", "vit", "bert_sharded", "gpt2_sharded", "vit_sharded"])
def test_folder_opens_as_its_model_with_the_same_logits(folders, key):
    original, folder = folders[key]
    if key.endswith("_sharded"):
        assert (folder / "model.safetensors.index.json").is_file()
        assert len(list(folder.glob("model-*.safetensors"))) > 1
    opened = _open_timed(key, folder)
    assert type(opened.model) is type(original)
    assert opened.report.ok and not opened.weights_only
    assert opened.checkpoint.metadata.format == "hf_folder"
    assert opened.spec.name == model_folder.HF_BUILDER
    assert opened.spec.to_dict()["kwargs"]["architecture"] == type(original).__name__
    for name, tensor in original.state_dict().items():  # the weights bit for bit
        assert torch.equal(opened.model.state_dict()[name], tensor), name
    example = opened.example.kwargs
    torch.testing.assert_close(_logits(opened.model, example), _logits(original, example))  # kernels may reorder sums


@pytest.mark.parametrize("key", ["bert", "gpt2_sharded", "vit"])
def test_a_file_inside_the_folder_opens_the_folder(folders, key):
    original, folder = folders[key]
    files = [folder / "config.json"] + sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.index.json"))
    for file in files:
        opened = open_model(file)
        assert type(opened.model) is type(original), file
        assert opened.checkpoint.path == folder


def test_gpt2_lm_head_stays_tied_to_the_embedding(folders):
    opened = open_model(folders["gpt2"][1])
    model = opened.model
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    with torch.no_grad():
        model.transformer.wte.weight[0, 0] += 1.0
    assert model.lm_head.weight[0, 0] == model.transformer.wte.weight[0, 0]


def test_weights_are_memory_mapped_copy_on_write(folders, tmp_path):
    _, folder = folders["bert"]
    before = (folder / "model.safetensors").read_bytes()
    model = open_model(folder).model
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    assert (folder / "model.safetensors").read_bytes() == before
    assert all(p.requires_grad for p in model.parameters())


def test_example_input_from_the_config():
    text = hf_example_input({"vocab_size": 7, "max_position_embeddings": 8})
    assert text["input_ids"].dtype == torch.long and tuple(text["input_ids"].shape) == (1, 8)
    assert int(text["input_ids"].max()) < 7 and int(text["input_ids"].min()) >= 0
    assert text["attention_mask"].dtype == torch.long and bool((text["attention_mask"] == 1).all())
    vision = hf_example_input({"image_size": [24, 32], "num_channels": 1})
    assert set(vision) == {"pixel_values"} and tuple(vision["pixel_values"].shape) == (1, 1, 24, 32)
    state = torch.random.get_rng_state()
    hf_example_input({"vocab_size": 7})
    assert torch.equal(state, torch.random.get_rng_state())


def test_shapes_and_flops_show_for_a_folder(folders):
    from workbench.core.model.tree import annotate_shapes_and_flops, build_summary

    opened = open_model(folders["bert"][1])
    root = build_summary(opened.model)
    assert annotate_shapes_and_flops(root, example=opened.example) > 0


def test_read_checkpoint_reads_a_folder_as_its_weights(folders):
    _, folder = folders["gpt2_sharded"]
    ckpt = model_folder.read_folder_checkpoint(model_folder.read_model_folder(folder / "config.json"))
    assert ckpt.metadata.format == "hf_folder" and ckpt.path == folder
    assert "transformer.wte.weight" in ckpt.state_dict and len(ckpt.metadata.extra["weight_files"]) > 1


def test_saved_folder_round_trips(folders, tmp_path):
    original, folder = folders["vit"]
    model = open_model(folder).model
    out = tmp_path / "saved"
    written = hf_build.save_hf_folder(model, out)
    assert {p.name for p in written} >= {"config.json", "model.safetensors"}
    again = open_model(out).model
    example = hf_example_input(original.config)
    torch.testing.assert_close(_logits(again, example), _logits(original, example))
    assert not list(tmp_path.glob(".saved.*"))


def test_num_classes_changes_the_head_and_needs_partial(folders):
    _, folder = folders["bert"]
    from workbench.core.model.opening import PartialFit

    with pytest.raises(PartialFit) as err:
        open_model(folder, kwargs={"num_classes": 5})
    assert err.value.report.mismatched
    opened = open_model(folder, partial=True, kwargs={"num_classes": 5})
    assert opened.model.classifier.out_features == 5 and opened.notes


def test_custom_code_asks_for_trust_and_runs_nothing(tmp_path):
    marker = tmp_path / "imported.txt"
    folder = tmp_path / "custom"
    folder.mkdir()
    code = f"open({str(marker)!r}, 'w').write('ran')\n"
    (folder / "modeling_tiny.py").write_text(code)
    (folder / "configuration_tiny.py").write_text(code)
    config = {"architectures": ["TinyCustomModel"], "model_type": "tiny_custom", "vocab_size": 10,
              "auto_map": {"AutoConfig": "configuration_tiny.TinyConfig",
                           "AutoModel": "modeling_tiny.TinyCustomModel"}}
    (folder / "config.json").write_text(json.dumps(config))
    from safetensors.torch import save_file

    save_file({"embed.weight": torch.zeros(10, 4)}, str(folder / "model.safetensors"))
    for path in (folder, folder / "config.json", folder / "model.safetensors"):
        with pytest.raises(TrustRequired) as err:
            open_model(path)
        assert err.value.kind == "code"
        assert err.value.globals == ["configuration_tiny.py", "modeling_tiny.py"]
    assert not marker.exists()
    # trusted: still nothing of the folder runs; there is no library class, so the weights-only tree shows
    opened = open_model(folder, trust=True)
    assert opened.weights_only and "TinyCustomModel" in opened.notes[0] and "custom code" in opened.notes[0]
    assert not marker.exists()


def test_an_unknown_architecture_is_named(tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["os.system"], "model_type": "bert"}))
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    with pytest.raises(Exception, match="os.system"):
        open_model(folder)


def test_index_naming_a_file_outside_the_folder_is_refused(folders, tmp_path):
    _, source = folders["bert"]
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "config.json").write_bytes((source / "config.json").read_bytes())
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../x.safetensors"}}))
    with pytest.raises(CheckpointError, match="plain file name"):
        open_model(folder)


def test_a_folder_without_config_is_still_refused(tmp_path):
    with pytest.raises(CheckpointError, match="is a directory"):
        open_model(tmp_path)


def _timm_folder(tmp_path):
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=5).eval()
    folder = tmp_path / "timm_resnet18"
    folder.mkdir()
    from safetensors.torch import save_file

    save_file(model.state_dict(), str(folder / "model.safetensors"))
    config = {"architecture": "resnet18", "num_classes": 5, "num_features": 512,
              "pretrained_cfg": {"tag": "a1_in1k", "input_size": [3, 64, 64], "mean": [0.485, 0.456, 0.406],
                                 "std": [0.229, 0.224, 0.225], "num_classes": 1000, "interpolation": "bicubic",
                                 "crop_pct": 0.95, "classifier": "fc"}}
    (folder / "config.json").write_text(json.dumps(config))
    return model, folder


def test_timm_hub_folder_opens_as_timm_model(tmp_path):
    original, folder = _timm_folder(tmp_path)
    start = time.perf_counter()
    opened = open_model(folder)
    TIMES["timm_resnet18"] = time.perf_counter() - start
    assert type(opened.model).__module__.startswith("timm.")
    assert opened.model.fc.out_features == 5
    assert opened.checkpoint.metadata.format == "timm_folder"
    assert opened.spec.name == model_folder.TIMM_BUILDER and opened.spec.kwargs["model_name"] == "resnet18"
    (x,) = opened.example.args
    assert tuple(x.shape) == (1, 3, 64, 64)
    x = torch.randn(2, 3, 64, 64)
    model = opened.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x), original(x), rtol=0, atol=0)
    assert type(open_model(folder / "model.safetensors").model) is type(original)


def test_timm_name_that_would_download_is_refused(tmp_path):
    _, folder = _timm_folder(tmp_path)
    (folder / "config.json").write_text(json.dumps({"architecture": "hf-hub:timm/resnet18.a1_in1k",
                                                    "pretrained_cfg": {}}))
    with pytest.raises(CheckpointError, match="architecture = 'hf-hub:timm/resnet18.a1_in1k' names a model on the "
                                              "Hugging Face Hub; Workbench never downloads"):
        open_model(folder)
    with pytest.raises(Exception, match="names a model on the Hugging Face Hub"):
        hf_build.build_timm_model("hf-hub:timm/resnet18.a1_in1k")  # a spec recorded in a checkpoint: the same rule


def test_without_the_library_the_weights_show(folders, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_transformers(name, *args, **kwargs):
        if name == "transformers":
            raise ImportError("no transformers")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    with pytest.raises(NeedsArchitecture, match=r"workbench\[hf\]"):
        open_model(folders["bert"][1])
    opened = open_model(folders["bert"][1], weights_only=True)
    assert opened.weights_only and "workbench[hf]" in opened.notes[0]


def test_report_times():
    """Prints the measured open times (run with -s to see them)."""
    for key, seconds in TIMES.items():
        print(f"open {key}: {seconds:.3f} s")


def test_recorded_spec_builds_the_model_again(folders):
    """A Workbench checkpoint of an opened folder model rebuilds from its spec (plain data) with the same keys."""
    from workbench.core.model.loading import load_state_dict_into
    from workbench.core.model.meta_build import build_module

    opened = open_model(folders["vit"][1])
    spec = opened.spec
    assert set(spec.to_dict()["kwargs"]) == {"architecture", "config_json"}
    model = build_module(spec, device="meta")
    assert load_state_dict_into(model, opened.model.state_dict()).ok


def test_a_saved_checkpoint_of_a_folder_model_reopens_without_a_trust_question(folders, tmp_path):
    """The folder's recorded builder is Workbench's own: a checkpoint (or run.toml) naming it needs no trust."""
    from workbench.core.model.saving import checkpoint_payload, save_checkpoint

    original, folder = folders["bert"]
    opened = open_model(folder)
    path = save_checkpoint(tmp_path / "bert.pt", checkpoint_payload(opened.model, arch=opened.spec))
    again = open_model(path)  # trust=False
    assert type(again.model).__name__ == "BertForSequenceClassification"
    for k, v in opened.model.state_dict().items():
        assert torch.equal(again.model.state_dict()[k], v), k


def test_a_recorded_spec_naming_a_hub_backbone_is_refused_before_transformers_sees_it():
    """A checkpoint's recorded HF_BUILDER spec goes through the same rule as a folder's config.json."""
    from workbench.core.errors import ArchitectureError

    config = json.dumps({"model_type": "rf_detr", "encoder": {"backbone": "org/repo"}})
    with pytest.raises(ArchitectureError, match=r"encoder\.backbone = 'org/repo' names a model on the Hugging Face Hub"):
        hf_build.build_hf_model("RfDetrForObjectDetection", config)
