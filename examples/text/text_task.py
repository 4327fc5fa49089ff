"""A text classifier on token ids, with the user's own Dataset and training step.

The "texts" are sequences of token ids; a sequence is positive (class 1) when it
holds more "good" tokens (ids 10-19) than "bad" ones (ids 20-29). Everything
here is plain PyTorch: Workbench calls ``make_dataset`` for the data,
``TinyTextClassifier`` for the model and ``training_step`` for each batch.
"""

import torch
from torch import nn
from torch.utils.data import Dataset


class TokenIds(Dataset):
    """``n`` sequences of ``length`` token ids below ``vocab``, as ``{"input_ids": (L,), "label": ()}``."""

    def __init__(self, n: int, vocab: int, length: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)
        good = ((self.ids >= 10) & (self.ids < 20)).sum(1)
        bad = ((self.ids >= 20) & (self.ids < 30)).sum(1)
        self.labels = (good > bad).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "label": self.labels[i]}


def make_dataset(n: int = 1200, vocab: int = 64, length: int = 24):
    """The training and validation splits (different seeds: no shared sequences)."""
    return {"train": TokenIds(n, vocab, length, seed=0), "val": TokenIds(n // 4, vocab, length, seed=1)}


class TinyTextClassifier(nn.Module):
    """Embedding -> mean over the sequence -> Linear: ``(N, L)`` int64 ids -> ``(N, num_classes)`` logits."""

    def __init__(self, vocab: int = 64, dim: int = 32, num_classes: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, input_ids):
        return self.head(self.embed(input_ids).mean(1))


def training_step(model, batch):
    """The loss of a batch, and its accuracy (a metric: a live curve and a metrics.csv column)."""
    logits = model(batch["input_ids"])
    loss = nn.functional.cross_entropy(logits, batch["label"])
    acc = (logits.argmax(1) == batch["label"]).float().mean()
    return {"loss": loss, "acc": acc}
