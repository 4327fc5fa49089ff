"""safetensors export: ``load_file`` reads it, Workbench reopens it as itself, the metadata says where it came from."""

from __future__ import annotations

import json

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from workbench.core.export import export
from workbench.core.model.opening import open_model
from workbench.core.model.saving import checkpoint_payload, save_model_file


def test_a_run_checkpoint_exports_to_safetensors_that_reopen_as_itself(resnet, image, tmp_path):
    run = tmp_path / "run"
    arch = {"name": "resnet18", "kwargs": {"num_classes": 10}}
    ckpt, _ = save_model_file(run / "best.pt", checkpoint_payload(resnet, arch=arch))
    (run / "run.toml").write_text('[data]\ndataset = "a_dataset_that_does_not_exist"\n')
    report = export(ckpt, "safetensors", tmp_path / "w.safetensors", example=image)
    assert report.passed and report.exporter == "safetensors" and report.source == str(ckpt)
    weights = load_file(str(tmp_path / "w.safetensors"))
    assert torch.equal(weights["fc.weight"], resnet.fc.weight.detach())
    with safe_open(str(tmp_path / "w.safetensors"), "pt") as f:
        meta = f.metadata()
    assert json.loads(meta["arch"])["name"] == "resnet18"
    assert json.loads(meta["source"]) == {"checkpoint": str(ckpt), "run": str(run)}
    back = open_model(tmp_path / "w.safetensors").model.eval()
    assert type(back).__name__ == "ResNet"
    with torch.no_grad():
        assert torch.equal(back(image), resnet(image))


def test_tied_weights_are_stored_once_and_reload_without_an_architecture(tmp_path):
    emb = torch.nn.Embedding(20, 8)
    head = torch.nn.Linear(8, 20, bias=False)
    head.weight = emb.weight
    model = torch.nn.Sequential(emb, head)
    report = export(model, "safetensors", tmp_path, example=torch.randint(0, 20, (2, 5)))
    assert report.passed, report.lines()
    assert list(load_file(str(tmp_path / "model.safetensors"))) == ["0.weight"]


def test_a_hugging_face_classifier_exports_as_a_folder_from_pretrained_loads(tmp_path):
    import transformers

    from tests.core.train.text_models import word_tokenizer

    tok = word_tokenizer(["good bad film"], tmp_path / "tok")
    config = transformers.BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    model = transformers.BertForSequenceClassification(config).eval()
    enc = dict(tok(["good film", "bad"], padding=True, return_tensors="pt"))
    report = export(model, "hf", tmp_path / "out", example=enc, tokenizer=tmp_path / "tok")
    assert report.passed and report.exporter == "save_pretrained", report.lines()
    assert {"config.json", "model.safetensors", "tokenizer.json", "export_report.json"} <= {
        p.name for p in (tmp_path / "out").iterdir()}
    back = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "out")).eval()
    assert back.config.id2label == {0: "neg", 1: "pos"}
    with torch.no_grad():
        assert torch.allclose(back(**enc).logits, model(**enc).logits)
