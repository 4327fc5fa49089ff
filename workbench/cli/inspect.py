"""``workbench inspect PATH``: a checkpoint's metadata, how it was loaded, its module tree.

Prints the module tree with output shapes, parameters and FLOPs (or the same as
JSON); with ``--memory``, the memory of a training step per module
(:func:`workbench.core.model.memory.estimate_memory`: parameters, gradients,
optimizer state and activations for ``--batch``, ``--optimizer`` and
``--precision``, from a forward on fake tensors). Exit codes: 0 loaded (also when no architecture fits and the
weights-only tree is shown); 1 the file could not be loaded, needs trust that
was not given, or does not fit the chosen architecture; 2 usage error (bad
arguments, or an input shape the model does not take).

:func:`open_checkpoint` is the command line's open loop (``workbench graph``
opens through it too): it answers the open policy's questions itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from workbench.cli.arguments import add_memory, depth_arg, shape_arg
from workbench.cli.guard import CommandFailed
from workbench.cli.output import escaped, write_out

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run", "open_checkpoint"]

NAME = "inspect"
USAGE = "PATH"
SUMMARY = "what a checkpoint holds: load report, module tree, shapes, FLOPs, memory"
DESCRIPTION = ("Show what a checkpoint holds: metadata, load report, module tree, shapes, parameters, FLOPs, "
               "and with --memory the memory a training step needs per module.")
SUBJECT = "path"
EPILOG = """\
exit codes: 0 loaded (also when only the weights-only tree can be shown);
1 the file could not be loaded, needs --trust, does not fit the architecture,
or the input shape does not fit the model; 2 usage error.

examples:
  workbench inspect resnet18.pth --input-shape 1,3,224,224
  workbench inspect run/last.pt --json
  workbench inspect model.ckpt --arch "resnet50(num_classes=10)" --partial
  workbench inspect gpt2-folder --memory --batch 16 --optimizer adamw --precision bf16 --json
  workbench inspect gpt2-folder --memory --batch 16 --activation-checkpointing
"""

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``workbench inspect`` (``--debug`` is added by :func:`~workbench.cli.guard.run_command`)."""
    parser.add_argument("path", help="checkpoint file (.pt, .pth, .bin, .ckpt, .safetensors, TorchScript)")
    parser.add_argument(
        "--arch",
        metavar="NAME|SPEC",
        help='architecture: a registered name (torchvision\'s "resnet18", "resnet18(num_classes=10)", '
        '"digits_cnn", an installed package\'s: workbench contributions architecture lists them), '
        'or a factory "pkg.mod:fn" / "file.py:fn". Default: the checkpoint\'s own entry, else auto-detection',
    )
    parser.add_argument("--num-classes", type=int, metavar="N", help="num_classes passed to the architecture")
    parser.add_argument(
        "--input-shape",
        type=shape_arg,
        metavar="N,C,H,W",
        help="example input shape, e.g. 1,3,224,224: adds output shapes and FLOPs",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--trust",
        action="store_true",
        help="run code the file names: a full pickled model, TorchScript, custom classes, or an architecture "
        "factory (pkg.mod:fn, file.py:fn) in its arch entry",
    )
    parser.add_argument(
        "--partial", action="store_true", help="load every matching tensor and list the rest (not strict)"
    )
    parser.add_argument("--max-depth", type=depth_arg, metavar="D", help="show modules down to this depth only")
    add_memory(parser)
    parser.add_argument(
        "--activation-checkpointing", action="store_true",
        help="the --memory estimate for a run with activation_checkpointing = true: each checkpointed block's "
        "inputs kept and one block recomputed at a time")


def run(args: argparse.Namespace) -> int:
    """Print what ``args.path`` holds, as a table or ``--json``; 0 when it opened.

    Raises
    ------
    CommandFailed
        Code 2: an ``--input-shape`` the model does not take (a usage error, not a load failure).
    WorkbenchError
        The file could not be opened or does not fit the architecture (exit 1 through the guard).
    """
    from workbench.core.model.tree import InputShapeError, annotate_shapes_and_flops, build_summary, summary_rows

    loaded = open_checkpoint(args)
    root = build_summary(loaded["model"])
    example = loaded.get("example")
    try:
        if args.input_shape or example is not None:
            if loaded["weights_only"]:
                if args.input_shape:
                    loaded["notes"].append("No output shapes or FLOPs: the weights-only tree cannot run a forward "
                                           "pass.")
            else:
                label = loaded["spec"].name if loaded["spec"] is not None else None
                if args.input_shape:
                    annotate_shapes_and_flops(root, args.input_shape, label=label)
                else:  # the file's own example input (a Hugging Face config's input_ids, pixel_values...)
                    annotate_shapes_and_flops(root, example=example, label=label)
                    loaded["notes"].append(f"Output shapes and FLOPs for the config's example input "
                                           f"{example.describe()}.")
    except InputShapeError as exc:  # a usage error, not a load failure: exit 2 as documented
        raise CommandFailed(str(exc), code=2) from exc
    rows = summary_rows(root, args.max_depth)
    estimate = _memory(args, loaded) if getattr(args, "memory", False) else None
    if estimate is not None:
        for row in rows:
            entry = estimate.modules.get(row["name"])
            row["memory"] = entry.as_dict() if entry is not None else None
    if args.json:
        write_out(_to_json(args, loaded, root, rows, estimate))
    else:
        write_out(_table(loaded, root, rows, estimate))
    return 0


