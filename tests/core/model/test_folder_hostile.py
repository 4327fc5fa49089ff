"""Red team: model folders whose config or index lies, opened by ``workbench inspect`` in a real process.

Each folder is a real transformers model saved by ``save_pretrained``, then one
file edited the way an attacker (or a broken tool) would. The rule: one line
naming the file and the key, exit 1, in bounded time and memory, nothing
written into the folder, no network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from workbench.core.errors import CheckpointError
from workbench.core.model import hf_build
from workbench.core.model.example_input import MAX_EXAMPLE_IMAGE_SIDE, hf_example_input
from workbench.core.model.formats import model_folder, read_checkpoint

import transformers  # noqa: E402 - in the test extra: fails if missing, never skips

REPO = Path(__file__).resolve().parents[3]
#: What a refusal may take: a fresh process imports torch and transformers (~5 s here), then reads a few kB.
LIMIT_S = 60
#: Peak resident memory of the refusing process (torch and transformers imported: ~600 MB here).
LIMIT_RSS = 1500 * 2**20


def _save(model, folder: Path, **kwargs) -> Path:
    with hf_build.quiet(transformers):
        model.save_pretrained(folder, **kwargs)
    return folder


def _llama(folder: Path, **kwargs) -> Path:
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                   num_key_value_heads=1, vocab_size=64, max_position_embeddings=64)
    cfg.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(0)
    return _save(transformers.LlamaForCausalLM(cfg), folder, **kwargs)


def _convnext(folder: Path) -> Path:
    cfg = transformers.ConvNextConfig(hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1], image_size=32, num_labels=3)
    cfg.architectures = ["ConvNextForImageClassification"]
    torch.manual_seed(0)
    return _save(transformers.ConvNextForImageClassification(cfg), folder)


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


#: ``python -m workbench ARGS`` that prints its own peak resident memory (``VmHWM``, kB) on stdout at exit
#: (``ru_maxrss`` of a child keeps its parent's peak across exec).
CLI = r"""
import atexit, runpy, sys

def peak():
    with open("/proc/self/status") as f:
        print("PEAK_KB", next(line.split()[1] for line in f if line.startswith("VmHWM:")), flush=True)

atexit.register(peak)
sys.argv = ["workbench", *sys.argv[1:]]
runpy.run_module("workbench", run_name="__main__")
"""


def _inspect(folder: Path) -> tuple[int, str, float, int]:
    """``workbench inspect FOLDER`` offline in a fresh process: (exit code, stderr, seconds, peak RSS bytes)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", CLI, "inspect", str(folder)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"workbench inspect {folder} ran past {LIMIT_S} s")
    elapsed = time.monotonic() - start
    peak = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("PEAK_KB ")]
    return proc.returncode, proc.stderr, elapsed, int(peak[-1]) * 1024 if peak else 0


def _assert_refused(folder: Path, *words: str) -> str:
    before = _listing(folder)
    code, err, elapsed, peak = _inspect(folder)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 1, err
    assert len(lines) == 1, err
    line = lines[0]
    for word in words:
        assert word in line, line
    assert "Traceback" not in err
    assert elapsed < LIMIT_S
    assert 0 < peak < LIMIT_RSS, peak
    assert _listing(folder) == before  # nothing written
    return line


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux")
def test_a_million_layers_beside_two_layers_of_weights_is_refused_quickly(tmp_path):
    """It hung past 60 s building a million decoder layers."""
    folder = _llama(tmp_path / "llama")
    _edit_json(folder / "config.json", lambda d: d.update(num_hidden_layers=10**6))
    line = _assert_refused(folder, str(folder / "config.json"), "num_hidden_layers = 1000000", "tensors")
    assert "layer" in line


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux")
def test_an_image_size_of_30000_is_refused_before_the_example_is_made(tmp_path):
    """It took 3 GB and was killed making a (1, 3, 30000, 30000) example image."""
    folder = _convnext(tmp_path / "convnext")
    _edit_json(folder / "config.json", lambda d: d.update(image_size=30000))
    _assert_refused(folder, str(folder / "config.json"), "image_size = 30000", f"{MAX_EXAMPLE_IMAGE_SIDE:,}")


@pytest.mark.parametrize("weight_map", ["list_of_pairs", "list_values"])
def test_a_weight_map_that_is_not_a_map_of_names_is_refused(tmp_path, weight_map):
    """A list value gave ``TypeError: unhashable type: 'list'``."""
    folder = _llama(tmp_path / "sharded", max_shard_size="20KB")
    index = folder / "model.safetensors.index.json"

    def edit(d):
        pairs = d["weight_map"]
        d["weight_map"] = (list(pairs.items()) if weight_map == "list_of_pairs"
                           else {k: [v] for k, v in pairs.items()})

    _edit_json(index, edit)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(folder)
    assert str(index) in str(info.value) and "weight_map" in str(info.value)
    if weight_map == "list_values":  # the CLI once: the same line, exit 1
        _assert_refused(folder, str(index), "weight_map")


def test_sizes_the_weights_bear_out_are_accepted(tmp_path):
    """The real folders themselves open: the checks refuse lies only."""
    for folder in (_llama(tmp_path / "llama"), _convnext(tmp_path / "convnext")):
        ckpt = read_checkpoint(folder)
        assert ckpt.metadata.format == "hf_folder"


@pytest.mark.parametrize("key, value, words", [
    ("hidden_size", 10**9, ["hidden_size = 1000000000", "values"]),
    ("depths", [1, 1, 10**6, 1], ["depths = [1, 1, 1000000, 1]", "tensors"]),
    ("vision_config", {"image_size": 10**5}, ["vision_config.image_size = 100000"]),
])
def test_each_kind_of_size_is_checked(tmp_path, key, value, words):
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], key: value}
    with pytest.raises(CheckpointError) as info:
        model_folder.check_config_sizes(config, tensors=20, elements=50_000, origin=tmp_path / "config.json")
    text = str(info.value)
    assert text.startswith(str(tmp_path / "config.json"))
    for word in words:
        assert word in text, text


def test_the_example_input_refuses_a_huge_image_itself():
    with pytest.raises(ValueError, match="image_size"):
        hf_example_input({"image_size": MAX_EXAMPLE_IMAGE_SIDE + 1})
    assert hf_example_input({"image_size": 32})["pixel_values"].shape == (1, 3, 32, 32)
