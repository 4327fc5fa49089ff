"""``workbench export CKPT_OR_FOLDER --format onnx|pt2|safetensors|hf --out PATH``: ship a model, proven on a batch."""

from __future__ import annotations

import argparse

from workbench.cli.arguments import FILE_TRUST, add_trust, shape_arg
from workbench.cli.output import escaped, write_out

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "export"
USAGE = "CKPT_OR_FOLDER --format onnx|pt2|safetensors|hf --out PATH"
SUMMARY = "export a model (ONNX, torch.export, safetensors, save_pretrained folder) and check it on a batch"
DESCRIPTION = ("Write a checkpoint (a run's best.pt or last.pt) or a model folder as an ONNX file, a torch.export "
               "program (.pt2), a safetensors file of its weights, or a save_pretrained folder; then run the export "
               "(onnxruntime on the CPU, the loaded .pt2, the reloaded weights) on a batch beside the PyTorch model "
               "and compare every output within a tolerance set by --dtype. When one differs, the first module whose "
               "output differs is named. Exit 1 when the check fails; the report is written beside the export as "
               "export_report.json.")
EPILOG = """examples:
  workbench export runs/r1/best.pt --format onnx --out model.onnx
  workbench export runs/r1/best.pt --format pt2 --out model.pt2 --batch-from runs/r1/run.toml
  workbench export resnet18.pth --format safetensors --out out/ --input-shape 1,3,224,224
  workbench export runs/r1/best.pt --format hf --adapters separate --out adapters/"""
SUBJECT = "checkpoint"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``workbench export``."""
    parser.add_argument("checkpoint", help="the checkpoint file or model folder to export (RUN/best.pt)")
    parser.add_argument("--format", choices=("onnx", "pt2", "safetensors", "hf"), required=True,
                        help="onnx: an ONNX graph; pt2: a torch.export program; safetensors: the weights with "
                             "their architecture; hf: a Hugging Face save_pretrained folder")
    parser.add_argument("--out", required=True, metavar="PATH",
                        help="the file to write (model.onnx), or a folder to write model.<format> into")
    parser.add_argument("--input-shape", type=shape_arg, default=None, metavar="N,C,H,W",
                        help="shape of the example input (random normal values) when the file gives none")
    parser.add_argument("--batch-from", default=None, metavar="RUN.toml",
                        help="check on the first validation samples of this run file's data")
    parser.add_argument("--dynamic-batch", action=argparse.BooleanOptionalAction, default=True,
                        help="make the batch dimension dynamic and check a second batch size (default: on)")
    parser.add_argument("--opset", type=int, default=None, metavar="N", help="ONNX opset (default: the exporter's)")
    parser.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default="fp32",
                        help="dtype of the exported weights; sets the check's tolerance (default fp32)")
    parser.add_argument("--no-check", action="store_true", help="write the export without running it")
    parser.add_argument("--tokenizer", default=None, metavar="FOLDER",
                        help="hf: copy the tokenizer of FOLDER (default: the one the run's run.toml names)")
    parser.add_argument("--adapters", choices=("merged", "separate"), default="merged",
                        help="LoRA adapters merged into the weights (default), or, with --format hf, saved apart in "
                             "peft's format (adapter_config.json + adapter_model.safetensors) for the base folder")
    add_trust(parser, FILE_TRUST + "; a run file's dataset factory (--batch-from)")


def run(args: argparse.Namespace) -> int:
    """Export (:func:`workbench.core.export.export`), print the report; 1 when the check fails, else 0."""
    from workbench.core.export import ExportError, export

    try:
        report = export(args.checkpoint, args.format, args.out, batch_from=args.batch_from,
                        input_shape=args.input_shape,
                        dynamic_batch=args.dynamic_batch, check=not args.no_check, opset=args.opset,
                        dtype=args.dtype, trust=args.trust, tokenizer=args.tokenizer,
                        adapters=args.adapters)
    except ExportError as exc:
        from workbench.cli.guard import CommandFailed

        raise CommandFailed(f"{args.checkpoint}: {exc}") from exc
    write_out(escaped(report.lines()))
    return 0 if report.passed else 1
