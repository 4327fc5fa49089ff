"""Model folders: Hugging Face ``save_pretrained`` folders and timm hub folders, opened as their model.

A model folder holds ``config.json`` beside its weights: ``model.safetensors``,
the shards a ``model.safetensors.index.json`` lists, or (older folders)
``pytorch_model.bin`` and its index. The config says which library the folder
belongs to:

* **transformers** (``model_type`` / ``architectures``): the class named by
  ``architectures[0]`` (the head, e.g. ``BertForSequenceClassification``) is
  looked up in the installed ``transformers`` package -- a class of the
  library, never code from the folder -- and built from the config on the meta
  device by ``from_pretrained(None, config=..., state_dict=...)``, which applies
  the library's own key conversions (transformers 5 renames some checkpoints'
  keys, e.g. ViT's) and ties the embeddings;
* **timm** (``architecture`` and ``pretrained_cfg``, as the timm hub writes
  them): ``timm.create_model(architecture, pretrained=False, num_classes=...)``
  built on the meta device through :func:`~workbench.core.model.architectures.load_model`.

Safety (``DESIGN.md``, "Safety contract"): the weights are read by Workbench's
own validated safetensors header parser
(:func:`~workbench.core.model.checkpoint.safetensors_header`) and memory-mapped
copy-on-write (``MAP_PRIVATE``: training never writes into the folder);
``pytorch_model.bin`` goes through ``torch.load(weights_only=True)``
(:func:`~workbench.core.model.checkpoint.read_checkpoint`). Shard names from an
index must be plain file names of the folder. ``trust_remote_code`` is never
passed: a config with ``auto_map`` (custom code shipped in the folder) raises
:class:`~workbench.core.errors.TrustRequired` naming the folder's ``.py`` files
before anything is imported; with trust, Workbench still runs none of that code
(it opens the library's own class when there is one, else the weights-only
tree, and says so). The architecture names read from a config resolve only to
classes of the installed ``transformers`` / registered ``timm`` models.

``transformers`` and ``timm`` are optional extras (``workbench[hf]``,
``workbench[timm]``): imported inside the functions that need them only.
Qt-free.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import struct
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import nn

from workbench.core import contrib, warm_imports
from workbench.core.errors import ArchitectureError, CheckpointError, TrustRequired
from workbench.core.model.architectures import ArchSpec, LoadReport, weights_only_model
from workbench.core.model.checkpoint import (
    Checkpoint,
    CheckpointMetadata,
    read_checkpoint,
    safetensors_header,
    tensor_stats,
)
from workbench.core.model.example_input import ExampleInput

from workbench.core.model.opened import NeedsArchitecture, Opened, PartialFit

__all__ = ["CONFIG_NAME", "ModelFolder", "find_model_folder", "read_model_folder", "read_folder_checkpoint",
           "read_safetensors_mmap", "open_folder", "hf_example_input", "build_hf_model", "build_timm_model",
           "save_hf_folder", "HF_BUILDER", "TIMM_BUILDER"]

CONFIG_NAME = "config.json"
SAFE_WEIGHTS, SAFE_INDEX = "model.safetensors", "model.safetensors.index.json"
PT_WEIGHTS, PT_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
#: The spec a Hugging Face model opened from a folder is recorded with (``to_dict`` keeps it plain data).
HF_BUILDER = "workbench.core.model.hf_folder:build_hf_model"
#: The spec a timm hub folder's model is recorded with.
TIMM_BUILDER = "workbench.core.model.hf_folder:build_timm_model"
#: Largest ``config.json`` / index file read (bytes); real ones are a few kB / a few hundred kB.
MAX_JSON_BYTES = 16 * 1024 * 1024
#: Shape ``(N, L)`` of the example token ids.
EXAMPLE_TOKENS = (1, 16)
_SHARD = re.compile(r"(model|pytorch_model)-\d+-of-\d+\.(safetensors|bin)")
_CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ST_DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16,
    "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64, "U64": torch.uint64, "F16": torch.float16,
    "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64, "C64": torch.complex64,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}


@dataclass
class ModelFolder:
    """A model folder's config and weight files, validated, nothing imported.

    Attributes
    ----------
    path : Path
        The folder.
    config : dict
        ``config.json`` as read.
    library : {"transformers", "timm"}
        Which library the config belongs to.
    weights : list of Path
        The weight files, in index order (one for an unsharded folder).
    """

    path: Path
    config: dict
    library: str
    weights: list[Path] = field(default_factory=list)

    @property
    def config_path(self) -> Path:
        """``<folder>/config.json``."""
        return self.path / CONFIG_NAME


# --------------------------------------------------------------------------- finding and reading


def _read_json(path: Path) -> Any:
    """A JSON file of at most :data:`MAX_JSON_BYTES`, as Python data.

    Raises
    ------
    CheckpointError
        Not a regular file, too large, unreadable, or not JSON.
    """
    try:
        if not path.is_file():
            raise CheckpointError("is not a regular file.", path)
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise CheckpointError(f"cannot be read ({exc.strerror}). Check its permissions.", path) from exc
    if len(data) > MAX_JSON_BYTES:
        raise CheckpointError(f"is larger than {MAX_JSON_BYTES // 2**20} MB; a model folder's JSON files are small.",
                              path)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"is not valid UTF-8 JSON ({exc}). Save the folder again.", path) from exc


def _library(config: Any) -> str | None:
    """``"timm"``, ``"transformers"`` or None (a config.json of neither), from the config's keys only."""
    if not isinstance(config, dict):
        return None
    if isinstance(config.get("architecture"), str) and ("pretrained_cfg" in config or "model_type" not in config):
        return "timm"
    if isinstance(config.get("model_type"), str) or isinstance(config.get("architectures"), list):
        return "transformers"
    return None


