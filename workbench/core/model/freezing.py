"""``requires_grad`` edits by module or parameter path.

A *path* is a qualified module name (``"layer1.0"``), a qualified parameter
name (``"fc.weight"``), or ``""`` for the whole model. Tied parameters (one
``nn.Parameter`` reachable under several names) are handled once and reported
under their canonical name: the first one ``model.named_parameters()`` gives.
Any alias is accepted as input.

Every function that edits returns the qualified names (canonical, in
``named_parameters()`` order) of the parameters whose ``requires_grad`` actually
changed, so a caller can undo exactly that, or report "nothing changed".

The helpers follow Lightning's ``BaseFinetuning``: they walk modules with
``parameters(recurse=False)``-style iteration over unique tensors, and the
BatchNorm policy is explicit (:func:`apply_batchnorm_policy`).

These functions mutate the model; while a training run owns the model, the UI
queues them on the trainer instead of calling them (see DESIGN.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn

from workbench.core.model.names import UnknownPathError, all_parameters, resolve

__all__ = [
    "freeze_first_blocks",
    "frozen_modules",
    "set_trainable",
    "freeze_all_except",
    "freeze_before",
    "set_requires_grad",
    "trainable_counts",
    "apply_frozen",
    "would_change",
    "apply_batchnorm_policy",
]


def _apply(model: nn.Module, targets: dict[int, bool]) -> list[str]:
    """Set requires_grad per id(parameter); return canonical names that changed, in model order."""
    changed = []
    for name, p in model.named_parameters():
        flag = targets.get(id(p))
        if flag is not None and p.requires_grad != flag:
            p.requires_grad_(flag)
            changed.append(name)
    return changed


def set_trainable(model: nn.Module, path: str, flag: bool) -> list[str]:
    """Set ``requires_grad`` of every parameter under ``path``.

    Parameters
    ----------
    model : nn.Module
    path : str
        Module qualified name (its whole subtree), parameter qualified name, or
        ``""`` for every parameter of the model.
    flag : bool
        True makes them trainable, False freezes them.

    Returns
    -------
    list of str
        Canonical names of the parameters whose ``requires_grad`` changed.

    Raises
    ------
    UnknownPathError
        When ``path`` is neither a module nor a parameter of ``model``.
    """
    flag = bool(flag)
    if path == "":
        # Fast path for the root (one walk instead of two): unchecking the root of a
        # 20,000-module model must stay well under the tree's 0.2 s budget.
        changed = []
        for name, p in model.named_parameters():
            if p.requires_grad != flag:
                p.requires_grad_(flag)
                changed.append(name)
        return changed
    return _apply(model, {id(p): flag for p in resolve(model, path)})


def freeze_all_except(model: nn.Module, path: str) -> list[str]:
    """Make the parameters under ``path`` trainable and freeze every other one.

    A parameter shared between ``path``'s subtree and the rest stays trainable.

    Parameters
    ----------
    model : nn.Module
    path : str
        Module or parameter qualified name; ``""`` unfreezes everything.

    Returns
    -------
    list of str
        Canonical names of the parameters whose ``requires_grad`` changed.

    Raises
    ------
    UnknownPathError
    """
    keep = {id(p) for p in resolve(model, path)}
    return _apply(model, {id(p): id(p) in keep for p in model.parameters()})


def freeze_before(model: nn.Module, path: str) -> list[str]:
    """Freeze every parameter registered before ``path``; leave the rest as is.

    "Before" is ``named_modules()`` order: the own parameters
    (``recurse=False``) of every module listed before ``path``, its ancestors
    included (e.g. a ViT's ``class_token`` on the root), and never a parameter
    inside ``path``'s subtree -- also not one tied to a parameter there. For a
    parameter path, the parameters listed before it by ``named_parameters()``.

    Parameters
    ----------
    model : nn.Module
    path : str
        Module or parameter qualified name (``"layer3"`` freezes the stem,
        ``layer1`` and ``layer2`` of a ResNet). ``""`` freezes nothing.

    Returns
    -------
    list of str
        Canonical names of the parameters that were frozen by this call.

    Raises
    ------
    UnknownPathError
    """
    if path == "":
        return []
    keep = {id(p) for p in resolve(model, path)}
    before: list[nn.Parameter] = []
    modules = dict(model.named_modules())
    if path in modules:
        target = modules[path]
        for _name, module in model.named_modules():
            if module is target:
                break
            before.extend(module.parameters(recurse=False))
    else:
        target_param = all_parameters(model)[path]
        for _name, p in model.named_parameters():
            if p is target_param:
                break
            before.append(p)
    return _apply(model, {id(p): False for p in before if id(p) not in keep})


def freeze_first_blocks(model: nn.Module, n: int) -> list[str]:
    """Freeze the embeddings (everything before the repeated blocks) and the first ``n`` blocks.

    The blocks are :func:`~workbench.core.model.blocks.repeated_blocks` (a BERT's
    ``encoder.layer``, a GPT-2's ``h``); what comes before the first block in
    ``named_modules()`` order (embeddings, a stem) is frozen with them, as
    :func:`freeze_before` the ``n``-th block does. The rest is left as it is.
    LLaMA-Factory's "freeze" fine-tuning and ULMFiT's gradual unfreezing freeze
    the lower layers this way.

    Parameters
    ----------
    model : nn.Module
    n : int
        Blocks to freeze, ``1 <= n <= len(blocks)``; all of them freezes what follows the last block's
        predecessors too, but never the modules after the blocks (a head, a final norm).

    Returns
    -------
    list of str
        Canonical names of the parameters this call froze.

    Raises
    ------
    ValueError
        The model has no repeated blocks, or ``n`` is out of range.
    """
    from workbench.core.model.blocks import repeated_blocks

    blocks = repeated_blocks(model)
    if not blocks:
        raise ValueError("the model has no repeated blocks (a ModuleList or Sequential of one class) to count")
    if not 1 <= n <= len(blocks):
        raise ValueError(f"freeze the first 1 to {len(blocks)} blocks, not {n}")
    if n < len(blocks):
        return freeze_before(model, blocks[n][0])
    frozen = freeze_before(model, blocks[-1][0])
    return frozen + _apply(model, {id(p): False for p in blocks[-1][1].parameters()})


def set_requires_grad(model: nn.Module, names: Iterable[str], flag: bool) -> list[str]:
    """Set ``requires_grad`` for the listed parameters (module names also work: their subtree).

    Parameters
    ----------
    model : nn.Module
    names : iterable of str
        Parameter (or module) qualified names; aliases of tied parameters work.
    flag : bool

    Returns
    -------
    list of str
        Canonical names whose ``requires_grad`` changed.

    Raises
    ------
    UnknownPathError
        For the first name the model does not have (nothing is changed then).
    """
    return _apply(model, _targets(model, names, bool(flag)))


def would_change(model: nn.Module, names: Iterable[str], flag: bool) -> list[str]:
    """The canonical parameter names :func:`set_requires_grad` would change; nothing is changed.

    Raises
    ------
    UnknownPathError
        For the first name the model does not have.
    """
    targets = _targets(model, names, bool(flag))
    return [n for n, p in model.named_parameters() if targets.get(id(p)) not in (None, p.requires_grad)]


def _targets(model: nn.Module, names: Iterable[str], flag: bool) -> dict[int, bool]:
    """``{id(parameter): flag}`` for every parameter the names (parameters, modules' subtrees) cover."""
    targets: dict[int, bool] = {}
    params = all_parameters(model)
    for name in names:
        if name in params:
            targets[id(params[name])] = flag
        else:
            for p in resolve(model, name):
                targets[id(p)] = flag
    return targets


def trainable_counts(model: nn.Module) -> tuple[int, int]:
    """Count parameters, each tied parameter once.

    Returns
    -------
    tuple of int
        ``(trainable, total)`` numbers of elements (not tensors).
    """
    trainable = total = 0
    for p in model.parameters():
        n = p.numel()
        total += n
        if p.requires_grad:
            trainable += n
    return trainable, total


def frozen_modules(model: nn.Module) -> set[str]:
    """Qualified names of the modules that have parameters (their own or their children's) and every one frozen
    (``requires_grad`` False); ``""`` is the model itself."""
    out = set()
    for name, module in model.named_modules():
        flags = [p.requires_grad for p in module.parameters()]
        if flags and not any(flags):
            out.add(name)
    return out


def apply_frozen(model: nn.Module, frozen_names: Iterable[str], *, strict: bool = True) -> list[str]:
    """Freeze exactly ``frozen_names`` and make every other parameter trainable.

    Parameters
    ----------
    model : nn.Module
    frozen_names : iterable of str
        Parameter qualified names (e.g. a checkpoint's ``frozen`` entry) or module paths
        (``"features"``: every parameter under it, as :func:`~workbench.core.model.names.resolve`).
    strict : bool
        If True an unknown name raises; if False unknown names are ignored
        (e.g. after the head was replaced).

    Returns
    -------
    list of str
        Canonical names whose ``requires_grad`` changed.

    Raises
    ------
    UnknownPathError
        With ``strict=True``, for a name the model does not have (nothing is changed then).
    """
    params = all_parameters(model)
    frozen: set[int] = set()
    for name in frozen_names:
        p = params.get(name)
        if p is not None:
            frozen.add(id(p))
            continue
        try:  # a module path ("layer1", written by hand in a run file): every parameter under it
            frozen.update(id(q) for q in resolve(model, name))
        except UnknownPathError:
            if strict:
                raise
    return _apply(model, {id(p): id(p) not in frozen for p in model.parameters()})


def apply_batchnorm_policy(model: nn.Module) -> list[str]:
    """Put BatchNorm layers whose parameters are all frozen into eval mode.

    In eval mode a BatchNorm layer normalizes with its running statistics and
    stops updating them, so a frozen backbone stays exactly as loaded (the
    policy of Lightning's ``BaseFinetuning(train_bn=False)``). Call it after
    every ``model.train()``, since that puts them back in training mode.
    BatchNorm layers without affine parameters (``affine=False``) are left alone:
    there is no freeze decision to follow.

    Parameters
    ----------
    model : nn.Module

    Returns
    -------
    list of str
        Qualified names of the BatchNorm *modules* switched from train to eval.
    """
    changed = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.modules.batchnorm._BatchNorm):
            continue
        params = list(module.parameters(recurse=False))
        if params and module.training and not any(p.requires_grad for p in params):
            module.eval()
            changed.append(name)
    return changed