def _memory(args: argparse.Namespace, loaded: dict[str, Any]):
    """The ``--memory`` estimate (:func:`~workbench.core.model.memory.estimate_memory`) of the opened model.

    The input is ``--input-shape``'s, else the file's own example (a model
    folder's config), else the one the architecture implies (torchvision's
    224 x 224 images, an embedding model's token ids); its batch dimension
    becomes ``--batch``.

    Raises
    ------
    CommandFailed
        Code 1: the weights-only tree (no architecture, no forward). Code 2: no
        input shape is known, or the model does not take it.
    """
    from workbench.core.model.example_input import example_input, spec_input_shape
    from workbench.core.model.memory import estimate_memory

    model, spec = loaded["model"], loaded["spec"]
    if loaded["weights_only"]:
        raise CommandFailed("--memory needs a forward pass, which the weights-only tree cannot run: "
                            "choose an architecture with --arch", code=1)
    try:
        if args.input_shape:
            example = example_input(model, args.input_shape)
        elif loaded.get("example") is not None:
            example = loaded["example"]
        else:
            example = example_input(model, spec_input_shape(spec))
    except ValueError as exc:
        raise CommandFailed(f"--memory needs the model's input: give --input-shape, e.g. 1,3,224,224 ({exc})",
                            code=2) from exc
    batch = args.batch or (example.shape[0] if example.shape else 1)
    label = spec.name if spec is not None else type(model).__name__
    try:
        return estimate_memory(model, example, batch_size=batch, optimizer=args.optimizer,
                               momentum=args.momentum, precision=args.precision,
                               activation_checkpointing=getattr(args, "activation_checkpointing", False))
    except Exception as exc:  # the model's own forward on the fake input: say it in the user's terms
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CommandFailed(f"--memory: {label} does not run on {example.describe()} with batch {batch}: {first}; "
                            "set the input shape the model takes with --input-shape", code=2) from exc


def open_checkpoint(args: argparse.Namespace) -> dict[str, Any]:
    """Open ``args.path`` through the one answer policy (``core.model.open_policy.OpenPolicy``).

    The command line answers the policy's questions with its own rules
    (:class:`_CommandLineAnswers`): without an architecture it takes the detected
    one when the policy calls it a fair guess, else (or when that guess does not load strictly) it shows the weights-only
    tree with a note; trust and partial loading are answered up front
    (``--trust``, ``--partial``). The file is read once whatever the answers.

    Parameters
    ----------
    args : argparse.Namespace
        ``path``, ``arch``, ``num_classes``, ``trust`` and ``partial`` of the command line.

    Returns
    -------
    dict
        The pieces for the output: ``checkpoint``, ``model``, ``spec``, ``arch_source``,
        ``candidates``, ``report``, ``weights_only``, ``example``, ``notes``.

    Raises
    ------
    WorkbenchError
        From reading / strict loading, or the question ``--trust`` / ``--partial``
        did not answer; the guard turns it into exit code 1.
    """
    from workbench.core.model.open_policy import OpenPolicy
    from workbench.core.model.spec import ArchSpec

    extra = {"num_classes": args.num_classes} if args.num_classes is not None else {}
    out: dict[str, Any] = {"spec": None, "arch_source": None, "candidates": [], "report": None,
                           "weights_only": False, "notes": []}
    arch = ArchSpec.parse(args.arch, **extra) if args.arch else None
    policy = OpenPolicy(_CommandLineAnswers(out), guess_fallback=True)
    opened = policy.open(args.path, arch, trust=args.trust, partial=bool(args.partial), kwargs=extra)
    if opened is None:
        raise policy.declined
    out["candidates"] = out["candidates"] or policy.candidates[:5]
    if policy.detected is not None:
        out["arch_source"] = f"detected (score {policy.detected.score:.3f})"
    if policy.guess_failed is not None:
        spec, exc = policy.guess_failed
        out["notes"].append(
            f"Detected {spec} but it does not load strictly ({exc}). Showing the weights-only tree; "
            f"load the matching tensors with --arch {spec.name} --partial.")
        out["report"] = exc.report
    elif arch is not None:
        out["arch_source"] = "--arch"
    elif opened.checkpoint.module is not None:
        out["arch_source"] = "file (full module)"
        opened.spec = opened.spec or ArchSpec(type(opened.model).__name__)
    elif not policy.candidates:
        out["arch_source"] = "checkpoint"
    out["checkpoint"] = opened.checkpoint
    out["model"] = opened.model
    out["weights_only"] = opened.weights_only
    out["example"] = opened.example  # what the file says the model is called with (a model folder's config)
    if not opened.weights_only:
        out["spec"] = opened.spec
        out["report"] = None if out["arch_source"] == "file (full module)" else opened.report
    return out


