"""The ``workbench`` command: the window, and the commands without it.

``workbench [PATH] [--arch NAME|SPEC] [--trust] ...``
    Open the desktop app (:func:`workbench.ui.app.main`).
``workbench inspect PATH ...``
    Print a checkpoint's metadata, how it was loaded, and its module tree with
    output shapes, parameters and FLOPs (or the same as JSON).
``workbench train RUN.toml``
    Train from a run configuration, without the GUI
    (:func:`workbench.core.train.launch.headless.train_from_toml`).
``workbench lr-find RUN.toml``
    The learning-rate range test; ``lr_find.csv`` goes beside RUN.toml
    (:func:`workbench.core.train.launch.headless.lr_find_from_toml`).
``workbench diff A B`` / ``workbench runs [ROOT]``
    Per-module change between two checkpoints; the list of run folders.
``workbench contributions [KIND]``
    The registered architectures (datasets, steps, metrics, probes): builtins,
    torchvision's, and installed packages' (:mod:`workbench.core.contrib`).
``workbench graph PATH --out OUT.json|.svg|.png``
    The dataflow graph of the model (:func:`workbench.core.graph.capture_graph`),
    grouped by modules (``--expand``), as JSON, an SVG drawing or a PNG.

``workbench --help`` lists them (:data:`COMMANDS`, :func:`top_level_help`); a
bare word that is neither a command nor an existing file (``workbench foo``)
is a usage error, exit 2, and opens no window.

Exit codes of ``inspect``: 0 loaded (also when no architecture fits and the
weights-only tree is shown); 1 the file could not be loaded, needs trust that
was not given, or does not fit the chosen architecture; 2 usage error (bad
arguments, or an input shape the model does not take).

Every command reports an error as one line on stderr,
``error: <what, which file, what to do>``, and prints a traceback only with
``--debug``. Code that a file names (a pickle's classes, TorchScript, an
architecture or factory spec that is not a registered contribution) runs only
with ``--trust``; a spec given with ``--arch`` is the user's own and needs none.

Imports are lazy: torch is imported when a command needs it, Qt only for the GUI.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "inspect_main", "build_inspect_parser", "top_level_help", "COMMANDS", "DETECT_THRESHOLD"]

#: Auto-detection uses the best candidate when its score is at least this.
DETECT_THRESHOLD = 0.9

_EPILOG = """\
exit codes: 0 loaded (also when only the weights-only tree can be shown);
1 the file could not be loaded, needs --trust, does not fit the architecture,
or the input shape does not fit the model; 2 usage error.

examples:
  workbench inspect resnet18.pth --input-shape 1,3,224,224
  workbench inspect run/last.pt --json
  workbench inspect model.ckpt --arch "resnet50(num_classes=10)" --partial
