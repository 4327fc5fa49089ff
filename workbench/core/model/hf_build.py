"""Building the models of Hugging Face and timm model folders, and saving them as folders.

What a model folder's format (:mod:`workbench.core.model.formats.model_folder`)
records as its architecture resolves here:

* :func:`build_hf_model` (:data:`~workbench.core.model.formats.model_folder.HF_BUILDER`):
  the class named by ``architectures[0]`` (the head, e.g.
  ``BertForSequenceClassification``) is looked up in the installed
  ``transformers`` package -- a class of the library, never code from the
  folder -- and built from the config. A folder's own weights go in through
  :func:`open_hf_folder`: ``from_pretrained(None, config=..., state_dict=...)``
  on the meta device, which applies the library's own key conversions
  (transformers 5 renames some checkpoints' keys, e.g. ViT's) and ties the embeddings;
* :func:`build_timm_model` (:data:`~workbench.core.model.formats.model_folder.TIMM_BUILDER`):
  ``timm.create_model(name, pretrained=False, ...)`` for a registered timm name.

Every build is offline (:func:`~workbench.core.hub_offline.hub_offline`,
``local_files_only=True``, timm with ``pretrained=False``): a config that
names a model elsewhere (:func:`~workbench.core.model.formats.model_folder.remote_name`)
is refused before the library sees it, and any other Hub request the library
would make fails at once and is refused the same way (:func:`_built`).
``trust_remote_code`` is never passed: with trust, a folder whose config has
``auto_map`` still runs none of its code (the library's own class opens it when
there is one, else the weights-only tree, and says so). ``transformers`` and
``timm`` are optional extras (``workbench[hf]``, ``workbench[timm]``): imported
inside the functions that need them only. Qt-free.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
from torch import nn

from workbench.core import contrib, warm_imports
from workbench.core.hub_offline import hub_offline, offline_refusal
from workbench.core.errors import ArchitectureError, CheckpointError
from workbench.core.model.checkpoint import Checkpoint
from workbench.core.model.example_input import ExampleInput, hf_example_input
from workbench.core.model.formats.model_folder import (CONFIG_NAME, HF_BUILDER, SHARD, TIMM_BUILDER, WEIGHT_NAMES,
                                                       remote_name)
from workbench.core.model.formats.safetensors import LazyStateDict
from workbench.core.model.loading import LoadReport
from workbench.core.model.opened import NeedsArchitecture, Opened, PartialFit
from workbench.core.model.spec import ArchSpec
from workbench.core.model.weights_only import weights_only_model

__all__ = ["build_hf_model", "build_timm_model", "save_hf_folder", "folder_library", "without_library",
           "open_hf_folder", "quiet"]

_CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The library each recorded builder needs, and its pip extra.
_LIBRARIES = {HF_BUILDER: ("transformers", "hf"), TIMM_BUILDER: ("timm", "timm")}


def _import(module: str, extra: str, origin: Path):
    warm_imports.claim()  # the window may be importing transformers' modeling code ahead: never a second importer
    try:
        return __import__(module)
    except ImportError as exc:
        raise ArchitectureError(f"{origin}: this is a {module} model folder; install {module} to open it as its "
                                f"model (pip install 'workbench[{extra}]').") from exc


def _hf_class(transformers: Any, cfg: Mapping, origin: Path) -> type:
    """The transformers model class ``architectures[0]`` names, else the base model of ``model_type``."""
    names = cfg.get("architectures")
    if isinstance(names, list) and names:
        name = names[0]
        cls = getattr(transformers, name, None) if isinstance(name, str) and _CLASS_NAME.fullmatch(name) else None
        if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)
                and cls.__module__.startswith("transformers.")):
            raise ArchitectureError(f"{origin}: architecture {str(name)[:80]!r} is not a model class of the "
                                    f"installed transformers {transformers.__version__}; a newer version may have it.")
        return cls
    config = _hf_config(transformers, None, cfg, origin)
    try:
        return transformers.AutoModel._model_mapping[type(config)]
    except KeyError as exc:
        raise ArchitectureError(f"{origin}: the config names no architecture and transformers has no base model "
                                f"for model_type {cfg.get('model_type')!r}.") from exc


def _hf_config(transformers: Any, cls: type | None, cfg: Mapping, origin: Path) -> Any:
    data = {k: v for k, v in cfg.items() if k != "auto_map"}
    try:
        with quiet(transformers), hub_offline():
            if cls is not None:
                return cls.config_class.from_dict(data)
            return transformers.AutoConfig.for_model(**data)
    except Exception as exc:  # noqa: BLE001 - content of a file: any failure is a bad config
        _refuse_if_offline(exc, cfg, origin)
        raise ArchitectureError(f"{origin}: transformers cannot read this config ({type(exc).__name__}: "
                                f"{str(exc)[:300]}).") from exc


def _refuse_if_offline(exc: BaseException, cfg: Mapping, origin: Any) -> None:
    """Raise the one-line refusal when ``exc`` is a Hub request that the offline build stopped; else return.

    Names the config key whose value is in the URL when there is one (a name
    that no list of remote keys knows: ``backbone = 'resnet50'`` that RF-DETR
    asks the Hub about).
    """
    url = offline_refusal(exc)
    if url is None:
        return
    key = _key_in(cfg, url)
    what = f"{key[0]} = {key[1][:80]!r} makes transformers" if key else "building this config makes the library"
    raise ArchitectureError(f"{origin}: {what} fetch {url[:160]} from the Hugging Face Hub; Workbench never "
                            "downloads: remove the key, or give that model's config and weights in the folder.") from exc


def _key_in(cfg: Mapping, url: str) -> tuple[str, str] | None:
    """The first top-level or sub-config ``(dotted key, value)`` whose text value appears in ``url``."""
    stack: list[tuple[str, Any, int]] = [("", cfg, 0)]
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, str) and len(value) > 2 and f"/{value}" in url:
            return path, value
        if isinstance(value, dict) and depth < 8:
            stack.extend((f"{path}.{k}" if path else str(k), v, depth + 1) for k, v in reversed(value.items()))
    return None


def _built(build: Any, cfg: Mapping, origin: Any) -> Any:
    """``build()`` offline; a Hub request it tried raises the one-line refusal, any other error itself."""
    try:
        with hub_offline():
            return build()
    except Exception as exc:
        _refuse_if_offline(exc, cfg, origin)
        raise


@contextlib.contextmanager
def quiet(transformers: Any) -> Iterator[None]:
    """transformers' warnings, log lines and progress bars off for the block, restored after."""
    logging = transformers.utils.logging
    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def _config_dict(config_json: Any, architecture: Any, origin: Any, overrides: Mapping[str, Any]) -> dict:
    """The config a spec records, with its class and overrides (``num_classes`` as ``num_labels``)."""
    try:
        cfg = json.loads(config_json)
    except (TypeError, ValueError) as exc:
        raise ArchitectureError(f"{origin}: config_json is not JSON ({exc}).") from exc
    if not isinstance(cfg, dict):
        raise ArchitectureError(f"{origin}: config_json is not a JSON object.")
    remote = remote_name(cfg)
    if remote:
        raise ArchitectureError(f"{origin}: {remote}")
    if architecture is not None:
        cfg["architectures"] = [architecture]
    extra = dict(overrides)
    if isinstance(extra.get("num_classes"), int):
        extra["num_labels"] = extra.pop("num_classes")
        cfg.pop("id2label", None), cfg.pop("label2id", None)
    return {**cfg, **extra}


