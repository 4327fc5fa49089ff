"""Opening a large Hugging Face model folder to its full tree (issue 27).

A ~1.1B-parameter Llama-style config (hidden 2048, 22 layers, 32 heads with 4
key/value heads, intermediate 5632, vocabulary 32,000: TinyLlama's shape) with
random bf16 weights in sharded safetensors, generated once by this benchmark
into a temporary folder (about 2.2 GB; not timed). Then, in two fresh processes:

``open_hf_1b_folder_s``
    In the window: ``open_model(folder)`` plus ``build_summary`` (the tree:
    names, shapes, dtypes, parameter counts), s, in a process that has done
    what the window does before the user picks a file: import Workbench, torch
    and transformers, and import transformers' modeling code ahead
    (:func:`workbench.core.model.warm_imports.start`, which the window starts
    half a second after it is shown; joined here, as a window up for a few
    seconds has it done). Target <= 2 s.
``open_hf_1b_folder_rss_mb``
    That process's resident memory after the open, minus its resident memory
    before it (the window's baseline, the imports done), MB. Target <= 500 MB.
``open_hf_1b_folder_cold_s``
    The same open in a process that imported nothing of transformers' modeling
    code ahead (the command line's ``workbench summary FOLDER``), s. Reported:
    most of it is transformers importing that code (~2.2 s here).

Also reported: ``open_hf_1b_warm_imports_s`` and
``open_hf_1b_warm_imports_rss_mb`` (the imports ahead, on the window's daemon
thread: their time and the resident memory they add to every window of an
install with transformers), ``open_hf_1b_import_s`` (Workbench, torch and
transformers' top level) and ``open_hf_1b_folder_again_s`` (a second open in
the same process). Without transformers installed the module reports nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20

t0 = time.perf_counter()
import torch, transformers
from workbench.core.model import warm_imports
from workbench.core.model.opening import open_model
from workbench.core.model.tree import build_summary
t1 = time.perf_counter()
warm, before_warm = 0.0, rss_mb()
if sys.argv[2] == "window":
    warm_imports.start().join()
    warm = time.perf_counter() - t1
base = rss_mb()
t2 = time.perf_counter()
opened = open_model(sys.argv[1])
root = build_summary(opened.model)
t3 = time.perf_counter()
rss = rss_mb() - base
again = time.perf_counter()
open_model(sys.argv[1])
build_summary(opened.model)
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "warm": warm, "warm_rss": base - before_warm, "open": t3 - t2, "rss": rss, "params": root.total_params,
                  "type": type(opened.model).__name__, "again": t4 - again}))
"""


def _child(folder: Path, kind: str) -> dict:
    """One fresh process's figures (``kind``: ``"window"`` imports ahead, ``"cold"`` does not)."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), kind], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _make_folder(folder: Path) -> None:
    """TinyLlama-shaped random bf16 weights, sharded at 500 MB (built on meta, filled shard by shard)."""
    import torch
    import transformers

    config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                                      num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                                      max_position_embeddings=2048, torch_dtype="bfloat16")
    config.architectures = ["LlamaForCausalLM"]
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    shards, weight_map, current, size = [], {}, {}, 0
    g = torch.Generator().manual_seed(0)

    def flush():
        nonlocal current, size
        if current:
            name = f"model-{len(shards) + 1:05d}.safetensors"
            save_file(current, str(folder / name), metadata={"format": "pt"})
            shards.append(name)
            weight_map.update({k: name for k in current})
            current, size = {}, 0

    for key, p in model.state_dict().items():
        t = (torch.randn(p.shape, generator=g) * 0.02).to(torch.bfloat16)
        current[key] = t
        size += t.numel() * 2
        if size > 500 * 2**20:
            flush()
    flush()
    total = len(shards)
    renamed = {}
    for i, name in enumerate(shards, 1):
        new = f"model-{i:05d}-of-{total:05d}.safetensors"
        (folder / name).rename(folder / new)
        renamed[name] = new
    index = {"metadata": {"total_size": sum((folder / n).stat().st_size for n in renamed.values())},
             "weight_map": {k: renamed[v] for k, v in weight_map.items()}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    config.save_pretrained(folder)


def run() -> dict[str, float]:
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("open_hf_1b_folder: transformers is not installed; skipped")
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "llama-1b"
        _make_folder(folder)
        cold = _child(folder, "cold")
        window = _child(folder, "window")
    print(f"open_hf_1b_folder: {window['params']:,} parameters ({window['type']}) opened to the tree in the window "
          f"in {window['open']:.2f} s, +{window['rss']:.0f} MB resident (modeling code imported ahead in "
          f"{window['warm']:.1f} s, +{window['warm_rss']:.0f} MB; top-level imports {window['import']:.1f} s)")
    print(f"open_hf_1b_folder: with nothing imported ahead (the command line) {cold['open']:.2f} s, "
          f"+{cold['rss']:.0f} MB; again in the same process {window['again']:.2f} s")
    return {"open_hf_1b_folder_s": window["open"], "open_hf_1b_folder_rss_mb": window["rss"],
            "open_hf_1b_folder_cold_s": cold["open"], "open_hf_1b_warm_imports_s": window["warm"],
            "open_hf_1b_warm_imports_rss_mb": window["warm_rss"],
            "open_hf_1b_import_s": window["import"], "open_hf_1b_folder_again_s": window["again"]}


if __name__ == "__main__":
    print(run())
