"""The versions a bug report needs: Workbench, Python, torch, torchvision, Qt, pyqtgraph, CUDA.

Qt-free (``workbench/core`` never imports Qt): the versions of PySide6 and
pyqtgraph are read from their installed distributions' metadata, never by
importing them. The window's Help > About adds the Qt runtime version it
knows (``extra``) and shows :func:`format_versions` as selectable text.
"""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version

__all__ = ["collect_versions", "format_versions"]

#: Shown for a package that is not installed.
MISSING = "not installed"


def _distribution_version(*names: str) -> str:
    """The installed version of the first distribution of ``names`` found, else :data:`MISSING`."""
    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return MISSING


def _module_version(name: str) -> str:
    """The version of module ``name``, importing nothing.

    ``__version__`` when it is imported already (it names the build, ``0.21.0+cu124``),
    else its distribution's version.
    """
    module = sys.modules.get(name)
    found = getattr(module, "__version__", None)
    return str(found) if found else _distribution_version(name)


def _device_line() -> str:
    """Which accelerators torch sees, without creating a CUDA context (``is_available`` and a count only)."""
    import torch

    if torch.cuda.is_available():
        return f"cuda available ({torch.cuda.device_count()} device(s))"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps available"
    return "cpu only (no CUDA device available)"


def collect_versions(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Name -> version of everything a bug report about Workbench should state.

    Parameters
    ----------
    extra : dict of str to str, optional
        More rows, appended in order (the window adds the Qt runtime version).

    Returns
    -------
    dict of str to str
        In order: ``Workbench``, ``Python``, ``Platform``, ``torch``, ``torchvision``,
        ``PySide6``, ``pyqtgraph``, ``CUDA`` (``torch.version.cuda``, or "none" for a
        CPU build), ``cuDNN``, ``Devices``, then ``extra``.
    """
    import torch

    import workbench

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    rows = {
        "Workbench": workbench.__version__,
        "Python": f"{platform.python_version()} ({platform.python_implementation()})",
        "Platform": platform.platform(),
        "torch": torch.__version__,
        "torchvision": _module_version("torchvision"),
        "PySide6": _distribution_version("PySide6", "PySide6-Essentials"),
        "pyqtgraph": _distribution_version("pyqtgraph"),
        "CUDA": torch.version.cuda or "none (CPU build of torch)",
        "cuDNN": str(cudnn) if cudnn else "none",
        "Devices": _device_line(),
    }
    rows.update(extra or {})
    return rows


def format_versions(rows: dict[str, str]) -> str:
    """One ``name: version`` line per row, names padded to one column (plain text to paste into a report).

    Parameters
    ----------
    rows : dict of str to str
        As returned by :func:`collect_versions`.

    Returns
    -------
    str
        Lines joined by ``\\n``, no trailing newline.
    """
    width = max((len(name) for name in rows), default=0)
    return "\n".join(f"{name + ':':<{width + 1}} {value}" for name, value in rows.items())