class _CommandLineAnswers:
    """The command line's answers to the open's questions (:class:`~workbench.core.model.open_policy.Asker`).

    It never asks: ``--trust`` and ``--partial`` are the answers given up front
    (no means the question ends the command with exit code 1); an architecture
    is the detected best candidate when the policy calls it a fair guess
    (:meth:`~workbench.core.model.open_policy.OpenPolicy.fair_guess`), else the weights only.
    """

    def __init__(self, out: dict[str, Any]):
        self.out = out

    def trust(self, err) -> bool:
        return False

    def architecture(self, candidates, file_name: str):
        from workbench.core.model.open_policy import WEIGHTS_ONLY, OpenPolicy

        self.out["candidates"] = candidates[:5]
        guess = OpenPolicy.fair_guess(candidates)
        if guess is not None:
            self.out["arch_source"] = f"detected (score {guess.score:.3f})"
            return guess.spec
        best = candidates[0] if candidates else None
        found = f"best guess {best.spec} scores {best.score:.2f}" if best else "no architecture matches"
        self.out["notes"].append(
            f"No architecture fits well enough ({found}); showing the weights-only tree. "
            "Forward passes and training need an architecture: choose one with --arch.")
        return WEIGHTS_ONLY

    def partial_load(self, report, file_name: str, spec) -> bool:
        return False


def _arch_text(spec) -> str:
    """The architecture line: a model folder's recorded builder as its class and library, not its whole config."""
    from workbench.core.model.formats.model_folder import HF_BUILDER, TIMM_BUILDER

    if spec.name == HF_BUILDER:
        return f"{spec.kwargs.get('architecture', '?')} (transformers, from the folder's config.json)"
    if spec.name == TIMM_BUILDER:
        return f"timm/{spec.kwargs.get('model_name', '?')} (timm, from the folder's config.json)"
    return str(spec)


