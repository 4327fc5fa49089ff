"""``workbench graph PATH --out OUT``: the model's dataflow graph as JSON, an SVG drawing or a PNG.

Captured by :func:`workbench.core.graph.capture_graph`, grouped by modules
(``--expand``). The JSON is the :class:`~workbench.core.graph.ModelGraph`;
the drawing is core's SVG (:func:`workbench.core.graph.svg.to_svg`), written
(``.svg``) or rendered (``.png``) by the Graph tab's own image writer,
:func:`workbench.ui.graph.image_file.write_graph_image`. Every file is written
atomically.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from workbench.cli.arguments import FILE_TRUST, add_trust, depth_arg, shape_arg
from workbench.cli.guard import CommandFailed
from workbench.cli.output import escaped

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run", "GRAPH_SUFFIXES"]

NAME = "graph"
USAGE = "PATH --out OUT"
SUMMARY = "the model's dataflow graph as .json, .svg or .png (--expand all|N)"
DESCRIPTION = ("Capture the dataflow graph of a model (torch.export, falling back to torch.fx, then to a "
               "forward-hook trace) and write it as JSON (the ModelGraph), an SVG drawing or a PNG, laid out "
               "in layers with modules as boxes.")
SUBJECT = "path"
EPILOG = """\
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
    """``all`` -> None (every operation), else a depth (argparse type of ``--expand``)."""
    if text == "all":
        return None
    try:
        return depth_arg(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither 'all' nor a whole number >= 0") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``workbench graph``: the file and its architecture, the input, ``--expand``, ``--out``."""
    parser.add_argument("path", help="checkpoint file or model folder, opened as `workbench inspect` opens it")
    parser.add_argument("--arch", metavar="NAME|SPEC", help="architecture, as for `workbench inspect`")
    parser.add_argument("--num-classes", type=int, metavar="N", help="num_classes passed to the architecture")
    parser.add_argument("--input-shape", type=shape_arg, metavar="N,C,H,W",
                        help="example input shape (default: the model folder's own example, or token ids for a "
                             "model whose first layer is an embedding)")
    parser.add_argument("--expand", type=_expand_arg, default=None, metavar="all|N",
                        help="all: every operation (default); N: open N levels of modules, the rest are boxes "
                             "(1: the top-level modules as boxes, 0: the model as one box)")
    parser.add_argument("--out", required=True, metavar="OUT", help="output file: .json, .svg or .png")
    add_trust(parser, FILE_TRUST)


def run(args: argparse.Namespace) -> int:
    """Capture the graph of the model in ``args.path`` and write it to ``args.out``; print one line; 0.

    Raises
    ------
    CommandFailed
        Code 2: ``--out`` has another suffix, or no input shape is known; code 1: no architecture to run.
    GraphCaptureError
        No capture method could trace the model (exit 1 through the guard).
    """
    import sys

    from workbench.cli.inspect import open_checkpoint
    from workbench.core.graph import capture_graph

    suffix = Path(args.out).suffix.lower()
    if suffix not in GRAPH_SUFFIXES:
        raise CommandFailed(f"{args.out}: cannot write a {suffix or 'suffix-less'} file: give --out a .json, .svg "
                            "or .png name", code=2)
    args.partial = False
    loaded = open_checkpoint(args)
    if loaded["weights_only"]:
        raise CommandFailed(f"{args.path}: no architecture to run, and a graph needs a forward pass: choose one "
                            "with --arch (workbench contributions architecture lists them)")
    example = _graph_example(args, loaded)
    if example is None:
        raise CommandFailed(f"{args.path}: the model gives no hint of its input: give --input-shape "
                            "(e.g. 1,3,224,224)", code=2)
    graph = capture_graph(loaded["model"], example)
    if args.expand is not None:
        graph = graph.collapsed(graph.expand_depth(args.expand))
    _write_graph(graph, Path(args.out))
    print(escaped([f"{args.out}: {len(graph.nodes)} nodes, {len(graph.edges)} edges, "
                   f"captured with {graph.method} on {example.describe()}"]))
    if graph.note:
        print(escaped([f"note: {graph.note}"]), file=sys.stderr)
    return 0


def _graph_example(args: argparse.Namespace, loaded: dict[str, Any]):
    """The input to capture on: ``--input-shape``, else the file's own example, else the model's hint, else None."""
    from workbench.core.model.example_input import default_input_shape, example_input

    model = loaded["model"]
    if args.input_shape:
        return example_input(model, args.input_shape)
    if loaded.get("example") is not None:
        return loaded["example"]
    return example_input(model) if default_input_shape(model) is not None else None


def _write_graph(graph, out: Path) -> None:
    """Write ``graph`` to ``out`` atomically: its JSON, or its SVG drawing as ``.svg`` / ``.png``."""
    if out.suffix.lower() == ".json":
        from workbench.core.files import atomic_write_text

        atomic_write_text(out, graph.to_json(indent=1))
        return
    from workbench.core.graph.svg import to_svg
    from workbench.ui.graph import image_file  # Qt only for a .png

    image_file.write_graph_image(out, to_svg(graph))
