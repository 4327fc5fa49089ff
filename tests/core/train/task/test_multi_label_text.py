"""Multi-label text classification: ``[data] target`` a list of 0/1 columns, on the real all-MiniLM-L6-v2."""

from __future__ import annotations

import csv
import random

import pytest
import torch

from tests.core.train.text_models import TOPICS, minilm_folder

import transformers  # noqa: E402 - in the test extra: fails if missing, never skips
import torchmetrics  # noqa: F401,E402 - in the test extra: fails if missing, never skips

from workbench.core.train.task.metrics import MultilabelAccuracy, MultilabelF1, column  # noqa: E402

LABELS = ["sports", "cooking", "computers"]


def test_multilabel_metrics_are_torchmetrics_own():
    from torchmetrics.functional.classification import multilabel_accuracy, multilabel_f1_score

    g = torch.Generator().manual_seed(0)
    acc, f1 = MultilabelAccuracy(), MultilabelF1()
    logits, targets = torch.randn(40, 4, generator=g), (torch.rand(40, 4, generator=g) > 0.6).float()
    for part in range(0, 40, 16):  # batch by batch, as validation adds them
        acc.update(logits[part:part + 16], targets[part:part + 16], 16)
        f1.update(logits[part:part + 16], targets[part:part + 16], 16)
    probs, t = logits.sigmoid(), targets.long()
    assert acc.compute() == pytest.approx(float(multilabel_accuracy(probs, t, num_labels=4, average="micro")))
    assert f1.compute() == pytest.approx(float(multilabel_f1_score(probs, t, num_labels=4, average="macro")))
    assert (column("multilabel_accuracy"), column("multilabel_f1")) == ("val_acc", "val_f1")
    bad = MultilabelAccuracy()
    bad.update(logits, targets[:, 0].long(), 40)  # class indices, not 0/1 columns: no value
    assert bad.compute() != bad.compute()


def _multi_label_csv(path) -> None:
    """topics.csv as one 0/1 column per topic, and sentences of two topics joined with both columns at 1."""
    with open(TOPICS, newline="") as f:
        rows = [(r["sentence"], r["topic"]) for r in csv.DictReader(f)]
    rng = random.Random(0)
    out = [(s, {t}) for s, t in rows]
    for _ in range(60):  # about 40 rows of two topics
        (a, ta), (b, tb) = rng.sample(rows, 2)
        if ta != tb:
            out.append((f"{a}. {b}", {ta, tb}))
    rng.shuffle(out)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sentence", *LABELS])
        w.writerows([s, *(int(c in topics) for c in LABELS)] for s, topics in out)


@pytest.mark.slow
def test_minilm_multi_label_from_a_csv(tmp_path):
    """all-MiniLM-L6-v2 + a CSV with a 0/1 column per topic (some rows of two topics): the head is built with
    ``problem_type = "multi_label_classification"`` (BCE with logits), the label accuracy and macro F1 are far
    above an all-zero guess, and the exported folder loads with that problem type and those labels."""
    from workbench.cli import main
    from workbench.core.train.launch.headless import trainer_from_toml

    data = tmp_path / "multi.csv"
    _multi_label_csv(data)
    run = tmp_path / "run.toml"
    run.write_text(f"""epochs = 2
optimizer = "adamw"
lr = 0.001
tensorboard = false
run_dir = "{tmp_path / 'out'}"
[model]
checkpoint = "{minilm_folder()}"
frozen = ["embeddings", "encoder.layer.0", "encoder.layer.1", "encoder.layer.2", "encoder.layer.3"]
[task]
kind = "text_classification"
[data]
dataset = "text"
root = "{data}"
text = "sentence"
target = {LABELS!r}
max_length = 32
batch_size = 16
val_fraction = 0.3
""".replace("'", '"'))
    lines: list[str] = []
    trainer = trainer_from_toml(run, out=lines.append)
    assert trainer is not None and trainer.fit() == "completed", lines
    assert trainer.model.config.problem_type == "multi_label_classification"
    rows = list(csv.DictReader(open(tmp_path / "out" / "metrics.csv")))
    acc, f1 = float(rows[-1]["val_acc"]), float(rows[-1]["val_f1"])
    # an all-zero guess scores label accuracy 0.56 and F1 0
    assert acc >= 0.85 and f1 >= 0.8, rows  # measured: 0.98 and 0.97 after 2 epochs (0.90 and 0.89 after 1)
    assert not (tmp_path / "out" / "class_report.json").exists()

    out = tmp_path / "exported"
    assert main(["export", str(tmp_path / "out" / "last.pt"), "--format", "hf", "--out", str(out)]) == 0
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(str(out)).eval()
    assert loaded.config.problem_type == "multi_label_classification"
    assert loaded.config.id2label == dict(enumerate(LABELS))
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    enc = tok(["The striker scored a late goal. Fry the onions in butter"], return_tensors="pt")
    labels = torch.tensor([[1.0, 1.0, 0.0]])
    with torch.no_grad():
        loss = loaded(**enc, labels=labels).loss
    want = torch.nn.functional.binary_cross_entropy_with_logits(loaded(**enc).logits, labels)
    assert torch.allclose(loss, want)  # transformers computes the multi-label loss: BCE with logits
