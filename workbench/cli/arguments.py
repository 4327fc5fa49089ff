"""Argument types and help texts that several commands share."""

from __future__ import annotations

import argparse

__all__ = ["shape_arg", "depth_arg", "add_trust", "RUN_TRUST", "FILE_TRUST"]

#: ``--trust`` of the commands that start from a run file.
RUN_TRUST = ("run code the run file (or its starting checkpoint) names: an architecture factory pkg.mod:fn / "
             "file.py:fn, or a pickled model")
#: ``--trust`` of the commands that open a checkpoint.
FILE_TRUST = "run code the file names (a pickled model, TorchScript, an architecture factory)"


def shape_arg(text: str) -> tuple[int, ...]:
    """``"1,3,224,224"`` -> ``(1, 3, 224, 224)`` (argparse type of ``--input-shape``).

    Raises
    ------
    argparse.ArgumentTypeError
        Not a comma-separated list of whole numbers.
    """
    from workbench.core.formatting import parse_shape

    try:
        return parse_shape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def depth_arg(text: str) -> int:
    """A whole number >= 0 (argparse type of ``--max-depth``).

    Raises
    ------
    argparse.ArgumentTypeError
        Not a whole number, or negative.
    """
    try:
        depth = int(text)
    except ValueError:
        depth = -1
    if depth < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a depth: give a whole number >= 0")
    return depth


def add_trust(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Add ``--trust`` (run code that a file names) with the command's own ``help_text``."""
    parser.add_argument("--trust", action="store_true", help=help_text)
