"""Qt widgets: they show core data and send user intent to core.

``MainWindow`` is imported lazily so that importing a single widget module does
not build the whole window's import graph.
"""

from __future__ import annotations

__all__ = ["MainWindow"]


def __getattr__(name: str):
    if name == "MainWindow":
        from workbench.ui.main_window import MainWindow

        return MainWindow
    raise AttributeError(f"module 'workbench.ui' has no attribute {name!r}")
