"""``workbench export CKPT --format hf --out DIR``: a run's checkpoint as a folder ``from_pretrained`` loads."""

from __future__ import annotations

import argparse

from workbench.cli.arguments import FILE_TRUST, add_trust
from workbench.cli.output import escaped, write_out

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "export"
USAGE = "CKPT --format hf --out DIR"
SUMMARY = "write a run's checkpoint as a save_pretrained folder (config, weights, tokenizer)"
DESCRIPTION = ("Write a checkpoint (a run's best.pt or last.pt) of a transformers or timm model as a folder that "
               "from_pretrained loads back: config with the head's labels, safetensors weights, and the tokenizer "
               "the run used (named by the run.toml beside the checkpoint, or --tokenizer).")
EPILOG = None
SUBJECT = "checkpoint"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``workbench export``: the checkpoint, ``--format``, ``--out``, ``--tokenizer``, ``--trust``."""
    parser.add_argument("checkpoint", help="the checkpoint to export (RUN/best.pt)")
    parser.add_argument("--format", choices=("hf",), default="hf",
                        help="hf: a Hugging Face save_pretrained folder (the only format so far)")
    parser.add_argument("--out", required=True, metavar="DIR", help="the folder to write (created when missing)")
    parser.add_argument("--tokenizer", default=None, metavar="FOLDER",
                        help="copy the tokenizer of FOLDER (default: the one the run's run.toml names)")
    add_trust(parser, FILE_TRUST)


def run(args: argparse.Namespace) -> int:
    """Export (:func:`~workbench.core.train.task.hf_export.export_checkpoint`) and list the files written; 0."""
    from workbench.core.train.task.hf_export import export_checkpoint

    _, files = export_checkpoint(args.checkpoint, args.out, trust=args.trust, tokenizer=args.tokenizer)
    write_out(escaped([f"wrote {len(files)} files into {args.out}", *(f"  {f.name}" for f in files)]))
    return 0
