"""``workbench diff A B``: the per-module relative change between two checkpoints of one architecture."""

from __future__ import annotations

import argparse
import sys

from workbench.cli.arguments import add_trust
from workbench.cli.output import escaped, write_out

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "diff"
USAGE = "A B"
SUMMARY = "per-module relative change between two checkpoints"
DESCRIPTION = ("Per-module relative change ||a - b|| / ||a|| of parameters and buffers between two checkpoints "
               "of one architecture; one line per changed module, largest first.")
EPILOG = None
SUBJECT = "a"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``workbench diff``: the two files, ``--arch``, ``--trust``."""
    parser.add_argument("a", help="reference checkpoint (the denominator)")
    parser.add_argument("b", help="checkpoint to compare")
    parser.add_argument("--arch", default=None, help="architecture NAME or SPEC when the files do not name one")
    add_trust(parser, "run code the files name (a pickled model, TorchScript, an architecture factory)")


def run(args: argparse.Namespace) -> int:
    """Print one line per changed module, largest change first (module names from the files: escaped); 0."""
    from workbench.core.model.diff import module_diff
    from workbench.core.model.opening import open_model

    a = open_model(args.a, args.arch, trust=args.trust, weights_only=True).model
    b = open_model(args.b, args.arch, trust=args.trust, weights_only=True).model
    changes = module_diff(a, b, names=(args.a, args.b))
    if changes:
        write_out(escaped(change.text() for change in changes))
    else:
        print("no module changed", file=sys.stderr)
    return 0
