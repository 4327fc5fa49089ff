"""``workbench inspect --memory``: the memory of a training step per module, in-process on real files."""

from __future__ import annotations

import json

import pytest
import torch
import torchvision

from workbench import cli
from workbench.cli.arguments import MEMORY_OPTIMIZERS, MEMORY_PRECISIONS
from workbench.core.model.memory import MEMORY_KEYS, OPTIMIZER_STATES, PRECISIONS

RESNET18_PARAMS = 11_689_512


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mem") / "resnet18.pth"
    torch.save(torchvision.models.resnet18().state_dict(), path)
    return path


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=64,
                                     bos_token_id=0, eos_token_id=0)
    folder = tmp_path_factory.mktemp("mem") / "gpt2"
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def _json(capsys, *args):
    code = cli.main(["inspect", *map(str, args), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_json_gives_every_module_and_the_root_its_memory(capsys, resnet18_file):
    doc = _json(capsys, resnet18_file, "--arch", "resnet18", "--input-shape", "1,3,64,64", "--memory",
                "--batch", "4", "--optimizer", "adamw")
    root = doc["memory"]
    assert set(root) == set(MEMORY_KEYS) and all(type(v) is int for v in root.values())
    assert root["params_bytes"] == root["grads_bytes"] == 4 * RESNET18_PARAMS
    assert root["optimizer_bytes"] == 2 * 4 * RESNET18_PARAMS
    assert root["activations_bytes"] > 0
    assert root["total_bytes"] == sum(root[k] for k in MEMORY_KEYS[:4])
    rows = {r["name"]: r for r in doc["modules"]}
    assert rows[""]["memory"] == root
    assert all(set(r["memory"]) == set(MEMORY_KEYS) for r in doc["modules"])
    assert rows["fc"]["memory"]["params_bytes"] == (512 * 1000 + 1000) * 4
    assert doc["memory_for"]["batch_size"] == 4 and doc["memory_for"]["precision"] == "fp32"
    # the batch scales the activations only
    eight = _json(capsys, resnet18_file, "--arch", "resnet18", "--input-shape", "1,3,64,64", "--memory",
                  "--batch", "8")["memory"]
    assert eight["params_bytes"] == root["params_bytes"]
    assert eight["activations_bytes"] == pytest.approx(2 * root["activations_bytes"], rel=0.05)


def test_folder_sgd_bf16_and_the_text_table(capsys, gpt2_folder):
    doc = _json(capsys, gpt2_folder, "--memory", "--batch", "2", "--optimizer", "sgd", "--momentum", "0",
                "--precision", "bf16")
    assert doc["memory"]["optimizer_bytes"] == 0 and doc["memory"]["grads_bytes"] > 0
    assert doc["memory_for"]["example"].startswith("input_ids=(2, 16) int64")
    code = cli.main(["inspect", str(gpt2_folder), "--memory", "--batch", "2", "--max-depth", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Memory" in out.splitlines()[out.splitlines().index("") + 1]  # the table's header
    assert "for a training step: batch 2" in out and "activations" in out
    without = cli.main(["inspect", str(gpt2_folder)])
    assert without == 0 and "Memory" not in capsys.readouterr().out


def test_activation_checkpointing_keeps_less(capsys, gpt2_folder):
    args = (gpt2_folder, "--memory", "--batch", "4", "--optimizer", "adamw")
    off = _json(capsys, *args)
    on = _json(capsys, *args, "--activation-checkpointing")
    assert on["memory_for"]["activation_checkpointing"] is True and on["memory_for"]["checkpointed_blocks"] == 2
    assert off["memory_for"]["activation_checkpointing"] is False
    # 2 layers: one is still recomputed at a time, and the logits stay
    assert on["memory"]["activations_bytes"] < 0.6 * off["memory"]["activations_bytes"]
    assert on["memory"]["optimizer_bytes"] == off["memory"]["optimizer_bytes"]
    rows = {r["name"]: r["memory"] for r in on["modules"]}
    assert rows["transformer.h.0.attn"]["activations_bytes"] == 0  # nothing inside a block stays
    assert cli.main(["inspect", *map(str, args), "--activation-checkpointing"]) == 0
    assert "activation checkpointing: 2 blocks' inputs kept" in capsys.readouterr().out


def test_what_cannot_be_estimated_is_one_line(capsys, tmp_path):
    path = tmp_path / "odd.pt"
    torch.save({"foo.weight": torch.zeros(3, 3)}, path)
    assert cli.main(["inspect", str(path), "--memory"]) == 1
    err = capsys.readouterr().err
    assert "--memory" in err and "--arch" in err and len(err.strip().splitlines()) == 1
    assert cli.main(["inspect", str(path), "--memory", "--batch", "0"]) == 2
    assert "batch size" in capsys.readouterr().err


def test_flag_choices_are_the_estimates():
    assert set(MEMORY_OPTIMIZERS) == set(OPTIMIZER_STATES)
    assert set(MEMORY_PRECISIONS) == set(PRECISIONS)
