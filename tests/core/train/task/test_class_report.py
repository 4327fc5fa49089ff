"""The class report: per-class figures from a confusion matrix, the worst rows kept, and the files written.
(A whole run writing them: test_image_classification.py.)"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from workbench.core.train.task.class_report import (CONFUSION_FILE, REPORT_FILE, WORST_FILE, WORST_ROWS, ClassReport,
                                                    per_class, read_confusion, tagged_rows)


def test_per_class_matches_scikit_learn():
    from sklearn.metrics import precision_recall_fscore_support

    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 4, (200,), generator=gen)
    pred = torch.where(torch.rand(200, generator=gen) < 0.6, y, torch.randint(0, 4, (200,), generator=gen))
    pred[pred == 3] = 2  # class 3 never predicted: precision 0, as zero_division=0
    matrix = torch.bincount(y * 4 + pred, minlength=16).reshape(4, 4)
    report = per_class(matrix, ["a", "b", "c", "d"])
    p, r, f, s = precision_recall_fscore_support(y.numpy(), pred.numpy(), labels=[0, 1, 2, 3], zero_division=0)
    for i, name in enumerate("abcd"):
        got = report["classes"][name]
        assert got["precision"] == pytest.approx(p[i], abs=1e-4) and got["recall"] == pytest.approx(r[i], abs=1e-4)
        assert got["f1"] == pytest.approx(f[i], abs=1e-4) and got["support"] == s[i]
    assert report["macro_f1"] == pytest.approx(f.mean(), abs=1e-4)
    assert report["accuracy"] == pytest.approx(float((y == pred).float().mean()), abs=1e-4)


def test_the_matrix_counts_and_the_worst_rows_are_the_highest_losses(tmp_path):
    report = ClassReport()
    gen = torch.Generator().manual_seed(1)
    logits, target = torch.randn(30, 3, generator=gen), torch.randint(0, 3, (30,), generator=gen)
    for start in range(0, 30, 8):
        report.add(logits[start:start + 8], target[start:start + 8])
    want = torch.bincount(target * 3 + logits.argmax(1), minlength=9).reshape(3, 3)
    assert torch.equal(report.matrix(), want)
    losses = torch.nn.functional.cross_entropy(logits, target, reduction="none")
    trainer = SimpleNamespace(run_dir=tmp_path, step=7, epoch=1, is_main=True, info=SimpleNamespace(
        classes=["x", "y", "z"]), val_loader=SimpleNamespace(dataset=None), model=None)
    written = report.write(trainer)
    assert written["step"] == 7 and set(written["classes"]) == {"x", "y", "z"}
    worst = [json.loads(line) for line in (tmp_path / WORST_FILE).read_text().splitlines()]
    assert [w["id"] for w in worst] == losses.argsort(descending=True)[:WORST_ROWS].tolist()
    assert all(w["true"] == "xyz"[int(target[w["id"]])] and w["epoch"] == 1 for w in worst)
    assert read_confusion(tmp_path)[0]["matrix"] == want.tolist()
    assert json.loads((tmp_path / REPORT_FILE).read_text())["support"] == 30
    report.start()  # a new evaluation: empty again
    assert report.matrix() is None and report.write(trainer) is None
    assert len(read_confusion(tmp_path)) == 1


def test_tagged_rows_name_each_sentences_tags(tmp_path):
    logits = torch.tensor([[[3.0, 0.0], [0.0, 3.0], [3.0, 0.0]], [[0.0, 3.0], [0.0, 0.0], [0.0, 0.0]]])
    labels = torch.tensor([[0, -100, 1], [1, -100, -100]])
    rows = tagged_rows(logits, labels, -100)
    assert rows[0][1:3] == ([0, 1], [0, 0]) and rows[1][1:3] == ([1], [1])
    assert rows[0][0] > rows[1][0]  # the row with a wrong tag has the higher loss
    report = ClassReport()
    keep = labels != -100
    report.add(logits[keep], labels[keep], rows)
    table = [{"tokens": ["Paris", "is", "big"]}, {"tokens": ["Oslo"]}]
    dataset = SimpleNamespace(table=table, words="tokens")
    trainer = SimpleNamespace(run_dir=tmp_path, step=1, epoch=0, info=SimpleNamespace(classes=["LOC", "O"]),
                              val_loader=SimpleNamespace(dataset=dataset), model=None)
    report.write(trainer)
    first = json.loads((tmp_path / WORST_FILE).read_text().splitlines()[0])
    assert first["text"] == "Paris is big" and first["true"] == ["LOC", "O"] and first["predicted"] == ["LOC", "LOC"]
    assert (tmp_path / CONFUSION_FILE).is_file()