"""


def _shape_arg(text: str) -> tuple[int, ...]:
    from workbench.core.formatting import parse_shape

    try:
        return parse_shape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _depth_arg(text: str) -> int:
    try:
        depth = int(text)
    except ValueError:
        depth = -1
    if depth < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a depth: give a whole number >= 0")
    return depth


def build_inspect_parser() -> argparse.ArgumentParser:
    """The argument parser of ``workbench inspect``."""
    parser = argparse.ArgumentParser(
        prog="workbench inspect",
        description="Show what a checkpoint holds: metadata, load report, module tree, shapes, parameters, FLOPs.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
        type=_shape_arg,
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
    parser.add_argument("--max-depth", type=_depth_arg, metavar="D", help="show modules down to this depth only")
    parser.add_argument("--debug", action="store_true", help="print tracebacks on errors")
    return parser


class _Failure(Exception):
    """Ends ``inspect`` with exit code 1 and a message for stderr."""


def _load(args: argparse.Namespace) -> dict[str, Any]:
    """Open the file through the one open policy (``core.model.opening.open_model``).

    The command line answers the policy's questions itself: without an
    architecture it takes the detected one when its score reaches
    :data:`DETECT_THRESHOLD`, else (or when that guess does not load strictly)
    it shows the weights-only tree with a note. Returns the pieces for the output.

    Raises
    ------
    WorkbenchError
        From reading / strict loading; the caller turns it into exit code 1.
    """
    from workbench.core.errors import ArchitectureError
    from workbench.core.model.architectures import ArchSpec
    from workbench.core.model.opening import NeedsArchitecture, open_model

    extra = {"num_classes": args.num_classes} if args.num_classes is not None else {}
    out: dict[str, Any] = {"spec": None, "arch_source": None, "candidates": [], "report": None,
                           "weights_only": False, "notes": []}
    arch = ArchSpec.parse(args.arch, **extra) if args.arch else None
    partial = bool(args.partial)
    try:
        opened = open_model(args.path, arch, trust=args.trust, partial=partial, kwargs=extra)
        if arch is not None:
            out["arch_source"] = "--arch"
        elif opened.checkpoint.module is not None:
            out["arch_source"] = "file (full module)"
            opened.spec = opened.spec or ArchSpec(type(opened.model).__name__)
        else:
            out["arch_source"] = "checkpoint"
    except NeedsArchitecture as need:
        candidates = need.candidates[:5]
        out["candidates"] = candidates
        best = candidates[0] if candidates else None
        if best is not None and best.score >= DETECT_THRESHOLD:
            spec = best.spec.with_kwargs(**extra)
            out["arch_source"] = f"detected (score {best.score:.3f})"
            try:
                opened = open_model(args.path, spec, trust=args.trust, partial=partial)
            except ArchitectureError as exc:  # the detection was a guess: show the weights-only tree (exit 0)
                out["notes"].append(
                    f"Detected {spec} but it does not load strictly ({exc}). Showing the weights-only tree; "
                    f"load the matching tensors with --arch {spec.name} --partial.")
                out["report"] = exc.report
                opened = open_model(args.path, trust=args.trust, weights_only=True)
        else:
            found = f"best guess {best.spec} scores {best.score:.2f}" if best else "no architecture matches"
            out["notes"].append(
                f"No architecture fits well enough ({found}); showing the weights-only tree. "
                "Forward passes and training need an architecture: choose one with --arch.")
            opened = open_model(args.path, trust=args.trust, weights_only=True)
    out["checkpoint"] = opened.checkpoint
    out["model"] = opened.model
    out["weights_only"] = opened.weights_only
    out["example"] = opened.example  # what the file says the model is called with (a model folder's config)
    if not opened.weights_only:
        out["spec"] = opened.spec
        out["report"] = None if out["arch_source"] == "file (full module)" else opened.report
    return out


def _arch_text(spec) -> str:
    """The architecture line: a model folder's recorded builder as its class and library, not its whole config."""
    from workbench.core.model.hf_folder import HF_BUILDER, TIMM_BUILDER

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


def _to_json(args, loaded: dict, root, rows: list[dict]) -> str:
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
    return json.dumps(doc, indent=2)


def _table(loaded: dict, root, rows: list[dict]) -> str:
    from workbench.core.formatting import (
        format_bytes,
        format_count,
        format_flops,
        format_int,
        format_shape,
    )

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

    header = ("Name", "Type", "Output shape", "Params", "Trainable", "FLOPs")
    table = []
    for row in rows:
        name = row["name"] or root.short_name
        table.append(
            (
                "  " * row["depth"] + name,
                row["type"],
                format_shape(row["output_shape"]),
                format_int(row["params"]),
                format_int(row["trainable"]),
                format_int(row["flops"]),
            )
        )
    widths = [max(len(header[i]), *(len(r[i]) for r in table)) for i in range(len(header))]
    right = {3, 4, 5}

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
        lines.append(f"FLOPs             {format_int(root.flops)} ({format_flops(root.flops)})")
    from workbench.core.run_files import printable

    return "\n".join(printable(line) for line in lines)  # key names come from the file: escaped


