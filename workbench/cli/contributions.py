"""``workbench contributions [KIND]``: what builds by name (builtins, torchvision's, installed packages')."""

from __future__ import annotations

import argparse
import dataclasses
import json

from workbench.cli.output import escaped, write_out

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "contributions"
USAGE = "[KIND]"
SUMMARY = "what builds by name: architectures, datasets, steps, metrics, probes"
DESCRIPTION = ("List the registered contributions, one per line: kind, name, where it comes from "
               "(builtin, torchvision, or the installed package that registers it through an entry point "
               "workbench.<kind>s). A registered name is built by name (--arch NAME) and resolves without "
               "--trust when a file names it; docs/plugins.md shows how a package contributes.")
EPILOG = None
SUBJECT = None


def _kind_arg(text: str) -> str:
    """A kind of :data:`workbench.core.contrib.KINDS`, singular (``architectures`` -> ``architecture``)."""
    from workbench.core.contrib import KINDS  # the registry alone: neither torch nor Qt

    kind = text.lower().removesuffix("s")
    if kind not in KINDS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a kind: give one of {', '.join(KINDS)}")
    return kind


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``workbench contributions``: the kind, ``--json``."""
    parser.add_argument("kind", nargs="?", type=_kind_arg, metavar="KIND",
                        help="only this kind: architecture, dataset, step, metric or probe (default: every kind)")
    parser.add_argument("--json", action="store_true", help="the same as a JSON list of {kind, name, target, source}")


def run(args: argparse.Namespace) -> int:
    """Print the contributions of ``args.kind`` (default: every kind), one per line or as JSON; 0."""
    from workbench.core import contrib

    found = [c for kind in ([args.kind] if args.kind else contrib.KINDS) for c in contrib.contributions(kind)]
    width = max((len(c.name) for c in found), default=0)
    # names and sources come from installed packages' metadata: escaped
    write_out(json.dumps([dataclasses.asdict(c) for c in found], indent=1) if args.json
              else escaped(f"{c.kind:<12}  {c.name:<{width}}  {c.source}" for c in found))
    return 0
