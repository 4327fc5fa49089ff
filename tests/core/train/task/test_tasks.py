"""The built-in tasks and metrics, checked against independent computations (scikit-learn's metrics)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score, mean_absolute_error, r2_score
from torch import nn
from torch.utils.data import TensorDataset

from workbench.core.errors import StepError
from workbench.core.train.config import TaskConfig, TrainConfig
from workbench.core.train.data.batch import batch_size, describe, move, split_xy
from workbench.core.train.task.build import build_task
from workbench.core.train.task.losses import build_loss
from workbench.core.train.task.metrics import build_metric
from workbench.core.train.trainer.loop import Trainer


def test_regression_metrics_match_scikit_learn_over_several_batches():
    g = torch.Generator().manual_seed(0)
    target = torch.randn(100, 2, generator=g)
    output = target + 0.5 * torch.randn(100, 2, generator=g)
    mae, r2 = build_metric("mae"), build_metric("r2")
    for part in (slice(0, 37), slice(37, 100)):
        for m in (mae, r2):
            m.update(output[part], target[part], part.stop - part.start)
    assert mae.compute() == pytest.approx(mean_absolute_error(target.numpy(), output.numpy()), rel=1e-6)
    assert r2.compute() == pytest.approx(r2_score(target.numpy(), output.numpy(),
                                                  multioutput="variance_weighted"), rel=1e-6)


def test_f1_and_map_of_multilabel_logits():
    g = torch.Generator().manual_seed(1)
    target = (torch.rand(64, 5, generator=g) > 0.6).float()
    logits = 2 * (target - 0.5) + torch.randn(64, 5, generator=g)
    f1, ap = build_metric("f1"), build_metric("map")
    f1.update(logits, target, 64)
    ap.update(logits, target, 64)
    assert f1.compute() == pytest.approx(f1_score(target.numpy(), (logits > 0).numpy(), average="micro"))
    from sklearn.metrics import average_precision_score
    assert ap.compute() == pytest.approx(average_precision_score(target.numpy(), logits.numpy(), average="macro"),
                                         rel=1e-4)


def test_top5_is_nan_with_five_classes_or_fewer_and_counts_otherwise():
    t = build_metric("top5")
    t.update(torch.randn(4, 5), torch.tensor([0, 1, 2, 3]), 4)
    assert math.isnan(t.compute())
    t = build_metric("top5")
    logits = torch.arange(10.0).repeat(2, 1)  # classes 5..9 are the top 5
    t.update(logits, torch.tensor([9, 0]), 2)
    assert t.compute() == 0.5


def test_a_regression_target_of_n_against_an_output_of_n_by_1_is_not_broadcast():
    out, y = torch.zeros(8, 1), torch.arange(8.0)
    loss = build_loss("mse")(out, y)
    assert loss.item() == pytest.approx(float((y ** 2).mean()))  # (8, 8) broadcasting would give another mean


def test_batches_of_any_structure_move_count_and_describe():
    batch = {"input_ids": torch.zeros(3, 7, dtype=torch.long), "labels": (torch.ones(3), [torch.zeros(3, 2)])}
    moved = move(batch, torch.device("meta"))
    assert moved["input_ids"].device.type == "meta" and moved["labels"][1][0].device.type == "meta"
    assert batch_size(batch) == 3
    assert describe(batch) == "{input_ids: (3, 7) int64, labels: ((3,) float32, ((3, 2) float32))}"
    assert split_xy({"x": 1, "labels": 2}, "t") == (1, 2)


def test_a_model_loss_task_without_labels_says_so():
    class Tagger(nn.Module):
        def forward(self, input_ids, labels=None):
            return {"logits": input_ids.float()}

    task = build_task(TrainConfig(task=TaskConfig(kind="model_loss")), "model_loss")
    with pytest.raises(StepError, match="returns its loss only when the batch holds labels"):
        task.train_step(Tagger(), {"input_ids": torch.zeros(2, 3)})


def _fit(kind: str, x: torch.Tensor, y: torch.Tensor, model: nn.Module, tmp_path, **task) -> Trainer:
    data = (TensorDataset(x[:96], y[:96]), TensorDataset(x[96:], y[96:]))
    from torch.utils.data import DataLoader
    loaders = (DataLoader(data[0], batch_size=16, shuffle=False), DataLoader(data[1], batch_size=32))
    cfg = TrainConfig(task=TaskConfig(kind=kind, **task), epochs=6, lr=0.05, run_dir=str(tmp_path / kind),
                      tensorboard=False)
    tr = Trainer(model, cfg, data=loaders)
    assert tr.fit() == "completed", tr.error
    return tr


def test_a_multilabel_run_reports_f1_and_map_and_follows_its_monitor(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 6, generator=g)
    y = (x[:, :3] > 0).float()  # three labels, each the sign of one feature
    tr = _fit("multilabel", x, y, nn.Linear(6, 3), tmp_path, monitor="val_f1", mode="max")
    assert tr.kind == "multilabel"
    last = tr.history[-1]
    assert last["val_f1"] > 0.8 and last["val_map"] > 0.8
    best = max(range(len(tr.history)), key=lambda i: (tr.history[i]["val_f1"], -i))
    assert tr.history[best]["best"] and tr.best_score == tr.history[best]["val_f1"]
    header = (tmp_path / "multilabel" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"val_f1", "val_map"} <= set(header)


def test_a_monitor_the_run_does_not_report_is_named_with_the_ones_it_does(tmp_path):
    x, y = torch.randn(128, 6), torch.randn(128)
    cfg_model = nn.Linear(6, 1)
    from torch.utils.data import DataLoader
    data = (DataLoader(TensorDataset(x[:96], y[:96]), batch_size=32), DataLoader(TensorDataset(x[96:], y[96:])))
    cfg = TrainConfig(task=TaskConfig(kind="regression", monitor="val_accuracy_top1"), epochs=1,
                      run_dir=str(tmp_path / "r"), tensorboard=False)
    tr = Trainer(cfg_model, cfg, data=data)
    assert tr.fit() == "error"
    assert "monitor = 'val_accuracy_top1' is not a metric of this run; choose one of" in str(tr.error)
    assert "val_r2" in str(tr.error)


def test_user_loss_and_metric_specs(tmp_path):
    path = tmp_path / "crit.py"
    path.write_text("import torch\n"
                    "class Focal(torch.nn.Module):\n"
                    "    def forward(self, out, y):\n"
                    "        ce = torch.nn.functional.cross_entropy(out, y, reduction='none')\n"
                    "        return ((1 - torch.exp(-ce)) ** 2 * ce).mean()\n"
                    "def wrong_share(out, y):\n"
                    "    return (out.argmax(1) != y).float().mean()\n")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 4, generator=g)
    y = (x[:, 0] > 0).long()
    tr = _fit("classification", x, y, nn.Linear(4, 2), tmp_path, loss=f"{path}:Focal",
              metrics=["accuracy", f"{path}:wrong_share"])
    last = tr.history[-1]
    assert last["val_acc"] + last["val_wrong_share"] == pytest.approx(1.0)
    assert tr.history[-1]["val_loss"] < tr.history[0]["val_loss"]
    assert np.isfinite(last["val_loss"])


class _Scorer(nn.Module):
    """Returns its own loss, with ``logits`` (N, 2) when ``with_logits`` (a Hugging Face classifier's shape)."""

    def __init__(self, with_logits: bool):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.with_logits = with_logits

    def forward(self, x, labels):
        logits = self.fc(x)
        loss = nn.functional.cross_entropy(logits, labels)
        return {"loss": loss, "logits": logits} if self.with_logits else {"loss": loss}


class _Rows(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


def _model_loss_fit(tmp_path, with_logits: bool, name: str) -> Trainer:
    from torch.utils.data import DataLoader

    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=g)
    y = (x[:, 0] > 0).long()
    loaders = (DataLoader(_Rows(x[:64], y[:64]), batch_size=16), DataLoader(_Rows(x[64:], y[64:]), batch_size=10))
    cfg = TrainConfig(task=TaskConfig(kind="model_loss", metrics=["accuracy"]), epochs=2, lr=0.05,
                      run_dir=str(tmp_path / name), tensorboard=False, checkpoint_every_epoch=False)
    torch.manual_seed(0)
    tr = Trainer(_Scorer(with_logits), cfg, data=loaders)
    assert tr.fit() == "completed", tr.error
    return tr


def test_model_loss_accuracy_comes_from_the_outputs_logits_and_the_batchs_labels(tmp_path, caplog):
    tr = _model_loss_fit(tmp_path, True, "logits")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=g)
    with torch.no_grad():  # the accuracy of the trained model on the validation rows, computed here
        want = (tr.model.fc(x[64:]).argmax(1) == (x[64:, 0] > 0).long()).float().mean().item()
    assert tr.history[-1]["val_acc"] == pytest.approx(want)
    assert "cannot be computed" not in caplog.text


def test_model_loss_accuracy_without_logits_is_said_once(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="workbench.core.train.task.tasks"):
        tr = _model_loss_fit(tmp_path, False, "no_logits")
    assert all(math.isnan(h["val_acc"]) for h in tr.history)
    said = [r.getMessage() for r in caplog.records if "cannot be computed" in r.getMessage()]
    assert len(said) == 1, said  # two validations, one line
    assert "metric accuracy cannot be computed for the model_loss task: the model's output (dict) has no logits" \
        in said[0] and "val_acc stays empty" in said[0]
