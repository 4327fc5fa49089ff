"""A model that computes its own loss, as Hugging Face models do when the batch holds ``labels``.

``TinyTagger`` returns ``{"loss": ..., "logits": ...}`` from ``forward(input_ids,
labels=None)``; the batches are dicts, passed to the model as keyword arguments
(``model(**batch)``). The task: tag each token as "even" or "odd" id.
"""

import torch
from torch import nn
from torch.utils.data import Dataset


class Tokens(Dataset):
    """``n`` sequences of ``length`` token ids, each labelled with its id's parity: ``{"input_ids", "labels"}``."""

    def __init__(self, n: int, vocab: int, length: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i] % 2}


def make_dataset(n: int = 800, vocab: int = 50, length: int = 16):
    return Tokens(n, vocab, length, seed=0), Tokens(n // 4, vocab, length, seed=1)


class TinyTagger(nn.Module):
    """``(N, L)`` ids -> ``(N, L, 2)`` logits; with ``labels`` ``(N, L)`` also the mean cross-entropy as ``loss``."""

    def __init__(self, vocab: int = 50, dim: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.classifier = nn.Linear(dim, 2)

    def forward(self, input_ids, labels=None):
        logits = self.classifier(self.embed(input_ids))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits.reshape(-1, 2), labels.reshape(-1))
        return out
