"""Red team: an open model owns its weights -- its file truncated, rewritten in place or deleted changes nothing.

Memory-mapped weights died of SIGBUS at their next read after a truncation (it
would kill pytest, so each check runs in a fresh process whose exit code and
output are asserted) and silently became the new file's after a rewrite in
place (``save_pretrained`` over the same folder), which File > Save then wrote.
Real files: a Hugging Face folder and a plain safetensors file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.core.model import hf_build

import transformers  # noqa: E402 - in the test extra: fails if missing, never skips

REPO = Path(__file__).resolve().parents[3]

CHILD = r"""
import os, sys
from pathlib import Path
import torch
from workbench.core.model.opening import open_model
from workbench.core.model.hf_build import save_hf_folder
from workbench.core.model.formats.safetensors import read_shards

path, weights, change, out = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
opened = open_model(path)
original = {k: v.clone() for k, v in opened.model.state_dict().items()}
size = weights.stat().st_size
if change == "truncate":
    os.truncate(weights, 8 + (size - 8) // 4)
elif change == "rewrite":  # the same size, other bytes, in place (the inode a map would follow)
    with open(weights, "r+b") as f:
        f.seek(size // 2)
        f.write(b"\x7f" * (size - size // 2))
elif change == "delete":
    weights.unlink()
params = {n: p.detach().clone() for n, p in opened.model.named_parameters()}  # every byte touched again
state = opened.model.state_dict()
same = state.keys() == original.keys() and all(torch.equal(state[k], original[k]) for k in original)
same_params = all(torch.equal(params[n], original[n]) for n in params if n in original)
if hasattr(opened.model, "save_pretrained"):
    save_hf_folder(opened.model, out)
    saved = read_shards(sorted(out.glob("*.safetensors")))[0]
else:
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in state.items()}, str(out))
    saved = read_shards([out])[0]
written = all(torch.equal(saved[k], original[k]) for k in saved) and len(saved) > 0
print("RESULT", same, same_params, written)
"""


def _run(path: Path, weights: Path, change: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, str(path), str(weights), change, str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture()
def hf_folder(tmp_path):
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100, max_position_embeddings=64, num_labels=3)
    cfg.architectures = ["BertForSequenceClassification"]
    torch.manual_seed(0)
    folder = tmp_path / "bert"
    with hf_build.quiet(transformers):
        transformers.BertForSequenceClassification(cfg).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("change", ["truncate", "rewrite", "delete"])
def test_a_model_folder_survives_its_weights_changing(hf_folder, tmp_path, change):
    proc = _run(hf_folder, hf_folder / "model.safetensors", change, tmp_path / "saved")
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # -7: SIGBUS
    assert "RESULT True True True" in proc.stdout, proc.stdout + proc.stderr[-2000:]


@pytest.mark.parametrize("change", ["truncate", "rewrite"])
def test_a_safetensors_file_survives_changing(tmp_path, change):
    from safetensors.torch import save_file
    import torchvision

    torch.manual_seed(0)
    path = tmp_path / "resnet18.safetensors"
    model = torchvision.models.resnet18(num_classes=4)
    save_file(model.state_dict(), str(path), metadata={"arch": '{"name": "resnet18", "kwargs": {"num_classes": 4}}'})
    proc = subprocess.run([sys.executable, "-c", CHILD.replace("open_model(path)",
                                                               "open_model(path, 'resnet18(num_classes=4)')"),
                           str(path), str(path), change, str(tmp_path / "saved.safetensors")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "RESULT True True True" in proc.stdout, proc.stdout + proc.stderr[-2000:]