def inspect_main(argv: Sequence[str]) -> int:
    """Run ``workbench inspect`` with ``argv`` (the arguments after ``inspect``).

    Returns
    -------
    int
        Exit code: 0 loaded, 1 could not load, 2 usage error (argparse exits
        via SystemExit(2) and this returns 2; an ``--input-shape`` the model
        does not take is one too).
    """
    parser = build_inspect_parser()
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args

    from workbench.core.errors import WorkbenchError

    try:
        from workbench.core.model.tree import InputShapeError, annotate_shapes_and_flops, build_summary, summary_rows

        loaded = _load(args)
        root = build_summary(loaded["model"])
        example = loaded.get("example")
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
        rows = summary_rows(root, args.max_depth)
        text = _to_json(args, loaded, root, rows) if args.json else _table(loaded, root, rows)
    except InputShapeError as exc:  # a usage error, not a load failure: exit 2 as documented
        return _fail(str(exc), args.debug, code=2)
    except WorkbenchError as exc:
        return _fail(str(exc), args.debug)
    except OSError as exc:
        return _fail(f"{args.path}: {exc.strerror or exc}: check the path and its permissions", args.debug)
    except Exception as exc:  # a bug or an unforeseen torch error: still no traceback by default
        return _fail(f"{args.path}: unexpected error: {type(exc).__name__}: {exc}", args.debug)
    print(text)
    return 0


def version_text() -> str:
    """``workbench 0.1.0 (torch 2.x, torchvision 0.y, Python 3.z)``."""
    import platform

    import torch
    import torchvision

    import workbench

    return (f"workbench {workbench.__version__} (torch {torch.__version__}, torchvision {torchvision.__version__}, "
            f"Python {platform.python_version()})")


def _fail(message: str, debug: bool, code: int = 1) -> int:
    """Print the error as one line, ``error: <message>`` (the traceback first with ``--debug``); return ``code``."""
    from workbench.core.run_files import printable

    if debug:
        traceback.print_exc()
    print(f"error: {printable(message)}", file=sys.stderr)  # names and specs come from files: escaped
    return code


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace | int:
    """The parsed arguments, or the exit code argparse chose (``--help``: 0, a usage error: 2)."""
    try:
        return parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)


#: The subcommands: name -> (arguments, one line for ``workbench --help``). Dispatch is in :func:`main`.
COMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("PATH", "what a checkpoint holds: load report, module tree, shapes, FLOPs"),
    "train": ("RUN.toml", "train from a run file without the window (--nproc-per-node N: DDP)"),
    "lr-find": ("RUN.toml", "learning-rate range test; writes lr_find.csv beside RUN.toml"),
    "diff": ("A B", "per-module relative change between two checkpoints"),
    "runs": ("[ROOT]", "list the run folders (model, dataset, epochs, best, state)"),
    "contributions": ("[KIND]", "what builds by name: architectures, datasets, steps, metrics, probes"),
    "index": ("[--rebuild]", "the architecture index that ranks checkpoints (torchvision, timm): status or rebuild"),
    "graph": ("PATH --out OUT", "the model's dataflow graph as .json, .svg or .png (--expand all|N)"),
}


def _command_mains() -> dict[str, Any]:
    return {"inspect": inspect_main, "train": _train_main, "lr-find": _lr_find_main, "diff": _diff_main,
            "runs": _runs_main, "contributions": _contributions_main, "index": _index_main, "graph": _graph_main}


def top_level_help() -> str:
    """``workbench --help``: every subcommand with one line, then the window's own options."""
    from workbench.ui.app import build_parser  # argparse only: no Qt is imported

    forms = [("workbench [PATH]", "open the window on a checkpoint (default: the built-in demo)")]
    forms += [(f"workbench {name} {args}", text) for name, (args, text) in COMMANDS.items()]
    width = max(len(form) for form, _ in forms)
    lines = ["usage: workbench [PATH] [--arch NAME|SPEC] [--trust] [--in-process] [--screenshot OUT.png]",
             "       workbench COMMAND ...  (workbench COMMAND --help: its options)",
             "       workbench --version",
             "",
             "commands:"]
    lines += [f"  {form:<{width}}  {text}" for form, text in forms]
    gui = build_parser()
    gui.usage = argparse.SUPPRESS
    gui.description = "options of the window (workbench [PATH]):"
    lines += ["", gui.format_help().strip()]
    return "\n".join(lines) + "\n"


