"""Every version Workbench reads: of an installed library, for a bug report, for ``workbench --version``.

- :func:`library_version`: an installed distribution's version from its metadata,
  nothing imported (the architecture index and the timm name cache are named by it).
- :func:`collect_versions` / :func:`format_versions`: the rows a bug report needs
  (Workbench, Python, torch, torchvision, Qt, pyqtgraph, CUDA); the window's
  Help > About adds the Qt runtime version it knows (``extra``).
- :func:`version_line`: the one line of ``workbench --version``.

Qt-free (``workbench/core`` never imports Qt): the versions of PySide6 and
pyqtgraph are read from their installed distributions' metadata, never by
importing them.
"""

from __future__ import annotations

import functools
import platform
import sys
from importlib.metadata import PackageNotFoundError, version

__all__ = ["library_version", "collect_versions", "format_versions", "version_line", "MISSING"]

#: Shown for a package that is not installed.
MISSING = "not installed"


@functools.lru_cache(maxsize=None)
def library_version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (``"timm"``), from its metadata.

    Nothing is imported; remembered for the process.

    Parameters
    ----------
    dist : str
        A distribution name as pip knows it (``"PySide6-Essentials"``).

    Returns
    -------
    str or None
        Its version, or None when it is not installed.
    """
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _distribution_version(*names: str) -> str:
    """The installed version of the first distribution of ``names`` found, else :data:`MISSING`."""
    return next((found for found in map(library_version, names) if found is not None), MISSING)


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


def version_line() -> str:
    """The line ``workbench --version`` prints: ``workbench 0.1.0 (torch 2.x, torchvision 0.y, Python 3.z)``.

    torch and torchvision are imported: their ``__version__`` names the build (``2.10.0+cu128``).
    """
    import torch
    import torchvision  # noqa: F401 - imported for its __version__, read by _module_version

    import workbench

    return (f"workbench {workbench.__version__} (torch {torch.__version__}, "
            f"torchvision {_module_version('torchvision')}, Python {platform.python_version()})")
