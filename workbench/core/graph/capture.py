"""``capture_graph``: the one way to get a model's graph, with its fallbacks in order.

1. ``torch.export`` non-strict (:mod:`.from_export`): aten operations, fake
   tensors, no weight read. Default first: it names every operation by its aten
   op and traces what fx cannot (Hugging Face models, ``**kwargs``); resnet50 in
   about 0.5 s on 2 cores (``benchmarks/bench_graph.py``).
2. ``torch.fx.symbolic_trace`` (:mod:`.from_fx`): torch functions, ``torch.nn``
   layers as module calls; shapes under fake tensors; no weight read.
3. Forward hooks on a real run (:mod:`.from_hooks`): for data-dependent control
   flow; this one reads the weights and computes.

Every method runs with the model in eval mode (the graph of inference:
BatchNorm on its running statistics, dropout off) and gives each module its
training flag back afterwards.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.fake_tensors import FAKE_TENSOR_LOCK
from workbench.core.graph.from_export import export_graph
from workbench.core.graph.from_fx import fx_graph
from workbench.core.graph.from_hooks import hooks_graph
from workbench.core.graph.model_graph import ModelGraph
from workbench.core.model.example_input import ExampleInput, model_device_dtype

__all__ = ["capture_graph", "as_example", "GraphCaptureError", "METHODS"]

#: The capture methods, in the order ``method="auto"`` tries them.
METHODS = ("export", "fx", "hooks")

_CAPTURES: dict[str, Callable[[nn.Module, ExampleInput], ModelGraph]] = {
    "export": export_graph, "fx": fx_graph, "hooks": hooks_graph}

_WHAT = {"export": "torch.export", "fx": "torch.fx.symbolic_trace", "hooks": "the forward-hook trace"}
_FALLBACK = {
    "fx": "traced with torch.fx.symbolic_trace instead (torch.nn layers are single module calls)",
    "hooks": "recorded module calls with forward hooks instead, running the model for real on the example "
             "input (only the branch taken is in the graph)",
}


class GraphCaptureError(WorkbenchError):
    """No capture method could trace the model.

    Attributes
    ----------
    reasons : dict of str to str
        Why each method tried failed, by method name.
    """

    def __init__(self, model_type: str, reasons: dict[str, str]):
        self.reasons = dict(reasons)
        tried = "; ".join(f"{_WHAT[m]}: {why}" for m, why in reasons.items())
        super().__init__(f"could not capture the graph of {model_type}: {tried}. Check that the example input "
                         "fits the model (its shape and dtype), e.g. with `workbench inspect --input-shape`")


def capture_graph(model: nn.Module, example_input: Any, *, method: str = "auto") -> ModelGraph:
    """The dataflow graph of ``model`` called on ``example_input``.

    Parameters
    ----------
    model : nn.Module
        Left as it was: weights, buffers and every module's training flag. Its
        weights are not read by ``"export"`` and ``"fx"``, which run on fake tensors
        (a model on the ``meta`` device works); ``"hooks"`` runs it for real.
    example_input : Tensor, tuple of Tensor, dict of str to Tensor, or ExampleInput
        What the model is called with: ``model(x)``, ``model(*args)``,
        ``model(**kwargs)`` (a Hugging Face model's ``input_ids``, ``attention_mask``).
        E.g. ``(1, 3, 224, 224)`` float32 images or ``(1, 16)`` int64 token ids
        (:func:`workbench.core.model.example_input.example_input` builds one). Moved to
        the model's device.
    method : {"auto", "export", "fx", "hooks"}
        ``"auto"`` tries :data:`METHODS` in order and takes the first that works.

    Returns
    -------
    ModelGraph
        ``method`` says which capture was used; ``note`` why the ones before it failed.

    Raises
    ------
    ValueError
        An unknown ``method``.
    TypeError
        ``example_input`` is none of the forms above.
    GraphCaptureError
        Every method tried failed (its ``reasons`` say why, by method).
    """
    if method != "auto" and method not in METHODS:
        raise ValueError(f"method must be 'auto' or one of {', '.join(METHODS)}, not {method!r}")
    device, _ = model_device_dtype(model)
    example = as_example(example_input).to(device)
    reasons: dict[str, str] = {}
    with FAKE_TENSOR_LOCK, _eval_mode(model), _quiet_tracer_logs():
        for name in METHODS if method == "auto" else (method,):
            try:
                graph = _CAPTURES[name](model, example)
            except Exception as exc:  # noqa: BLE001 - each tracer fails in its own ways; the next one may work
                reasons[name] = _reason(exc)
                continue
            graph.method = name
            graph.note = _note(reasons, name)
            return graph
    raise GraphCaptureError(type(model).__name__, reasons)


def as_example(example_input: Any) -> ExampleInput:
    """``example_input`` as an :class:`ExampleInput`: a tensor -> ``(x,)``, a tuple/list -> args, a mapping -> kwargs.

    Raises
    ------
    TypeError
        Anything else.
    """
    if isinstance(example_input, ExampleInput):
        return example_input
    if isinstance(example_input, torch.Tensor):
        return ExampleInput((example_input,))
    if isinstance(example_input, (tuple, list)):
        return ExampleInput(tuple(example_input))
    if isinstance(example_input, Mapping):
        return ExampleInput((), dict(example_input))
    raise TypeError(f"example_input must be a tensor, a tuple of tensors or a dict of tensors, "
                    f"not {type(example_input).__name__}")


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode for the capture; every module's own training flag back afterwards."""
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in flags:
            module.training = training


#: torch's loggers that print a whole traceback at ERROR when a trace fails (the fake-tensor run of an op
#: whose shapes do not fit: a wrong example input). The capture says why in its note; the next method runs.
_TRACER_LOGGERS = ("torch._subclasses.fake_tensor", "torch._dynamo", "torch.export")


@contextmanager
def _quiet_tracer_logs() -> Iterator[None]:
    """No tracebacks from torch's tracers while a capture tries its methods (their levels back afterwards)."""
    loggers = [logging.getLogger(name) for name in _TRACER_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _reason(exc: BaseException) -> str:
    """The first line of an exception, with its type: what a note or a message can show."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 300 else text[:297] + "..."


def _note(reasons: dict[str, str], used: str) -> str:
    if not reasons:
        return ""
    failed = "; ".join(f"{_WHAT[m]} failed ({why})" for m, why in reasons.items())
    return f"{failed}; {_FALLBACK.get(used, 'used ' + _WHAT[used])}."
