"""``run.toml`` of a run folder read whatever is on disk: :func:`read_toml`, :func:`read_run_info`. Qt-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from workbench.core.run_folder.reading import TOML_FILE, RunFileError, json_type, read_small

__all__ = ["RunInfo", "read_toml", "read_run_info"]


def read_toml(folder: str | Path) -> dict | None:
    """``run.toml`` of a run folder as a dict; None when missing.

    Raises
    ------
    RunFileError
        Unreadable (see :func:`read_small`) or not TOML.
    """
    text = read_small(folder, TOML_FILE)
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:  # ValueError: an integer of more than 4,300 digits
        raise RunFileError(TOML_FILE, f"not TOML ({exc})") from None
    except RecursionError:
        raise RunFileError(TOML_FILE, "not TOML (nested too deeply)") from None


@dataclass(frozen=True)
class RunInfo:
    """What a runs list shows of a ``run.toml``: ``[model] arch``, ``[data] dataset``, ``epochs``.

    ``""`` or 0: not set. ``model_kwargs`` and ``model_source`` (``[model] kwargs``, and ``source`` or
    ``checkpoint``) let a runs list call the architecture by its short name
    (:func:`workbench.core.model.spec.short_name`: ``LlamaForCausalLM``, not the builder that reads its config).
    """

    model: str = ""
    dataset: str = ""
    epochs: int = 0
    model_kwargs: dict = field(default_factory=dict, compare=False)
    model_source: str = ""


def _toml_type(v: object) -> str:
    return "a table" if isinstance(v, dict) else json_type(v)


def _table(cfg: dict, key: str) -> dict:
    value = cfg.get(key, {})
    if not isinstance(value, dict):
        raise RunFileError(TOML_FILE, f"{key} is {_toml_type(value)}, not a table ([{key}])")
    return value


def _field(table: dict, key: str, where: str, kind: type):
    value = table.get(key)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        wanted = "an integer" if kind is int else "a string"
        raise RunFileError(TOML_FILE, f"{where} is {_toml_type(value)}, not {wanted}")
    return value


def read_run_info(folder: str | Path) -> RunInfo | None:
    """The :class:`RunInfo` of a run folder's ``run.toml``, its types checked; None when missing.

    Raises
    ------
    RunFileError
        Unreadable (see :func:`read_toml`), or ``model = 3`` where a table belongs, and the like.
    """
    cfg = read_toml(folder)
    if cfg is None:
        return None
    model = _table(cfg, "model")
    arch = _field(model, "arch", "[model] arch", str)
    dataset = _field(_table(cfg, "data"), "dataset", "[data] dataset", str)
    epochs = _field(cfg, "epochs", "epochs", int)
    if epochs is not None and epochs < 0:
        raise RunFileError(TOML_FILE, f"epochs is {epochs}, not a count")
    kwargs = model.get("kwargs")
    source = model.get("source") or model.get("checkpoint")
    return RunInfo(arch or "", dataset or "", epochs or 0, dict(kwargs) if isinstance(kwargs, dict) else {},
                   source if isinstance(source, str) else "")
