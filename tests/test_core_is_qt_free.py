"""workbench.core must never import Qt or pyqtgraph (DESIGN.md: the one rule)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import workbench.core


def _core_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(workbench.core.__path__, "workbench.core.")]


def test_core_has_modules():
    assert "workbench.core.model.checkpoint" in _core_modules()


def test_importing_every_core_module_imports_no_qt():
    code = (
        "import sys, importlib\n"
        f"for name in {_core_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'PyQt5', 'PyQt6', 'shiboken6'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"workbench.core imported Qt modules: {out.stdout.strip()}"
