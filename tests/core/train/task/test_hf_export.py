"""Saving a model as a folder with its tokenizer, and finding the tokenizer a run used."""

from __future__ import annotations

import torch

from tests.core.train.text_models import word_tokenizer

import transformers  # noqa: E402 - in the test extra: fails if missing, never skips

from workbench.core.train.task.hf_export import run_tokenizer, save_model_folder  # noqa: E402


def test_a_classifier_and_its_tokenizer_load_back(tmp_path):
    tok = word_tokenizer(["good bad film"], tmp_path / "tok")
    config = transformers.BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    model = transformers.BertForSequenceClassification(config).eval()
    written = {p.name for p in save_model_folder(model, tmp_path / "out", tmp_path / "tok")}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= written
    back = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "out")).eval()
    assert back.config.id2label == {0: "neg", 1: "pos"}
    enc = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))(["good film"], return_tensors="pt")
    with torch.no_grad():
        assert torch.allclose(back(**enc).logits, model(**enc).logits)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_run_tokenizer_reads_the_run_file_beside_the_checkpoint(tmp_path):
    word_tokenizer(["a"], tmp_path / "tok")
    assert run_tokenizer(tmp_path / "best.pt") is None
    (tmp_path / "run.toml").write_text(f'[task]\nkind = "causal_lm"\n[data]\ndataset = "text"\n'
                                       f'tokenizer = "{tmp_path / "tok"}"\n')
    assert run_tokenizer(tmp_path / "best.pt") == str(tmp_path / "tok")
