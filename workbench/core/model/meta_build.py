"""Building a module from its :class:`~workbench.core.model.spec.ArchSpec`, on CPU or on the ``meta`` device.

Candidates are built on ``meta`` (shapes only, no memory, no random init), so
ranking all of torchvision takes seconds, and loading a 512 MB checkpoint is
``load_state_dict(..., assign=True)`` on a meta-built module
(:mod:`workbench.core.model.loading`).
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from workbench.core import contrib
from workbench.core.errors import ArchitectureError
from workbench.core.model.spec import ArchSpec


class MetaStorage(TorchFunctionMode):
    """Create parameters and buffers on ``meta`` but keep index arithmetic on CPU.

    ``with torch.device("meta")`` also moves ``torch.arange`` / ``torch.tensor``,
    which breaks models that compute layer widths with tensors (torchvision's
    RegNet calls ``.tolist()``) and leaves computed non-persistent buffers
    (e.g. relative position indices) without data. Only storage-allocating
    factories are redirected here.
    """

    FACTORIES = frozenset(
        {torch.empty, torch.empty_strided, torch.zeros, torch.ones, torch.full, torch.rand, torch.randn, torch.randint}
    )
    #: In-place initialisers that are no-ops on meta but cost Python decompositions.
    INITS = frozenset(
        [getattr(torch.nn.init, n) for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")]
        + [getattr(torch.Tensor, n) for n in ("uniform_", "normal_", "zero_", "fill_", "exponential_", "random_")]
    )

    def __init__(self, everything: bool = False):
        super().__init__()
        if everything:  # shapes only: index arithmetic on meta too (fast, but values are lost)
            from torch.utils._device import _device_constructors

            self.FACTORIES = frozenset(_device_constructors())

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.INITS or _is_value_inplace(func):  # nn.init passes the tensor by keyword
            target = args[0] if args else kwargs.get("tensor")
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        if func in self.FACTORIES and kwargs.get("device") is None:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


#: In-place tensor methods that change a tensor's shape or flags, not only its values: never skipped.
_SHAPE_INPLACE = frozenset({"requires_grad_", "resize_", "resize_as_", "set_", "as_strided_", "squeeze_",
                            "unsqueeze_", "t_", "transpose_", "swapdims_", "swapaxes_", "share_memory_",
                            "detach_", "retain_grad", "rename_", "refine_names_"})


def _is_value_inplace(func: Any) -> bool:
    """True for an in-place tensor method that only writes values (``clamp_``, ``mul_``, ``erfinv_``...).

    On a meta tensor these are no-ops, but each costs a Python decomposition
    (timm's ``trunc_normal_`` calls four of them per weight): skipping them
    makes building timm models on ``meta`` several times faster.
    """
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.startswith("_") and name not in _SHAPE_INPLACE
            and getattr(func, "__objclass__", None) is torch._C.TensorBase)


def list_architectures() -> list[str]:
    """Every registered architecture name: builtins, installed packages' (sorted), torchvision's (sorted).

    From the contributions registry (:func:`workbench.core.contrib.names`); no
    contributing package is imported to list it.
    """
    return contrib.names("architecture")


def _as_spec(spec: ArchSpec | str | Mapping) -> ArchSpec:
    if isinstance(spec, ArchSpec):
        return spec
    if isinstance(spec, str):
        return ArchSpec.parse(spec)
    if isinstance(spec, Mapping):
        return ArchSpec.from_dict(spec)
    raise ArchitectureError(f"not an architecture spec: {spec!r}")


def build_module(
    spec: ArchSpec | str | Mapping, device: str | torch.device = "cpu", *, _shapes_only: bool = False
) -> nn.Module:
    """Build a model from its spec.

    Parameters
    ----------
    spec : ArchSpec, str or dict
        What to build (a string is parsed with :meth:`ArchSpec.parse`).
    device : str or torch.device
        ``"meta"`` builds shapes only (no memory, no random init; index buffers
        computed with ``torch.arange`` stay on CPU). Default ``"cpu"``.

    Returns
    -------
    nn.Module

    Raises
    ------
    ArchitectureError
        Unknown name, import failure, or the constructor failed (e.g. bad kwargs).
    """
    spec = _as_spec(spec)
    factory = contrib.resolve("architecture", spec.name, base=spec.base)  # a file's spec passed from_file already
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if str(device) == "meta":
                with MetaStorage(everything=_shapes_only):
                    model = factory(*spec.args, **spec.kwargs)
            else:
                with torch.device(device):
                    model = factory(*spec.args, **spec.kwargs)
    except Exception as exc:
        raise ArchitectureError(f"could not build {spec}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise ArchitectureError(f"{spec} returned a {type(model).__name__}, not an nn.Module.")
    return model
