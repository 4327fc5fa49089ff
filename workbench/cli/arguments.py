"""Argument types and help texts that several commands share."""

from __future__ import annotations

import argparse

__all__ = ["shape_arg", "depth_arg", "batch_arg", "add_trust", "add_memory", "RUN_TRUST", "FILE_TRUST"]

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


#: ``--optimizer`` / ``--precision`` choices: ``core.model.memory``'s OPTIMIZER_STATES / PRECISIONS, spelled out so
#: that ``--help`` stays instant (no torch import); a test checks they agree.
MEMORY_OPTIMIZERS = ("adamw", "adam", "sgd", "rmsprop")
MEMORY_PRECISIONS = ("fp32", "bf16", "fp16")


def batch_arg(text: str) -> int:
    """A whole number >= 1 (argparse type of ``--batch``).

    Raises
    ------
    argparse.ArgumentTypeError
        Not a whole number, or below 1.
    """
    try:
        batch = int(text)
    except ValueError:
        batch = 0
    if batch < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a batch size: give a whole number >= 1")
    return batch


def add_memory(parser: argparse.ArgumentParser) -> None:
    """Add ``--memory`` and what it is estimated for: ``--batch``, ``--optimizer``, ``--momentum``, ``--precision``."""
    parser.add_argument(
        "--memory", action="store_true",
        help="estimate the memory of a training step per module (parameters, gradients, optimizer state, "
        "activations), from a forward on fake tensors: nothing runs on the device")
    parser.add_argument("--batch", type=batch_arg, metavar="B",
                        help="batch size of the --memory estimate (default: the example input's)")
    parser.add_argument("--optimizer", choices=MEMORY_OPTIMIZERS, default="adamw",
                        help="optimizer of the --memory estimate (default adamw: 2 states per trainable value)")
    parser.add_argument("--momentum", type=float, default=0.9, metavar="M",
                        help="SGD / RMSprop momentum of the --memory estimate (default 0.9, a run's; 0: no buffer)")
    parser.add_argument("--precision", choices=MEMORY_PRECISIONS, default="fp32",
                        help="fp32, or bf16 / fp16 autocast (weights, gradients and optimizer state stay fp32)")