def _is_folder_file(path: Path) -> bool:
    name = path.name
    return name in (CONFIG_NAME, SAFE_WEIGHTS, SAFE_INDEX, PT_WEIGHTS, PT_INDEX) or bool(_SHARD.fullmatch(name))


def find_model_folder(path: str | Path) -> Path | None:
    """The model folder ``path`` opens as, or None when it is an ordinary checkpoint file.

    A folder holding ``config.json``; that ``config.json``; or one of the
    folder's weight files (``model.safetensors``, a ``model-0000k-of-0000n``
    shard, an index, ``pytorch_model.bin``) beside a ``config.json`` of
    transformers or timm. Reads at most the small ``config.json``; imports nothing.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    Path or None
    """
    path = Path(path)
    try:
        if path.is_dir():
            return path if (path / CONFIG_NAME).is_file() else None
        if not path.is_file() or not _is_folder_file(path) or not (path.parent / CONFIG_NAME).is_file():
            return None
        if path.name == CONFIG_NAME:
            return path.parent
        return path.parent if _library(_read_json(path.parent / CONFIG_NAME)) else None
    except (OSError, CheckpointError):
        return None


def _folder_file(folder: Path, name: Any, origin: Path) -> Path:
    """``folder / name`` for a plain file name read from an index (no path parts, a regular file inside)."""
    if not isinstance(name, str) or not name or name != Path(name).name or name in (".", ".."):
        raise CheckpointError(f"names a weight file {str(name)[:80]!r} that is not a plain file name of the folder.",
                              origin)
    path = folder / name
    if path.is_symlink() or not path.is_file():
        raise CheckpointError(f"lists {name}, which is missing from the folder (or is not a regular file). "
                              "Copy the whole folder again.", origin)
    return path


