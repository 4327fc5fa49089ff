"""The repeated blocks of a model, and "Freeze embeddings and the first N blocks" (issue 40)."""

from __future__ import annotations

import pytest
import torch
import torchvision
import transformers

from workbench.core.model.blocks import repeated_blocks
from workbench.core.model.freezing import freeze_first_blocks


def _bert():
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=6, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100, num_labels=3)
    return transformers.BertForSequenceClassification(cfg)


def test_the_blocks_of_a_bert_and_a_resnet():
    assert [n for n, _ in repeated_blocks(_bert())] == [f"bert.encoder.layer.{i}" for i in range(6)]
    assert [n for n, _ in repeated_blocks(torchvision.models.resnet18())] == ["layer4.0", "layer4.1"]
    assert repeated_blocks(torch.nn.Linear(3, 4)) == []


def test_freeze_first_blocks_freezes_the_embeddings_and_exactly_those_blocks():
    model = _bert()
    changed = freeze_first_blocks(model, 4)
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == set(changed)
    assert any(n.startswith("bert.embeddings.") for n in frozen)
    for i in range(6):
        inside = {n for n, _ in model.named_parameters() if n.startswith(f"bert.encoder.layer.{i}.")}
        assert (inside <= frozen) if i < 4 else not (inside & frozen), i
    assert not any(n.startswith(("bert.pooler.", "classifier.")) for n in frozen)
    all_of_them = _bert()
    freeze_first_blocks(all_of_them, 6)
    assert all(not p.requires_grad for n, p in all_of_them.named_parameters() if n.startswith("bert.encoder."))
    assert all(p.requires_grad for p in all_of_them.classifier.parameters())
    with pytest.raises(ValueError, match="1 to 6"):
        freeze_first_blocks(_bert(), 7)