def _plain(value: Any) -> Any:
    """JSON-friendly copy: tuples -> lists, tensors/other objects -> str."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _report_dict(report) -> dict | None:
    if report is None:
        return None
    return {
        "ok": bool(report.ok),
        "strict": bool(report.strict),
        "loaded": int(report.loaded),
        "stripped_prefixes": list(report.stripped_prefixes),
        "missing": list(report.missing),
        "unexpected": list(report.unexpected),
        "mismatched": [
            {"name": n, "expected": list(map(int, e)), "found": list(map(int, f))} for n, e, f in report.mismatched
        ],
    }


def _to_json(args, loaded: dict, root, rows: list[dict], estimate=None) -> str:
    ckpt = loaded["checkpoint"]
    spec = loaded["spec"]
    meta = dataclasses.asdict(ckpt.metadata)
    doc = {
        "path": str(ckpt.path),
        "arch": spec.name if spec is not None else None,
        "arch_kwargs": _plain(spec.kwargs) if spec is not None else None,
        "arch_source": loaded["arch_source"],
        "weights_only": loaded["weights_only"],
        "candidates": [
            {"arch": c.spec.name, "kwargs": _plain(c.spec.kwargs), "score": float(c.score)}
            for c in loaded["candidates"]
        ],
        "load_report": _report_dict(loaded["report"]),
        "metadata": _plain(meta),
        "input_shape": list(args.input_shape) if args.input_shape else None,
        "total_params": int(root.total_params),
        "trainable_params": int(root.trainable_params),
        "total_bytes": int(root.total_bytes),
        "total_flops": None if root.flops is None else int(root.flops),
        "notes": loaded["notes"],
        "modules": rows,
    }
    if estimate is not None:
        doc["memory"] = estimate.root.as_dict()
        doc["memory_for"] = {"batch_size": estimate.batch_size, "optimizer": estimate.optimizer,
                             "momentum": estimate.momentum, "precision": estimate.precision,
                             "example": estimate.example, "device": estimate.device,
                             "activation_checkpointing": estimate.activation_checkpointing,
                             "checkpointed_blocks": estimate.checkpointed_blocks}
    return json.dumps(doc, indent=2)


def _table(loaded: dict, root, rows: list[dict], estimate=None) -> str:
    from workbench.core.formatting import (
        format_bytes,
        format_count,
        format_flops,
        format_int,
        format_shape,
    )
    from workbench.core.model.flops import macs

    ckpt = loaded["checkpoint"]
    meta = ckpt.metadata
    lines = [f"File        {ckpt.path}"]
    lines.append(
        f"Format      {meta.format} ({meta.container})"
        + (f", state_dict at '{meta.state_dict_key}'" if meta.state_dict_key else "")
        + f", {format_bytes(meta.file_size)}"
    )
    progress = []
    if meta.epoch is not None:
        progress.append(f"epoch {meta.epoch}")
    if meta.global_step is not None:
        progress.append(f"step {meta.global_step}")
    if meta.loss is not None:
        progress.append(f"loss {meta.loss:.6g}")
    if progress:
        lines.append("Progress    " + ", ".join(progress))
    if meta.optimizer_class or meta.optimizer_hparams:
        hp = ", ".join(
            f"{k}={v}" for k, v in meta.optimizer_hparams.items() if isinstance(v, (int, float, str, bool, tuple, list))
        )
        lines.append(f"Optimizer   {meta.optimizer_class or '?'}" + (f" ({hp})" if hp else ""))
    dtypes = ", ".join(f"{k} x{v}" for k, v in meta.dtypes.items())
    lines.append(f"Tensors     {format_int(meta.num_tensors)} ({dtypes}), {format_int(meta.total_params)} values")

    spec = loaded["spec"]
    if loaded["weights_only"]:
        lines.append("Arch        none (weights-only tree: forward passes and training need an architecture)")
    elif spec is not None:
        lines.append(f"Arch        {_arch_text(spec)} [{loaded['arch_source']}]")
    if loaded["candidates"]:
        top = ", ".join(f"{c.spec} {c.score:.3f}" for c in loaded["candidates"][:3])
        lines.append(f"Detected    {top}")
    report = loaded["report"]
    if report is not None:
        kind = "strict" if report.strict else "partial"
        stripped = ", ".join(repr(p) for p in report.stripped_prefixes) or "none"
        lines.append(f"Load        {kind}, {report.loaded} tensors loaded, stripped prefixes: {stripped}")
        lines.append(f"            {report.summary()}")
    for note in loaded["notes"]:
        lines.append(f"Note        {note}")
    lines.append("")

    header = ("Name", "Type", "Output shape", "Params", "Trainable", "FLOPs") + (("Memory",) if estimate else ())
    table = []
    for row in rows:
        name = row["name"] or root.short_name
        cells = (
            "  " * row["depth"] + name,
            row["type"],
            format_shape(row["output_shape"]),
            format_int(row["params"]),
            format_int(row["trainable"]),
            format_int(row["flops"]),
        )
        if estimate is not None:
            memory = row.get("memory")
            cells += (format_bytes(memory["total_bytes"] if memory else None),)
        table.append(cells)
    widths = [max(len(header[i]), *(len(r[i]) for r in table)) for i in range(len(header))]
    right = {3, 4, 5, 6}

    def fmt(cells):
        return "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(cells)).rstrip()

    lines.append(fmt(header))
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(fmt(r) for r in table)
    lines.append("")
    lines.append(f"Total params      {format_int(root.total_params)} ({format_count(root.total_params)})")
    lines.append(f"Trainable params  {format_int(root.trainable_params)}")
    lines.append(f"Size              {format_bytes(root.total_bytes)} (parameters and buffers)")
    if root.flops is not None:
        lines.append(f"FLOPs             {format_int(root.flops)} ({format_flops(root.flops)}, 2 per multiply-add)")
        lines.append(f"Multiply-adds     {format_int(macs(root.flops))} (FLOPs / 2: what torchvision's _ops and many papers count)")
    if estimate is not None:
        mem = estimate.root
        lines.append(f"Memory            {format_bytes(mem.total_bytes)} for a training step: batch "
                     f"{estimate.batch_size} ({estimate.example}), {estimate.optimizer}, {estimate.precision}")
        lines.append(f"  parameters      {format_bytes(mem.params_bytes)}")
        lines.append(f"  gradients       {format_bytes(mem.grads_bytes)}")
        lines.append(f"  optimizer state {format_bytes(mem.optimizer_bytes)}")
        if estimate.activation_checkpointing:
            how = (f"activation checkpointing: {estimate.checkpointed_blocks} blocks' inputs kept, "
                   f"{format_bytes(estimate.recompute_bytes)} recomputed at a time" if estimate.checkpointed_blocks
                   else "activation checkpointing finds no repeated blocks: saved for backward")
        else:
            how = "saved for backward"
        lines.append(f"  activations     {format_bytes(mem.activations_bytes)} ({how})")
    return escaped(lines)  # key names come from the file: escaped
