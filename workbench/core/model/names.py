"""Parameter paths: the one resolver from a module / parameter name to parameters.

A *path* is a qualified module name (``"layer1.0"``), a qualified parameter name
(``"fc.weight"``, aliases of tied parameters included) or ``""`` for the whole
model. Tied parameters (one ``nn.Parameter`` reachable under several names, e.g.
an embedding shared with a decoder ``nn.Linear``) are resolved by identity and
reported once under their canonical name: the first one
``model.named_parameters()`` gives. The window's checkboxes, the trainer's
``SetTrainable`` command and a run file's ``[model] frozen`` list all go through
:func:`resolve`, so they agree on what a path covers. Qt-free.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from torch import nn

from workbench.core.errors import WorkbenchError

__all__ = ["UnknownPathError", "resolve", "resolve_names", "all_parameters", "frozen_names", "close_matches"]


class UnknownPathError(WorkbenchError):
    """A module or parameter path that the model does not have.

    Attributes
    ----------
    path : str
        The unknown path.
    suggestions : list of str
        Close matches among the model's module and parameter names.
    """

    def __init__(self, path: str, suggestions: list[str]):
        self.path = path
        self.suggestions = list(suggestions)
        hint = f" Did you mean: {', '.join(self.suggestions)}?" if self.suggestions else ""
        super().__init__(
            f"the model has no module or parameter named {path!r}.{hint} "
            "Use a qualified name as listed by named_modules() / named_parameters(), or '' for the whole model."
        )


def all_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """Every parameter name, aliases of tied parameters included (``remove_duplicate=False``)."""
    return dict(model.named_parameters(remove_duplicate=False))


def close_matches(model: nn.Module, path: str, n: int = 3) -> list[str]:
    """Up to ``n`` module / parameter names close to ``path`` (``difflib``, cutoff 0.6)."""
    names = [name for name, _ in model.named_modules() if name]
    names += [name for name, _ in model.named_parameters()]
    return difflib.get_close_matches(path, names, n=n, cutoff=0.6)


def resolve(model: nn.Module, path: str) -> list[nn.Parameter]:
    """The unique parameters under ``path``: a module's subtree, one parameter, or all for ``""``.

    A module owns every parameter its subtree reaches, tied ones included (a
    decoder sharing the embedding's weight covers that weight).

    Raises
    ------
    UnknownPathError
        ``path`` names neither a module nor a parameter.
    """
    if path == "":
        return list(model.parameters())
    try:
        module = model.get_submodule(path)
    except AttributeError:
        module = None
    if isinstance(module, nn.Module):
        return list(module.parameters())
    params = all_parameters(model)
    if path in params:
        return [params[path]]
    raise UnknownPathError(path, close_matches(model, path))


def resolve_names(model: nn.Module, paths: Iterable[str]) -> list[str]:
    """Canonical names of the parameters under any of ``paths``, in ``named_parameters()`` order.

    Raises
    ------
    UnknownPathError
        For the first path the model does not have.
    """
    ids = {id(p) for path in paths for p in resolve(model, path)}
    return [name for name, p in model.named_parameters() if id(p) in ids]


def frozen_names(model: nn.Module) -> list[str]:
    """Canonical names of the parameters with ``requires_grad == False``, in model order.

    This is a checkpoint's ``frozen`` entry and a run file's ``[model] frozen``.
    """
    return [name for name, p in model.named_parameters() if not p.requires_grad]
