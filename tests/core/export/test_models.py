"""Issue 43's model list: each model exported, checked by ``export`` at its tolerance, and reloaded here by the
runtime a user would use (onnxruntime, ``torch.export.load``, safetensors, ``from_pretrained``) — torchvision
mobilenet_v3_small and a small ViT, a timm convnext_atto, a Hugging Face BERT classifier and GPT-2 causal LM with
their tokenizers, and a model whose LoRA adapters are merged for the export.

(torchvision resnet18 is exported in test_api.py / test_onnx_format.py through the shared fixture.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

from tests.core.train.text_models import word_tokenizer
from workbench.core.export import export
from workbench.core.export.compare import TOLERANCES

ATOL, RTOL = TOLERANCES["fp32"]


def _seeded(build):
    torch.manual_seed(0)
    return build().eval()


def _images(n: int, size: int) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(1))


def _onnx_run(path, inputs: dict[str, torch.Tensor]) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {n: inputs[n].numpy() for n in names})


def _assert_passed(report) -> None:
    assert report.checked and report.passed, "\n".join(report.lines())
    assert report.checks and all(c.passed for c in report.checks)


def _assert_close(got, want: torch.Tensor) -> None:
    if isinstance(got, torch.Tensor):
        got = got.detach().numpy()
    assert np.abs(want.detach().numpy()).max() > 1e-3  # a real output, not zeros
    np.testing.assert_allclose(got, want.detach().numpy(), atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------------------- vision models
def _vit():
    vit = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2,
                                               hidden_dim=32, mlp_dim=64, num_classes=10)
    nn.init.normal_(vit.heads.head.weight)  # torchvision starts the head at zero: every logit would be 0
    return vit


def _convnext():
    import timm

    return timm.create_model("convnext_atto", pretrained=False, num_classes=10)


def _mobilenet():
    net = torchvision.models.mobilenet_v3_small(num_classes=10)
    for layer in net.classifier:  # torchvision's N(0, 0.01) head gives logits ~1e-5: nn.Linear's own init instead
        if isinstance(layer, nn.Linear):
            layer.reset_parameters()
    with torch.no_grad():  # BatchNorm's running statistics of real activations: with the initial ones (mean 0,
        net.train()(_images(8, 64))  # variance 1) the random network's outputs are ~1e-10, and any export equals it
    net.eval()
    return net


VISION = {  # name: (builder, image size, formats tested)
    "mobilenet_v3_small": (_mobilenet, 64, ("onnx", "safetensors")),
    "vit_b_16_small": (_vit, 32, ("onnx", "pt2", "safetensors")),
    "convnext_atto": (_convnext, 64, ("onnx", "safetensors")),
}
CASES = [pytest.param(name, fmt, marks=[pytest.mark.slow] if (name, fmt) == ("mobilenet_v3_small", "onnx") else [],
                      id=f"{name}-{fmt}")
         for name, (_, _, formats) in VISION.items() for fmt in formats]


@pytest.mark.parametrize(("name", "fmt"), CASES)
def test_vision_model_exports_checks_and_reloads(name, fmt, tmp_path):
    build, size, _ = VISION[name]
    model = _seeded(build)
    out = tmp_path / f"{name}.{fmt}"
    report = export(model, fmt, out, example=_images(1, size))
    _assert_passed(report)
    assert (tmp_path / "export_report.json").is_file()
    x = _images(3, size)  # another batch size than the example: the batch dimension is dynamic
    with torch.no_grad():
        want = model(x)
    if fmt == "onnx":
        (got,) = _onnx_run(out, {_input_names(out)[0]: x})
    elif fmt == "pt2":
        with torch.no_grad():
            got = torch.export.load(str(out)).module()(x)
    else:
        from safetensors.torch import load_file

        back = _seeded(build)
        back.load_state_dict(load_file(str(out)), strict=True)
        with torch.no_grad():
            got = back.eval()(x)
    _assert_close(got, want)


def _input_names(path) -> list[str]:
    import onnx

    return [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]


# ---------------------------------------------------------------------------- Hugging Face models
TEXTS = ["the cat sees the ball", "a dog likes the stick", "the bird chases a mouse in the garden"]


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    """A WordLevel tokenizer trained on :data:`TEXTS`, saved as a ``PreTrainedTokenizerFast`` folder."""
    folder = tmp_path_factory.mktemp("tokenizer")
    return folder, word_tokenizer(TEXTS, folder)


def _bert(vocab: int):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, num_labels=3,
                        id2label={0: "neg", 1: "neutral", 2: "pos"}, label2id={"neg": 0, "neutral": 1, "pos": 2})
    return BertForSequenceClassification(config)


def _gpt2(vocab: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    return GPT2LMHeadModel(config)


HF = {"bert_classifier": (_bert, "AutoModelForSequenceClassification", "logits"),
      "gpt2_lm": (_gpt2, "AutoModelForCausalLM", "logits")}


def _batch(tok) -> dict[str, torch.Tensor]:
    enc = tok(TEXTS[:2], padding="max_length", max_length=8, truncation=True, return_tensors="pt")
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


@pytest.mark.parametrize("name", list(HF))
def test_hf_folder_loads_with_from_pretrained_and_its_tokenizer_round_trips(name, tokenizer_folder, tmp_path):
    import transformers

    folder, tok = tokenizer_folder
    build, auto, _ = HF[name]
    model = _seeded(lambda: build(len(tok)))
    batch = _batch(tok)
    out = tmp_path / name
    report = export(model, "hf", out, example=batch, tokenizer=folder)
    _assert_passed(report)
    assert {"config.json", "model.safetensors", "tokenizer.json", "export_report.json"} <= {
        p.name for p in out.iterdir()}
    back = getattr(transformers, auto).from_pretrained(str(out)).eval()
    with torch.no_grad():
        _assert_close(back(**batch).logits, model(**batch).logits)
    if name == "bert_classifier":
        assert back.config.id2label == {0: "neg", 1: "neutral", 2: "pos"}
    loaded = transformers.AutoTokenizer.from_pretrained(str(out))
    ids = loaded(TEXTS[2])["input_ids"]
    assert ids == tok(TEXTS[2])["input_ids"]
    assert loaded.decode(ids) == TEXTS[2]


def test_bert_classifier_exports_to_onnx_with_a_token_batch(tokenizer_folder, tmp_path):
    _, tok = tokenizer_folder
    model = _seeded(lambda: _bert(len(tok)))
    batch = _batch(tok)
    out = tmp_path / "bert.onnx"
    report = export(model, "onnx", out, example=batch)
    _assert_passed(report)
    got = _onnx_run(out, batch)
    with torch.no_grad():
        _assert_close(got[0], model(**batch).logits)


# ---------------------------------------------------------------------------- LoRA merged
class _Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU())
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


def test_lora_adapters_are_merged_and_the_onnx_export_equals_the_adapted_model(tmp_path):
    from workbench.core.model.lora import add_lora, lora_paths

    model = _seeded(_Classifier)
    add_lora(model, ["encoder.0", "encoder.2"], r=4, alpha=8)
    torch.manual_seed(1)
    with torch.no_grad():  # B starts at zero: randomize the adapters so that merging them matters
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.5)
    model.eval()
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        adapted = model(x)
        base = nn.Sequential(*[m.base_layer if hasattr(m, "base_layer") else m for m in model.encoder])
        assert not torch.allclose(model.head(base(x)), adapted, atol=1e-3)  # the adapters change the output
    out = tmp_path / "lora.onnx"
    report = export(model, "onnx", out, example=x[:2])
    _assert_passed(report)
    assert any("LoRA adapters merged" in n for n in report.notes)
    assert lora_paths(model) == ["encoder.0", "encoder.2"]  # the caller's model keeps its adapters
    import onnx

    graph = onnx.load(str(out))
    assert not any("lora" in init.name.lower() for init in graph.graph.initializer)
    (got,) = _onnx_run(out, {_input_names(out)[0]: x})
    _assert_close(got, adapted)


def test_gpt2_exports_to_onnx_with_its_kv_cache_off_and_answers_as_the_model(tokenizer_folder, tmp_path):
    """A finding (torch 2.x, transformers' DynamicCache): with ``use_cache=True`` (GPT-2's default) the model
    returns a cache object that neither ONNX exporter takes. The export turns the cache off on its copy (and
    says so): the graph gives the logits, equal to the model's; the caller's model keeps its config."""
    _, tok = tokenizer_folder
    model = _seeded(lambda: _gpt2(len(tok)))
    batch = _batch(tok)
    report = export(model, "onnx", tmp_path / "gpt2.onnx", example=batch)
    assert report.passed and any("use_cache turned off" in n for n in report.notes), report.lines()
    assert model.config.use_cache is True
    got = _onnx_run(tmp_path / "gpt2.onnx", batch)[0]
    with torch.no_grad():
        want = model.eval()(**batch, use_cache=False).logits
    _assert_close(got, want)

def test_lora_adapters_saved_apart_load_with_peft_onto_the_base_folder_and_answer_as_the_model(
        tokenizer_folder, tmp_path):
    """``--format hf --adapters separate``: peft's adapter folder (the trained head as ``modules_to_save``, the
    base folder as ``base_model_name_or_path``) and the tokenizer; the check loads them onto the base with
    ``PeftModel.from_pretrained`` and compares with the adapted model."""
    import peft
    import transformers

    from workbench.core.export import ExportError
    from workbench.core.model.lora import add_lora

    folder, tok = tokenizer_folder
    base = tmp_path / "base"
    _seeded(lambda: _bert(len(tok))).save_pretrained(str(base))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(base))
    add_lora(model, ["bert.encoder.layer.0.attention.self.query", "bert.encoder.layer.1.attention.self.value"],
             r=4, alpha=8)
    torch.manual_seed(3)
    with torch.no_grad():  # trained adapters and a trained head: both must travel
        for name, p in model.named_parameters():
            if "lora_" in name or name.startswith("classifier."):
                p.copy_(torch.randn_like(p) * 0.3)
    model.eval()
    batch = _batch(tok)
    out = tmp_path / "adapters"
    report = export(model, "hf", out, example=batch, tokenizer=folder, adapters="separate")
    _assert_passed(report)
    names = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= names
    assert "config.json" not in names and "model.safetensors" not in names  # the base weights stay in the base
    config = peft.PeftConfig.from_pretrained(str(out))
    assert config.base_model_name_or_path == str(base) and config.task_type == "SEQ_CLS"
    fresh = transformers.AutoModelForSequenceClassification.from_pretrained(str(base))
    back = peft.PeftModel.from_pretrained(fresh, str(out)).eval()
    with torch.no_grad():
        _assert_close(back(**batch).logits, model(**batch).logits)
    with pytest.raises(ExportError, match="only with the hf format"):
        export(model, "onnx", tmp_path / "m.onnx", example=batch, adapters="separate")
    with pytest.raises(ExportError, match="no LoRA adapters"):
        export(_seeded(lambda: _bert(len(tok))), "hf", tmp_path / "plain", example=batch, adapters="separate")
    assert not (tmp_path / "m.onnx").exists() and not (tmp_path / "plain").exists()