def _looks_like_a_command(word: str) -> bool:
    """A bare lower-case word (``foo``, ``lr_find``), not a path: no dot, no separator, not an option."""
    return bool(re.fullmatch(r"[a-z][a-z0-9_-]*", word))


def _gui_path(argv: list[str]) -> str | None:
    """The PATH the window would open, as its own parser reads ``argv`` (None when it reads none or fails)."""
    from workbench.ui.app import build_parser

    try:
        args, _ = build_parser().parse_known_args(argv)
    except SystemExit:  # the window's parser reports its own usage errors
        return None
    return args.path


def _unknown_command(word: str) -> int:
    """``workbench foo`` where ``foo`` is neither a command nor an existing path: exit 2 with one line."""
    near = difflib.get_close_matches(word, list(COMMANDS), n=1)
    hint = f"; did you mean {near[0]}?" if near else ""
    return _fail(f"no such file or command: {word}; commands: {', '.join(COMMANDS)}{hint}", False, code=2)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``workbench`` console script and ``python -m workbench``.

    ``workbench COMMAND ...`` runs a subcommand of :data:`COMMANDS`; anything
    else opens the window (:func:`workbench.ui.app.main`), except a bare word
    that is neither a command nor an existing file (``workbench foo``), which
    is a usage error (exit 2) naming the commands.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; default ``sys.argv[1:]``.

    Returns
    -------
    int
        The process exit code.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-V"]):
        print(version_text())
        return 0
    if argv and argv[0] in COMMANDS:
        return int(_command_mains()[argv[0]](argv[1:]))
    if "-h" in argv or "--help" in argv:
        print(top_level_help(), end="")
        return 0
    path = _gui_path(argv)
    if path is not None and _looks_like_a_command(path) and not Path(path).exists():
        return _unknown_command(path)
    from workbench.ui.app import main as gui_main

    return gui_main(argv)


def _add_common(parser: argparse.ArgumentParser, trust_help: str) -> None:
    parser.add_argument("--trust", action="store_true", help=trust_help)
    parser.add_argument("--debug", action="store_true", help="print tracebacks on errors")


_RUN_TRUST = ("run code the run file (or its starting checkpoint) names: an architecture factory pkg.mod:fn / "
              "file.py:fn, or a pickled model")


def _train_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="workbench train", description="Train from a run configuration (TOML).")
    parser.add_argument("config", help="RUN.toml")
    _add_common(parser, _RUN_TRUST)
    ddp = parser.add_argument_group("data-parallel (DistributedDataParallel on torch.distributed.run)")
    ddp.add_argument("--nproc-per-node", type=int, default=0, metavar="N",
                     help="run N ranks on this machine (Gloo on CPU, NCCL on CUDA); 0 = one process, no DDP")
    ddp.add_argument("--nnodes", type=int, default=1)
    ddp.add_argument("--node-rank", type=int, default=0)
    ddp.add_argument("--master-addr", default=None)
    ddp.add_argument("--master-port", type=int, default=None)
    ddp.add_argument("--rank-timeout", type=float, default=60.0, metavar="S",
                     help="end the run when a rank has made no step for S seconds (default 60)")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args

    def run() -> int:
        from workbench.core.train.launch.headless import train_from_toml

        if args.nproc_per_node > 0:
            from workbench.core.train.launch.headless import check_run_trust
            from workbench.core.train.launch.torchrun import launch

            check_run_trust(args.config, trust=args.trust)  # before any rank starts

            return int(launch(args.config, args.nproc_per_node, out=print, nnodes=args.nnodes,
                              node_rank=args.node_rank, master_addr=args.master_addr,
                              master_port=args.master_port, timeout_s=args.rank_timeout, trust=args.trust))
        return int(train_from_toml(args.config, out=print, trust=args.trust, debug=args.debug))

    return _guard(run, args.config, args.debug)