def _weight_files(folder: Path) -> list[Path]:
    for index_name, single in ((SAFE_INDEX, SAFE_WEIGHTS), (PT_INDEX, PT_WEIGHTS)):
        index = folder / index_name
        if index.is_file():
            data = _read_json(index)
            weight_map = data.get("weight_map") if isinstance(data, dict) else None
            if not isinstance(weight_map, dict) or not weight_map:
                raise CheckpointError("has no weight_map (tensor name -> shard file). Save the folder again.", index)
            return [_folder_file(folder, n, index) for n in dict.fromkeys(weight_map.values())]
        if (folder / single).is_file():
            return [folder / single]
    raise CheckpointError(f"holds {CONFIG_NAME} but no weights ({SAFE_WEIGHTS}, {SAFE_INDEX}, {PT_WEIGHTS} or "
                          f"{PT_INDEX}). Copy the weight files into it.", folder)


def read_model_folder(path: str | Path) -> ModelFolder:
    """Read a model folder's ``config.json`` and find its weight files (nothing imported).

    Parameters
    ----------
    path : str or Path
        The folder, or a file inside it (:func:`find_model_folder`).

    Returns
    -------
    ModelFolder

    Raises
    ------
    CheckpointError
        No ``config.json``; a config of neither transformers nor timm; no
        weights; an index naming files outside the folder or missing ones.
    """
    folder = find_model_folder(path) or Path(path)
    config = _read_json(folder / CONFIG_NAME)
    library = _library(config)
    if library is None:
        raise CheckpointError("is neither a Hugging Face transformers config (model_type, architectures) nor "
                              "timm's (architecture, pretrained_cfg).", folder / CONFIG_NAME)
    return ModelFolder(folder, config, library, _weight_files(folder))


def _st_dtype(name: str, dtype: str, path: Path) -> torch.dtype:
    if dtype not in _ST_DTYPES:
        raise CheckpointError(f"tensor {name!r} has dtype {dtype}, which Workbench cannot map yet.", path)
    return _ST_DTYPES[dtype]


