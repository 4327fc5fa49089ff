"""``workbench [PATH] ...``: the window's own form of the command line (:func:`workbench.ui.app.main`).

Which PATH the window would open, and whether a bare word there is a mistyped
command instead (``workbench foo``: a usage error that opens no window).
"""

from __future__ import annotations

import sys

import argparse
import re
from collections.abc import Sequence

__all__ = ["window_parser", "window_path", "looks_like_a_command", "open_window"]


def window_parser() -> argparse.ArgumentParser:
    """The window's argument parser (argparse only: no Qt is imported)."""
    from workbench.ui.app import build_parser

    return build_parser()


def window_path(argv: list[str]) -> str | None:
    """The PATH the window would open, as its own parser reads ``argv`` (None when it reads none or fails)."""
    try:
        args, _ = window_parser().parse_known_args(argv)
    except SystemExit:  # the window's parser reports its own usage errors
        return None
    return args.path


def looks_like_a_command(word: str) -> bool:
    """A bare lower-case word (``foo``, ``lr_find``), not a path: no dot, no separator, not an option."""
    return bool(re.fullmatch(r"[a-z][a-z0-9_-]*", word))


def open_window(argv: Sequence[str]) -> int:
    """Open the desktop app on ``argv`` (:func:`workbench.ui.app.main`); its exit code.

    Without Qt (PySide6) or pyqtgraph (a server install) it prints one line saying what to install
    and returns 1, instead of a traceback.
    """
    try:
        import PySide6.QtWidgets  # noqa: F401 - a server install has no Qt: say so, not a traceback
        import pyqtgraph  # noqa: F401
    except ImportError as exc:
        print(f"error: the window needs {exc.name or 'PySide6'}, which is not installed here (a server install?): "
              "pip install PySide6-Essentials pyqtgraph, or use the commands (workbench train, submit, runs; "
              "workbench --help)", file=sys.stderr)
        return 1
    from workbench.ui.app import main as gui_main

    return gui_main(list(argv))