def _guard(run, path: str, debug: bool) -> int:
    """``run()``'s exit code; any error it raises becomes one ``error:`` line and exit 1."""
    from workbench.core.errors import WorkbenchError

    try:
        return run()
    except WorkbenchError as exc:
        return _fail(str(exc), debug)
    except OSError as exc:
        where = exc.filename or path
        return _fail(f"{where}: {exc.strerror or exc}: check the path, its permissions and the free disk space",
                     debug)
    except Exception as exc:  # noqa: BLE001 - a bug or an unforeseen torch error: one line unless --debug
        return _fail(f"{path}: unexpected error: {type(exc).__name__}: {exc} (--debug prints the traceback)", debug)


def _lr_find_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="workbench lr-find",
        description="Learning-rate range test on a run configuration (TOML): prints suggested_lr = <float> last "
                    "and writes lr_find.csv into the run folder; the model is not changed.")
    parser.add_argument("config", help="RUN.toml")
    parser.add_argument("--min-lr", type=float, default=1e-7)
    parser.add_argument("--max-lr", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=100)
    _add_common(parser, _RUN_TRUST)
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args

    def run() -> int:
        from workbench.core.train.launch.headless import lr_find_from_toml

        return int(lr_find_from_toml(args.config, out=print, min_lr=args.min_lr, max_lr=args.max_lr,
                                     steps=args.steps, trust=args.trust))

    return _guard(run, args.config, args.debug)


def _diff_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="workbench diff",
        description="Per-module relative change ||a - b|| / ||a|| of parameters and buffers between two checkpoints "
                    "of one architecture; one line per changed module, largest first.")
    parser.add_argument("a", help="reference checkpoint (the denominator)")
    parser.add_argument("b", help="checkpoint to compare")
    parser.add_argument("--arch", default=None, help="architecture NAME or SPEC when the files do not name one")
    _add_common(parser, "run code the files name (a pickled model, TorchScript, an architecture factory)")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args

    def run() -> int:
        from workbench.core.model.diff import module_diff
        from workbench.core.model.opening import open_model

        a = open_model(args.a, args.arch, trust=args.trust, weights_only=True).model
        b = open_model(args.b, args.arch, trust=args.trust, weights_only=True).model
        changes = module_diff(a, b, names=(args.a, args.b))
        from workbench.core.run_files import printable

        for change in changes:
            print(printable(change.text()))  # module names come from the files: escaped
        if not changes:
            print("no module changed", file=sys.stderr)
        return 0

    return _guard(run, args.a, args.debug)


def _runs_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="workbench runs", description="List the run folders: one run per line.")
    parser.add_argument("root", nargs="?", default=None, help="runs folder (default: the runs root)")
    parser.add_argument("--json", action="store_true", help="the same as a JSON list")
    parser.add_argument("--debug", action="store_true", help="print tracebacks on errors")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args

    def run() -> int:
        from workbench.core.train.runs.index import list_runs, runs_table
        from workbench.core.train.runs.folder import default_runs_root

        try:
            runs = list_runs(args.root or default_runs_root())
        except FileNotFoundError as exc:
            return _fail(f"{exc}: give an existing runs folder", args.debug)
        print(json.dumps([r.to_dict() for r in runs], indent=1) if args.json else runs_table(runs))
        return 0

    return _guard(run, args.root or "runs root", args.debug)


def _kind_arg(text: str) -> str:
    from workbench.core.contrib import KINDS  # the registry alone: neither torch nor Qt

    kind = text.lower().removesuffix("s")
    if kind not in KINDS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a kind: give one of {', '.join(KINDS)}")
    return kind


def _contributions_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="workbench contributions",
        description="List the registered contributions, one per line: kind, name, where it comes from "
                    "(builtin, torchvision, or the installed package that registers it through an entry point "
                    "workbench.<kind>s). A registered name is built by name (--arch NAME) and resolves without "
                    "--trust when a file names it; docs/plugins.md shows how a package contributes.")
    parser.add_argument("kind", nargs="?", type=_kind_arg, metavar="KIND",
                        help="only this kind: architecture, dataset, step, metric or probe (default: every kind)")
    parser.add_argument("--json", action="store_true", help="the same as a JSON list of {kind, name, target, source}")
    parser.add_argument("--debug", action="store_true", help="print tracebacks on errors")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args

    def run() -> int:
        from workbench.core import contrib
        from workbench.core.run_files import printable

        found = [c for kind in ([args.kind] if args.kind else contrib.KINDS) for c in contrib.contributions(kind)]
        width = max((len(c.name) for c in found), default=0)
        # names and sources come from installed packages' metadata: escaped
        text = (json.dumps([dataclasses.asdict(c) for c in found], indent=1) if args.json
                else "\n".join(printable(f"{c.kind:<12}  {c.name:<{width}}  {c.source}") for c in found))
        try:
            print(text)
            sys.stdout.flush()
        except BrokenPipeError:  # `workbench contributions | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

    return _guard(run, "contributions", args.debug)


