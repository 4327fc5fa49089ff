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
               "of one architecture; one line per changed module, largest first. Keys are aligned as opening "
               "aligns them (a wrapper prefix such as bert. or module. on either side); a module with LoRA "
               "adapters on one side only is compared merged (W + alpha/r * B@A), on both sides adapter by "
               "adapter; how the sides were matched is written to stderr.")
EPILOG = None
SUBJECT = "a"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``workbench diff``: the two files, ``--arch``, ``--partial``, ``--trust``."""
    parser.add_argument("a", help="reference checkpoint (the denominator)")
    parser.add_argument("b", help="checkpoint to compare")
    parser.add_argument("--arch", default=None, help="architecture NAME or SPEC when the files do not name one")
    parser.add_argument("--partial", action="store_true",
                        help="load the tensors of a file that fit --arch and compare only those (the rest are "
                             "listed as left out)")
    add_trust(parser, "run code the files name (a pickled model, TorchScript, an architecture factory)")


def _open(path: str, args: argparse.Namespace):
    """One side: its own architecture and edits (LoRA adapters) unless ``--arch``, which keeps the file's edits."""
    from workbench.core.errors import ArchitectureError
    from workbench.core.model.formats import read_checkpoint
    from workbench.core.model.opening import PartialFit, open_checkpoint

    ckpt = read_checkpoint(path, trust=args.trust)
    edits = list(ckpt.metadata.edits or []) if args.arch else []
    try:
        return open_checkpoint(ckpt, args.arch, trust=args.trust, partial=args.partial, weights_only=True,
                               edits=edits)
    except PartialFit as err:
        raise ArchitectureError(f"{err} With workbench diff: add --partial to compare the tensors that fit "
                                "(the rest are listed as left out).") from err


def _not_loaded(opened) -> list[str]:
    """State_dict keys a partial load initialized instead of reading (missing or mismatched)."""
    report = opened.report
    if report is None or report.ok:
        return []
    return list(report.missing) + [name for name, _, _ in report.mismatched]


def run(args: argparse.Namespace) -> int:
    """Print one line per changed module, largest change first (module names from the files: escaped); 0."""
    from workbench.core.model.diff import compare_models

    a, b = _open(args.a, args), _open(args.b, args)
    comparison = compare_models(a.model, b.model, names=(args.a, args.b), skip=(_not_loaded(a), _not_loaded(b)))
    if comparison.summary():
        print(escaped(comparison.summary()), file=sys.stderr)
    if comparison.changes:
        write_out(escaped(change.text() for change in comparison.changes))
    else:
        print("no module changed", file=sys.stderr)
    return 0
