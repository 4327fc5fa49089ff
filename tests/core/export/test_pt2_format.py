"""``.pt2``: resnet18 loads back and matches at two batch sizes; a module the export changes is named from the
program's ``nn_module_stack``; a model torch.export refuses is one line naming where, and nothing is written."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.core.export import ExportError, export


def test_resnet18_loads_back_and_matches(resnet, image, tmp_path):
    report = export(resnet, "pt2", tmp_path / "r.pt2", example=image)
    assert report.passed and [c.batch for c in report.checks] == [1, 3]
    loaded = torch.export.load(str(tmp_path / "r.pt2")).module()
    x = torch.randn(5, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(loaded(x), resnet(x), atol=1e-5)


class _DiffersWhenExported(nn.Module):
    def forward(self, x):
        return x * 1.5 if torch.compiler.is_exporting() else x


def test_the_module_the_export_changes_is_named(tmp_path):
    block = nn.Sequential(nn.Linear(8, 8), _DiffersWhenExported(), nn.ReLU())
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), block, nn.Linear(8, 3))
    report = export(model, "pt2", tmp_path / "m.pt2", example=torch.randn(2, 8))
    assert not report.passed
    assert (report.first_difference.module, report.first_difference.type) == ("2.1", "_DiffersWhenExported")
    assert report.first_difference.compared == 3  # "0", "1", "2.0" agreed before it


class _Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y * 2 if y.sum() > 0 else y


def test_a_refused_export_names_the_line_and_writes_nothing(tmp_path):
    with pytest.raises(ExportError, match=r"_Branchy \(at test_pt2_format\.py:\d+ in forward: .*y\.sum\(\) > 0"):
        export(_Branchy(), "pt2", tmp_path / "out" / "b.pt2", example=torch.ones(2, 4))
    assert list((tmp_path / "out").iterdir()) == []  # no file, no temporary folder