def build_hf_model(architecture: str | None = None, config_json: str = "{}", **overrides: Any) -> nn.Module:
    """A transformers model of class ``architecture`` from its config, randomly initialized.

    The builder of :data:`HF_BUILDER` specs (what Workbench records for a
    model opened from a folder, so a saved checkpoint or a training process can
    build it again). Runs no code but the installed library's: ``auto_map`` is
    ignored, the class must be one of ``transformers``.

    Parameters
    ----------
    architecture : str, optional
        ``"BertForSequenceClassification"``...; None: the base model of the config's ``model_type``.
    config_json : str
        The config as JSON text.
    **overrides
        Config attributes to change (``num_labels=3``; ``num_classes`` means ``num_labels``).

    Returns
    -------
    transformers.PreTrainedModel

    Raises
    ------
    ArchitectureError
        transformers missing, an unknown class, a config it cannot read, or a
        config that names a model elsewhere (nothing is downloaded: the build is offline).
    """
    origin = Path(str(architecture))
    cfg = _config_dict(config_json, architecture, architecture, overrides)
    transformers = _import("transformers", "hf", origin)
    cls = _hf_class(transformers, cfg, origin)
    config = _hf_config(transformers, cls, cfg, origin)
    with quiet(transformers):
        return _built(lambda: cls._from_config(config), cfg, origin)


