"""Each bad input of a user's task: one line naming the file, the callable and what to change; no run folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from workbench.core.errors import DataError
from workbench.core.train.config import DataConfig, TaskConfig, TrainConfig
from workbench.core.train.trainer.loop import Trainer

CODE = '''
import torch
from torch.utils.data import TensorDataset

def pairs():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 4, generator=g), torch.randint(0, 3, (64,), generator=g)
    return TensorDataset(x[:48], y[:48]), TensorDataset(x[48:], y[48:])

def raises():
    raise FileNotFoundError("no such file: corpus.txt")

def wrong_type():
    return "train.csv"

def no_loss(model, batch):
    x, y = batch
    return {"logits": model(x)}

def loss_is_a_float(model, batch):
    return 0.5
'''


@pytest.fixture
def user_file(tmp_path) -> Path:
    path = tmp_path / "my_task.py"
    path.write_text(CODE)
    return path


def _fit(tmp_path, model, data: DataConfig, task: TaskConfig | None = None) -> Trainer:
    cfg = TrainConfig(data=data, task=task or TaskConfig(), epochs=1, run_dir=str(tmp_path / "run"),
                      tensorboard=False)
    trainer = Trainer(model, cfg)
    assert trainer.fit() == "error" and trainer.step == 0
    assert not (tmp_path / "run").exists()  # stopped before the run folder was made
    message = str(trainer.error)
    assert "\n" not in message
    return trainer


def test_a_step_that_returns_no_loss(tmp_path, user_file):
    tr = _fit(tmp_path, nn.Linear(4, 3), DataConfig(dataset=f"{user_file}:pairs", num_workers=0),
              TaskConfig(step=f"{user_file}:no_loss"))
    assert isinstance(tr.error, DataError)
    assert f"{user_file}:no_loss returned a dict without \"loss\" (keys: logits)" in str(tr.error)
    assert "return the loss tensor, or a dict with a \"loss\" entry" in str(tr.error)


def test_a_step_whose_loss_is_not_a_tensor(tmp_path, user_file):
    tr = _fit(tmp_path, nn.Linear(4, 3), DataConfig(dataset=f"{user_file}:pairs", num_workers=0),
              TaskConfig(step=f"{user_file}:loss_is_a_float"))
    assert f"{user_file}:loss_is_a_float returned float as the loss: return a tensor" in str(tr.error)


def test_a_dataset_factory_that_raises(tmp_path, user_file):
    tr = _fit(tmp_path, nn.Linear(4, 3), DataConfig(dataset=f"{user_file}:raises"))
    assert (f"data.dataset '{user_file}:raises' raised FileNotFoundError: no such file: corpus.txt; fix the "
            "factory or its [data] kwargs") in str(tr.error)


def test_a_dataset_factory_that_returns_the_wrong_type(tmp_path, user_file):
    tr = _fit(tmp_path, nn.Linear(4, 3), DataConfig(dataset=f"{user_file}:wrong_type"))
    assert f"data.dataset '{user_file}:wrong_type' returned str: return (train, val) or" in str(tr.error)


def test_a_missing_dataset_callable(tmp_path, user_file):
    tr = _fit(tmp_path, nn.Linear(4, 3), DataConfig(dataset=f"{user_file}:make_dataset"))
    assert "make_dataset" in str(tr.error) and "could not be imported" in str(tr.error)


def test_a_batch_the_model_cannot_take(tmp_path, user_file):
    tr = _fit(tmp_path, nn.Linear(5, 3), DataConfig(dataset=f"{user_file}:pairs", num_workers=0))
    assert ("the first training batch ((48, 4) float32, (48,) int64) does not go through the model: "
            "RuntimeError: ") in str(tr.error)


def test_a_csv_without_the_target_column(tmp_path):
    table = tmp_path / "table.csv"
    table.write_text("a,b,c\n" + "".join(f"{i},{i * 2},{i % 3}\n" for i in range(40)))
    tr = _fit(tmp_path, nn.Linear(2, 3), DataConfig(dataset="csv", root=str(table), target=["label"]))
    assert "table.csv" in str(tr.error) and "label" in str(tr.error) and "a, b, c" in str(tr.error)


def test_a_classification_task_on_dict_batches_without_a_target_says_what_to_give(tmp_path):
    path = tmp_path / "dicts.py"
    path.write_text("import torch\nfrom torch.utils.data import Dataset\n"
                    "class D(Dataset):\n    def __len__(self): return 8\n"
                    "    def __getitem__(self, i): return {'tokens': torch.arange(4)}\n"
                    "def make(): return D(), D()\n")
    tr = _fit(tmp_path, nn.Embedding(8, 3), DataConfig(dataset=f"{path}:make", num_workers=0),
              TaskConfig(kind="classification"))
    assert "the classification task takes (input, target) batches, and this batch is {tokens: (8, 4) int64}" \
        in str(tr.error)
    assert "model_loss" in str(tr.error) and "[task] step" in str(tr.error)
