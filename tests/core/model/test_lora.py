"""LoRA as a freeze option (issue 27): peft adapters on a BERT's attention projections, trained, merged, saved."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import peft  # noqa: E402 - in the test extra: a missing extra fails here, never skips
import transformers  # noqa: E402

from workbench.core.errors import WorkbenchError  # noqa: E402
from workbench.core.model import lora, saving  # noqa: E402
from workbench.core.model.edits import apply_edits  # noqa: E402

ATTENTION = ("query", "key", "value")


def _bert(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100, num_labels=2)
    return transformers.BertForSequenceClassification(cfg).eval()


def _batch(n: int = 4, seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 100, (n, 12), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": (ids[:, 0] > 50).long()}


def _logits(model: nn.Module, batch: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def _with_adapters(r: int = 4, alpha: float = 8) -> tuple[nn.Module, list[str], list[str]]:
    model = _bert()
    paths = lora.lora_targets(model, ["bert.encoder"], names=ATTENTION)
    before = lora.add_lora(model, paths, r=r, alpha=alpha)
    return model, paths, before


def _randomize_b(model: nn.Module) -> None:
    """B starts at zero (the adapted model equals the base); give it values so merging shows."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def test_targets_are_the_attention_projections_by_exact_name():
    model = _bert()
    paths = lora.lora_targets(model, ["bert.encoder"], names=ATTENTION)
    assert paths == [f"bert.encoder.layer.{i}.attention.self.{n}" for i in range(2) for n in ATTENTION]
    assert lora.lora_targets(model, ["bert.encoder.layer.0.attention.self.query"]) == \
        ["bert.encoder.layer.0.attention.self.query"]
    with pytest.raises(WorkbenchError, match="no Conv2d module"):
        lora.lora_targets(model, ["bert.encoder"], types=("Conv2d",))
    with pytest.raises(WorkbenchError, match="no module named"):
        lora.lora_targets(model, ["bert.nowhere"])


def test_adapters_freeze_the_base_keep_the_output_and_show_as_children():
    model = _bert()
    batch = _batch()
    base_out = _logits(model, batch)
    paths = lora.lora_targets(model, ["bert.encoder"], names=ATTENTION)
    before = lora.add_lora(model, paths, r=4, alpha=8)
    assert len(before) == sum(1 for _ in _bert().parameters())  # everything was trainable
    # the adapters and the classifier's task head (peft's modules_to_save) train; the rest is frozen
    trainable = [n for n, p in model.named_parameters() if p.requires_grad and not n.startswith("classifier.")]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert len(trainable) == 2 * len(paths)
    head = sum(p.numel() for p in model.classifier.parameters())
    assert sum(p.numel() for n, p in model.named_parameters() if p.requires_grad) == len(paths) * 4 * (32 + 32) + head
    children = dict(model.get_submodule(paths[0]).named_children())
    assert {"base_layer", "lora_A", "lora_B"} <= set(children)
    assert lora.lora_paths(model) == paths
    assert torch.equal(_logits(model, batch), base_out)  # B = 0: the adapted model starts as the base
    assert not hasattr(model, "peft_config")
    with pytest.raises(WorkbenchError, match="already has adapters"):
        lora.add_lora(model, paths[:1])


def test_bad_numbers_and_types_are_refused_before_the_model_changes():
    model = _bert()
    for kwargs, match in (({"r": 0}, "rank r"), ({"alpha": 0}, "alpha"), ({"dropout": 1.0}, "dropout")):
        with pytest.raises(WorkbenchError, match=match):
            lora.add_lora(model, ["bert.encoder.layer.0.attention.self.query"], **kwargs)
    with pytest.raises(WorkbenchError, match="LayerNorm"):
        lora.add_lora(model, ["bert.encoder.layer.0.output.LayerNorm"])
    assert lora.lora_paths(model) == []


