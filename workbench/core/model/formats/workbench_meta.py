"""What Workbench writes into a safetensors header beyond what every reader decodes: its edits and tied names.

:func:`workbench.core.model.saving.save_model_file` stores a ``.safetensors``
file's Workbench entries as strings in ``__metadata__`` (JSON for structured
ones). ``arch``, ``frozen``, ``epoch``, ``global_step`` and ``loss`` are read by
:func:`workbench.core.model.formats.metadata.safetensors_metadata`; this module
reads the rest: ``edits`` (the structural edits replayed before the weights
load, e.g. LoRA adapters) and ``workbench_tied`` (``{"alias": "stored name"}``:
a tied weight is stored once, and its other names are given the same tensor
back so a strict load finds every key). Qt-free; reads strings only.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, MutableMapping

from workbench.core.model.checkpoint import CheckpointMetadata
from workbench.core.model.formats.plain import plain

__all__ = ["TIED_KEY", "EDITS_KEY", "apply_workbench_metadata"]

#: ``__metadata__`` key of the tied names (JSON ``{"alias": "stored name"}``).
TIED_KEY = "workbench_tied"
#: ``__metadata__`` key of the structural edits (JSON list of dicts).
EDITS_KEY = "edits"


def _json(header: Mapping[str, str], key: str) -> Any:
    text = header.get(key)
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None


def apply_workbench_metadata(state: MutableMapping[str, Any], meta: CheckpointMetadata,
                             header: Mapping[str, str]) -> None:
    """Give ``meta`` the header's edits and ``state`` its tied names back (in place).

    Parameters
    ----------
    state : mutable mapping of str to Tensor
        The tensors read; each alias of :data:`TIED_KEY` whose stored name is
        present (and which is not itself present) maps to that same tensor.
    meta : CheckpointMetadata
        ``edits`` is set from :data:`EDITS_KEY` when it is a list of dicts
        (plain data; ``apply_edits`` checks every entry before use).
    header : mapping of str to str
        The file's ``__metadata__``. Malformed entries are ignored: the file
        still opens as plain weights.
    """
    edits = _json(header, EDITS_KEY)
    if isinstance(edits, list) and not meta.edits:
        meta.edits = [plain(dict(e)) for e in edits if isinstance(e, Mapping)]
    tied = _json(header, TIED_KEY)
    if isinstance(tied, Mapping):
        for alias, name in tied.items():
            if isinstance(alias, str) and isinstance(name, str) and alias not in state and name in state:
                state[alias] = state[name]
