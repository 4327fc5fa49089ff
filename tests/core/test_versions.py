"""The versions a bug report needs (Help > About shows them)."""

from __future__ import annotations

import platform

import torch

import workbench
from workbench.core.versions import MISSING, collect_versions, format_versions, library_version, version_line


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


def test_library_version_reads_the_metadata_and_says_none_when_not_installed():
    assert library_version("torch") in (torch.__version__, torch.__version__.split("+")[0])  # a local build tag or not
    assert library_version("workbench") == workbench.__version__
    assert library_version("no-such-distribution-of-workbench") is None


def test_version_line_is_the_one_line_of_workbench_version():
    assert version_line() == (f"workbench {workbench.__version__} (torch {torch.__version__}, torchvision "
                              f"{collect_versions()['torchvision']}, Python {platform.python_version()})")