def read_safetensors_mmap(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A safetensors file's tensors as copy-on-write views of the memory-mapped file.

    The header is validated first (:func:`~workbench.core.model.checkpoint.safetensors_header`);
    the file is then mapped once (``torch.UntypedStorage.from_file(shared=False)``,
    ``MAP_PRIVATE``): opening reads no tensor data (pages are read on first use)
    and writing to a tensor never changes the file. A tensor whose offset is not
    a multiple of its element size is copied instead.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    (dict of str to Tensor, dict of str to str)
        The tensors (CPU, header order) and the header's ``__metadata__``.

    Raises
    ------
    CheckpointError
        A header that fails validation, or a dtype torch has no type for (F4, F6).
    """
    path = Path(path)
    metadata, entries = safetensors_header(path)
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
    size = path.stat().st_size
    storage = torch.UntypedStorage.from_file(str(path), shared=False, nbytes=size)
    start = 8 + header_len
    tensors: dict[str, torch.Tensor] = {}
    for e in entries:
        dtype = _st_dtype(e.name, e.dtype, path)
        offset = start + e.begin
        if offset % dtype.itemsize == 0:
            tensors[e.name] = torch.empty(0, dtype=dtype).set_(storage, offset // dtype.itemsize, e.shape)
        else:  # unaligned: copy the bytes into aligned memory
            raw = torch.empty(0, dtype=torch.uint8).set_(storage, offset, (e.end - e.begin,)).clone()
            tensors[e.name] = raw.view(dtype).reshape(e.shape)
    return tensors, metadata


def read_folder_checkpoint(folder: ModelFolder) -> Checkpoint:
    """The folder's weights as one :class:`~workbench.core.model.checkpoint.Checkpoint` (file keys, all shards).

    Parameters
    ----------
    folder : ModelFolder

    Returns
    -------
    Checkpoint
        ``path`` is the folder; ``metadata.format`` ``"hf_folder"`` or
        ``"timm_folder"``, ``container`` ``"safetensors"`` or ``"zip"``;
        ``metadata.extra["config"]`` the config; ``file_size`` the sum of the
        weight files' sizes.

    Raises
    ------
    CheckpointError
        A damaged weight file, a tensor named by two shards, or no tensors.
    TrustRequired
        A ``pytorch_model.bin`` that needs more than weights-only loading.
    """
    state: dict[str, torch.Tensor] = {}
    header: dict[str, str] = {}
    container = "safetensors"
    for file in folder.weights:
        if file.suffix == ".safetensors":
            tensors, meta = read_safetensors_mmap(file)
            header.update(meta)
        else:
            container = "zip"
            tensors = read_checkpoint(file).state_dict  # weights_only=True
        twice = state.keys() & tensors.keys()
        if twice:
            raise CheckpointError(f"holds tensor {sorted(twice)[0]!r} that another shard holds too. "
                                  "Save the folder again.", file)
        state.update(tensors)
    if not state:
        raise CheckpointError("holds no tensors.", folder.path)
    fmt = "hf_folder" if folder.library == "transformers" else "timm_folder"
    meta = CheckpointMetadata(format=fmt, container=container)
    meta.extra = {"config": folder.config, "weight_files": [f.name for f in folder.weights]}
    if header:
        meta.extra["__metadata__"] = header
    meta.num_tensors, meta.total_params, meta.dtypes = tensor_stats(state)
    meta.file_size = sum(f.stat().st_size for f in folder.weights)
    return Checkpoint(path=folder.path, state_dict=state, metadata=meta)


# --------------------------------------------------------------------------- example input


def _as_dict(config: Any) -> dict:
    return config.to_dict() if hasattr(config, "to_dict") else dict(config)


def hf_example_input(config: Mapping | Any, *, seq_len: int = EXAMPLE_TOKENS[1], batch: int = 1,
                     seed: int = 0) -> dict[str, torch.Tensor]:
    """What to call a Hugging Face model with for its shapes and FLOPs, from its config.

    * a text config (``vocab_size``): ``input_ids`` int64 ``(batch, L)`` uniform
      in ``[0, vocab_size)`` and ``attention_mask`` int64 ones ``(batch, L)``,
      with ``L = min(seq_len, max_position_embeddings / n_positions)``;
    * a vision config (``image_size``): ``pixel_values`` float32
      ``(batch, num_channels, H, W)`` standard normal (``image_size`` an int or
      ``[H, W]``; ``num_channels`` default 3).

    A config with both gives both; random values come from a private generator
    seeded with ``seed`` (the global RNG does not move).

    Parameters
    ----------
    config : mapping or transformers.PretrainedConfig
    seq_len, batch : int
    seed : int

    Returns
    -------
    dict of str to Tensor
        Keyword arguments, ``model(**example)``; empty when the config has neither key.
    """
    cfg = _as_dict(config)
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    vocab = cfg.get("vocab_size")
    if isinstance(vocab, int) and vocab > 0:
        limits = [cfg.get(k) for k in ("max_position_embeddings", "n_positions", "max_seq_len")]
        length = min([seq_len] + [n for n in limits if isinstance(n, int) and n > 0])
        out["input_ids"] = torch.randint(0, vocab, (batch, length), generator=gen, dtype=torch.long)
        out["attention_mask"] = torch.ones(batch, length, dtype=torch.long)
    size = cfg.get("image_size")
    if isinstance(size, int) or (isinstance(size, (list, tuple)) and len(size) == 2):
        h, w = (size, size) if isinstance(size, int) else size
        channels = cfg.get("num_channels") if isinstance(cfg.get("num_channels"), int) else 3
        out["pixel_values"] = torch.randn(batch, channels, h, w, generator=gen)
    return out


def _pretrained_cfg(config: Mapping) -> Mapping:
    """timm's ``pretrained_cfg`` (a legacy single-dict config is its own)."""
    pcfg = config.get("pretrained_cfg")
    return pcfg if isinstance(pcfg, dict) else config


def _timm_example(config: Mapping) -> ExampleInput | None:
    """Zeros ``(1, C, H, W)`` of ``pretrained_cfg["input_size"]``, or None without one."""
    pcfg = _pretrained_cfg(config)
    size = pcfg.get("input_size")
    if isinstance(size, list) and len(size) == 3 and all(isinstance(d, int) and d > 0 for d in size):
        return ExampleInput(args=(torch.zeros(1, *size),))
    return None


# --------------------------------------------------------------------------- builders (the recorded specs)


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
        with _quiet(transformers):
            if cls is not None:
                return cls.config_class.from_dict(data)
            return transformers.AutoConfig.for_model(**data)
    except Exception as exc:  # noqa: BLE001 - content of a file: any failure is a bad config
        raise ArchitectureError(f"{origin}: transformers cannot read this config ({type(exc).__name__}: "
                                f"{str(exc)[:300]}).") from exc


@contextlib.contextmanager
def _quiet(transformers: Any) -> Iterator[None]:
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


def build_hf_model(architecture: str, config_json: str, **overrides: Any) -> nn.Module:
    """A transformers model of class ``architecture`` from its config, randomly initialized.

    The builder of :data:`HF_BUILDER` specs (what Workbench records for a
    model opened from a folder, so a saved checkpoint or a training process can
    build it again). Runs no code but the installed library's: ``auto_map`` is
    ignored, the class must be one of ``transformers``.

    Parameters
    ----------
    architecture : str
        ``"BertForSequenceClassification"``...
    config_json : str
        The config as JSON text.
    **overrides
        Config attributes to change (``num_labels=3``).

    Returns
    -------
    transformers.PreTrainedModel

    Raises
    ------
    ArchitectureError
        transformers missing, an unknown class, or a config it cannot read.
    """
    origin = Path(architecture)
    transformers = _import("transformers", "hf", origin)
    try:
        cfg = json.loads(config_json)
    except (TypeError, ValueError) as exc:
        raise ArchitectureError(f"{architecture}: config_json is not JSON ({exc}).") from exc
    cfg = {**cfg, "architectures": [architecture]}
    cls = _hf_class(transformers, cfg, origin)
    config = _hf_config(transformers, cls, {**cfg, **overrides}, origin)
    with _quiet(transformers):
        return cls._from_config(config)


def build_timm_model(model_name: str, **kwargs: Any) -> nn.Module:
    """``timm.create_model(model_name, pretrained=False, **kwargs)`` for a registered timm model name.

    The builder of :data:`TIMM_BUILDER` specs. ``model_name`` must be in timm's
    registry (``timm.is_model``): ``hf-hub:`` / ``local-dir:`` names, which
    download or read other files, are refused; so is ``pretrained``.

    Raises
    ------
    ArchitectureError
        timm missing, an unknown name, or ``pretrained`` / ``pretrained_cfg_overlay`` given.
    """
    timm = _import("timm", "timm", Path(str(model_name)))
    if not isinstance(model_name, str) or not timm.is_model(model_name):
        raise ArchitectureError(f"{str(model_name)[:80]!r} is not a model of the installed timm {timm.__version__}.")
    if kwargs.get("pretrained") or "pretrained_cfg_overlay" in kwargs:
        raise ArchitectureError(f"{model_name}: Workbench builds timm models with pretrained=False (no downloads).")
    kwargs.pop("pretrained", None)
    return timm.create_model(model_name, pretrained=False, **kwargs)


# --------------------------------------------------------------------------- opening


def _code_files(folder: Path) -> list[str]:
    try:
        return sorted(p.name for p in folder.iterdir() if p.suffix == ".py")
    except OSError:
        return []


def _auto_map_names(cfg: Mapping) -> list[str]:
    auto_map = cfg.get("auto_map")
    values = auto_map.values() if isinstance(auto_map, dict) else [auto_map]
    return [str(v)[:120] for v in values if isinstance(v, (str, list))]


def open_folder(path: str | Path, *, trust: bool = False, partial: bool = False, weights_only: bool = False,
                kwargs: Mapping[str, Any] | None = None, open_spec: Callable[..., Opened] | None = None) -> Opened:
    """Open a model folder as the model its config names (the folder route of ``open_model``).

    Parameters
    ----------
    path : str or Path
        The folder or a file inside it.
    trust : bool
        The user agreed to run code the folder names. Workbench still runs none
        (see the module docstring); it only stops asking.
    partial : bool
        Load the tensors that fit and initialize the rest (transformers' own init).
    weights_only : bool
        Show the weights-only tree when the library is not installed.
    kwargs : mapping, optional
        ``num_classes`` (timm's ``num_classes``, transformers' ``num_labels``).
    open_spec : callable, optional
        ``open_spec(checkpoint, spec, partial=...) -> Opened``: how a timm folder's
        weights go into the model it names (:func:`workbench.core.model.opening.open_spec`,
        passed in by ``open_model``, which imports this module).

    Returns
    -------
    Opened
        ``spec`` :data:`HF_BUILDER` / :data:`TIMM_BUILDER` with plain-data
        kwargs; ``example`` the input built from the config; ``report`` the
        missing / unexpected / mismatched keys.

    Raises
    ------
    TrustRequired
        The config has ``auto_map`` (custom code) and ``trust`` is False;
        ``globals`` lists the folder's ``.py`` files (else the ``auto_map``
        entries). Nothing was imported.
    NeedsArchitecture
        The library is not installed and ``weights_only`` is False (no candidates).
    PartialFit
        Keys or shapes differ and ``partial`` is False.
    CheckpointError, ArchitectureError
        A bad config or weight file, an architecture the installed library lacks.
    """
    folder = read_model_folder(path)
    extra = dict(kwargs or {})
    if folder.library == "transformers" and "auto_map" in folder.config and not trust:
        raise TrustRequired(folder.config_path, _code_files(folder.path) or _auto_map_names(folder.config),
                            kind="code")
    lib = "transformers" if folder.library == "transformers" else "timm"
    warm_imports.claim()  # the window may be importing transformers' modeling code ahead: never a second importer
    try:
        __import__(lib)
    except ImportError:
        return _without_library(folder, lib, weights_only)
    if folder.library == "timm":
        if open_spec is None:
            raise ValueError("open_folder needs open_spec for a timm folder (open_model passes it)")
        return _open_timm(folder, partial, extra, open_spec)
    if "auto_map" in folder.config:  # trusted; without a class of the library there is nothing to build
        try:
            _hf_class(__import__("transformers"), folder.config, folder.config_path)
        except ArchitectureError as exc:
            return _without_library(folder, lib, True, note=(
                f"{exc}. Workbench does not run a folder's custom code yet: showing the weights only."))
    return _open_transformers(folder, partial, extra)


def _without_library(folder: ModelFolder, lib: str, weights_only: bool, note: str | None = None) -> Opened:
    ckpt = read_folder_checkpoint(folder)
    extra = "hf" if lib == "transformers" else "timm"
    note = note or (f"{folder.path.name} is a {lib} model folder and {lib} is not installed: showing the weights "
                    f"only (pip install 'workbench[{extra}]' to open it as its model).")
    if not weights_only:
        err = NeedsArchitecture(ckpt, [])
        err.args = (f"{folder.path}: {note.split(': showing')[0]}; install it (pip install 'workbench[{extra}]') "
                    "or open the weights only.",)
        raise err
    return Opened(weights_only_model(ckpt.state_dict), None, ckpt, weights_only=True, notes=[note])


def _open_timm(folder: ModelFolder, partial: bool, extra: dict, open_spec: Callable[..., Opened]) -> Opened:
    cfg, origin = folder.config, folder.config_path
    pcfg = _pretrained_cfg(cfg)
    model_args = contrib.plain_kwargs(cfg.get("model_args") or {}, origin)
    contrib.no_downloads(model_args, origin)
    num_classes = extra.get("num_classes", cfg.get("num_classes", pcfg.get("num_classes")))
    kwargs = {**model_args, **({"num_classes": num_classes} if isinstance(num_classes, int) else {})}
    name = cfg["architecture"]
    timm = __import__("timm")
    if not timm.is_model(name):
        raise ArchitectureError(f"{origin}: {name[:80]!r} is not a model of the installed timm {timm.__version__}; "
                                "a newer version may have it.")
    opened = open_spec(read_folder_checkpoint(folder), ArchSpec(TIMM_BUILDER, {"model_name": name, **kwargs}),
                       partial=partial)
    opened.example = _timm_example(cfg)
    return opened


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


def _open_transformers(folder: ModelFolder, partial: bool, extra: dict) -> Opened:
    transformers = __import__("transformers")
    origin, notes = folder.config_path, []
    cls = _hf_class(transformers, folder.config, origin)
    if "auto_map" in folder.config:  # trusted, yet nothing of the folder runs: the library's own class does
        notes.append(f"the folder's custom code ({', '.join(_code_files(folder.path)) or 'auto_map'}) was not run; "
                     f"opened with transformers' own {cls.__name__}")
    cfg = dict(folder.config)
    if isinstance(extra.get("num_classes"), int):
        cfg["num_labels"] = extra["num_classes"]
        cfg.pop("id2label", None), cfg.pop("label2id", None)
    config = _hf_config(transformers, cls, cfg, origin)
    ckpt = read_folder_checkpoint(folder)
    try:
        with _quiet(transformers):
            model, info = cls.from_pretrained(None, config=config, state_dict=dict(ckpt.state_dict),
                                              output_loading_info=True, ignore_mismatched_sizes=True)
    except Exception as exc:  # noqa: BLE001 - the library on a file's content: report, never crash
        raise ArchitectureError(f"{folder.path}: transformers could not load the weights into {cls.__name__} "
                                f"({type(exc).__name__}: {str(exc)[:300]}).") from exc
    spec = ArchSpec(HF_BUILDER, {"architecture": cls.__name__, "config_json": _config_json(config)})
    report = _report(info, partial, len(ckpt.state_dict))
    if not report.ok:
        message = (f"{folder.path}: the weights do not fit {cls.__name__}: {report.summary()}. Load partially to "
                   "keep every tensor that fits (the rest initialized as transformers does).")
        if not partial:
            raise PartialFit(ckpt, spec, report, message)
        notes.append(f"partial load into {cls.__name__}: {len(report.missing)} missing, {len(report.mismatched)} "
                     f"mismatched, {len(report.unexpected)} unexpected tensors")
    example = ExampleInput(kwargs=hf_example_input(config))
    return Opened(model, spec, ckpt, report, notes=notes, example=example)


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
        if hasattr(model, "save_pretrained") and hasattr(model, "config"):
            transformers = __import__("transformers")
            with _quiet(transformers):
                model.save_pretrained(tmp, max_shard_size=max_shard_size)
        elif hasattr(model, "pretrained_cfg"):
            from timm.models import save_for_hf

            save_for_hf(model, tmp, safe_serialization=True)
        else:
            raise ArchitectureError(f"{type(model).__name__} is neither a transformers nor a timm model: save it as "
                                    "a Workbench checkpoint instead.")
        written = sorted(p.name for p in tmp.iterdir() if p.is_file())
        for name in written:
            os.replace(tmp / name, folder / name)
        for stale in folder.iterdir():
            if stale.name not in written and (_SHARD.fullmatch(stale.name) or stale.name in
                                              (SAFE_WEIGHTS, SAFE_INDEX, PT_WEIGHTS, PT_INDEX)):
                stale.unlink()
        return [folder / n for n in written]
    except OSError as exc:
        raise CheckpointError(f"cannot be written ({exc.strerror}).", folder) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