def build_timm_model(model_name: str, **kwargs: Any) -> nn.Module:
    """``timm.create_model(model_name, pretrained=False, **kwargs)`` for a registered timm model name.

    The builder of :data:`TIMM_BUILDER` specs. ``model_name`` must be in timm's
    registry (``timm.is_model``): ``hf-hub:`` / ``local-dir:`` names, which
    download or read other files, are refused; so is ``pretrained``. Built offline.

    Raises
    ------
    ArchitectureError
        timm missing, an unknown name, a name or argument naming a model elsewhere,
        or ``pretrained`` / ``pretrained_cfg_overlay`` given.
    """
    remote = remote_name({"architecture": model_name, **kwargs})
    if remote:
        raise ArchitectureError(f"{str(model_name)[:80]}: {remote}")
    timm = _import("timm", "timm", Path(str(model_name)))
    if not isinstance(model_name, str) or not timm.is_model(model_name):
        raise ArchitectureError(f"{str(model_name)[:80]!r} is not a model of the installed timm {timm.__version__}; "
                                "a newer version may have it.")
    if kwargs.get("pretrained") or "pretrained_cfg_overlay" in kwargs:
        raise ArchitectureError(f"{model_name}: Workbench builds timm models with pretrained=False (no downloads).")
    kwargs.pop("pretrained", None)
    with hub_offline():
        return timm.create_model(model_name, pretrained=False, **kwargs)


# --------------------------------------------------------------------------- opening a folder's weights


def folder_library(ckpt: Checkpoint, spec: ArchSpec | None) -> str | None:
    """``"transformers"`` / ``"timm"`` when ``spec`` is the builder a model folder ``ckpt`` recorded, else None."""
    if spec is None or ckpt.metadata.format not in ("hf_folder", "timm_folder"):
        return None
    found = _LIBRARIES.get(contrib.canonical_spec(spec.name))
    return found[0] if found else None


def without_library(ckpt: Checkpoint, library: str, weights_only: bool) -> Opened | None:
    """The weights-only tree of a model folder whose library is not installed; None when it imports.

    Raises
    ------
    NeedsArchitecture
        The library is missing and ``weights_only`` is False (no candidates; the
        message says what to install).
    """
    warm_imports.claim()  # the window may be importing transformers' modeling code ahead: never a second importer
    try:
        __import__(library)
        return None
    except ImportError:
        pass
    extra = "hf" if library == "transformers" else "timm"
    if not weights_only:
        err = NeedsArchitecture(ckpt, [])
        err.args = (f"{ckpt.path}: {Path(ckpt.path).name} is a {library} model folder and {library} is not "
                    f"installed; install it (pip install 'workbench[{extra}]') or open the weights only.",)
        raise err
    return _weights_only(ckpt, f"{Path(ckpt.path).name} is a {library} model folder and {library} is not installed: "
                               f"showing the weights only (pip install 'workbench[{extra}]' to open it as its model).")


def _weights_only(ckpt: Checkpoint, note: str) -> Opened:
    return Opened(weights_only_model(ckpt.state_dict), None, ckpt, weights_only=True, notes=[note])


def _config_json(config: Any) -> str:
    """The config's non-default values as compact JSON (what ``save_pretrained`` writes, on one line)."""
    return json.dumps(config.to_diff_dict(), separators=(",", ":"), sort_keys=True, default=str)


def _report(info: Mapping, partial: bool, loaded: int) -> LoadReport:
    mismatched = []
    for item in info.get("mismatched_keys") or ():
        key, *shapes = item if isinstance(item, tuple) else (item,)
        found, expected = (tuple(shapes[0]), tuple(shapes[1])) if len(shapes) == 2 else ((), ())
        mismatched.append((key, expected, found))
    return LoadReport(missing=sorted(info.get("missing_keys") or ()), unexpected=sorted(info.get("unexpected_keys") or ()),
                      mismatched=sorted(mismatched), strict=not partial, loaded=loaded)


