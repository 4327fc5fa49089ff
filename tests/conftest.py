"""Shared fixtures. Tests run headless: QT_QPA_PLATFORM=offscreen is forced here too."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same torch RNG state."""
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path, monkeypatch):
    """QSettings and the default run folder go to a per-test temporary folder."""
    monkeypatch.setenv("WORKBENCH_SETTINGS_DIR", str(tmp_path / "settings"))
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    yield