def test_twenty_model_loss_steps_change_only_the_adapters(tmp_path):
    from torch.utils.data import DataLoader

    from workbench.core.train.config import TaskConfig, TrainConfig
    from workbench.core.train.trainer.loop import Trainer

    model, paths, _ = _with_adapters()
    base = {n: t.detach().clone() for n, t in model.state_dict().items()
            if "lora_" not in n and not n.startswith("classifier.")}  # the task head trains beside the adapters
    adapters = {n: t.detach().clone() for n, t in model.state_dict().items() if "lora_" in n}
    rows = [{k: v[i] for k, v in _batch(160, seed=5).items()} for i in range(160)]
    loaders = (DataLoader(rows, batch_size=8, shuffle=False), DataLoader(rows[:16], batch_size=8))
    cfg = TrainConfig(task=TaskConfig(kind="model_loss"), epochs=1, lr=1e-2, optimizer="adamw",
                      run_dir=str(tmp_path / "run"), tensorboard=False)
    tr = Trainer(model, cfg, data=loaders)
    assert tr.fit() == "completed", tr.error
    assert tr.step == 20
    after = model.state_dict()
    assert all(torch.equal(after[n], t) for n, t in base.items())  # base weights bit-identical
    changed = [n for n, t in adapters.items() if not torch.equal(after[n], t)]
    assert {n.split(".lora_")[0] for n in changed} == set(paths)  # every adapted module learned
    assert any(".lora_B." in n for n in changed)


def test_merge_on_save_is_base_plus_scaled_ba_and_computes_the_same(tmp_path):
    model, paths, _ = _with_adapters(r=4, alpha=8)
    _randomize_b(model)
    batch = _batch()
    adapted_out = _logits(model, batch)
    payload = saving.checkpoint_payload(model, lora="merge", edits=[lora.lora_edit(paths, 4, 8)], include_rng=False)
    assert "edits" not in payload  # the only edit was the adapters, now merged
    sd = payload["model_state_dict"]
    assert not any("lora_" in k or "base_layer" in k for k in sd)
    for path in paths:
        layer = model.get_submodule(path)
        w, a, b = layer.base_layer.weight, layer.lora_A["default"].weight, layer.lora_B["default"].weight
        expected = w + (8 / 4) * b @ a  # Hu et al., 2021: W + (alpha / r) B A
        assert torch.allclose(sd[f"{path}.weight"], expected, atol=1e-6)
    fresh = _bert(seed=9)
    fresh.load_state_dict(sd)
    assert torch.allclose(_logits(fresh, batch), adapted_out, atol=1e-5)
    assert lora.lora_paths(model) == paths  # the live model keeps its adapters
    path = saving.save_checkpoint(tmp_path / "merged.pt", payload)
    assert torch.load(path, weights_only=True)["model_state_dict"].keys() == sd.keys()


def test_keep_on_save_records_the_edit_and_replays(tmp_path):
    model, paths, _ = _with_adapters()
    edit = lora.lora_edit(paths, 4, 8)
    payload = saving.checkpoint_payload(model, edits=[edit], include_rng=False)
    assert payload["edits"] == [edit]
    assert any(".lora_A.default." in k for k in payload["model_state_dict"])
    with pytest.raises(ValueError, match="keep' or 'merge"):
        saving.checkpoint_payload(model, lora="fold")


