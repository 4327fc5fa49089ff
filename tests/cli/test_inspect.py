"""`workbench inspect` end to end, on real files: load reports, the module tree, shapes, FLOPs, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torchvision
from torch.utils.flop_counter import FlopCounterMode

from workbench import cli
from workbench.core.model.demo import DigitsCNN

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def resnet18_module_prefixed(tmp_path_factory):
    """A seeded resnet18 state_dict saved as by nn.DataParallel (``module.`` prefix)."""
    torch.manual_seed(1234)
    model = torchvision.models.resnet18()
    path = tmp_path_factory.mktemp("ckpt") / "resnet18_dp.pth"
    torch.save({"module." + k: v for k, v in model.state_dict().items()}, path)
    return path


@pytest.fixture(scope="module")
def resnet18_flops_224():
    """FlopCounterMode's own total for resnet18 at 1x3x224x224."""
    model = torchvision.models.resnet18().eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, 3, 224, 224))
    return counter.get_total_flops()


def _run_json(capsys, *args):
    code = cli.main(["inspect", *map(str, args), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_done_when_resnet18_dataparallel(capsys, resnet18_module_prefixed, resnet18_flops_224):
    doc = _run_json(capsys, resnet18_module_prefixed, "--input-shape", "1,3,224,224")
    assert doc["arch"] == "resnet18"
    assert doc["arch_source"].startswith("detected")
    assert doc["candidates"][0]["arch"] == "resnet18" and doc["candidates"][0]["score"] >= 0.9
    report = doc["load_report"]
    assert report["stripped_prefixes"] == ["module."]
    assert report["strict"] is True and report["ok"] is True
    assert report["missing"] == report["unexpected"] == report["mismatched"] == []
    assert doc["total_params"] == 11_689_512 and type(doc["total_params"]) is int
    assert doc["trainable_params"] == 11_689_512
    assert doc["total_flops"] == resnet18_flops_224 and type(doc["total_flops"]) is int
    rows = {r["name"]: r for r in doc["modules"]}
    assert rows[""]["flops"] == resnet18_flops_224
    assert rows["layer1.0.conv1"] == {
        "name": "layer1.0.conv1", "type": "Conv2d", "depth": 3, "output_shape": [1, 64, 56, 56],
        "params": 36864, "trainable": 36864, "bytes": 36864 * 4, "flops": 2 * 64 * 64 * 9 * 56 * 56,
        "macs": 64 * 64 * 9 * 56 * 56}
    assert doc["metadata"]["format"] == "state_dict" and doc["metadata"]["num_tensors"] == 122
    assert doc["weights_only"] is False

    # The same as a table
    assert cli.main(["inspect", str(resnet18_module_prefixed), "--input-shape", "1,3,224,224"]) == 0
    text = capsys.readouterr().out
    assert "Arch        resnet18 [detected" in text
    assert "Detected    resnet18 1.000" in text
    assert "stripped prefixes: 'module.'" in text
    assert "Total params      11,689,512 (11.7 M)" in text
    assert f"FLOPs             {resnet18_flops_224:,}" in text and "2 per multiply-add" in text
    assert f"Multiply-adds     {resnet18_flops_224 // 2:,}" in text
    conv_line = next(line for line in text.splitlines() if line.strip().startswith("layer1.0.conv1 "))
    assert conv_line.startswith("      layer1.0.conv1")  # indented by depth
    assert "[1, 64, 56, 56]" in conv_line and "36,864" in conv_line


def test_exit_codes_in_a_subprocess(tmp_path):
    bad = tmp_path / "broken.pt"
    bad.write_bytes(b"PK\x03\x04 this is not a zip")
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "inspect", str(bad)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "broken.pt" in proc.stderr and 0 < len(proc.stderr.strip().splitlines()) <= 4
    assert proc.stdout == ""
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "inspect", str(bad), "--input-shape", "1,x"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )
    assert proc.returncode == 2
    assert "usage: workbench inspect" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_file_and_debug(capsys, tmp_path):
    missing = tmp_path / "nope.pt"
    assert cli.main(["inspect", str(missing)]) == 1
    err = capsys.readouterr().err
    assert "nope.pt" in err and "Traceback" not in err
    assert cli.main(["inspect", str(missing), "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err
    assert cli.main(["inspect"]) == 2  # usage error in-process too


def test_arch_entry_from_a_workbench_checkpoint(capsys, tmp_path):
    model = DigitsCNN()
    model.features[0].weight.requires_grad_(False)
    path = tmp_path / "digits.pt"
    torch.save({"model_state_dict": model.state_dict(), "arch": {"name": "digits_cnn", "kwargs": {}},
                "frozen": ["features.0.weight"], "epoch": 3, "loss": 0.25}, path)
    doc = _run_json(capsys, path, "--input-shape", "1,1,8,8")
    assert doc["arch"] == "digits_cnn" and doc["arch_source"] == "checkpoint"
    assert doc["candidates"] == []  # no detection needed
    assert doc["metadata"]["epoch"] == 3
    total = sum(p.numel() for p in model.parameters())
    assert doc["total_params"] == total
    assert doc["trainable_params"] == total - model.features[0].weight.numel()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.eval()(torch.zeros(1, 1, 8, 8))
    assert doc["total_flops"] == counter.get_total_flops()


def test_no_architecture_fits_shows_weights_only_tree(capsys, tmp_path):
    path = tmp_path / "custom.pt"
    torch.save({"encoder.proj.weight": torch.randn(7, 5), "encoder.proj.bias": torch.randn(7),
                "decoder.out.weight": torch.randn(3, 7)}, path)
    doc = _run_json(capsys, path, "--input-shape", "1,5")
    assert doc["weights_only"] is True and doc["arch"] is None
    assert doc["total_params"] == 35 + 7 + 21 and doc["total_flops"] is None
    assert any("need an architecture" in n for n in doc["notes"])
    assert [r["name"] for r in doc["modules"]] == ["", "encoder", "encoder.proj", "decoder", "decoder.out"]
    assert cli.main(["inspect", str(path)]) == 0
    assert "weights-only tree" in capsys.readouterr().out


def test_wrong_architecture_and_wrong_input_shape(capsys, tmp_path):
    model = DigitsCNN()
    path = tmp_path / "digits_sd.pt"
    torch.save(model.state_dict(), path)
    assert cli.main(["inspect", str(path), "--arch", "digits_cnn", "--num-classes", "5"]) == 1
    err = capsys.readouterr().err
    assert "classifier" in err and "Traceback" not in err
    # partial load of the same: loads what matches, reports the rest, exit 0
    doc = _run_json(capsys, path, "--arch", "digits_cnn", "--num-classes", "5", "--partial")
    assert doc["load_report"]["strict"] is False
    assert {m["name"] for m in doc["load_report"]["mismatched"]} == {"classifier.weight", "classifier.bias"}
    assert doc["arch_kwargs"] == {"num_classes": 5}
    # an input shape the model cannot take is a usage error (2), not a load failure (1)
    assert cli.main(["inspect", str(path), "--arch", "digits_cnn", "--input-shape", "1,3,8,8"]) == 2
    err = capsys.readouterr().err
    assert "input shape (1,3,8,8) does not fit digits_cnn" in err and "Traceback" not in err
    # three numbers for a 2-d convolution: said in the user's terms, not torch's [1, 1, 3, 224]
    assert cli.main(["inspect", str(path), "--arch", "digits_cnn", "--input-shape", "1,3,224"]) == 2
    err = capsys.readouterr().err
    assert "its first layer (Conv2d) takes 4 numbers (N, C, H, W), got 3" in err


def test_pickled_module_needs_trust(capsys, tmp_path):
    path = tmp_path / "full.pt"
    torch.save(DigitsCNN(), path)
    assert cli.main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err
    assert "--trust" in err and "DigitsCNN" in err
    doc = _run_json(capsys, path, "--trust", "--input-shape", "1,1,8,8")
    assert doc["arch"] == "DigitsCNN" and doc["total_flops"] > 0


def test_a_negative_max_depth_is_a_usage_error(capsys, resnet18_module_prefixed):
    assert cli.main(["inspect", str(resnet18_module_prefixed), "--max-depth", "-5"]) == 2
    assert "whole number >= 0" in capsys.readouterr().err


def test_inspect_builds_an_installed_architecture_by_name(example_plugin, capsys, tmp_path):
    from workbench.core.contrib import resolve

    model = resolve("architecture", "tiny_mlp")(num_classes=3)
    bare, named = tmp_path / "tiny.pt", tmp_path / "named.pt"
    torch.save(model.state_dict(), bare)
    torch.save({"model_state_dict": model.state_dict(), "arch": {"name": "tiny_mlp", "kwargs": {"num_classes": 3}}},
               named)
    total = sum(p.numel() for p in model.parameters())
    doc = _run_json(capsys, bare, "--arch", "tiny_mlp", "--num-classes", "3", "--input-shape", "2,1,8,8")
    assert (doc["arch"], doc["arch_kwargs"], doc["arch_source"]) == ("tiny_mlp", {"num_classes": 3}, "--arch")
    assert doc["load_report"]["ok"] and doc["total_params"] == total == 64 * 32 + 32 + 32 * 3 + 3
    assert doc["total_flops"] == 2 * 2 * (64 * 32 + 32 * 3)
    doc = _run_json(capsys, named)  # a file naming an installed architecture needs no --trust
    assert (doc["arch"], doc["arch_source"], doc["load_report"]["ok"]) == ("tiny_mlp", "checkpoint", True)
    doc = _run_json(capsys, bare)  # and a bare state_dict of it is detected among torchvision's
    assert doc["arch"] == "tiny_mlp" and doc["arch_kwargs"] == {"num_classes": 3}
    assert doc["arch_source"] == "detected (score 1.000)"
    assert cli.main(["inspect", str(bare), "--arch", "tiny_mpl"]) == 1
    err = capsys.readouterr().err
    assert f"error: {bare}: unknown architecture 'tiny_mpl'; did you mean tiny_mlp?" in err
    assert "Available: digits_cnn, tabular_mlp, tiny_mlp and" in err


def test_inspect_a_hugging_face_folder_shows_shapes_and_flops_from_its_config(capsys, tmp_path):
    import transformers

    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                     vocab_size=100, num_labels=3)
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "bert")
    assert cli.main(["inspect", str(tmp_path / "bert"), "--max-depth", "1"]) == 0
    out = capsys.readouterr().out
    assert "Arch        BertForSequenceClassification (transformers, from the folder's config.json)" in out
    assert "input_ids=(1, 16) int64" in out
    classifier = next(line for line in out.splitlines() if line.startswith("  classifier"))
    assert "[1, 3]" in classifier and classifier.split()[-1] == "192"  # 2 x 32 x 3: the pooled (1, 32) through the head


def test_inspect_of_a_unique_match_opens_the_file_twice_at_most(capsys, tmp_path):
    """A sniff of the first bytes and one read, the detected architecture's answer included (6 before)."""
    from tests.core.model.open_counting import count_opens

    path = tmp_path / "r18_7.pt"
    torch.save(torchvision.models.resnet18(num_classes=7).state_dict(), path)
    with count_opens(path) as opened:
        doc = _run_json(capsys, str(path))
    assert doc["arch_source"] == "detected (score 1.000)"
    assert opened.count <= 2, opened.count


def _inspect_behind_a_trap(folder):
    """``python -m workbench inspect FOLDER`` with the Hub and every proxy a counting trap: (proc, requests, s)."""
    from tests.core.model.network_trap import network_trap

    with network_trap() as trap:
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "workbench", "inspect", str(folder)], env=trap.env(), cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        return proc, list(trap.requests), time.monotonic() - start


@pytest.mark.parametrize("name", ["rf_detr_backbone_repo", "rf_detr_backbone_name"])
def test_inspect_of_a_config_naming_a_hub_model_refuses_without_the_network(tmp_path, name):
    """A backbone repo id (refused from the config) or a plain name RF-DETR asks the Hub about (refused offline)."""
    from tests.core.model.network_trap import hub_naming_folder

    folder = hub_naming_folder(tmp_path, name)
    proc, requests, elapsed = _inspect_behind_a_trap(folder)
    assert requests == []
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].startswith(f"error: {folder / 'config.json'}: backbone = "), lines[0]
    assert "Workbench never downloads" in lines[0]
    assert proc.stdout == "" and elapsed < 30
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]  # nothing written


def test_inspect_of_a_plain_hugging_face_folder_reaches_no_network(tmp_path):
    from tests.core.model.network_trap import bert_folder

    proc, requests, elapsed = _inspect_behind_a_trap(bert_folder(tmp_path))
    assert requests == []
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "BertForSequenceClassification" in proc.stdout and elapsed < 30
