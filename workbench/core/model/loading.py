"""Loading a checkpoint's tensors into a module: strict or partial, with a report of what fit.

A module built on ``meta`` (:mod:`workbench.core.model.meta_build`) is loaded
with ``assign=True``: the checkpoint's tensors (memory-mapped where the file
allows) become its parameters, without random initialisation or a copy.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import torch
from torch import nn

from workbench.core.errors import ArchitectureError
from workbench.core.model.checkpoint import Checkpoint
from workbench.core.model.formats.safetensors import LazyStateDict
from workbench.core.model.prefixes import strip_prefixes
from workbench.core.model.meta_build import build_module
from workbench.core.model.spec import ArchSpec


@dataclass
class LoadReport:
    """What happened when a state_dict was loaded into a module.

    Attributes
    ----------
    missing : list of str
        Module keys the checkpoint lacks.
    unexpected : list of str
        Checkpoint keys (after prefix stripping) the module lacks.
    mismatched : list of (str, tuple, tuple)
        ``(name, expected_shape, found_shape)``.
    stripped_prefixes : list of str
        E.g. ``["module."]``.
    strict : bool
        Whether the load was strict.
    loaded : int
        Number of tensors loaded.
    """

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[tuple[str, tuple, tuple]] = field(default_factory=list)
    stripped_prefixes: list[str] = field(default_factory=list)
    strict: bool = True
    loaded: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing is missing, unexpected or mismatched."""
        return not (self.missing or self.unexpected or self.mismatched)

    def summary(self, limit: int = 5) -> str:
        """A few lines naming up to ``limit`` keys of each problem kind, with shapes."""
        lines = []
        for title, items in (
            ("missing", self.missing),
            ("unexpected", self.unexpected),
            ("shape mismatch", [f"{n}: expected {tuple(e)}, found {tuple(f)}" for n, e, f in self.mismatched]),
        ):
            if items:
                more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
                lines.append(f"{len(items)} {title}: {', '.join(items[:limit])}{more}")
        return "; ".join(lines) if lines else "all keys and shapes match"



def _is_meta(t: torch.Tensor) -> bool:
    return t.device.type == "meta"


def _compare(module: nn.Module, state_dict: Mapping[str, torch.Tensor], stripped: list[str], strict: bool) -> tuple[LoadReport, dict]:
    own = module.state_dict(keep_vars=True)
    report = LoadReport(stripped_prefixes=stripped, strict=strict)
    usable = copy.copy(state_dict) if isinstance(state_dict, dict) else dict(state_dict)  # keeps _metadata
    for key, value in state_dict.items():
        if key not in own:
            report.unexpected.append(key)
            del usable[key]
        elif tuple(own[key].shape) != tuple(value.shape):
            report.mismatched.append((key, tuple(own[key].shape), tuple(value.shape)))
            del usable[key]
    # BatchNorm tolerates a missing num_batches_tracked (old checkpoints); so do we.
    report.missing = [k for k in own if k not in state_dict and not k.endswith("num_batches_tracked")]
    return report, usable


def _match_dtypes(module: nn.Module, usable: dict) -> dict:
    """Cast floating tensors to the module's dtype in place (assign=True would otherwise keep the file's dtype)."""
    own = module.state_dict(keep_vars=True)
    for key, value in usable.items():
        target = own[key].dtype
        if value.dtype != target and value.is_floating_point() and target.is_floating_point:
            usable[key] = value.to(target)
    return usable


def load_state_dict_into(module: nn.Module, state_dict: Mapping[str, torch.Tensor], *, strict: bool = True) -> LoadReport:
    """Load a checkpoint's tensors into a module and report what fit.

    Prefixes are stripped against the module's own keys (:func:`strip_prefixes`).
    A module with tensors on ``meta`` is loaded with ``assign=True`` (the
    checkpoint's tensors become its parameters: no copy); others are copied into.
    A :class:`~workbench.core.model.formats.safetensors.LazyStateDict` (a large
    folder's headers) is read first, its files checked unchanged.

    Parameters
    ----------
    module : nn.Module
        The target (on CPU or meta).
    state_dict : mapping of str to Tensor
        The checkpoint's tensors.
    strict : bool
        True (default): any missing, unexpected or mismatched key raises and nothing
        is loaded. False: load every matching tensor and list the rest.

    Returns
    -------
    LoadReport

    Raises
    ------
    ArchitectureError
        ``strict`` and the keys or shapes differ (``.report`` holds the LoadReport).
    CheckpointError
        A lazily read file changed since it was opened.
    """
    if isinstance(state_dict, LazyStateDict):  # weights not read yet: read them now (files checked first)
        state_dict = state_dict.read()
    ties = tied_groups(module)
    own_keys = list(module.state_dict(keep_vars=True))
    renamed, stripped = strip_prefixes(state_dict, own_keys)
    report, usable = _compare(module, renamed, stripped, strict)
    if strict and not report.ok:
        raise ArchitectureError(
            f"the checkpoint does not fit {type(module).__name__}: {report.summary()}. "
            "Choose the matching architecture (or its num_classes), or load partially (strict=False) "
            "to keep every tensor that fits.",
            report,
        )
    assign = any(_is_meta(t) for t in module.state_dict(keep_vars=True).values())
    usable = _match_dtypes(module, usable)  # a copy of renamed: it keeps the module versions (mnasnet reads them)
    module.load_state_dict(usable, strict=False, assign=assign)
    retie(module, ties)  # assign=True gives each alias its own tensor: tie them again
    report.loaded = len(usable)
    return report


