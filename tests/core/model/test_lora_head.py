"""LoRA on a Hugging Face classifier keeps its task head trainable and saves it with the adapters (issue 40:
LoRA on ``bert`` froze ``classifier`` without a word, and the adapters-only save dropped the trained head)."""

from __future__ import annotations

import peft
import torch
import transformers

from workbench.core.model.lora import add_lora, head_paths, save_adapters


def _classifier(seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100, num_labels=3)
    return transformers.BertForSequenceClassification(cfg).eval()


def test_the_task_head_stays_trainable_and_is_saved_with_the_adapters(tmp_path):
    model = _classifier()
    assert head_paths(model) == ["classifier"]
    add_lora(model, ["bert.encoder.layer.0.attention.self.query"], r=2, alpha=4)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert {"classifier.weight", "classifier.bias"} <= trainable
    assert not any(n.startswith("bert.") and "lora_" not in n for n in trainable)
    with torch.no_grad():  # "trained": adapters and head moved
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.1)
    save_adapters(model, tmp_path / "adapters")
    import json

    config = json.loads((tmp_path / "adapters" / "adapter_config.json").read_text())
    assert config["task_type"] == "SEQ_CLS" and config["modules_to_save"] == ["classifier"]
    fresh = _classifier()  # the same pretrained weights, a fresh (untrained) head
    loaded = peft.PeftModel.from_pretrained(fresh, str(tmp_path / "adapters")).eval()
    ids = torch.randint(0, 100, (2, 9))
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)


def test_a_causal_lm_has_no_task_head():
    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50, n_positions=16)
    assert head_paths(transformers.GPT2LMHeadModel(cfg)) == []
    assert head_paths(transformers.BertModel(transformers.BertConfig(hidden_size=32, num_hidden_layers=1,
                                                                     num_attention_heads=2, intermediate_size=64,
                                                                     vocab_size=100))) == []
