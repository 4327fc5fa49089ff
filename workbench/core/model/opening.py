"""The one open policy: a file path (and an optional architecture) to a model.

The command line (``workbench inspect``), the window (File > Open) and the
headless ``workbench train`` all call :func:`open_model`. It never asks: each
question for the user comes back as a typed exception the caller answers and
then calls again with the answer:

* :class:`~workbench.core.errors.TrustRequired` -- the file runs code when
  loaded; call again with ``trust=True`` once the user agreed;
* :class:`NeedsArchitecture` -- the file does not say what it is; its
  ``candidates`` are the detected ranking; call again with ``arch=...`` or
  ``weights_only=True``;
* :class:`PartialFit` -- the architecture does not take every tensor; its
  ``report`` says which; call again with ``partial=True`` to load what fits.

Qt-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from torch import nn

from workbench.core.errors import ArchitectureError
from workbench.core.model.architectures import (
    ArchSpec,
    LoadReport,
    build_module,
    detect_architecture,
    load_model,
    load_state_dict_into,
    weights_only_model,
)
from workbench.core.model import hf_folder
from workbench.core.model.checkpoint import Checkpoint, read_checkpoint
from workbench.core.model.opened import NeedsArchitecture, Opened, PartialFit
from workbench.core.model.edits import apply_edits
from workbench.core.model.freezing import apply_frozen

__all__ = ["Opened", "NeedsArchitecture", "PartialFit", "open_model", "open_spec", "as_spec"]


def as_spec(arch: ArchSpec | str | Mapping | None, **extra: Any) -> ArchSpec | None:
    """An :class:`ArchSpec` from a spec, ``"resnet18(num_classes=2)"`` or ``{"name", "kwargs"}``.

    ``extra`` keyword arguments (e.g. ``num_classes``) are added to its kwargs.
    """
    if arch is None or arch == "":
        return None
    if isinstance(arch, ArchSpec):
        spec = arch
    elif isinstance(arch, Mapping):
        spec = ArchSpec.from_dict(arch)
    else:
        spec = ArchSpec.parse(str(arch))
    if extra:
        spec = spec.with_kwargs(**extra)
    return spec


def open_model(path: str | Path, arch: ArchSpec | str | Mapping | None = None, *, trust: bool = False,
               partial: bool = False, weights_only: bool = False, edits: list[dict] = (),
               kwargs: Mapping[str, Any] | None = None) -> Opened:
    """Open any checkpoint file as a model, by one policy.

    0. A model folder (a folder holding ``config.json``, that file, or one of
       its weight files beside it) opens as the model its config names,
       through :func:`workbench.core.model.hf_folder.open_folder`; with
       ``arch`` its weights load into ``arch`` as a file's would.
    1. Read the file (:func:`~workbench.core.model.checkpoint.read_checkpoint`,
       ``weights_only=True`` unless ``trust``).
    2. The architecture is ``arch`` when given (the caller's own decision),
       else the module stored whole (pickled module, TorchScript), else the
       file's own ``arch`` entry, which names code only with ``trust``
       (:mod:`workbench.core.contrib`).
    3. Without one: the weights-only tree when ``weights_only``, else
       :class:`NeedsArchitecture` with the detected ranking.
    4. Build it and load strictly; a partial fit raises :class:`PartialFit`
       unless ``partial``.

    Parameters
    ----------
    path : str or Path
        A checkpoint file or a model folder.
    arch : ArchSpec, str or mapping, optional
    trust : bool
        The user agreed to run code from the file: unpickle its custom globals,
        load TorchScript, or import and call the factory its ``arch`` entry names.
    partial : bool
        Load the tensors that fit and initialize the rest.
    weights_only : bool
        Without an architecture, show the weights-only module tree.
    edits : list of dict
        Structural edits to make between building ``arch`` and loading the
        weights (:func:`~workbench.core.model.edits.apply_edits`), e.g. a
        replaced head recorded in a run file.
    kwargs : mapping, optional
        Architecture keyword arguments (``num_classes``...) added to the spec
        used, whether given or read from the file.

    Returns
    -------
    Opened

    Raises
    ------
    TrustRequired
        The file needs ``trust=True`` (a pickle's globals, TorchScript, or an
        ``arch`` entry naming code that is not registered); nothing from it ran.
    NeedsArchitecture
        No architecture known and ``weights_only`` False.
    PartialFit
        The architecture does not take every tensor and ``partial`` False.
    CheckpointError, ArchitectureError
        Unreadable file, unknown architecture, a spec that cannot be built.
    """
    extra = dict(kwargs or {})
    spec = as_spec(arch, **extra)
    folder = hf_folder.find_model_folder(path)
    if folder is not None and spec is None:
        return hf_folder.open_folder(folder, trust=trust, partial=partial, weights_only=weights_only, kwargs=extra,
                                     open_spec=open_spec)
    ckpt = (read_checkpoint(path, trust=trust) if folder is None
            else hf_folder.read_folder_checkpoint(hf_folder.read_model_folder(folder)))
    if spec is None and ckpt.module is not None:  # a stored module: loading it already needed trust
        model, report = load_model(ckpt, None)
        return Opened(model, _file_spec(ckpt, trust=True), ckpt, report)
    if spec is None:
        spec = _file_spec(ckpt, trust=trust, **extra)
        edits = list(edits) or list(ckpt.metadata.edits)  # the file's own edits (LoRA adapters) with its own arch
    if spec is None:
        if weights_only:
            return Opened(weights_only_model(ckpt.state_dict), None, ckpt, weights_only=True)
        raise NeedsArchitecture(ckpt, detect_architecture(ckpt.state_dict))
    return open_spec(ckpt, spec, partial=partial, edits=edits)


def open_spec(ckpt: Checkpoint, spec: ArchSpec, *, partial: bool = False, edits: list[dict] = ()) -> Opened:
    """Build ``spec``, make ``edits``, load ``ckpt`` into it: step 4 of :func:`open_model`.

    Raises
    ------
    PartialFit
        Keys or shapes differ and ``partial`` is False.
    ArchitectureError
        The spec cannot be built, or nothing fits.
    """
    try:
        model, report = _load(ckpt, spec, not partial, list(edits))
    except ArchitectureError as err:
        report = getattr(err, "report", None)
        message = str(err) if str(ckpt.path) in str(err) else f"{ckpt.path}: {err}"  # which file (diff opens two)
        if report is None or report.ok or partial:
            raise ArchitectureError(message, report) from err
        raise PartialFit(ckpt, spec, report, message) from err
    notes = [] if report.ok else [f"partial load into {spec}: {len(report.missing)} missing, "
                                  f"{len(report.mismatched)} mismatched, {len(report.unexpected)} unexpected tensors"]
    return Opened(model, spec, ckpt, report, notes=notes)


def _file_spec(ckpt: Checkpoint, *, trust: bool, **extra: Any) -> ArchSpec | None:
    """The file's own ``arch`` entry through the trust rule (:meth:`ArchSpec.from_file`), or None."""
    if not ckpt.metadata.arch:
        return None
    spec = ArchSpec.from_file(ckpt.metadata.arch, ckpt.path, trust=trust)
    if extra:
        spec = spec.with_kwargs(**extra)
    return spec


def _load(ckpt: Checkpoint, spec: ArchSpec, strict: bool, edits: list[dict]) -> tuple[nn.Module, LoadReport]:
    if not edits:
        return load_model(ckpt, spec, strict=strict)
    model = build_module(spec)
    apply_edits(model, edits)
    report = load_state_dict_into(model, ckpt.state_dict, strict=strict)
    apply_frozen(model, ckpt.metadata.frozen or [], strict=False)
    return model, report