def _code_note(ckpt: Checkpoint) -> str:
    folder = Path(ckpt.path)
    try:
        files = sorted(p.name for p in folder.iterdir() if p.suffix == ".py")
    except OSError:
        files = []
    return ", ".join(files) or "auto_map"


def open_hf_folder(ckpt: Checkpoint, spec: ArchSpec, *, partial: bool = False) -> Opened:
    """Load a transformers folder's weights (file keys) into the class its config names.

    Parameters
    ----------
    ckpt : Checkpoint
        Read by the model folder format (``metadata.format == "hf_folder"``);
        ``metadata.extra["config"]`` is the folder's config.
    spec : ArchSpec
        :data:`HF_BUILDER` with ``config_json`` (and ``architecture``, ``num_classes``).
    partial : bool
        Keep the tensors that fit and initialize the rest (transformers' own init).

    Returns
    -------
    Opened
        ``spec`` the builder with the config's non-default values; ``example``
        from the config (:func:`~workbench.core.model.example_input.hf_example_input`).
        A trusted folder with custom code (``auto_map``) and no class of the
        library opens as the weights-only tree, with a note. A lazily read
        folder (a :class:`~workbench.core.model.formats.safetensors.LazyStateDict`)
        whose keys and shapes are exactly the class's opens on ``meta``, reading
        its weights when needed (:mod:`workbench.core.model.lazy`); otherwise its
        weights are read now and loaded through the library.

    Raises
    ------
    PartialFit
        Keys or shapes differ and ``partial`` is False.
    ArchitectureError
        An unknown class, a config transformers cannot read, weights it cannot load.
    """
    transformers = _import("transformers", "hf", Path(ckpt.path))
    origin = Path(ckpt.path) / CONFIG_NAME
    kwargs = dict(spec.kwargs)
    cfg = _config_dict(kwargs.pop("config_json", "{}"), kwargs.pop("architecture", None), origin, kwargs)
    notes: list[str] = []
    custom = "auto_map" in (ckpt.metadata.extra.get("config") or {})
    try:
        cls = _hf_class(transformers, cfg, origin)
    except ArchitectureError as exc:
        if not custom:
            raise
        return _weights_only(ckpt, f"{exc}. Workbench does not run a folder's custom code yet: showing the weights only.")
    if custom:  # trusted, yet nothing of the folder runs: the library's own class does
        notes.append(f"the folder's custom code ({_code_note(ckpt)}) was not run; "
                     f"opened with transformers' own {cls.__name__}")
    config = _hf_config(transformers, cls, cfg, origin)
    example = _example(config, origin)
    state = ckpt.state_dict
    if isinstance(state, LazyStateDict):
        model = _lazy_model(transformers, cls, config, state, cfg, origin)
        if model is not None:
            spec = ArchSpec(HF_BUILDER, {"architecture": cls.__name__, "config_json": _config_json(config)})
            report = LoadReport(strict=not partial, loaded=len(state))
            return Opened(model, spec, ckpt, report, notes=notes, example=example)
        state = state.read()  # keys the library converts, or buffers it computes: the library loads them
    try:
        with quiet(transformers), hub_offline():
            model, info = cls.from_pretrained(None, config=config, state_dict=dict(state),
                                              output_loading_info=True, ignore_mismatched_sizes=True,
                                              local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - the library on a file's content: report, never crash
        _refuse_if_offline(exc, cfg, origin)
        raise ArchitectureError(f"{ckpt.path}: transformers could not load the weights into {cls.__name__} "
                                f"({type(exc).__name__}: {str(exc)[:300]}).") from exc
    spec = ArchSpec(HF_BUILDER, {"architecture": cls.__name__, "config_json": _config_json(config)})
    report = _report(info, partial, len(ckpt.state_dict))
    if not report.ok:
        message = (f"{ckpt.path}: the weights do not fit {cls.__name__}: {report.summary()}. Load partially to "
                   "keep every tensor that fits (the rest initialized as transformers does).")
        if not partial:
            raise PartialFit(ckpt, spec, report, message)
        notes.append(f"partial load into {cls.__name__}: {len(report.missing)} missing, {len(report.mismatched)} "
                     f"mismatched, {len(report.unexpected)} unexpected tensors")
    return Opened(model, spec, ckpt, report, notes=notes, example=example)


def _example(config: Any, origin: Path) -> ExampleInput:
    """The config's example input (:func:`~workbench.core.model.example_input.hf_example_input`), or the refusal."""
    try:
        return ExampleInput(kwargs=hf_example_input(config))
    except ValueError as exc:  # an image past the stated bound: refused before it is made
        raise ArchitectureError(f"{origin}: {exc}") from exc


def _lazy_model(transformers: Any, cls: type, config: Any, state: LazyStateDict, cfg: Mapping,
                origin: Path) -> nn.Module | None:
    """``cls`` built on ``meta`` with the file's shapes and dtypes, reading its weights when needed; or None.

    None (the caller loads the weights through the library instead) when the
    model's keys and shapes are not exactly the file's, tied weights aside (the
    library would convert or initialize some), or when a buffer the library
    computes is left on ``meta``.
    """
    from workbench.core.model import lazy
    from workbench.core.model.meta_build import MetaStorage

    with quiet(transformers), MetaStorage():
        model = _built(lambda: cls._from_config(config), cfg, origin)
    holders = lazy._holders(model)
    present = {id(t) for k, (_, _, t) in holders.items() if k in state}
    if any(k not in holders for k in state) or any(id(t) not in present for _, _, t in holders.values()):
        return None
    if any(tuple(holders[k][2].shape) != tuple(v.shape) for k, v in state.items()):
        return None
    if any(b.is_meta for sub in model.modules() for n, b in sub._buffers.items()
           if b is not None and n in sub._non_persistent_buffers_set):
        return None
    with torch.no_grad():
        for key, value in state.items():  # the file's dtype, as the library's load keeps it
            held = holders[key][2]
            if held.dtype != value.dtype:
                held.data = torch.empty(held.shape, dtype=value.dtype, device="meta")
    lazy.attach(model, state)
    return model.eval()


# --------------------------------------------------------------------------- saving


def save_hf_folder(model: nn.Module, folder: str | Path, *, max_shard_size: int | str = "5GB") -> list[Path]:
    """Write ``model`` as a folder ``from_pretrained`` (or timm's hub loader) opens: config + safetensors.

    A transformers model is written by its ``save_pretrained`` (sharded past
    ``max_shard_size``); a timm model by ``timm.models.save_for_hf``. Files are
    written into a temporary folder beside ``folder`` and moved in one by one
    with ``os.replace`` (an interrupted save never leaves a half-written file,
    and a file memory-mapped from the old folder keeps its data); weight shards
    and indexes of an earlier save that this one did not write are removed.

    Parameters
    ----------
    model : nn.Module
        A ``transformers.PreTrainedModel`` or a timm model (``pretrained_cfg``).
    folder : str or Path
        Created when missing.
    max_shard_size : int or str
        Bytes or ``"50KB"`` / ``"5GB"`` (transformers only).

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    ArchitectureError
        The model is neither.
    CheckpointError
        The folder cannot be written.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    except OSError as exc:
        raise CheckpointError(f"cannot be written ({exc.strerror}).", folder) from exc
    try:
        _write_folder(model, tmp, max_shard_size)
        written = sorted(p.name for p in tmp.iterdir() if p.is_file())
        for name in written:
            os.replace(tmp / name, folder / name)
        for stale in folder.iterdir():
            if stale.name not in written and (SHARD.fullmatch(stale.name) or stale.name in WEIGHT_NAMES):
                stale.unlink()
        return [folder / n for n in written]
    except OSError as exc:
        raise CheckpointError(f"cannot be written ({exc.strerror}).", folder) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_folder(model: nn.Module, tmp: Path, max_shard_size: int | str) -> None:
    if hasattr(model, "save_pretrained") and hasattr(model, "config"):
        transformers = __import__("transformers")
        with quiet(transformers):
            model.save_pretrained(tmp, max_shard_size=max_shard_size)
    elif hasattr(model, "pretrained_cfg"):
        from timm.models import save_for_hf

        save_for_hf(model, tmp, safe_serialization=True)
    else:
        raise ArchitectureError(f"{type(model).__name__} is neither a transformers nor a timm model: save it as "
                                "a Workbench checkpoint instead.")