def _index_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="workbench index",
        description="The architecture index: every known architecture's state_dict keys and shapes (torchvision, "
                    "timm when installed, registered contributions), built once per library version in the cache "
                    "folder ($WORKBENCH_CACHE_DIR, else $XDG_CACHE_HOME/workbench or ~/.cache/workbench) and read "
                    "when a checkpoint's architecture is detected. Without options: what is built.")
    parser.add_argument("--rebuild", action="store_true",
                        help="build everything again, every timm family included (about a minute), with a progress line")
    parser.add_argument("--debug", action="store_true", help="print tracebacks on errors")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args

    def progress(done: int, total: int, what: str) -> None:
        line = f"\rindexing {what[:60]:<60} {done}/{total}"
        print(line, end="", file=sys.stderr, flush=True)

    def run() -> int:
        import time

        from workbench.core.model import arch_index, architectures

        arch_index.use_builder(architectures.candidate_builder)  # (architectures registers it on import too)
        if args.rebuild:
            t0 = time.perf_counter()
            live = sys.stderr.isatty()
            counts = arch_index.rebuild(progress if live else None)
            if live:
                print(file=sys.stderr)
            print(f"indexed {counts['torchvision']} torchvision, {counts['timm']} timm and "
                  f"{counts['contributions']} contributed architectures in {time.perf_counter() - t0:.1f} s")
        st = arch_index.status()
        timm = (f"timm {st['timm']}: {st['timm_built']} of {st['timm_families']} families built"
                if st["timm"] else "timm: not installed")
        print(f"{st['folder']}: torchvision {'built' if st['torchvision'] else 'not built'}, "
              f"contributions {'built' if st['contributions'] else 'not built'}, {timm}; "
              f"{st['bytes'] / 2**20:.1f} MiB")
        return 0

    return _guard(run, "index", args.debug)


_GRAPH_EPILOG = """\
exit codes: 0 written; 1 the file could not be opened, needs --trust or an
architecture, or no capture could trace the model on the example input;
2 usage error (options, an unknown output type, no input shape to use).

examples:
  workbench graph resnet18.pth --arch resnet18 --out resnet18.svg --expand 1
  workbench graph bert-folder/ --out bert.json
  workbench graph model.pt --input-shape 1,3,32,32 --out model.png
"""

#: What ``workbench graph --out`` writes, by suffix.
GRAPH_SUFFIXES = (".json", ".svg", ".png")


