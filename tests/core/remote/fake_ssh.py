"""A stand-in ``ssh`` on ``PATH`` for the tests of what Workbench makes of ssh's exit and output."""

from __future__ import annotations

import os
from pathlib import Path


def fake_ssh(tmp_path: Path, monkeypatch, script: str, *, only: bool = False) -> Path:
    """Put an executable ``ssh`` running the shell ``script`` first on ``PATH`` (``only``: alone on it); its folder."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text("#!/bin/sh\n" + script)
    (fake / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake) if only else f"{fake}{os.pathsep}{os.environ['PATH']}")
    return fake
