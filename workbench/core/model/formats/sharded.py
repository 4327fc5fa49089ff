"""A sharded checkpoint of an FSDP run: a small ``last.pt`` beside the ``last.dcp/`` folder of its shards.

An FSDP run (``strategy = "fsdp"``) writes its model and optimizer state with
``torch.distributed.checkpoint`` (DCP) into ``last.dcp/`` (one ``.distcp`` file
per rank and a ``.metadata`` plan), and the rest of the checkpoint (epoch, step,
arch, history; ``"sharded": "last.dcp"``, an empty ``model_state_dict``) into
``last.pt`` (``workbench/core/train/trainer/fsdp_checkpoints.py``).

:func:`~workbench.core.model.formats.torch_pickle.read` hands such a ``last.pt``
to :func:`read_sharded`, which gathers the model's shards into whole tensors in this
process, without a process group: ``torch.distributed.checkpoint.load(...,
no_dist=True)`` into empty CPU tensors of the shapes and dtypes the folder's plan
gives for the ``model.*`` keys (the optimizer's state is not read). The plan is
a pickle that DCP reads with a plain ``pickle.load``; here it is read by an
unpickler that builds only DCP's own metadata classes, ``torch.Size``, dtypes
and paths (anything else is refused in one line, nothing of the file runs), and
the shards by DCP's reader, which uses ``torch.load(weights_only=True)``. The
same as ``python -m torch.distributed.checkpoint.format_utils dcp_to_torch_save
last.dcp full.pt`` would give, without writing a second copy. Qt-free.
"""

from __future__ import annotations

import math
import pickle
import warnings
from pathlib import Path
from typing import Any, Mapping

import torch

from workbench.core.errors import CheckpointError
from workbench.core.model.checkpoint import Checkpoint
from workbench.core.model.formats.classify import classify
from workbench.core.model.formats.metadata import metadata_from_raw, tensor_stats
from workbench.core.model.formats.sniff import Sniff, short

__all__ = ["read_sharded", "gather_model_state", "CONVERT_HINT"]

#: DCP's plan file in a checkpoint folder (written last: a folder without it is incomplete).
METADATA = ".metadata"
#: The prefix of the model's keys in the folder (the trainer saves ``{"model": ..., "optim": ...}``).
MODEL_PREFIX = "model."
#: What to run when a sharded checkpoint cannot be gathered here.
CONVERT_HINT = ("to convert it to one file: python -m torch.distributed.checkpoint.format_utils dcp_to_torch_save "
                "FOLDER full.pt")
#: The classes the plan may build, by module (DCP's metadata dataclasses and enums, torch's types, paths).
_PLAN_GLOBALS = {
    "torch.distributed.checkpoint.metadata": {"Metadata", "TensorStorageMetadata", "TensorProperties",
                                              "ChunkStorageMetadata", "BytesStorageMetadata", "MetadataIndex",
                                              "StorageMeta", "_MEM_FORMAT_ENCODING"},
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
}


class _PlanUnpickler(pickle.Unpickler):
    """Builds DCP's plan from its data classes only (:data:`_PLAN_GLOBALS` and torch dtypes)."""

    def find_class(self, module: str, name: str) -> Any:
        if name in _PLAN_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"the plan names {module}.{name}, which a DCP plan never holds")


def _read_plan(folder: Path):
    from torch.distributed.checkpoint.metadata import Metadata

    with open(folder / METADATA, "rb") as fh:
        plan = _PlanUnpickler(fh).load()
    if not isinstance(plan, Metadata):
        raise pickle.UnpicklingError(f"the plan is a {type(plan).__name__}, not DCP Metadata")
    for info in (plan.storage_data or {}).values():  # every shard file inside the folder, by a plain name
        name = str(getattr(info, "relative_path", ""))
        if not name or Path(name).name != name or name in (".", ".."):
            raise pickle.UnpicklingError(f"the plan names a shard file {name!r} outside its folder")
    return plan


