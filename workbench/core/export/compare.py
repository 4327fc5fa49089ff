"""Compare an exported model's outputs with the PyTorch model's: the tolerance by dtype and one line per output.

Outputs are flattened in the order ``torch.export`` (and so the ONNX
exporter) flattens them: a tensor is ``output``; a tuple or list gives
``output[i]``; a mapping (a Hugging Face ``ModelOutput`` too) gives its keys
(values that are None are left out, as the exporters leave them out). An
element passes when ``|exported - torch| <= atol + rtol * |torch|`` (numpy's
``allclose`` rule); the output passes when every element does. Qt-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

__all__ = ["TOLERANCES", "tolerance", "flatten_outputs", "OutputCheck", "compare_output", "diff_stats"]

#: ``(atol, rtol)`` by the dtype the model is exported in. fp32: the PyTorch
#: ONNX tutorial and timm's ``onnx_validate`` compare with ``rtol=1e-3``; its
#: ``atol=1e-5`` is raised to 1e-4 because a deep network run by another
#: runtime (other kernels, a Conv folded with its BatchNorm by the ONNX
#: optimizer) sums rounding errors of that size in its logits. fp16 / bf16
#: carry 11 / 8 significant bits (a relative step of 1e-3 / 8e-3), so their
#: tolerances are ten times one step of the format after a few layers.
TOLERANCES: dict[str, tuple[float, float]] = {
    "fp32": (1e-4, 1e-3),
    "fp16": (1e-2, 1e-2),
    "bf16": (1e-1, 5e-2),
}
#: Relative differences are divided by ``max(|torch|, this)``: a reference of zero gives no infinite ratio.
_REL_FLOOR = 1e-12


def tolerance(dtype: str) -> tuple[float, float]:
    """``(atol, rtol)`` of :data:`TOLERANCES` for ``"fp32"``, ``"fp16"`` or ``"bf16"``.

    Raises
    ------
    ValueError
        Another dtype name.
    """
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise ValueError(f"dtype must be one of {', '.join(TOLERANCES)}, not {dtype!r}") from None


def flatten_outputs(obj: Any, name: str = "output") -> list[tuple[str, torch.Tensor]]:
    """Every tensor of a model's output with a name, in the exporters' order.

    Parameters
    ----------
    obj : Tensor, tuple, list, mapping or None
        A model's output (a ``ModelOutput`` is a mapping of its non-None fields).
    name : str
        The name of ``obj`` itself.

    Returns
    -------
    list of (str, Tensor)
        ``[("output", t)]`` for a tensor, ``("output[0]", ...)`` for a tuple,
        ``("logits", ...)`` for a mapping; other values (None, numbers) are left out.
    """
    if isinstance(obj, torch.Tensor):
        return [(name, obj)]
    if isinstance(obj, Mapping):
        out = []
        for key, value in obj.items():
            out += flatten_outputs(value, str(key) if name == "output" else f"{name}.{key}")
        return out
    if isinstance(obj, (tuple, list)):
        out = []
        for i, value in enumerate(obj):
            out += flatten_outputs(value, f"{name}[{i}]")
        return out
    return []


@dataclass
class OutputCheck:
    """One output of the exported model beside the PyTorch model's (plain data: crosses threads and processes).

    Attributes
    ----------
    name : str
        ``"output"``, ``"logits"``, ``"output[1]"``...
    batch : int
        The batch size it was run at.
    shape : list of int
        The PyTorch output's shape.
    max_abs, max_rel : float
        Largest absolute difference, and largest difference relative to ``|torch|``
        (``inf`` when a shape differs or a value is not finite on one side only).
    atol, rtol : float
        The tolerance used (:data:`TOLERANCES`).
    passed : bool
    reason : str
        Why it failed when not by value (``"shape (1, 10) != (2, 10)"``); ``""`` else.
    """

    name: str
    batch: int
    shape: list
    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    passed: bool
    reason: str = ""

    def line(self) -> str:
        """``"logits (batch 3): max abs 2.1e-06, max rel 4.0e-05 (atol 1e-04, rtol 1e-03): pass"``."""
        verdict = "pass" if self.passed else "FAIL"
        why = f" - {self.reason}" if self.reason else ""
        return (f"{self.name} (batch {self.batch}): max abs {self.max_abs:.2e}, max rel {self.max_rel:.2e} "
                f"(atol {self.atol:.0e}, rtol {self.rtol:.0e}): {verdict}{why}")

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict."""
        return asdict(self)


def diff_stats(ref: torch.Tensor, got: torch.Tensor, atol: float, rtol: float) -> tuple[float, float, bool, str]:
    """``(max_abs, max_rel, passed, reason)`` of ``got`` against ``ref`` (both compared in float64 on the CPU).

    A shape that differs fails with ``inf`` differences and the reason; NaN
    where the other side is NaN too counts as equal, anywhere else as a failure.
    """
    ref = ref.detach().cpu()
    got = torch.as_tensor(got).detach().cpu()
    if tuple(ref.shape) != tuple(got.shape):
        return float("inf"), float("inf"), False, f"shape {tuple(got.shape)} != {tuple(ref.shape)}"
    if ref.numel() == 0:
        return 0.0, 0.0, True, ""
    if not (ref.is_floating_point() or ref.is_complex()):
        equal = bool(torch.equal(ref, got.to(ref.dtype)))
        diff = (ref.double() - got.double()).abs().max().item()
        return diff, diff, equal, "" if equal else "integer values differ"
    a, b = ref.double(), got.double()
    both_nan = torch.isnan(a) & torch.isnan(b)
    same_inf = torch.isinf(a) & (a == b)
    diff = (a - b).abs()
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    rel = diff / a.abs().clamp_min(_REL_FLOOR)
    rel = torch.where(diff == 0, torch.zeros_like(rel), rel)
    ok = bool((diff <= atol + rtol * a.abs().nan_to_num(posinf=0.0)).all())
    return float(diff.max()), float(rel.max()), ok, ""


def compare_output(name: str, ref: torch.Tensor, got: Any, dtype: str = "fp32") -> OutputCheck:
    """One :class:`OutputCheck`: ``got`` (a tensor or numpy array) against the PyTorch output ``ref``.

    Parameters
    ----------
    name : str
    ref : Tensor
        The PyTorch model's output; its first dimension is the batch.
    got : Tensor or numpy.ndarray
        The exported model's output.
    dtype : {"fp32", "fp16", "bf16"}
        Picks the tolerance (:func:`tolerance`).
    """
    atol, rtol = tolerance(dtype)
    got_t = got if isinstance(got, torch.Tensor) else torch.from_numpy(got)
    max_abs, max_rel, ok, reason = diff_stats(ref, got_t, atol, rtol)
    batch = int(ref.shape[0]) if ref.dim() else 1
    return OutputCheck(name, batch, list(ref.shape), max_abs, max_rel, atol, rtol, ok, reason)
