"""``workbench lr-find RUN.toml``: the learning-rate range test; ``lr_find.csv`` goes into the run folder."""

from __future__ import annotations

import argparse

from workbench.cli.arguments import RUN_TRUST, add_trust

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "lr-find"
USAGE = "RUN.toml"
SUMMARY = "learning-rate range test; writes lr_find.csv beside RUN.toml"
DESCRIPTION = ("Learning-rate range test on a run configuration (TOML): prints suggested_lr = <float> last "
               "and writes lr_find.csv into the run folder; the model is not changed.")
EPILOG = None
SUBJECT = "config"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``workbench lr-find``: the run file, the range and number of steps, ``--trust``."""
    parser.add_argument("config", help="RUN.toml")
    parser.add_argument("--min-lr", type=float, default=1e-7)
    parser.add_argument("--max-lr", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=100)
    add_trust(parser, RUN_TRUST)


def run(args: argparse.Namespace) -> int:
    """Run the range test (:func:`~workbench.core.train.launch.headless.lr_find_from_toml`); its exit code."""
    from workbench.core.train.launch.headless import lr_find_from_toml

    return int(lr_find_from_toml(args.config, out=print, min_lr=args.min_lr, max_lr=args.max_lr,
                                 steps=args.steps, trust=args.trust))
