"""Model folders: Hugging Face ``save_pretrained`` folders and timm hub folders, read as a checkpoint.

A model folder holds ``config.json`` beside its weights: ``model.safetensors``,
the shards a ``model.safetensors.index.json`` lists, or (older folders)
``pytorch_model.bin`` and its index. The config says which library the folder
belongs to: **transformers** (``model_type`` / ``architectures``) or **timm**
(``architecture`` and ``pretrained_cfg``, as the timm hub writes them).

Reading never builds: the checkpoint's ``metadata.arch`` names the builder as
plain data (:data:`HF_BUILDER` with the config as JSON, or :data:`TIMM_BUILDER`
with the model name and plain keyword arguments), and
:mod:`workbench.core.model.opening` builds it like any file's ``arch`` entry.
Nothing is imported here: neither ``transformers`` nor ``timm``.

Safety (``DESIGN.md``, "Safety contract"): the weights are read by the one
validated safetensors reader (:mod:`~workbench.core.model.formats.safetensors`),
copied into memory the model owns (never a memory map the file can pull away);
a transformers folder larger than :data:`LAZY_FOLDER_BYTES` reads its headers
only (a :class:`~workbench.core.model.formats.safetensors.LazyStateDict`), its
weights when first needed, after checking the files did not change. Every size
the config states is checked against the weights present before anything is
built from it (:func:`check_config_sizes`). ``pytorch_model.bin`` goes through
``torch.load(weights_only=True)``. Shard names from an index must be plain file
names of the folder. A config with ``auto_map`` (custom code shipped in the
folder) raises :class:`~workbench.core.errors.TrustRequired` naming the
folder's ``.py`` files; even with trust, Workbench runs none of that code.
A config that names a model elsewhere, which transformers or timm would fetch
when they build it (a ``backbone`` repo id, an ``hf-hub:`` timm name), is
refused before anything is read (:func:`remote_name`): Workbench never downloads.
Qt-free.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from workbench.core import contrib
from workbench.core.errors import CheckpointError, TrustRequired
from workbench.core.model.checkpoint import Checkpoint, CheckpointMetadata
from workbench.core.model.formats import safetensors, torch_pickle
from workbench.core.model.example_input import MAX_EXAMPLE_IMAGE_SIDE
from workbench.core.model.formats.metadata import tensor_stats

__all__ = ["CONFIG_NAME", "HF_BUILDER", "TIMM_BUILDER", "ModelFolder", "find_model_folder", "read_model_folder",
           "read_folder_checkpoint", "pretrained_cfg", "remote_name", "match", "read", "LAZY_FOLDER_BYTES",
           "check_config_sizes"]

CONFIG_NAME = "config.json"
SAFE_WEIGHTS, SAFE_INDEX = "model.safetensors", "model.safetensors.index.json"
PT_WEIGHTS, PT_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
#: The spec a Hugging Face model opened from a folder is recorded with (built by
#: :func:`workbench.core.model.hf_build.build_hf_model`).
HF_BUILDER = "workbench.core.model.hf_build:build_hf_model"
#: The spec a timm hub folder's model is recorded with (:func:`workbench.core.model.hf_build.build_timm_model`).
TIMM_BUILDER = "workbench.core.model.hf_build:build_timm_model"
SHARD = re.compile(r"(model|pytorch_model)-\d+-of-\d+\.(safetensors|bin)")
#: The names of a folder's weight files (what a new save replaces).
WEIGHT_NAMES = (SAFE_WEIGHTS, SAFE_INDEX, PT_WEIGHTS, PT_INDEX)
#: Keys whose value transformers or timm resolves as a model name when they build: ``backbone`` (transformers
#: asks the Hub whether it is a repo and fetches its config), ``architecture`` (the name timm creates).
_NAME_KEYS = ("backbone", "architecture")
#: timm's name prefixes that fetch a Hub repo or read another folder (``hf-hub:org/repo``, ``local-dir:/path``).
_SOURCE_PREFIXES = ("hf-hub:", "hf_hub:", "local-dir:")
#: How deep sub-configs are searched: real configs nest 2 to 4 levels (encoder-decoder, backbone_config); the
#: build itself is offline (:func:`workbench.core.hub_offline.hub_offline`) for anything deeper.
_MAX_CONFIG_DEPTH = 8
#: A transformers folder whose safetensors weights are larger than this (bytes) opens lazily: only the headers are
#: read at open (the tree from ``meta``, FLOPs on ``meta``), the weights when first needed (training, probes,
#: save), each file's identity checked first. Below it the weights are copied into memory at open: about 0.5 s and
#: its size in memory per GiB on the 2-core reference machine, the cost a user waits for a small model.
LAZY_FOLDER_BYTES = 1 << 30
#: Config keys counting layers or blocks (an int, or a list summed: ``depths``). Each layer holds at least one
#: tensor, so a count is bounded by the tensors of the weight files: ``num_hidden_layers = 10**6`` beside two layers
#: of weights would build a million modules (minutes, gigabytes) before anything failed.
_LAYER_KEYS = frozenset({"num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
                         "num_encoder_layers", "num_decoder_layers", "depths", "depth", "num_blocks"})
#: Config keys sizing a weight dimension (an int, or a list of them): each is bounded by the elements the weight
#: files hold (a dimension of d is at least d weights).
_DIM_KEYS = frozenset({"hidden_size", "intermediate_size", "vocab_size", "d_model", "n_embd", "n_inner", "d_ff",
                       "ffn_dim", "embed_dim", "embed_dims", "hidden_sizes", "num_attention_heads",
                       "num_key_value_heads", "n_head", "num_channels", "n_positions", "num_labels", "num_classes",
                       "patch_size", "encoder_ffn_dim", "decoder_ffn_dim", "projection_dim"})
#: Config keys sizing the example input image (``image_size``, timm's ``input_size``): no weight bounds them (a
#: convolutional network takes any size), so :data:`~workbench.core.model.example_input.MAX_EXAMPLE_IMAGE_SIDE` does.
_IMAGE_KEYS = frozenset({"image_size", "input_size", "img_size"})


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
    return name == CONFIG_NAME or name in WEIGHT_NAMES or bool(SHARD.fullmatch(name))


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
        return path.parent if _library(safetensors.read_json(path.parent / CONFIG_NAME)) else None
    except (OSError, CheckpointError):
        return None


def _weight_files(folder: Path) -> list[Path]:
    for index_name, single in ((SAFE_INDEX, SAFE_WEIGHTS), (PT_INDEX, PT_WEIGHTS)):
        index = folder / index_name
        if index.is_file():
            return safetensors.index_files(index)
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
    config = safetensors.read_json(folder / CONFIG_NAME)
    library = _library(config)
    if library is None:
        raise CheckpointError("is neither a Hugging Face transformers config (model_type, architectures) nor "
                              "timm's (architecture, pretrained_cfg).", folder / CONFIG_NAME)
    return ModelFolder(folder, config, library, _weight_files(folder))


def _remote_reason(key: str, value: str) -> str | None:
    """Why ``key = value`` names something outside the folder, or None."""
    name = key.rsplit(".", 1)[-1]
    lowered = value.lower()
    if lowered.startswith("local-dir:"):
        return "names a folder outside this one; Workbench reads only the folder's own files: remove the key."
    if lowered.startswith(_SOURCE_PREFIXES) or (name in _NAME_KEYS and "/" in value):
        todo = ("give the backbone's own config as backbone_config (its weights in the folder's weight files)"
                if name == "backbone" else "name a model of the installed library, its weights in this folder")
        return f"names a model on the Hugging Face Hub; Workbench never downloads: remove the key, or {todo}."
    return None


def remote_name(config: Any) -> str | None:
    """What in a model config makes transformers or timm fetch a model from elsewhere at build, as a message; or None.

    Searches the config and its sub-configs (dicts and lists, at most
    :data:`_MAX_CONFIG_DEPTH` deep) for a ``backbone`` or ``architecture`` that
    is a Hub repo id (``org/repo``) and any value with a timm source prefix
    (``hf-hub:``, ``local-dir:``). Imports nothing.

    Parameters
    ----------
    config : Any
        The config as read from ``config.json`` (or a spec's ``config_json``).

    Returns
    -------
    str or None
        ``"backbone = 'org/repo' names a model on the Hugging Face Hub; Workbench never downloads: ..."``
        (the key dotted from the top: ``encoder.backbone``), without the file
        name, which the caller puts in front.
    """
    stack: list[tuple[str, Any, int]] = [("", config, 0)]
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, str):
            reason = _remote_reason(path, value)
            if reason:
                return f"{path or 'value'} = {value[:80]!r} {reason}"
        elif depth < _MAX_CONFIG_DEPTH and isinstance(value, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v, depth + 1) for k, v in reversed(value.items()))
        elif depth < _MAX_CONFIG_DEPTH and isinstance(value, list):
            stack.extend((f"{path}[{i}]", v, depth + 1) for i, v in reversed(list(enumerate(value))))
    return None


def pretrained_cfg(config: Mapping) -> Mapping:
    """timm's ``pretrained_cfg`` (a legacy single-dict config is its own)."""
    pcfg = config.get("pretrained_cfg")
    return pcfg if isinstance(pcfg, dict) else config


def _hf_arch(config: Mapping) -> dict:
    """The :data:`HF_BUILDER` entry: the class ``architectures[0]`` names (when it names one) and the config."""
    data = {k: v for k, v in config.items() if k != "auto_map"}
    kwargs: dict[str, Any] = {"config_json": json.dumps(data, separators=(",", ":"), sort_keys=True, default=str)}
    names = config.get("architectures")
    if isinstance(names, list) and names:
        kwargs["architecture"] = str(names[0])
    return {"name": HF_BUILDER, "kwargs": kwargs}


def _timm_arch(config: Mapping, origin: Path) -> dict:
    """The :data:`TIMM_BUILDER` entry: the model name and its plain keyword arguments (no downloads)."""
    model_args = contrib.plain_kwargs(config.get("model_args") or {}, origin)
    contrib.no_downloads(model_args, origin)
    num_classes = config.get("num_classes", pretrained_cfg(config).get("num_classes"))
    kwargs = {**model_args, **({"num_classes": num_classes} if isinstance(num_classes, int) else {})}
    return {"name": TIMM_BUILDER, "kwargs": {"model_name": config["architecture"], **kwargs}}


def _code_files(folder: Path) -> list[str]:
    try:
        return sorted(p.name for p in folder.iterdir() if p.suffix == ".py")
    except OSError:
        return []


def _auto_map_names(cfg: Mapping) -> list[str]:
    auto_map = cfg.get("auto_map")
    values = auto_map.values() if isinstance(auto_map, dict) else [auto_map]
    return [str(v)[:120] for v in values if isinstance(v, (str, list))]


def code_files(folder: ModelFolder) -> list[str]:
    """What a folder's ``auto_map`` would run: its ``.py`` files, else the ``auto_map`` entries."""
    return _code_files(folder.path) or _auto_map_names(folder.config)


def _read_bin(path: Path) -> dict:
    return torch_pickle.read(path).state_dict  # weights_only=True


def _ints(value: Any) -> list[int] | None:
    """An int or a list of ints as a list (bools and anything else: None)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    return None


def _size_problem(key: str, values: list[int], tensors: int, elements: int) -> str | None:
    """Why ``key`` = ``values`` is more than the weights present (or the stated bound) allow, or None."""
    if key in _LAYER_KEYS and sum(values) > tensors:
        return (f"but the weight files hold only {tensors:,} tensors (a layer holds at least one); the config is "
                "damaged or made to exhaust memory: set it to the layers the weights hold.")
    if key in _DIM_KEYS and max(values) > elements:
        return (f"but the weight files hold only {elements:,} values (a dimension of d is at least d of them); the "
                "config is damaged or made to exhaust memory: set it to the weights' size.")
    if key in _IMAGE_KEYS and max(values) > MAX_EXAMPLE_IMAGE_SIDE:
        return (f"past the example image side Workbench builds ({MAX_EXAMPLE_IMAGE_SIDE:,} pixels; an image of it "
                "would take gigabytes): set the size the model was trained at.")
    return None


def check_config_sizes(config: Any, tensors: int, elements: int, origin: Path) -> None:
    """Refuse a config that states sizes larger than its weights (or a stated bound) allow, before anything is built.

    Searched: the config and its sub-configs (dicts and lists, at most
    :data:`_MAX_CONFIG_DEPTH` deep, timm's ``model_args`` and ``pretrained_cfg``
    included). Layer counts (:data:`_LAYER_KEYS`) are at most ``tensors``;
    dimensions (:data:`_DIM_KEYS`) at most ``elements``; image sides
    (:data:`_IMAGE_KEYS`) at most :data:`~workbench.core.model.example_input.MAX_EXAMPLE_IMAGE_SIDE`.
    Linear in the config's size; allocates nothing.

    Parameters
    ----------
    config : Any
        ``config.json`` as read.
    tensors : int
        Tensors in the weight files.
    elements : int
        Values (elements) in the weight files.
    origin : Path
        ``config.json``, named in the error.

    Raises
    ------
    CheckpointError
        ``"<folder>/config.json: num_hidden_layers = 1000000 but the weight files hold only 21 tensors ..."``.
    """
    stack: list[tuple[str, Any, int]] = [("", config, 0)]
    while stack:
        path, value, depth = stack.pop()
        name = path.rsplit(".", 1)[-1]
        values = _ints(value) if name in _LAYER_KEYS | _DIM_KEYS | _IMAGE_KEYS else None
        problem = _size_problem(name, values, tensors, elements) if values else None
        if problem:
            shown = value if len(str(value)) <= 60 else f"{str(value)[:60]}..."
            raise CheckpointError(f"{path} = {shown} {problem}", origin)
        if depth < _MAX_CONFIG_DEPTH and isinstance(value, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v, depth + 1) for k, v in reversed(value.items()))
        elif depth < _MAX_CONFIG_DEPTH and isinstance(value, list) and not values:
            stack.extend((f"{path}[{i}]", v, depth + 1) for i, v in reversed(list(enumerate(value))))


def _lazy(folder: ModelFolder) -> bool:
    """Open ``folder`` lazily: a transformers folder of safetensors files larger than :data:`LAZY_FOLDER_BYTES`."""
    if folder.library != "transformers" or any(f.suffix != ".safetensors" for f in folder.weights):
        return False
    try:
        return sum(f.stat().st_size for f in folder.weights) > LAZY_FOLDER_BYTES
    except OSError:
        return False


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
        ``metadata.arch`` the builder entry (plain data); ``metadata.extra["config"]``
        the config; ``file_size`` the sum of the weight files' sizes. A folder
        past :data:`LAZY_FOLDER_BYTES` has a
        :class:`~workbench.core.model.formats.safetensors.LazyStateDict` (``meta``
        tensors; the data is read when needed); others own their tensors.

    Raises
    ------
    CheckpointError
        A damaged weight file, a tensor named by two shards, or no tensors;
        a config size the weights do not bear out (:func:`check_config_sizes`);
        plain-data checks of a timm config's ``model_args``.
    TrustRequired
        A ``pytorch_model.bin`` that needs more than weights-only loading.
    """
    state, header, container = safetensors.read_shards(folder.weights, _read_bin, lazy=_lazy(folder))
    if not state:
        raise CheckpointError("holds no tensors.", folder.path)
    check_config_sizes(folder.config, len(state), sum(t.numel() for t in state.values()), folder.config_path)
    transformers = folder.library == "transformers"
    meta = CheckpointMetadata(format="hf_folder" if transformers else "timm_folder", container=container)
    meta.extra = {"config": folder.config, "weight_files": [f.name for f in folder.weights], "library": folder.library}
    if header:
        meta.extra["__metadata__"] = header
    meta.arch = _hf_arch(folder.config) if transformers else _timm_arch(folder.config, folder.config_path)
    meta.num_tensors, meta.total_params, meta.dtypes = tensor_stats(state)
    meta.file_size = sum(f.stat().st_size for f in folder.weights)
    return Checkpoint(path=folder.path, state_dict=state, metadata=meta)


def match(path: Path, head: bytes) -> bool:
    """A folder holding ``config.json``, that file, or a weight file beside a transformers / timm config."""
    return find_model_folder(path) is not None


def read(path: str | Path, *, trust: bool = False, **_: Any) -> Checkpoint:
    """Read a model folder's weights and name its builder.

    Raises
    ------
    TrustRequired
        A transformers config with ``auto_map`` (custom code) and ``trust`` False;
        ``globals`` lists the folder's ``.py`` files (else the ``auto_map``
        entries). Nothing was imported.
    CheckpointError
        The config names a model elsewhere (:func:`remote_name`), with or without
        trust; see also :func:`read_model_folder` and :func:`read_folder_checkpoint`.
    """
    folder = read_model_folder(path)
    remote = remote_name(folder.config)
    if remote:
        raise CheckpointError(remote, folder.config_path)
    if folder.library == "transformers" and "auto_map" in folder.config and not trust:
        raise TrustRequired(folder.config_path, code_files(folder), kind="code")
    return read_folder_checkpoint(folder)