def _expand_arg(text: str) -> int | None:
    if text == "all":
        return None
    try:
        return _depth_arg(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither 'all' nor a whole number >= 0") from None


def _graph_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="workbench graph",
        description="Capture the dataflow graph of a model (torch.export, falling back to torch.fx, then to a "
                    "forward-hook trace) and write it as JSON (the ModelGraph), an SVG drawing or a PNG, laid out "
                    "in layers with modules as boxes.",
        epilog=_GRAPH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", help="checkpoint file or model folder, opened as `workbench inspect` opens it")
    parser.add_argument("--arch", metavar="NAME|SPEC", help="architecture, as for `workbench inspect`")
    parser.add_argument("--num-classes", type=int, metavar="N", help="num_classes passed to the architecture")
    parser.add_argument("--input-shape", type=_shape_arg, metavar="N,C,H,W",
                        help="example input shape (default: the model folder's own example, or token ids for a "
                             "model whose first layer is an embedding)")
    parser.add_argument("--expand", type=_expand_arg, default=None, metavar="all|N",
                        help="all: every operation (default); N: open N levels of modules, the rest are boxes "
                             "(1: the top-level modules as boxes, 0: the model as one box)")
    parser.add_argument("--out", required=True, metavar="OUT", help="output file: .json, .svg or .png")
    parser.add_argument("--trust", action="store_true",
                        help="run code the file names (a pickled model, TorchScript, an architecture factory)")
    parser.add_argument("--debug", action="store_true", help="print tracebacks on errors")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    suffix = Path(args.out).suffix.lower()
    if suffix not in GRAPH_SUFFIXES:
        return _fail(f"{args.out}: cannot write a {suffix or 'suffix-less'} file: give --out a .json, .svg or .png "
                     "name", args.debug, code=2)
    args.partial = False

    def run() -> int:
        from workbench.core.graph import capture_graph

        loaded = _load(args)
        if loaded["weights_only"]:
            return _fail(f"{args.path}: no architecture to run, and a graph needs a forward pass: choose one with "
                         "--arch (workbench contributions architecture lists them)", args.debug)
        example = _graph_example(args, loaded)
        if example is None:
            return _fail(f"{args.path}: the model gives no hint of its input: give --input-shape "
                         "(e.g. 1,3,224,224)", args.debug, code=2)
        graph = capture_graph(loaded["model"], example)
        if args.expand is not None:
            graph = graph.collapsed(graph.expand_depth(args.expand))
        _write_graph(graph, Path(args.out), suffix)
        from workbench.core.run_files import printable

        print(printable(f"{args.out}: {len(graph.nodes)} nodes, {len(graph.edges)} edges, "
                        f"captured with {graph.method} on {example.describe()}"))
        if graph.note:
            print(printable(f"note: {graph.note}"), file=sys.stderr)
        return 0

    return _guard(run, args.path, args.debug)


def _graph_example(args: argparse.Namespace, loaded: dict[str, Any]):
    """The input to capture on: ``--input-shape``, else the file's own example, else the model's hint, else None."""
    from workbench.core.model.example_input import default_input_shape, example_input

    model = loaded["model"]
    if args.input_shape:
        return example_input(model, args.input_shape)
    if loaded.get("example") is not None:
        return loaded["example"]
    return example_input(model) if default_input_shape(model) is not None else None


def _write_graph(graph, out: Path, suffix: str) -> None:
    """Write ``graph`` to ``out`` atomically: its JSON, its SVG drawing, or that drawing rendered to PNG."""
    from workbench.core.files import atomic_write_bytes, atomic_write_text

    if suffix == ".json":
        atomic_write_text(out, graph.to_json(indent=1))
        return
    from workbench.core.graph.svg import to_svg

    svg = to_svg(graph)
    if suffix == ".svg":
        atomic_write_text(out, svg)
    else:
        atomic_write_bytes(out, _svg_to_png(svg))


#: Longest side of a PNG, pixels: a taller drawing is scaled down to fit (QImage's limits, file size).
PNG_MAX_SIDE = 16384
_QT_APP = None


def _svg_to_png(svg: str) -> bytes:
    """PNG bytes of an SVG document, rendered by Qt's SVG module (offscreen; no window is shown)."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QBuffer, QByteArray, QCoreApplication, QIODevice
    from PySide6.QtGui import QColor, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer
    from PySide6.QtWidgets import QApplication

    global _QT_APP
    if QCoreApplication.instance() is None:  # text needs fonts, fonts an application: one for the process,
        _QT_APP = QApplication(["workbench-graph"])  # a full QApplication so a window can still be made later
    renderer = QSvgRenderer(QByteArray(svg.encode("utf-8")))
    if not renderer.isValid():
        raise ValueError("the SVG drawing of the graph could not be rendered")
    size = renderer.defaultSize()
    scale = min(1.0, PNG_MAX_SIDE / max(size.width(), size.height(), 1))
    image = QImage(max(1, int(size.width() * scale)), max(1, int(size.height() * scale)), QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    try:
        renderer.render(painter)
    finally:
        painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise ValueError("the graph's image could not be encoded as PNG")
    buffer.close()
    return bytes(data.data())


if __name__ == "__main__":
    raise SystemExit(main())
