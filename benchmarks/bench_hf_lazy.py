"""A large Hugging Face folder opened lazily to its full tree with FLOPs (issue 39).

A ~1.1B-parameter Llama folder (TinyLlama's shape: hidden 2048, intermediate
5632, 22 layers, 32 heads with 4 key/value heads, vocabulary 32,000; random
bf16 weights in :data:`SHARDS` safetensors shards with an index) is generated once into :data:`CACHE` (about 2.2 GB, not timed) and kept
for later runs. Then, in :data:`ROUNDS` fresh processes that imported
Workbench, torch and transformers first (the window's state a few seconds after
it starts), figures are medians with ``_min`` / ``_max``:

``open_hf_1b_folder_tree_flops_s``
    ``open_model(folder)``, ``build_summary`` (the tree), ``annotate_shapes_and_flops``
    on the config's example input (output shapes and FLOPs) and ``find_nonfinite``
    (what the window runs after an open), s. Target <= 3 s.
``open_hf_1b_folder_tree_flops_rss_mb``
    The process's peak resident memory (``VmHWM``) over those steps minus its
    resident memory before them, MB. Target <= 500 MB.

Also reported: ``open_hf_1b_folder_tree_gflops`` (the FLOPs counted, G). Without
transformers installed the module reports nothing.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: Fresh processes measured.
ROUNDS = 3
#: Where the generated folder is kept between runs (built once; delete it to build it again).
CACHE = Path(tempfile.gettempdir()) / "workbench-bench-cache" / "llama-1b-bf16-5-shards"

CHILD = r"""
import json, resource, sys, time

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20

def peak_mb():  # VmHWM: this process's own peak (ru_maxrss keeps the parent's peak across exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024

import torch, transformers
import transformers.models.llama.modeling_llama
from workbench.core.model.health_check import find_nonfinite
from workbench.core.model.opening import open_model
from workbench.core.model.tree import annotate_shapes_and_flops, build_summary
base = rss_mb()
t0 = time.perf_counter()
opened = open_model(sys.argv[1])
root = build_summary(opened.model)
flops = annotate_shapes_and_flops(root, example=opened.example)
bad = find_nonfinite(opened.model)
t1 = time.perf_counter()
peak = peak_mb()
print(json.dumps({"s": t1 - t0, "rss": peak - base, "flops": flops, "params": root.total_params,
                  "bad": len(bad)}))
"""


#: Shards the folder is written in (TinyLlama's own folder has one file; five make the index and the per-file
#: identity checks count).
SHARDS = 5


def _make_folder(folder: Path) -> None:
    """TinyLlama-shaped random bf16 weights in :data:`SHARDS` safetensors shards and an index (built on meta)."""
    import torch
    import transformers
    from safetensors.torch import save_file

    config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                                      num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                                      max_position_embeddings=2048, torch_dtype="bfloat16")
    config.architectures = ["LlamaForCausalLM"]
    with torch.device("meta"):
        shapes = {k: p.shape for k, p in transformers.LlamaForCausalLM(config).state_dict().items()}
    folder.mkdir(parents=True, exist_ok=True)
    per_shard = sum(s.numel() for s in shapes.values()) / SHARDS
    groups: list[list[str]] = [[]]
    filled = 0
    for key, shape in shapes.items():
        if filled >= per_shard * len(groups) and len(groups) < SHARDS:
            groups.append([])
        groups[-1].append(key)
        filled += shape.numel()
    g = torch.Generator().manual_seed(0)
    weight_map = {}
    for i, keys in enumerate(groups, 1):
        name = f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        save_file({k: (torch.randn(shapes[k], generator=g) * 0.02).to(torch.bfloat16) for k in keys},
                  str(folder / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in keys})
    total = sum((folder / n).stat().st_size for n in set(weight_map.values()))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                     "weight_map": weight_map}))
    config.save_pretrained(folder)


def _folder() -> Path:
    """The cached 1.1B folder, generated when missing (a ``complete`` marker says a build finished)."""
    marker = CACHE / "complete"
    if not marker.exists():
        _make_folder(CACHE)
        print(f"open_hf_1b_folder_tree: built {CACHE} ({SHARDS} shards)")
        marker.write_text("ok\n")
    return CACHE


def _child(folder: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run() -> dict[str, float]:
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("open_hf_1b_folder_tree: transformers is not installed; skipped")
        return {}
    folder = _folder()
    rows = [_child(folder) for _ in range(ROUNDS)]
    figures: dict[str, float] = {}
    for key, name in (("s", "open_hf_1b_folder_tree_flops_s"), ("rss", "open_hf_1b_folder_tree_flops_rss_mb")):
        values = [r[key] for r in rows]
        figures.update({name: statistics.median(values), f"{name}_min": min(values), f"{name}_max": max(values)})
    figures["open_hf_1b_folder_tree_gflops"] = rows[0]["flops"] / 1e9
    print(f"open_hf_1b_folder_tree: {rows[0]['params']:,} parameters, {rows[0]['flops'] / 1e9:.2f} GFLOPs")
    return figures
