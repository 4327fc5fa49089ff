"""A tiny causal LM folder fine-tuned on a text file: perplexity falls, samples at every evaluation, the
exported folder generates with transformers."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from tests.core.train.text_models import STORY, tiny_llama_folder

import transformers  # noqa: E402 - in the test extra: fails if missing, never skips

from workbench.core.train.task.samples import SAMPLES_FILE, read_samples  # noqa: E402


def test_read_samples_skips_lines_that_are_not_objects(tmp_path):
    (tmp_path / SAMPLES_FILE).write_text('{"step": 1, "prompt": "a", "completion": "b"}\nnot json\n[1]\n')
    assert read_samples(tmp_path) == [{"step": 1, "prompt": "a", "completion": "b"}]
    assert read_samples(tmp_path / "none") == []


def test_causal_lm_learns_samples_and_exports(tmp_path):
    from workbench.cli import main
    from workbench.core.train.launch.headless import train_from_toml

    tiny_llama_folder(tmp_path / "model")
    (tmp_path / "story.txt").write_text(STORY)
    (tmp_path / "run.toml").write_text(f"""epochs = 2
optimizer = "adamw"
lr = 0.01
tensorboard = false
run_dir = "{tmp_path / 'out'}"
[model]
checkpoint = "model"
[task]
kind = "causal_lm"
prompts = ["the cat sees", "the dog"]
max_new_tokens = 6
[data]
dataset = "text"
root = "story.txt"
block_size = 16
batch_size = 8
""")
    lines: list[str] = []
    assert train_from_toml(tmp_path / "run.toml", out=lines.append) == 0, lines
    rows = list(csv.DictReader(open(tmp_path / "out" / "metrics.csv")))
    ppl = [float(r["val_perplexity"]) for r in rows]
    assert ppl[-1] < ppl[0] * 0.6, ppl  # measured 8.8 -> 4.0 over 2 epochs
    for r in rows:  # exp(mean validation loss)
        assert float(r["val_perplexity"]) == pytest.approx(torch.tensor(float(r["val_loss"])).exp().item(), rel=1e-5)
    samples = [json.loads(line) for line in (tmp_path / "out" / SAMPLES_FILE).read_text().splitlines()]
    assert [(s["step"], s["epoch"], s["prompt"]) for s in samples] == \
        [(step, epoch, p) for epoch, step in enumerate((4, 8)) for p in ("the cat sees", "the dog")]
    assert all(isinstance(s["completion"], str) for s in samples) and samples[-2]["completion"]

    out = tmp_path / "exported"
    assert main(["export", str(tmp_path / "out" / "best.pt"), "--format", "hf", "--out", str(out)]) == 0
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    ids = tok("the cat sees", return_tensors="pt", add_special_tokens=False)["input_ids"]
    generated = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=6,
                               do_sample=False, pad_token_id=tok.pad_token_id)
    assert tok.decode(generated[0, ids.shape[1]:], skip_special_tokens=True) == samples[-2]["completion"]
