"""Workbench: a desktop workbench for PyTorch models.

``workbench.attach(model, optimizer)`` opens a training script to the window
(:func:`workbench.core.attach.script.attach`); ``workbench.connect(address,
token)`` attaches to one from Python (:func:`workbench.core.attach.client.connect`).
Both are imported on first use: ``import workbench`` imports neither torch nor Qt.
"""

__version__ = "0.1.0"

__all__ = ["attach", "connect", "__version__"]


#: The lazily imported public names and their modules (PEP 562 ``__getattr__``). By name, through
#: importlib: everything in the package imports ``workbench`` (its version), and a static import
#: here would make every module depend on the attach code in the import contracts.
_LAZY = {"attach": "workbench.core.attach.script", "connect": "workbench.core.attach.client"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