def gather_model_state(folder: str | Path) -> dict[str, torch.Tensor]:
    """The model's whole tensors from a DCP folder the trainer wrote, in this process (no process group).

    Parameters
    ----------
    folder : str or Path
        ``last.dcp/``: ``.metadata`` and the ranks' ``.distcp`` files.

    Returns
    -------
    dict of str to Tensor
        ``{parameter or buffer name: CPU tensor}``: every ``model.*`` tensor of the folder, gathered from
        all ranks' shards, in its saved dtype and full shape.

    Raises
    ------
    CheckpointError
        The plan cannot be read, names a class a plan never holds, holds no model tensors, or a shard is
        missing or damaged; the message says how to convert the folder with PyTorch's own tool.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException: caught by name
    from torch.distributed.checkpoint.metadata import StorageMeta, TensorStorageMetadata

    folder = Path(folder)
    hint = CONVERT_HINT.replace("FOLDER", str(folder))
    try:
        plan = _read_plan(folder)
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign plan: one line
        raise CheckpointError(f"the plan of its shards cannot be read ({type(exc).__name__}: {short(exc)}); "
                              f"{hint}", folder) from exc
    wanted = {key[len(MODEL_PREFIX):]: md for key, md in plan.state_dict_metadata.items()
              if key.startswith(MODEL_PREFIX) and isinstance(md, TensorStorageMetadata)}
    if not wanted:
        raise CheckpointError(f"holds no model tensors (no '{MODEL_PREFIX}*' keys); {hint}", folder)
    # the model's tensors are a part of the shard files: a plan asking for more is damaged (or hostile)
    need = sum(math.prod(md.size) * md.properties.dtype.itemsize for md in wanted.values())
    have = sum(f.stat().st_size for f in folder.glob("*.distcp") if f.is_file())
    if need > have:
        raise CheckpointError(f"its plan asks for {need:,} bytes of model tensors but its shard files hold "
                              f"{have:,}; the folder is incomplete or damaged; {hint}", folder)
    state = {name: torch.empty(tuple(md.size), dtype=md.properties.dtype) for name, md in wanted.items()}

    class _Reader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any):  # the plan read above, never pickle.load
            if getattr(plan, "storage_meta", None) is None:
                plan.storage_meta = StorageMeta()
            plan.storage_meta.load_id = self.load_id
            return plan

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
            dcp.load({"model": state}, storage_reader=_Reader(folder), no_dist=True)
    except (Exception, CheckpointException) as exc:  # noqa: BLE001 - a missing or truncated shard: one line
        raise CheckpointError(f"its shards cannot be gathered ({type(exc).__name__}: {short(exc)}); {hint}",
                              folder) from exc
    return state


def read_sharded(path: Path, obj: Mapping, verified_ok: bool, head: Sniff) -> Checkpoint:
    """The :class:`Checkpoint` of a sharded checkpoint's ``.pt`` (already loaded), its model gathered from the
    folder it names (:func:`gather_model_state`); what :func:`~workbench.core.model.formats.torch_pickle.read`
    returns for such a file.

    Parameters
    ----------
    path : Path
        The ``.pt`` (``last.pt``).
    obj : Mapping
        Its content, ``weights_only``-loaded and digest-checked; ``obj["sharded"]`` names the folder.
    verified_ok : bool
        Whether its stored digest was checked.
    head : Sniff

    Returns
    -------
    Checkpoint
        ``format`` ``"training_dict"``; ``state_dict`` the gathered model; ``metadata.extra["sharded"]`` says
        from which folder and how many ranks.

    Raises
    ------
    CheckpointError
        The folder it names is not a plain name beside it, is missing or incomplete, or cannot be gathered
        (each said in one line with what to do).
    """
    name = obj.get("sharded")
    if not isinstance(name, str) or Path(name).name != name or name in (".", ".."):
        raise CheckpointError(f"names its shards' folder as {name!r}, not a folder beside it; "
                              f"{CONVERT_HINT.replace('FOLDER', 'the .dcp folder')}", path)
    folder = path.parent / name
    if not (folder / METADATA).is_file():
        raise CheckpointError(f"is the small part of a sharded (FSDP) checkpoint: the model is in the folder "
                              f"{name}/ beside it, which is missing or incomplete (no {METADATA}); copy the "
                              f"folder with the file, or open another checkpoint of the run", path)
    raw = dict(obj)
    raw["model_state_dict"] = gather_model_state(folder)
    fmt, key, state_dict, module = classify(path, raw)
    meta = metadata_from_raw(fmt, head.container, key, raw)
    ranks = raw.get("sharded_world_size")
    meta.extra["sharded"] = f"{name}/" + (f" ({ranks} ranks)" if isinstance(ranks, int) else "") + ", gathered"
    meta.num_tensors, meta.total_params, meta.dtypes = tensor_stats(state_dict)
    meta.file_size = head.size
    meta.verified = verified_ok
    return Checkpoint(path=path, state_dict=state_dict, metadata=meta, raw=raw, module=module)