def test_adapters_only_save_loads_back_onto_a_fresh_base_with_peft(tmp_path):
    model, paths, _ = _with_adapters()
    _randomize_b(model)
    batch = _batch()
    folder = lora.save_adapters(model, tmp_path / "adapters")
    assert sorted(p.name for p in folder.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    from safetensors.torch import load_file

    saved = load_file(folder / "adapter_model.safetensors")
    head = {"base_model.model.classifier.weight", "base_model.model.classifier.bias"}  # peft's modules_to_save
    assert head <= set(saved) and len(saved) == 2 * len(paths) + len(head)
    assert all(k.startswith("base_model.model.bert.") and k.endswith((".lora_A.weight", ".lora_B.weight"))
               for k in set(saved) - head)
    loaded = peft.PeftModel.from_pretrained(_bert(), folder).eval()
    assert torch.allclose(_logits(loaded, batch), _logits(model, batch), atol=1e-6)
    with pytest.raises(WorkbenchError, match="no adapters"):
        lora.save_adapters(_bert(), tmp_path / "none")


def test_remove_gives_back_the_very_linear_layers_and_the_trainable_set():
    model = _bert()
    model.classifier.weight.requires_grad_(False)
    originals = {p: model.get_submodule(p) for p in lora.lora_targets(model, ["bert.encoder"], names=ATTENTION)}
    keys = list(model.state_dict())
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    before = lora.add_lora(model, list(originals), r=2, alpha=4)
    assert before == trainable
    lora.remove_lora(model, list(originals), trainable=before)
    assert all(model.get_submodule(p) is m and type(m) is nn.Linear for p, m in originals.items())
    assert list(model.state_dict()) == keys
    assert [n for n, p in model.named_parameters() if p.requires_grad] == trainable
    with pytest.raises(WorkbenchError, match="no adapters to remove"):
        lora.remove_lora(model, list(originals)[:1])


def test_replay_of_the_recorded_edit_gives_the_same_structure_and_keys():
    model, paths, _ = _with_adapters(r=4, alpha=8)
    edit = lora.lora_edit(paths, r=4, alpha=8, dropout=0.1)
    assert edit == {"op": "add_lora", "paths": paths, "r": 4, "alpha": 8, "dropout": 0.1}
    fresh = _bert(seed=2)
    apply_edits(fresh, [{"op": "replace_head", "path": "classifier", "num_outputs": 2}, edit])
    assert lora.lora_paths(fresh) == paths
    assert list(fresh.state_dict()) == list(model.state_dict())
    assert {n: t.shape for n, t in fresh.state_dict().items()} == {n: t.shape for n, t in model.state_dict().items()}
    fresh.load_state_dict(model.state_dict())  # an init.pt of the adapted model loads strictly


@pytest.mark.parametrize("edit, match", [
    ({"op": "add_lora", "paths": []}, "'paths' must be a list"),
    ({"op": "add_lora", "paths": ["a"], "r": 0}, "'r'"),
    ({"op": "add_lora", "paths": ["a"], "alpha": -1}, "'alpha'"),
    ({"op": "add_lora", "paths": ["a"], "dropout": 1}, "'dropout'"),
    ({"op": "prune"}, "known: replace_head, add_lora"),
])
def test_bad_add_lora_entries_are_named_before_the_model_changes(edit, match):
    model = _bert()
    with pytest.raises(WorkbenchError, match=match):
        apply_edits(model, [{"op": "replace_head", "path": "classifier", "num_outputs": 3}, edit])
    assert model.classifier.out_features == 2


def test_conv2d_adapters_merge_too():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1))
    x = torch.randn(2, 3, 8, 8)
    lora.add_lora(model, lora.lora_targets(model, [""], types=("Conv2d",)), r=2, alpha=2)
    _randomize_b(model)
    with torch.no_grad():
        out = model(x)
        merged = lora.merged_copy(model)
        assert [type(m) for m in merged] == [nn.Conv2d, nn.ReLU, nn.Conv2d]
        assert torch.allclose(merged(x), out, atol=1e-5)


def test_a_run_file_replays_the_adapters_before_its_init_weights_load(tmp_path):
    """What ``workbench train run.toml`` does with a window's LoRA edit: edits, then init.pt, then the frozen set."""
    from workbench.core.model.meta_build import build_module
    from workbench.core.model.spec import ArchSpec
    from workbench.core.model.names import frozen_names
    from workbench.core.train.config import ModelConfig
    from workbench.core.train.launch.headless import model_from_config

    model = build_module(ArchSpec("digits_cnn"))
    paths = lora.lora_targets(model, [""], types=("Linear", "Conv2d"))
    lora.add_lora(model, paths, r=2, alpha=4)
    _randomize_b(model)
    model.get_submodule(paths[-1]).base_layer.weight.requires_grad_(True)  # the user unfroze the head
    init = saving.save_checkpoint(tmp_path / "init.pt", saving.checkpoint_payload(model, arch="digits_cnn"))
    mc = ModelConfig(arch="digits_cnn", init=str(init), edits=[lora.lora_edit(paths, 2, 4)],
                     frozen=frozen_names(model))
    replayed, _ = model_from_config(mc, tmp_path)
    assert lora.lora_paths(replayed) == paths
    assert all(torch.equal(replayed.state_dict()[k], v) for k, v in model.state_dict().items())
    assert frozen_names(replayed) == frozen_names(model)


def test_an_nn_multihead_attention_is_not_offered_and_its_out_proj_is_refused():
    """Its forward reads in_proj_weight / out_proj.weight directly: an adapter there would never run."""
    model = nn.Sequential(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True))
    assert lora.types_under(model, "") == ["Linear"]  # linear1, linear2; out_proj is not a plain Linear
    assert lora.lora_targets(model, [""]) == ["0.linear1", "0.linear2"]
    with pytest.raises(WorkbenchError, match="belongs to an nn.MultiheadAttention"):
        lora.add_lora(model, ["0.self_attn.out_proj"])
    with pytest.raises(WorkbenchError, match="is a MultiheadAttention"):
        lora.add_lora(model, ["0.self_attn"])