def tied_groups(module: nn.Module) -> list[list[str]]:
    """Qualified names of each parameter held under several names (tied weights), canonical name first.

    E.g. ``[["embedding.weight", "decoder.weight"]]`` for a decoder sharing the
    embedding's weight; ``[]`` when nothing is tied.
    """
    by_id: dict[int, list[str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return [names for names in by_id.values() if len(names) > 1]


def retie(module: nn.Module, groups: list[list[str]]) -> None:
    """Make every name of each group (:func:`tied_groups`) hold the first name's parameter again."""
    for names in groups:
        first = module.get_parameter(names[0])
        for name in names[1:]:
            owner, _, attr = name.rpartition(".")
            module.get_submodule(owner)._parameters[attr] = first


def _materialize(module: nn.Module) -> list[str]:
    """Give every tensor still on ``meta`` real CPU memory; return their names.

    Modules with ``reset_parameters`` (Linear, Conv, BatchNorm...) are re-initialised
    their usual way and their loaded tensors put back; ``running_var`` gets ones,
    anything else zeros.
    """
    names = []
    for mod_name, sub in module.named_modules():
        own = {**dict(sub.named_parameters(recurse=False)), **dict(sub.named_buffers(recurse=False))}
        meta = [n for n, t in own.items() if t is not None and _is_meta(t)]
        if not meta:
            continue
        keep = {n: t for n, t in own.items() if t is not None and not _is_meta(t)}
        sub.to_empty(device="cpu", recurse=False)
        if hasattr(sub, "reset_parameters"):
            with torch.no_grad():
                sub.reset_parameters()
        else:
            for n in meta:
                with torch.no_grad():
                    getattr(sub, n).fill_(1.0 if n == "running_var" else 0.0)
        for n, t in keep.items():
            _set_tensor(sub, n, t)
        names += [f"{mod_name}.{n}" if mod_name else n for n in meta]
    return names


def _set_tensor(sub: nn.Module, name: str, tensor: torch.Tensor) -> None:
    if name in sub._parameters:
        sub._parameters[name] = tensor if isinstance(tensor, nn.Parameter) else nn.Parameter(tensor)
    else:
        sub._buffers[name] = tensor


def _ensure_parameters(module: nn.Module) -> None:
    """Make every parameter a real ``nn.Parameter`` with ``requires_grad=True`` (assign=True keeps the file's flag)."""
    for sub in module.modules():
        for name, p in list(sub._parameters.items()):
            if p is None:
                continue
            if not isinstance(p, nn.Parameter):
                sub._parameters[name] = nn.Parameter(p, requires_grad=p.is_floating_point() or p.is_complex())
            elif not p.requires_grad and (p.is_floating_point() or p.is_complex()):
                p.requires_grad_(True)


def _apply_frozen(module: nn.Module, frozen: Iterable[str]) -> None:
    frozen = set(frozen)
    for name, p in module.named_parameters():
        if name in frozen:
            p.requires_grad_(False)


def _has_computed_meta_buffers(model: nn.Module) -> bool:
    """True when a non-persistent buffer (not in state_dict) is on meta: its value cannot come from the file."""
    keys = set(model.state_dict(keep_vars=True))
    return any(_is_meta(b) for n, b in model.named_buffers() if n not in keys)


def load_model(
    checkpoint: Checkpoint, spec: ArchSpec | str | Mapping | None = None, *, strict: bool = True,
    module: nn.Module | None = None,
) -> tuple[nn.Module, LoadReport]:
    """Build an architecture and load a checkpoint into it.

    Parameters
    ----------
    checkpoint : Checkpoint
        From :func:`~workbench.core.model.checkpoint.read_checkpoint`.
    spec : ArchSpec, str, dict or None
        The architecture. None uses the checkpoint's own module (pickled module /
        TorchScript) or the file's ``arch`` entry (:meth:`ArchSpec.from_file`:
        code that is not registered raises TrustRequired; pass the spec built
        with ``trust=True`` once the user agreed).
    strict : bool
        See :func:`load_state_dict_into`.
    module : nn.Module, optional
        ``spec`` already built, with nothing loaded: the ``module`` of the
        ArchitectureError a strict attempt raised (a partial answer loads into
        it instead of building the architecture again).

    Returns
    -------
    (nn.Module, LoadReport)
        The model on CPU. Its parameters are ``nn.Parameter`` with ``requires_grad``
        True except those named in the checkpoint's ``frozen`` entry. Tensors the
        checkpoint lacks (``strict=False``) are initialised the module's usual way.

    Raises
    ------
    ArchitectureError
        No architecture known, the spec cannot be built, or a strict load failed
        (then its ``module`` attribute holds the built module, nothing loaded).
    """
    if spec is None and checkpoint.module is not None:
        model = checkpoint.module
        return model, LoadReport(strict=strict, loaded=len(checkpoint.state_dict))
    if spec is None and checkpoint.metadata.arch:  # read from the file: the trust rule applies
        spec = ArchSpec.from_file(checkpoint.metadata.arch, checkpoint.path)
    if spec is None:
        raise ArchitectureError(
            f"{checkpoint.path}: the file does not say which architecture it is for. "
            "Choose one (e.g. --arch resnet18) or use the detected ranking."
        )
    model = module if module is not None else build_module(spec, device="meta")
    if module is None and _has_computed_meta_buffers(model):
        model = build_module(spec, device="cpu")
    ties = tied_groups(model)
    try:
        report = load_state_dict_into(model, checkpoint.state_dict, strict=strict)
    except ArchitectureError as err:  # nothing was loaded: a partial answer loads into this module
        err.module = model
        raise
    _materialize(model)
    _ensure_parameters(model)
    retie(model, ties)
    _apply_frozen(model, checkpoint.metadata.frozen)
    return model, report
