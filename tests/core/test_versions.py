"""The versions a bug report needs (Help > About shows them)."""

from __future__ import annotations

import platform

import torch

import workbench
from workbench.core.versions import MISSING, collect_versions, format_versions


def test_collect_versions_names_workbench_python_torch_qt_and_cuda():
    rows = collect_versions({"Qt (runtime)": "6.x"})
    assert list(rows)[:10] == ["Workbench", "Python", "Platform", "torch", "torchvision", "PySide6", "pyqtgraph",
                               "CUDA", "cuDNN", "Devices"]
    assert list(rows)[-1] == "Qt (runtime)"
    assert rows["Workbench"] == workbench.__version__
    assert rows["Python"].startswith(platform.python_version())
    assert rows["torch"] == torch.__version__
    for name in ("torchvision", "PySide6", "pyqtgraph"):  # installed here: a version, not "not installed"
        assert rows[name] != MISSING and rows[name][0].isdigit(), name
    assert rows["CUDA"] == (torch.version.cuda or "none (CPU build of torch)")
    assert ("cuda available" in rows["Devices"]) == torch.cuda.is_available()


def test_format_versions_is_one_aligned_line_per_row():
    text = format_versions({"torch": "2.5.0", "Workbench": "0.1.0"})
    assert text.splitlines() == ["torch:     2.5.0", "Workbench: 0.1.0"]
    assert format_versions({}) == ""
