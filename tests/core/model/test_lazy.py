"""A large model folder opens lazily: the same tree and FLOPs as opened eagerly, no weight read, changed files refused.

A real (small) Llama folder in bf16 shards, with the lazy threshold
(:data:`~workbench.core.model.formats.model_folder.LAZY_FOLDER_BYTES`) lowered
to 0 so it takes the path a 1.1B folder takes.
"""

from __future__ import annotations

import os

import pytest
import torch

from workbench.core.errors import CheckpointError
from workbench.core.model import hf_build, lazy
from workbench.core.model.formats import model_folder, safetensors
from workbench.core.model.health_check import find_nonfinite
from workbench.core.model.opening import open_model
from workbench.core.model.tree import annotate_shapes_and_flops, build_summary

import transformers  # noqa: E402 - in the test extra: fails if missing, never skips


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=100, max_position_embeddings=64,
                                   torch_dtype="bfloat16")
    cfg.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    path = tmp_path_factory.mktemp("llama")
    with hf_build.quiet(transformers):
        model.save_pretrained(path, max_shard_size="100KB")
    assert len(list(path.glob("model-*.safetensors"))) >= 2
    return path


@pytest.fixture()
def lazily(monkeypatch):
    monkeypatch.setattr(model_folder, "LAZY_FOLDER_BYTES", 0)


@pytest.fixture()
def reads(monkeypatch):
    """Every tensor-data read of the one safetensors reader, counted (headers are read otherwise)."""
    calls: list[int] = []
    real = safetensors._read_into

    def counting(f, out, offset, path):
        calls.append(out.numel())
        return real(f, out, offset, path)

    monkeypatch.setattr(safetensors, "_read_into", counting)
    return calls


def _tree(opened):
    root = build_summary(opened.model)
    flops = annotate_shapes_and_flops(root, example=opened.example)
    rows = [(n.name, n.type_name, n.total_params, n.total_bytes, n.output_shape, n.flops) for n in root.walk()]
    return flops, rows


def test_the_lazy_tree_and_flops_equal_the_eager_ones_and_read_no_weight(folder, monkeypatch, reads):
    eager = open_model(folder)
    eager_flops, eager_rows = _tree(eager)
    assert not lazy.is_lazy(eager.model) and reads  # the eager open copied the weights
    reads.clear()
    monkeypatch.setattr(model_folder, "LAZY_FOLDER_BYTES", 0)
    opened = open_model(folder)
    flops, rows = _tree(opened)
    assert find_nonfinite(opened.model) == []
    assert reads == []  # headers only: no tensor data read for the tree, the FLOPs or the scan
    assert lazy.is_lazy(opened.model)
    assert all(p.is_meta for p in opened.model.parameters())
    assert (flops, rows) == (eager_flops, eager_rows) and flops > 0
    assert type(opened.model) is type(eager.model) and opened.spec == eager.spec
    assert [p.dtype for p in opened.model.parameters()] == [p.dtype for p in eager.model.parameters()]


def test_the_weights_are_read_when_the_model_runs_and_equal_the_files(folder, lazily, reads):
    opened = open_model(folder)
    ids = opened.example.kwargs["input_ids"]
    out = opened.model(input_ids=ids)  # a real input: the weights are read first
    assert not lazy.is_lazy(opened.model) and reads
    assert out.logits.shape == (1, ids.shape[1], 100) and torch.isfinite(out.logits.float()).all()
    state = opened.model.state_dict()
    files = safetensors.read_shards(sorted(folder.glob("model-*.safetensors")))[0]
    assert state.keys() == files.keys()
    assert all(torch.equal(state[k], files[k]) for k in files)
    assert all(isinstance(p, torch.nn.Parameter) and p.requires_grad for p in opened.model.parameters())


@pytest.mark.parametrize("how", ["state_dict", "to", "ensure_loaded"])
def test_saving_moving_or_asking_reads_them(folder, lazily, how):
    opened = open_model(folder)
    if how == "state_dict":
        assert not any(t.is_meta for t in opened.model.state_dict().values())
    elif how == "to":
        opened.model.to(torch.float32)
        assert {p.dtype for p in opened.model.parameters()} == {torch.float32}
    else:
        assert lazy.ensure_loaded(opened.model) and not lazy.ensure_loaded(opened.model)
    assert not lazy.is_lazy(opened.model)


def test_the_on_demand_scan_reads_the_files_and_leaves_the_model_lazy(folder, lazily, tmp_path):
    opened = open_model(folder)
    assert find_nonfinite(opened.model, read_files=True) == []
    assert lazy.is_lazy(opened.model)


def _shard(folder):
    return sorted(folder.glob("model-*.safetensors"))[-1]


@pytest.mark.parametrize("change", ["truncate", "rewrite", "delete", "replace"])
def test_a_changed_file_is_refused_in_one_line_never_followed(folder, lazily, tmp_path, change):
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in folder.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    opened = open_model(copy)
    shard = _shard(copy)
    data = shard.read_bytes()
    if change == "truncate":
        os.truncate(shard, len(data) // 2)
    elif change == "rewrite":  # same size, other bytes, in place (save_pretrained over the folder)
        with open(shard, "r+b") as f:
            f.seek(len(data) - 64)
            f.write(bytes(64))
        os.utime(shard, ns=(0, 0))
    elif change == "delete":
        shard.unlink()
    else:
        other = tmp_path / "other.safetensors"
        other.write_bytes(data)
        os.replace(other, shard)
    message = lazy.changed_file(opened.model)
    assert message is not None and message.startswith(str(shard)) and "\n" not in message
    with pytest.raises(CheckpointError) as info:
        opened.model(input_ids=opened.example.kwargs["input_ids"])
    assert str(info.value) == message and "changed on disk since it was opened" in message
    assert lazy.is_lazy(opened.model) and all(p.is_meta for p in opened.model.parameters())
    with pytest.raises(CheckpointError):
        opened.model.state_dict()  # a save is refused the same way


def test_an_unchanged_folder_says_nothing(folder, lazily):
    opened = open_model(folder)
    assert lazy.changed_file(opened.model) is None
    lazy.ensure_loaded(opened.model)
    assert lazy.changed_file(opened.model) is None  # it owns its weights now


def test_another_architecture_on_a_lazy_checkpoint_reads_the_weights(folder, lazily):
    """A loader that is not the library's (weights-only, another spec) gets real tensors, never random ones."""
    from workbench.core.model.loading import load_state_dict_into

    opened = open_model(folder)
    cfg = transformers.LlamaConfig.from_pretrained(folder)
    target = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    report = load_state_dict_into(target, opened.checkpoint.state_dict)
    assert report.ok
    files = safetensors.read_shards(sorted(folder.glob("model-*.safetensors")))[0]
    assert torch.equal(target.model.norm.weight, files["model.norm.weight"])
