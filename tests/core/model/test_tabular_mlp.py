"""The built-in Tabular MLP: shapes, the factory, and that it learns scikit-learn's diabetes table."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.core.train.data.test_tabular import write_diabetes
from workbench.core.errors import ArchitectureError
from workbench.core.model.tabular_mlp import TabularMLP, tabular_mlp
from workbench.core.train.config import DataConfig
from workbench.core.train.data.tabular import table_datasets


def test_rows_in_outputs_out_and_a_head_to_train_alone():
    model = TabularMLP(7, 3)
    assert model(torch.randn(5, 7)).shape == (5, 3)
    assert isinstance(model.head, nn.Linear) and model.head.out_features == 3
    assert not any(isinstance(m, (nn.BatchNorm1d, nn.LayerNorm)) for m in model.modules())
    model.train()
    assert model(torch.randn(1, 7)).shape == (1, 3)  # a last batch of one row trains
    assert TabularMLP(4, 1, hidden=()).head.in_features == 4  # a linear model


def test_the_factory_takes_num_classes_and_says_what_is_missing():
    assert tabular_mlp(in_features=4, num_classes=3).head.out_features == 3
    assert tabular_mlp(4, hidden=[32], dropout=0.0).head.out_features == 1
    with pytest.raises(ArchitectureError, match="tabular_mlp needs in_features"):
        tabular_mlp(num_classes=3)
    with pytest.raises(ArchitectureError, match="num_outputs=2 and num_classes=3"):
        tabular_mlp(4, 2, num_classes=3)


def _r2(pred: torch.Tensor, target: torch.Tensor) -> float:
    return float(1 - ((pred - target) ** 2).sum() / ((target - target.mean()) ** 2).sum())


def test_it_learns_diabetes_to_a_validation_r2_above_0_4(tmp_path):
    """The issue's target, with Workbench's default training settings: Adam 1e-3, batches of 64, 5 epochs."""
    torch.manual_seed(0)
    train, val, info = table_datasets(DataConfig(dataset="csv", root=str(write_diabetes(tmp_path)),
                                                 target=["progression"]))
    model = tabular_mlp(in_features=info["input_shape"][0], num_outputs=info["num_classes"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = train.tensors
    for _ in range(5):
        for idx in torch.randperm(len(x)).split(64):
            opt.zero_grad()
            nn.functional.mse_loss(model(x[idx]), y[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        r2 = _r2(model(val.tensors[0]), val.tensors[1])
    assert r2 > 0.4, r2
