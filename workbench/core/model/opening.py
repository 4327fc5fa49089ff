"""The one open policy: a file path (and an optional architecture) to a model.

The command line (``workbench inspect``), the window (File > Open) and the
headless ``workbench train`` all call :func:`open_model`. It reads the file
once (:func:`~workbench.core.model.formats.read_checkpoint`: a sniff of its
first bytes, then one read) and never asks: each question for the user comes
back as a typed exception that carries what was read, and the answer resumes
from there without reading the file again:

* :class:`~workbench.core.errors.TrustRequired` -- the file runs code when
  loaded. When the file was read and only its ``arch`` entry names code,
  ``err.checkpoint`` holds it; else ``err.sniff`` holds the sniff (the trusted
  read starts after it). Answer with :func:`open_trusted`;
* :class:`NeedsArchitecture` -- the file does not say what it is; its
  ``candidates`` are the detected ranking; answer with
  ``open_spec(err.checkpoint, spec)`` or :func:`open_weights_only`;
* :class:`PartialFit` -- the architecture does not take every tensor; its
  ``report`` says which; answer with
  ``open_spec(err.checkpoint, err.spec, partial=True, edits=err.edits)``.

:mod:`workbench.core.model.open_policy` answers them the same way for the
window and the command line. The example input comes with the model
(``Opened.example`` from a model folder's config, else ``Opened.input_shape``).
Qt-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from torch import nn

from workbench.core import contrib
from workbench.core.errors import ArchitectureError, TrustRequired
from workbench.core.model import hf_build
from workbench.core.model.checkpoint import Checkpoint
from workbench.core.model.detection import detect_architecture, infer_num_classes
from workbench.core.model.edits import apply_edits
from workbench.core.model.example_input import default_input_shape, spec_input_shape, timm_example
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.formats.model_folder import pretrained_cfg
from workbench.core.model.freezing import apply_frozen
from workbench.core.model.loading import LoadReport, load_model, load_state_dict_into
from workbench.core.model.meta_build import build_module
from workbench.core.model.opened import NeedsArchitecture, Opened, PartialFit
from workbench.core.model.spec import ArchSpec
from workbench.core.model.weights_only import weights_only_model

__all__ = ["Opened", "NeedsArchitecture", "PartialFit", "open_model", "open_checkpoint", "open_spec",
           "open_trusted", "open_weights_only", "as_spec"]


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
    """Open any checkpoint file or model folder as a model, by one policy.

    1. Read it once (:func:`~workbench.core.model.formats.read_checkpoint`:
       ``weights_only=True`` unless ``trust``; a model folder's checkpoint
       names the builder of the model its config describes).
    2. Then :func:`open_checkpoint`: the architecture is ``arch`` when given
       (the caller's own decision), else the module stored whole (pickled
       module, TorchScript), else the file's own ``arch`` entry, which names
       code only with ``trust`` (:mod:`workbench.core.contrib`).
    3. Without one: the weights-only tree when ``weights_only``, else
       :class:`NeedsArchitecture` with the detected ranking.
    4. Build it and load strictly (:func:`open_spec`); a partial fit raises
       :class:`PartialFit` unless ``partial``.

    Parameters
    ----------
    path : str or Path
        A checkpoint file or a model folder (a folder holding ``config.json``,
        that file, or one of its weight files beside it).
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
        The file needs ``trust=True`` (a pickle's globals, TorchScript, a
        folder's custom code, or an ``arch`` entry naming code that is not
        registered); nothing from it ran. ``checkpoint`` / ``sniff`` carry what was read.
    NeedsArchitecture
        No architecture known and ``weights_only`` False.
    PartialFit
        The architecture does not take every tensor and ``partial`` False.
    CheckpointError, ArchitectureError
        Unreadable file, unknown architecture, a spec that cannot be built.
    """
    try:
        ckpt = read_checkpoint(path, trust=trust)
    except TrustRequired as err:
        err.checkpoint = None  # nothing could be read without trust
        raise
    return open_checkpoint(ckpt, arch, trust=trust, partial=partial, weights_only=weights_only, edits=edits,
                           kwargs=kwargs)


def open_checkpoint(ckpt: Checkpoint, arch: ArchSpec | str | Mapping | None = None, *, trust: bool = False,
                    partial: bool = False, weights_only: bool = False, edits: list[dict] = (),
                    kwargs: Mapping[str, Any] | None = None) -> Opened:
    """Steps 2-4 of :func:`open_model` on a checkpoint already read (nothing is read again).

    Parameters and errors as :func:`open_model`; a :class:`~workbench.core.errors.TrustRequired`
    for the file's ``arch`` entry carries ``ckpt`` as ``err.checkpoint``.
    """
    extra = dict(kwargs or {})
    spec = as_spec(arch, **extra)
    if spec is None and ckpt.module is not None:  # a stored module: loading it already needed trust
        model, report = load_model(ckpt, None)
        return _finish(Opened(model, _file_spec(ckpt, trust=True), ckpt, report))
    if spec is None:
        spec = _file_spec(ckpt, trust=trust, **extra)
        edits = list(edits) or list(ckpt.metadata.edits)  # the file's own edits (LoRA adapters) with its own arch
        library = hf_build.folder_library(ckpt, spec)
        opened = hf_build.without_library(ckpt, library, weights_only) if library else None
        if opened is not None:
            return opened
    if spec is None:
        if weights_only:
            return open_weights_only(ckpt)
        raise NeedsArchitecture(ckpt, detect_architecture(ckpt.state_dict))
    return open_spec(ckpt, spec, partial=partial, edits=edits)


def open_trusted(err: TrustRequired, arch: ArchSpec | str | Mapping | None = None, **options: Any) -> Opened:
    """The answer "trust it" to a :class:`~workbench.core.errors.TrustRequired` of :func:`open_model`.

    Resumes from ``err.checkpoint`` when the file was read (its ``arch`` entry
    named code); else reads the file with trust, starting after the sniff the
    question carries (``err.sniff``): the one case a file is read twice, since
    the first read could not proceed without trust.

    Parameters
    ----------
    err : TrustRequired
    arch : ArchSpec, str or mapping, optional
    **options
        ``partial``, ``weights_only``, ``edits``, ``kwargs`` of :func:`open_model`.

    Returns
    -------
    Opened
    """
    ckpt = getattr(err, "checkpoint", None)
    if ckpt is None:
        ckpt = read_checkpoint(err.path, trust=True, head=getattr(err, "sniff", None))
    return open_checkpoint(ckpt, arch, trust=True, **options)


def open_weights_only(ckpt: Checkpoint) -> Opened:
    """The answer "weights only": the checkpoint's tensors as a module tree (no forward pass)."""
    return Opened(weights_only_model(ckpt.state_dict), None, ckpt, weights_only=True)


