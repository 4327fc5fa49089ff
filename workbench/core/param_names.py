"""Parameter names of a model: the frozen ones, and those under a parameter or module name.

Qt-free helpers of the trainer and the headless ``workbench train``.
"""

from __future__ import annotations

from torch import nn


def _frozen_names(model: nn.Module) -> list[str]:
    return [n for n, p in model.named_parameters() if not p.requires_grad]


def _resolve_parameter_names(model: nn.Module, names: list[str]) -> list[str]:
    """Parameter names under each name (a parameter, a module path, or "" = all).

    Raises
    ------
    KeyError
        A name matches neither a parameter nor a module.
    """
    params = [n for n, _ in model.named_parameters()]
    modules = {n for n, _ in model.named_modules()}
    out: list[str] = []
    for name in names:
        if name in params:
            hits = [name]
        elif name == "" or name in modules:
            hits = [n for n in params if name == "" or n.startswith(name + ".")]
        else:
            raise KeyError(f"{name!r} is neither a parameter nor a module of the model")
        out.extend(h for h in hits if h not in out)
    return out
