"""``workbench diff`` across a wrapper prefix, a partial fit and LoRA adapters (issue 39), on real files."""

from __future__ import annotations

import contextlib
import io
from types import SimpleNamespace

import pytest
import torch
import torchvision
import transformers

from workbench import cli

from workbench.core.model.diff import compare_models
from workbench.core.model.lora import add_lora, lora_edit, merged_copy
from workbench.core.model.saving import checkpoint_payload, save_checkpoint

ARCH = "resnet18(num_classes=10)"
ARCH_ENTRY = {"name": "resnet18", "kwargs": {"num_classes": 10}}  # as a run writes it
ADAPTED = ["layer4.1.conv2", "fc"]


def _diff(*args: str) -> SimpleNamespace:
    """``workbench diff ARGS`` in this process (the CLI's own entry point; a subprocess costs ~20 s here)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["diff", *map(str, args)])
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def _tiny_bert_folders(tmp_path):
    """A pretrained BertModel folder and a sequence classifier fine-tuned from it (one layer moved)."""
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=100, num_labels=3)
    torch.manual_seed(0)
    base = transformers.BertModel(cfg)
    base.save_pretrained(tmp_path / "pre")
    tuned = transformers.BertForSequenceClassification(cfg)
    tuned.bert.load_state_dict(base.state_dict())
    with torch.no_grad():
        tuned.bert.encoder.layer[1].output.dense.weight.add_(0.01)
    tuned.save_pretrained(tmp_path / "ft")
    return tmp_path / "ft", tmp_path / "pre"


def test_a_fine_tuned_bert_compares_with_the_pretrained_folder_it_came_from(tmp_path):
    ft, pre = _tiny_bert_folders(tmp_path)
    out = _diff(ft, pre / "model.safetensors")
    assert out.returncode == 0, out.stderr
    assert "removing bert. from a's keys" in out.stderr
    lines = out.stdout.strip().splitlines()
    # the head is new; of the backbone only the moved layer changed (nothing "only in a / only in b" there)
    assert lines[0] == "classifier  classifier.bias only in a; classifier.weight only in a"
    assert len(lines) == 2 and lines[1].startswith("bert.encoder.layer.1.output.dense  params ")


def _resnet_files(tmp_path):
    """A pretrained 1000-class resnet18 state_dict and a 10-class model fine-tuned from it (layer4 moved)."""
    torch.manual_seed(0)
    pre = torchvision.models.resnet18()
    torch.save(pre.state_dict(), tmp_path / "pre.pt")
    ft = torchvision.models.resnet18(num_classes=10)
    ft.load_state_dict({k: v for k, v in pre.state_dict().items() if not k.startswith("fc.")}, strict=False)
    with torch.no_grad():
        ft.layer4[1].conv2.weight.mul_(1.5)
    save_checkpoint(tmp_path / "ft.pt", checkpoint_payload(ft, arch=ARCH_ENTRY, include_rng=False))
    return tmp_path / "ft.pt", tmp_path / "pre.pt"


def test_partial_compares_what_fits_and_lists_what_was_left_out(tmp_path):
    ft, pre = _resnet_files(tmp_path)
    out = _diff(ft, pre, "--arch", ARCH, "--partial")
    assert out.returncode == 0, out.stderr
    assert "left out (not loaded from b's file, partial load): 2 tensor(s): fc.bias, fc.weight" in out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("layer4.1.conv2  params 3.333e-01")  # 0.5 / 1.5; fc not compared


def _lora_model(seed: int):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    add_lora(model, ADAPTED, r=4, alpha=8)
    torch.manual_seed(seed)
    with torch.no_grad():  # as if trained: B leaves zero
        for path in ADAPTED:
            model.get_submodule(path).lora_B["default"].weight.normal_(0, 0.05)
    return model


def _save_lora(model, path):
    save_checkpoint(path, checkpoint_payload(model, arch=ARCH_ENTRY, include_rng=False, edits=[lora_edit(ADAPTED, 4, 8)]))
    return path


@torch.no_grad()
def test_a_lora_checkpoint_compares_merged_with_the_plain_one(tmp_path):
    import peft  # noqa: F401 - in the test extra: a missing extra fails here, never skips
    torch.manual_seed(0)
    plain = torchvision.models.resnet18(num_classes=10)
    save_checkpoint(tmp_path / "plain.pt", checkpoint_payload(plain, arch=ARCH_ENTRY, include_rng=False))
    adapted = _lora_model(1)
    merged = merged_copy(adapted)
    expected = {p: float((merged.get_submodule(p).weight - plain.get_submodule(p).weight).norm()
                         / torch.cat([plain.get_submodule(p).weight.flatten(), plain.get_submodule(p).bias.flatten()]
                                     if p == "fc" else [plain.get_submodule(p).weight.flatten()]).norm())
                for p in ADAPTED}

    comparison = compare_models(plain, adapted)
    assert comparison.merged == {"a": [], "b": ADAPTED}
    assert {c.module: c.params for c in comparison.changes} == pytest.approx(expected, rel=1e-5)
    assert all(c.how == "LoRA merged in b" and not c.note for c in comparison.changes)

    out = _diff(tmp_path / "plain.pt", _save_lora(adapted, tmp_path / "lora.pt"))
    assert out.returncode == 0, out.stderr
    assert "LoRA: b's adapters merged (W + alpha/r * B@A)" in out.stderr
    lines = out.stdout.strip().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(ADAPTED)
    assert all("(LoRA merged in b)" in line and "only in" not in line for line in lines)


def test_two_checkpoints_of_one_lora_run_compare_by_adapter(tmp_path):
    import peft  # noqa: F401 - in the test extra: a missing extra fails here, never skips
    first = _save_lora(_lora_model(1), tmp_path / "epoch1.pt")
    last = _save_lora(_lora_model(2), tmp_path / "last.pt")
    out = _diff(first, last, "--arch", ARCH)  # --arch used to drop the files' adapters: 3 missing, 8 unexpected
    assert out.returncode == 0, out.stderr
    assert "compared by adapter" in out.stderr
    modules = {line.split()[0] for line in out.stdout.strip().splitlines()}
    assert modules == {f"{p}.lora_B.default" for p in ADAPTED}  # A and the base weights did not move