def open_spec(ckpt: Checkpoint, spec: ArchSpec, *, partial: bool = False, edits: list[dict] = (),
              module: nn.Module | None = None) -> Opened:
    """Build ``spec``, make ``edits``, load ``ckpt`` into it: step 4 of :func:`open_model`.

    The answer to :class:`NeedsArchitecture` (``open_spec(err.checkpoint, spec)``)
    and :class:`PartialFit` (``open_spec(err.checkpoint, err.spec, partial=True,
    edits=err.edits, module=err.module)``: ``module`` is the architecture the
    strict attempt built, loaded into instead of built again). A Hugging Face folder's recorded builder loads the
    folder's weights through the library (:func:`~workbench.core.model.hf_build.open_hf_folder`).

    Raises
    ------
    PartialFit
        Keys or shapes differ and ``partial`` is False.
    ArchitectureError
        The spec cannot be built, or nothing fits.
    """
    if hf_build.folder_library(ckpt, spec) == "transformers":
        return _finish(hf_build.open_hf_folder(ckpt, spec, partial=partial))
    try:
        model, report = _load(ckpt, spec, not partial, list(edits), module)
    except ArchitectureError as err:
        report = getattr(err, "report", None)
        message = str(err) if str(ckpt.path) in str(err) else f"{ckpt.path}: {err}"  # which file (diff opens two)
        if report is None or report.ok or partial:
            raise ArchitectureError(message, report) from err
        raise PartialFit(ckpt, spec, report, message, edits, getattr(err, "module", None)) from err
    notes = [] if report.ok else [f"partial load into {spec}: {len(report.missing)} missing, "
                                  f"{len(report.mismatched)} mismatched, {len(report.unexpected)} unexpected tensors"]
    opened = Opened(model, spec, ckpt, report, notes=notes)
    if ckpt.metadata.format == "timm_folder":
        opened.example = timm_example(pretrained_cfg(ckpt.metadata.extra.get("config") or {}))
    return _finish(opened)


def _finish(opened: Opened) -> Opened:
    """The example input shape, when the file gives no example (:attr:`Opened.input_shape`)."""
    if opened.example is None and opened.input_shape is None:
        opened.input_shape = spec_input_shape(opened.spec) or default_input_shape(opened.model)
    return opened


def _file_spec(ckpt: Checkpoint, *, trust: bool, **extra: Any) -> ArchSpec | None:
    """The file's own ``arch`` entry through the trust rule (:meth:`ArchSpec.from_file`), or None.

    A builder that moved is named where it lives now (:data:`workbench.core.contrib.MOVED_SPECS`).
    """
    arch = ckpt.metadata.arch
    if not arch:
        return None
    if isinstance(arch, Mapping) and "name" in arch:
        arch = {**arch, "name": contrib.canonical_spec(arch["name"])}
    try:
        spec = ArchSpec.from_file(arch, ckpt.path, trust=trust)
    except TrustRequired as err:
        err.checkpoint = ckpt  # the answer resumes from what was read
        raise
    spec = spec if ckpt.metadata.edits else infer_num_classes(spec, ckpt.state_dict)  # timm: the head's size
    if extra:
        spec = spec.with_kwargs(**extra)
    return spec


def _load(ckpt: Checkpoint, spec: ArchSpec, strict: bool, edits: list[dict],
          module: nn.Module | None = None) -> tuple[nn.Module, LoadReport]:
    if not edits:
        return load_model(ckpt, spec, strict=strict, module=module)
    model = module
    if model is None:
        model = build_module(spec)
        apply_edits(model, edits, source=ckpt.path)
    try:
        report = load_state_dict_into(model, ckpt.state_dict, strict=strict)
    except ArchitectureError as err:  # nothing was loaded: a partial answer loads into this module
        err.module = model
        raise
    apply_frozen(model, ckpt.metadata.frozen or [], strict=False)
    return model, report
