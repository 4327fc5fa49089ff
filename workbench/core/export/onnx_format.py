"""ONNX: export with ``torch.onnx.export(dynamo=True)``, run with onnxruntime on the CPU, and read module scopes.

``onnx``, ``onnxscript`` and ``onnxruntime`` are the ``export`` extra: imported
inside the functions, never by ``import workbench``; a missing one is an
:class:`~workbench.core.export.report.ExportError` naming the extra. The
TorchScript exporter (``dynamo=False``) is used only when the dynamo exporter
fails; the caller's report names it and the first line of why. Qt-free.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workbench.core.export.divergence import ScopedNode, module_outputs
from workbench.core.export.inputs import dynamic_shapes, named_tensors
from workbench.core.export.quiet import first_line, quiet, where
from workbench.core.export.report import ExportError
from workbench.core.model.example_input import ExampleInput

__all__ = ["require_onnx", "export_onnx", "run_onnx", "onnx_module_values", "EXTERNAL_DATA_BYTES"]

#: Weights above this many bytes go to an external data file beside the ``.onnx`` (``NAME.onnx.data``):
#: one protobuf message cannot exceed 2 GiB, and the graph itself needs room under that limit.
EXTERNAL_DATA_BYTES = 1536 * 2**20
_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
_EXTRA = "the export extra (pip install 'workbench[export]': onnx, onnxscript, onnxruntime)"


def require_onnx(*modules: str) -> None:
    """Import ``modules`` (default onnx, onnxscript, onnxruntime) or raise one line naming the extra.

    Raises
    ------
    ExportError
        One is not installed.
    """
    import importlib

    for name in modules or ("onnx", "onnxscript", "onnxruntime"):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ExportError(f"ONNX export needs {name}, which is not installed: install {_EXTRA}") from exc


def export_onnx(model: nn.Module, example: ExampleInput, path: Path, *, dynamic_batch: bool = True,
                opset: int | None = None) -> tuple[str, str]:
    """Write ``model`` called on ``example`` as an ONNX file at ``path``.

    Parameters
    ----------
    model : nn.Module
        In eval mode, on the CPU.
    example : ExampleInput
        Traced with this batch; with ``dynamic_batch`` its batch size should be
        at least 2 (a size-1 dimension is specialized by ``torch.export``).
    path : Path
        The file to write (its folder exists); with weights over
        :data:`EXTERNAL_DATA_BYTES`, ``path.data`` is written beside it.
    dynamic_batch : bool
        Dimension 0 of every batch input (and so of the outputs) is dynamic.
    opset : int, optional
        The ONNX opset; default: the exporter's.

    Returns
    -------
    (str, str)
        The exporter used (``"torch.onnx dynamo"`` or ``"torch.onnx torchscript (fallback)"``)
        and, for the fallback, the first line of the dynamo exporter's error.

    Raises
    ------
    ExportError
        Both exporters failed (the message gives the model's class and both reasons),
        or the extra is missing.
    """
    require_onnx()
    external = sum(t.numel() * t.element_size() for t in model.state_dict().values()) > EXTERNAL_DATA_BYTES
    shapes = dynamic_shapes(model, example, torch.export.Dim("batch")) if dynamic_batch else None
    try:
        with quiet():
            torch.onnx.export(model, tuple(example.args), str(path), kwargs=dict(example.kwargs), dynamo=True,
                              dynamic_shapes=shapes, opset_version=opset, external_data=external, verbose=False)
        return "torch.onnx dynamo", ""
    except Exception as exc:  # noqa: BLE001 - any refusal of the dynamo exporter tries the fallback
        reason = first_line(exc) + (f" (at {where(exc)})" if where(exc) else "")
    for stale in (path, path.with_name(path.name + ".data")):
        stale.unlink(missing_ok=True)
    try:
        _export_torchscript(model, example, path, dynamic_batch, opset)
    except Exception as exc:  # noqa: BLE001 - both failed: one line with both reasons
        raise ExportError(f"{type(model).__name__} cannot be exported to ONNX: the dynamo exporter said "
                          f"{reason}; the TorchScript exporter said {first_line(exc)}") from exc
    return "torch.onnx torchscript (fallback)", reason


def _export_torchscript(model: nn.Module, example: ExampleInput, path: Path, dynamic_batch: bool,
                        opset: int | None) -> None:
    names = [n for n, _ in named_tensors(model, example)]
    with torch.no_grad():
        out = example.call(model)
    from workbench.core.export.compare import flatten_outputs

    outputs = [n for n, _ in flatten_outputs(out)]
    axes = {n: {0: "batch"} for n in names + outputs} if dynamic_batch else None
    args = tuple(example.args) + ((dict(example.kwargs),) if example.kwargs else ())
    with quiet():
        torch.onnx.export(model, args, str(path), dynamo=False, input_names=names, output_names=outputs,
                          dynamic_axes=axes, opset_version=opset)


def _feeds(session: Any, model: nn.Module, example: ExampleInput) -> dict[str, Any]:
    """onnxruntime's feed dict: by name where every graph input is named after an example tensor, else in order."""
    tensors = named_tensors(model, example)
    by_name = dict(tensors)
    inputs = [i.name for i in session.get_inputs()]
    if all(name in by_name for name in inputs):
        return {name: by_name[name].detach().cpu().numpy() for name in inputs}
    if len(inputs) > len(tensors):
        raise ExportError(f"the ONNX graph takes {len(inputs)} inputs ({', '.join(inputs)}) but the example "
                          f"gives {len(tensors)}")
    return {name: t.detach().cpu().numpy() for name, (_, t) in zip(inputs, tensors)}


def _session(model_or_path: Any) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: warnings about unused initializers are not the user's
    return ort.InferenceSession(model_or_path, options, providers=["CPUExecutionProvider"])


def run_onnx(path: Path, model: nn.Module, example: ExampleInput) -> list[Any]:
    """Run the ONNX file with onnxruntime on the CPU; its outputs (numpy arrays) in graph order.

    Raises
    ------
    ExportError
        onnxruntime cannot load or run it (the message names the file and the reason).
    """
    require_onnx("onnxruntime")
    try:
        session = _session(str(path))
        return session.run(None, _feeds(session, model, example))
    except ExportError:
        raise
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own errors: one line naming the file
        raise ExportError(f"{path.name}: onnxruntime cannot run it: {first_line(exc)}") from exc


def _scopes(node: Any) -> tuple[str, ...]:
    for prop in node.metadata_props:
        if prop.key == _SCOPES_KEY:
            try:
                names = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return ()
            return tuple(n for n in names[1:-1] if n)  # [0] is the model itself, [-1] the op
    return ()


def onnx_module_values(path: Path, model: nn.Module, example: ExampleInput) -> dict[tuple[str, int], Any]:
    """The value of each module call in the ONNX graph on ``example``: ``(path, call) -> numpy array``.

    The module scopes come from the dynamo exporter's ``pkg.torch.onnx.name_scopes``
    node metadata (:func:`~workbench.core.export.divergence.module_outputs`); the
    chosen values become extra outputs of a copy of the graph (types from
    ``onnx.shape_inference``), run with onnxruntime. Empty when the graph has no
    scopes (the TorchScript exporter's).
    """
    import onnx

    proto = onnx.load(str(path))
    graph = proto.graph
    nodes = [ScopedNode(_scopes(n), tuple(n.input), tuple(n.output)) for n in graph.node]
    finals = [o.name for o in graph.output]
    wanted = module_outputs(nodes, finals)
    if not wanted:
        return {}
    try:
        inferred = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:  # noqa: BLE001 - shape inference is best effort; the exporter's value_info stays
        inferred = graph
    types = {v.name: v for v in list(inferred.value_info) + list(inferred.output) + list(inferred.input)}
    extra = []
    for name in dict.fromkeys(wanted.values()):
        if name in finals or name not in types or not types[name].type.HasField("tensor_type"):
            continue
        extra.append(onnx.helper.make_tensor_value_info(name, types[name].type.tensor_type.elem_type, None))
    graph.output.extend(extra)
    session = _session(proto.SerializeToString())
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, _feeds(session, model, example))))
    return {key: got[name] for key, name in wanted.items() if name in got}
