"""The module tree of a state_dict without an architecture: shapes and counts, no forward."""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from workbench.core.errors import ArchitectureError
from workbench.core.model.prefixes import strip_prefixes


class WeightsOnlyModule(nn.Module):
    """A node of the module tree rebuilt from dotted state_dict keys, without an architecture.

    It holds the checkpoint's tensors (floating ones as parameters, the rest and
    BatchNorm statistics as buffers) so structure, shapes and counts can be shown.
    """

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Always raises: there is no computation without an architecture.

        Raises
        ------
        ArchitectureError
        """
        raise ArchitectureError(
            "this is a weights-only tree: forward passes and training need an architecture. "
            "Choose one (a torchvision name or a factory spec) and load the checkpoint into it."
        )


_BUFFER_NAMES = ("running_mean", "running_var", "num_batches_tracked")


def _safe_name(name: str) -> str:
    """A usable attribute name: never empty, never shadowing an nn.Module attribute."""
    name = name or "_"
    while hasattr(WeightsOnlyModule, name):
        name += "_"
    return name


def weights_only_model(state_dict: Mapping[str, torch.Tensor]) -> nn.Module:
    """Build a :class:`WeightsOnlyModule` tree from dotted key names.

    ``"layer1.0.conv1.weight"`` becomes modules ``layer1`` -> ``0`` -> ``conv1``
    holding parameter ``weight`` (the same tensor, no copy). ``module.`` /
    ``_orig_mod.`` prefixes are stripped first.

    Parameters
    ----------
    state_dict : mapping of str to Tensor

    Returns
    -------
    WeightsOnlyModule
        The root; its ``forward`` raises ArchitectureError.
    """
    stripped, _ = strip_prefixes(state_dict)
    module_paths = {".".join(k.split(".")[:i]) for k in stripped for i in range(1, k.count(".") + 1)}
    root = WeightsOnlyModule()
    for key, tensor in stripped.items():
        parts = [_safe_name(p) for p in key.split(".")]
        node = root
        for part in parts[:-1]:
            child = node._modules.get(part)
            if child is None:
                child = WeightsOnlyModule()
                node.add_module(part, child)
            node = child
        leaf = parts[-1] + ("_tensor" if key in module_paths else "")
        if leaf in node._modules or leaf in node._parameters or leaf in node._buffers:
            leaf += "_"
        if tensor.is_floating_point() and leaf not in _BUFFER_NAMES:
            node.register_parameter(leaf, nn.Parameter(tensor, requires_grad=True))
        else:
            node.register_buffer(leaf, tensor)
    return root
